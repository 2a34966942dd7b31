#!/usr/bin/env bash
# rootless_test.sh KCAGE HOSTILE_DIR KERNELS_DIR: kcage as a real unprivileged user
# created here (a system user: no subordinate id range, so its sandboxes map only its
# own id), run as root, which it needs to create the user and delegate cgroups to it.
#   1. nothing delegated: limits refused with one line that says why and how, never
#      dropped; without limits the sandbox still runs (own id mapped to root inside);
#   2. a delegated subtree (the admin's chown of a cgroup in every hierarchy, as
#      systemd's Delegate=yes does for a unit): every limit held by cgroups, the same
#      verdicts as root for kcage run and kcage bench;
#   3. nothing delegated, --limits-fallback rlimit: the limits held as rlimits, named
#      so in the record, a --memory too small for an RLIMIT_AS refused naming the
#      tensor and the limit, and kcage bench's verdicts again.
set -euo pipefail
kcage=$1 hostile=$2 kernels=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to create a user and delegate cgroups"; exit 77; }
command -v useradd >/dev/null && command -v setpriv >/dev/null ||
  { echo "SKIP: no useradd/setpriv"; exit 77; }
if [ -f /sys/fs/cgroup/cgroup.controllers ] && [ "$(grep '^0::' /proc/self/cgroup)" != "0::/" ]; then
  echo "SKIP: pure cgroup v2 below the root: delegating controllers needs a systemd unit"
  exit 77
fi

user=kcrl$$
tmp=$(mktemp -d /tmp/kcage-rootless.XXXXXX)
chmod 755 "$tmp"
deleg=()
cleanup() {
  set +e
  for d in "${deleg[@]}"; do # deepest first: leaves, kcage/, then the delegated dir
    [ -d "$d" ] || continue
    find "$d" -depth -type d | while read -r c; do
      for p in $(cat "$c/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
      rmdir "$c" 2>/dev/null || { sleep 0.5; rmdir "$c" 2>/dev/null; }
    done
  done
  pkill -9 -u "$user" 2>/dev/null
  userdel "$user" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

useradd -r -M -d "$tmp/home" -s /bin/sh "$user"
grep -q "^$user:" /etc/subuid 2>/dev/null && fail "$user got a subordinate uid range"
mkdir -p "$tmp/home" "$tmp/k"
cp "$kernels"/*.c "$kernels/ARGS" "$tmp/k/"
# naive.c that aborts at load unless sysinfo(2) gives the sandbox's figures (no load, one
# process): the pool's relay answers it by writing into the worker's memory, which an
# unprivileged parent must be allowed to do too.
{ cat "$kernels/naive.c"; cat <<'C'; } >"$tmp/k/sysinfo.c"
#include <stdlib.h>
#include <sys/sysinfo.h>
__attribute__((constructor)) static void sandbox_view(void) {
  struct sysinfo s;
  if (sysinfo(&s) != 0 || s.procs != 1 || s.loads[0] || s.loads[1] || s.loads[2])
    abort();
}
C
chown -R "$user:" "$tmp/home" "$tmp/k"
uid=$(id -u "$user")
# A checkout under a directory only root may enter (/root, a mktemp -d) is out of the
# user's reach: the user then runs an install of this build, and copies of the hostile
# programs, from $tmp, as a plain user would.
if ! setpriv --reuid="$user" --regid="$user" --clear-groups test -x "$kcage"; then
  cmake --install "$(dirname "$kcage")" --prefix "$tmp/prefix" >/dev/null
  kcage=$tmp/prefix/bin/kcage
  cp -r "$hostile" "$tmp/hostile"
  hostile=$tmp/hostile
fi

# as_user [delegated] CMD...: CMD as the user (in the delegated cgroups when asked).
as_user() {
  local move=no
  [ "$1" = delegated ] && { move=yes; shift; }
  (
    if [ $move = yes ]; then
      for d in "${deleg[@]}"; do echo $BASHPID >"$d/cgroup.procs"; done
    fi
    exec setpriv --reuid="$user" --regid="$user" --clear-groups \
      env -i PATH=/usr/bin:/bin HOME="$tmp/home" XDG_CACHE_HOME="$tmp/home/cache" "$@"
  )
}
field() { python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(json.dumps(eval(sys.argv[2])))' "$1" "$2"; }

# The way out a refusal names: systemd's where systemd is the init, else the recipe.
if [ -d /run/systemd/system ]; then way='systemd-run --user --scope -p Delegate=yes'
else way='no systemd here: have root delegate one and move your shell into it, docs/operating.md "Delegating cgroups by hand"'; fi

echo "== 1. nothing delegated"
set +e
out=$(as_user "$kcage" run --memory 64M -- /bin/true 2>&1); rc=$?
set -e
[ $rc = 125 ] || fail "--memory without a delegated cgroup: exit $rc ($out)"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "refusal is not one line: $out"
case $out in *"not delegated to uid $uid"*"$way"*"--limits-fallback rlimit"*) ;;
  *) fail "refusal does not say why and how: $out" ;; esac
echo "   refused: $out"
set +e
out=$(as_user "$kcage" run --cpus 0.5 --limits-fallback rlimit -- /bin/true 2>&1); rc=$?
set -e
[ $rc = 125 ] && [[ $out == *"cpus limit cannot be enforced"* ]] ||
  fail "--cpus with the rlimit fallback must still be refused: exit $rc ($out)"
id_in=$(as_user "$kcage" run -- /usr/bin/id -u) || fail "kcage run without limits as $user"
[ "$id_in" = 0 ] || fail "inside the sandbox the user is $id_in, want 0 (its own id mapped to root)"
# kcage bench: one answer, before any work, whatever the batch holds: no reference, a
# reference, a build already in the cache (made with the rlimit fallback).
bench_refused() { # WHAT OPTIONS...
  local what=$1 out rc
  shift
  set +e
  out=$(as_user "$kcage" bench --quiet --json "$tmp/home/b0.json" --args "$(cat "$tmp/k/ARGS")" \
    "$@" "$tmp/k/naive.c" 2>&1); rc=$?
  set -e
  [ $rc = 3 ] || fail "bench $what without delegation: exit $rc, want 3 ($out)"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "bench $what: refusal is not one line: $out"
  case $out in "kcage: bench: memory limit cannot be enforced: "*"$way"*"--limits-fallback rlimit"*) ;;
    *) fail "bench $what: refusal does not say why and how: $out" ;; esac
  [ ! -s "$tmp/home/b0.json" ] || fail "bench $what: records written: $(cat "$tmp/home/b0.json")"
  echo "   bench $what refused: $out"
}
bench_refused "(no reference)"
[ ! -e "$tmp/home/cache/kcage" ] || fail "bench made a build cache before it refused"
bench_refused "with a reference" --reference "$tmp/k/reference.c"
as_user "$kcage" bench --quiet --limits-fallback rlimit --args "$(cat "$tmp/k/ARGS")" \
  "$tmp/k/naive.c" >/dev/null 2>&1 || true
[ -n "$(find "$tmp/home/cache" -name '*.so' 2>/dev/null)" ] || fail "no cached build to test with"
bench_refused "with a cached build"

# The bench battery, as root gets it (examples/kernels/MANIFEST).
bench_verdicts() { # NAME delegated|plain [OPTIONS...]
  local name=$1 mode=$2; shift 2
  local pre=()
  [ "$mode" = delegated ] && pre=(delegated)
  as_user "${pre[@]}" "$kcage" bench "$@" --quiet --no-cache --timeout 5 --memory 256M \
    --json "$tmp/home/$name.json" --args "$(cat "$tmp/k/ARGS")" "$tmp/k/naive.c" \
    "$tmp/k/segfault.c" "$tmp/k/memory_bomb.c" "$tmp/k/infinite_loop.c" "$tmp/k/fork.c" \
    "$tmp/k/sysinfo.c" ||
    fail "$name: kcage bench exit $?"
  python3 - "$tmp/home/$name.json" "$how" <<'PY'
import json, sys
want = {"naive.c": "ok", "sysinfo.c": "ok", "segfault.c": "crash", "memory_bomb.c": "memory",
        "infinite_loop.c": "timeout", "fork.c": "syscall"}
got, limits = {}, set()
for line in open(sys.argv[1]):
    r = json.loads(line)
    got[r["kernel"].rsplit("/", 1)[1]] = r["status"]
    limits.add(json.dumps(r.get("limits"), sort_keys=True))
want_limits = {json.dumps({"memory": sys.argv[2], "pids": sys.argv[2]}, sort_keys=True)}
if got != want or limits != want_limits:
    sys.exit(f"verdicts {got} limits {limits}; want {want} {want_limits}")
print("   bench verdicts as root's:", got)
PY
}

echo "== 2. a delegated subtree"
for h in memory pids cpu cpuacct freezer unified ''; do
  if [ -z "$h" ]; then
    [ -f /sys/fs/cgroup/cgroup.controllers ] || continue
    own=$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup) mnt=/sys/fs/cgroup
  else
    mnt=/sys/fs/cgroup/$h
    [ -f "$mnt/cgroup.procs" ] || continue
    if [ $h = unified ]; then own=$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
    else own=$(awk -F: -v h=$h '{n=split($2,c,","); for(i=1;i<=n;i++) if(c[i]==h) print $3}' /proc/self/cgroup); fi
  fi
  d=$mnt${own%/}/kcrl-$$
  mkdir "$d"
  chown -R "$user" "$d"
  [ -z "$h" ] && echo "+memory +pids +cpu" >"$mnt${own%/}/cgroup.subtree_control"
  deleg+=("$d")
done
rep=$(as_user delegated "$kcage" run --memory 64M --pids 16 --report - -- /bin/true) ||
  fail "kcage run with limits in the delegated subtree"
[ "$(field "$rep" 'r["limits"]')" = '{"memory": "cgroup", "pids": "cgroup"}' ] ||
  fail "limits not held by cgroups: $rep"
set +e
rep=$(as_user delegated "$kcage" run --memory 64M --ro-bind "$hostile" --report - -- "$hostile/h_membomb" 2>/dev/null); rc=$?
set -e
[ "$(field "$rep" 'r["status"]')" = '"memory"' ] && [ $rc = 137 ] ||
  fail "memory bomb in the delegated subtree: exit $rc, $rep"
how=cgroup bench_verdicts delegated delegated
ls "${deleg[0]}/kcage" >/dev/null || fail "kcage made no cgroups under the delegated ${deleg[0]}"

# v2's no-internal-process rule: in a delegated v2 cgroup kcage moves itself into a
# leaf before it enables controllers.  This host's v2 mount has none to enable, so
# the limit is still refused, but the move is visible.
if [ -f /sys/fs/cgroup/unified/cgroup.procs ]; then
  v2d=$(printf '%s\n' "${deleg[@]}" | grep '^/sys/fs/cgroup/unified/')
  set +e
  out=$(as_user delegated "$kcage" run --cgroup v2 --memory 64M -- /bin/true 2>&1); rc=$?
  set -e
  [ $rc = 125 ] && [[ $out == *"memory limit cannot be enforced"* ]] ||
    fail "forced v2 without a memory controller: exit $rc ($out)"
  [ -d "$v2d/kcage.self" ] || fail "kcage did not move into the leaf $v2d/kcage.self"
  [ -z "$(cat "$v2d/cgroup.procs")" ] || fail "processes left in the delegated v2 cgroup $v2d"
fi

echo "== 2b. the delegation recipe of docs/operating.md, as written"
for d in "${deleg[@]}"; do # section 2's cgroups gone first
  find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done
deleg=()
docs=$(dirname "$0")/../../docs/operating.md
recipe=$(sed -n '/<!-- delegation-recipe:begin -->/,/<!-- delegation-recipe:end -->/p' "$docs" |
  sed '1,2d;$d' | sed '$d')
case $recipe in "user=alice pid=12345 "*) ;; *) fail "no recipe in $docs: $recipe" ;; esac
# the user's shell: waits for the recipe, then runs kcage (as the user)
mkfifo "$tmp/go" && chmod 0666 "$tmp/go"
(exec setpriv --reuid="$user" --regid="$user" --clear-groups env -i PATH=/usr/bin:/bin \
  HOME="$tmp/home" XDG_CACHE_HOME="$tmp/home/cache" sh -c 'read -r _ <"$0"; exec "$@"' "$tmp/go" \
  "$kcage" bench --quiet --no-cache --timeout 5 --memory 256M --json "$tmp/home/recipe.json" \
  --args "$(cat "$tmp/k/ARGS")" "$tmp/k/naive.c" "$tmp/k/memory_bomb.c" "$tmp/k/fork.c") &
shell=$!
printf '%s\n' "$recipe" | sed "1s/^user=alice pid=12345/user=$user pid=$shell/" | sh -e ||
  fail "the recipe failed"
mapfile -t deleg < <(find /sys/fs/cgroup -type d -name "kcage-$user" 2>/dev/null)
((${#deleg[@]})) || fail "the recipe made no cgroup"
grep -q "kcage-$user" /proc/$shell/cgroup || fail "the shell was not moved: $(cat /proc/$shell/cgroup)"
echo go >"$tmp/go"
wait $shell || fail "kcage bench in the recipe's cgroups: exit $?"
python3 - "$tmp/home/recipe.json" <<'PY' || fail "verdicts in the recipe's cgroups"
import json, sys
got = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    got[r["kernel"].rsplit("/", 1)[1]] = (r["status"], r["limits"])
held = {"memory": "cgroup", "pids": "cgroup"}
want = {"naive.c": ("ok", held), "memory_bomb.c": ("memory", held), "fork.c": ("syscall", held)}
print("   recipe:", got)
sys.exit(got != want)
PY

echo "== 3. nothing delegated, --limits-fallback rlimit"
if grep -q __asan_init "$kcage"; then
  # ASan reserves terabytes of address space for its shadow: no RLIMIT_AS holds it.
  echo "   skipped: an AddressSanitizer build cannot run under RLIMIT_AS"
  echo "rootless test: ok"
  exit 0
fi
rep=$(as_user "$kcage" run --limits-fallback rlimit --memory 64M --pids 16 --report - -- /bin/true) ||
  fail "kcage run with the rlimit fallback"
[ "$(field "$rep" 'r["limits"]')" = '{"memory": "rlimit", "pids": "rlimit"}' ] ||
  fail "limits not named as rlimits: $rep"
set +e
rep=$(as_user "$kcage" run --limits-fallback rlimit --memory 64M --ro-bind "$hostile" --report - -- "$hostile/h_membomb" 2>/dev/null); rc=$?
set -e
[ $rc = 3 ] || fail "memory bomb under RLIMIT_AS: its allocation must fail (exit 3), got $rc: $rep"
# An RLIMIT_AS counts address space: a --memory too small for the measuring worker's
# mapping of its inputs is refused up front, naming the tensor and the limit (not the
# worker's "map inputs: Cannot allocate memory").  52M: above what the inputs alone
# need, below what the worker's address space needs with them.
set +e
out=$(as_user "$kcage" bench --limits-fallback rlimit --memory 52M --args "$(cat "$tmp/k/ARGS")" \
  "$tmp/k/naive.c" 2>&1); rc=$?
set -e
[ $rc = 2 ] && [[ $out == *"tensor 0 ("*"RLIMIT_AS (--limits-fallback rlimit)"*"raise --memory"* ]] ||
  fail "a --memory the rlimit fallback cannot hold: exit $rc ($out)"
how=rlimit bench_verdicts fallback plain --limits-fallback rlimit
echo "rootless test: ok"
