#!/bin/sh
# In the qemu guest (pure cgroup v2), as root after guest-extra.sh: kcage as the plain
# user kcu (uid 1000, its passwd line written by run.sh), with kcage installed in /usr
# (run.sh), the way a user runs it under
# `systemd-run --user --scope -p Delegate=yes kcage ...`:
#   1. a delegated cgroup: a fresh scope per command, the directory and its
#      cgroup.procs, cgroup.subtree_control and cgroup.threads owned by the user,
#      memory, pids and cpu enabled in the parent's subtree_control; the user's shell
#      is moved into it and execs kcage.  Every limit is held there, kcage moves itself
#      into a leaf (v2's no-internal-process rule), kcage bench gives root's verdicts;
#   2. no delegation: a limit is refused with one line that says why and how; with
#      --limits-fallback rlimit the limits are rlimits and the records say so;
#   3. docs/operating.md's delegation recipe and its kc function, run as written: the
#      user's shell, sharing a cgroup with another process, moved in by root, then
#      kc bench from that shell gets its limits held by cgroups.
# Prints KR2 OK|FAIL lines and "KR2 DONE pass=N fail=M"; run.sh decides from them.
user=kcu
uid=1000
cg=/sys/fs/cgroup
slice=$cg/user.slice
home=/home/$user
args='f32[64,64] f32[64,64] f32[64,64]:out'
pass=0
fail=0
ok() { echo "KR2 OK $*"; pass=$((pass + 1)); }
bad() { echo "KR2 FAIL $*"; fail=$((fail + 1)); }

mkdir -p "$home"
chown $user:$user "$home"
# the delegating parent, as systemd's user slice: the controllers reach it
echo "+memory +pids +cpu" > $cg/cgroup.subtree_control
mkdir -p $slice
echo "+memory +pids +cpu" > $slice/cgroup.subtree_control

# scope: a fresh delegated cgroup in $d, as systemd leaves a Delegate=yes scope
n=0
scope() {
  n=$((n + 1))
  d=$slice/run-$n.scope
  mkdir "$d"
  chown $user:$user "$d" "$d/cgroup.procs" "$d/cgroup.subtree_control" "$d/cgroup.threads"
}

# as_user DIR|- CMD...: CMD as the user, exec'd by the user's shell; with DIR, that
# shell was moved into the cgroup DIR first ("0": the writing process, this subshell).
# (POSIXLY_CORRECT: busybox su would take CMD's options for its own)
as_user() {
  where=$1
  shift
  (
    if [ "$where" != - ]; then echo 0 > "$where/cgroup.procs" || exit 120; fi
    POSIXLY_CORRECT=1 exec su -s /bin/sh $user -c \
      'cd && exec env -i PATH=/usr/bin:/bin:/sbin HOME='$home' "$@"' sh "$@"
  )
}

# flat FILE: the file with no blanks (records are JSON; no JSON tool in the guest)
flat() { tr -d ' \n' < "$1" 2>/dev/null; }
has() { flat "$1" | grep -q "$2"; }
num() { flat "$1" | grep -o "\"$2\":[0-9.e-]*" | head -1 | cut -d: -f2; }

# run_case NAME DIR|- WANT_STATUS WANT_LIMITS KCAGE_RUN_ARGS... -- PROGRAM...
run_case() {
  name=$1 where=$2 want=$3 limits=$4
  shift 4
  rm -f $home/r.json
  as_user "$where" kcage run --report $home/r.json --ro-bind /payload "$@" >/tmp/kr.out 2>/tmp/kr.err
  rc=$?
  if has $home/r.json "\"status\":\"$want\"" && has $home/r.json "\"limits\":$limits"; then
    ok "$name: status=$want limits=$limits rc=$rc"
  else
    bad "$name: rc=$rc, want status $want and limits $limits: $(flat $home/r.json | head -c 400) $(head -c 300 /tmp/kr.err | tr '\n' ' ')"
  fi
}

echo "== delegated"
scope
run_case memory "$d" memory '{"memory":"cgroup"}' --memory 32M --wall 30 -- /payload hostile memory
scope
# (the bomb's parent spins on the refused fork: --wall ends it, the pids verdict wins)
run_case pids "$d" pids '{"pids":"cgroup"}' --pids 16 --wall 3 -- /payload hostile forkbomb
scope
run_case cpus "$d" timeout '{"cpus":"cgroup"}' --cpus 0.1 --wall 2 -- /payload hostile spin
cpu=$(num $home/r.json cpu_s)
wall=$(num $home/r.json wall_s)
# cpu.max at 10%: a spinner gets a tenth of the wall time; 0.3 leaves room for TCG
if [ -n "$cpu" ] && [ -n "$wall" ] && awk "BEGIN{exit !($cpu <= 0.3 * $wall && $wall >= 1.5)}"; then
  ok "cpus: a spinner held to ${cpu} s of CPU in ${wall} s"
else
  bad "cpus: a spinner used '${cpu}' s of CPU in '${wall}' s under --cpus 0.1"
fi

# While kcage runs: it has left the delegated cgroup for its leaf (no process in the
# scope itself), enabled the controllers there, and its sandbox's cgroup holds the limit.
scope
as_user "$d" kcage run --memory 48M --wall 30 --ro-bind /payload -- /payload hostile sleep \
  >/dev/null 2>&1 &
bg=$!
i=0
while [ -z "$(cat "$d/kcage.self/cgroup.procs" 2>/dev/null)" ] ||
  [ -z "$(cat "$d"/kcage/*/memory.max 2>/dev/null)" ]; do
  [ $i -lt 300 ] || break
  sleep 0.1
  i=$((i + 1))
done
self=$(cat "$d/kcage.self/cgroup.procs" 2>/dev/null | tr '\n' ' ')
who=
for p in $self; do who="$who$(cat /proc/$p/comm):$(stat -c %u /proc/$p) "; done
inner=$(cat "$d/cgroup.procs" | tr '\n' ' ')
ctl=$(cat "$d/cgroup.subtree_control")
max=$(cat "$d"/kcage/*/memory.max 2>/dev/null | head -1)
owner=$(stat -c %u "$d/kcage" 2>/dev/null)
if [ "$who" = "kcage:$uid " ] && [ -z "$inner" ] && [ "$max" = 50331648 ] &&
  [ "$owner" = $uid ] && echo "$ctl" | grep -q memory; then
  ok "leaf: kcage (pid $self) in kcage.self, none left in the scope, '$ctl' enabled, memory.max=$max"
else
  bad "leaf: kcage.self holds '$who' (want kcage:$uid), scope holds '$inner', subtree_control '$ctl', memory.max '$max', kcage/ owner '$owner'"
fi
for p in $self; do kill -TERM $p; done
wait $bg 2>/dev/null

# kcage bench, with the verdicts root gets (examples/kernels/MANIFEST).  Rounds of at
# least 200 ms: the check that a round's CPU time fits its wall time has a fixed slack,
# and under TCG on a loaded host the worker's time around a short round exceeds it.
# bench_case NAME DIR|- HOW [BENCH_OPTIONS...]: HOW = how the memory limit is held
bench_case() {
  name=$1 where=$2 how=$3
  shift 3
  rm -f $home/b.json
  t0=$(cut -d' ' -f1 /proc/uptime)
  as_user "$where" kcage bench "$@" --quiet --repeat 2 --min-repeat-ms 200 --timeout 3 --memory 256M \
    --json $home/b.json --args "$args" /kernels/naive.so /kernels/segfault.so \
    /kernels/memory_bomb.so /kernels/infinite_loop.so /kernels/fork.so >/tmp/kr.out 2>/tmp/kr.err
  rc=$?
  t1=$(cut -d' ' -f1 /proc/uptime)
  got=
  for k in naive:ok segfault:crash memory_bomb:memory infinite_loop:timeout fork:syscall; do
    line=$(tr -d ' ' < $home/b.json 2>/dev/null | grep "\"kernel\":\"[^\"]*/${k%%:*}.so\"")
    st=$(echo "$line" | grep -o '"status":"[a-z_]*"' | head -1 | cut -d'"' -f4)
    echo "$line" | grep -q "\"limits\":{\"memory\":\"$how\"" || st="$st(limits?)"
    got="$got ${k%%:*}:$st"
  done
  if [ $rc = 0 ] && [ "$got" = " naive:ok segfault:crash memory_bomb:memory infinite_loop:timeout fork:syscall" ]; then
    ok "bench $name: $got, memory held by $how ($t0 -> $t1 s)"
  else
    bad "bench $name: rc=$rc,$got; $(head -c 300 /tmp/kr.err | tr '\n' ' ') $(head -c 600 $home/b.json)"
  fi
}
scope
bench_case delegated "$d" cgroup
if [ -d "$d/kcage" ]; then ok "bench made its cgroups under the delegated $d"; else bad "no $d/kcage"; fi

echo "== not delegated"
as_user - kcage run --memory 64M --ro-bind /payload -- /payload hostile ok >/tmp/kr.out 2>/tmp/kr.err
rc=$?
msg=$(cat /tmp/kr.err)
if [ $rc = 125 ] && [ "$(wc -l < /tmp/kr.err)" = 1 ] &&
  echo "$msg" | grep -Eq "not delegated to uid $uid.*(systemd-run --user --scope -p Delegate=yes|Delegating cgroups by hand).*--limits-fallback rlimit"; then
  ok "refused in one line: $msg"
else
  bad "no delegation: rc=$rc (want 125), want one line saying why and how: $msg"
fi
as_user - kcage bench --quiet --args "$args" /kernels/naive.so >/tmp/kr.out 2>/tmp/kr.err
rc=$?
if [ $rc = 3 ] && [ "$(wc -l < /tmp/kr.err)" = 1 ] && grep -Eq 'Delegate=yes|Delegating cgroups by hand' /tmp/kr.err; then
  ok "bench refuses in one line with the way out (exit 3): $(cat /tmp/kr.err)"
else
  bad "bench without delegation: rc=$rc (want 3), want one line naming Delegate=yes: $(head -c 400 /tmp/kr.err)"
fi
run_case fallback - ok '{"memory":"rlimit","pids":"rlimit"}' --limits-fallback rlimit --memory 64M \
  --pids 16 -- /payload hostile ok
# under RLIMIT_AS the bomb's own allocation fails: it exits 3
rm -f $home/r.json
as_user - kcage run --limits-fallback rlimit --memory 64M --report $home/r.json --ro-bind /payload \
  -- /payload hostile memory >/dev/null 2>&1
rc=$?
if [ $rc = 3 ] && has $home/r.json '"limits":{"memory":"rlimit"}'; then
  ok "fallback: the memory bomb's allocation refused (exit 3), memory held by rlimit"
else
  bad "fallback memory bomb: rc=$rc (want 3): $(flat $home/r.json | head -c 400)"
fi
as_user - kcage run --limits-fallback rlimit --cpus 0.5 --ro-bind /payload -- /payload hostile ok \
  >/dev/null 2>/tmp/kr.err
rc=$?
if [ $rc = 125 ] && grep -q "cpus limit cannot be enforced" /tmp/kr.err; then
  ok "fallback: --cpus (no rlimit holds it) still refused"
else
  bad "fallback --cpus: rc=$rc (want 125): $(head -c 300 /tmp/kr.err)"
fi
bench_case fallback - rlimit --limits-fallback rlimit

echo "== the delegation recipe of docs/operating.md, as written"
# block NAME: the shell block between NAME's marker comments, without markers and fences
block() { sed -n "/<!-- $1:begin -->/,/<!-- $1:end -->/p" /operating.md | sed '1,2d;$d' | sed '$d'; }
recipe=$(block delegation-recipe)
kcdef=$(block delegation-recipe-v2-run | sed '$d') # its last line is an example use
rcase() { # rcase 1|0 MESSAGE
  if [ "$1" = 1 ]; then ok "recipe: $2"; else bad "recipe: $2"; fi
}
case $recipe in "user=alice pid=12345 "*) r=1 ;; *) r=0 ;; esac
case $kcdef in "kc() {"*) ;; *) r=0 ;; esac
rcase $r "found in /operating.md: $(printf '%s\n' "$recipe" | wc -l) + $(printf '%s\n' "$kcdef" | wc -l) lines"
# The user's shell shares a cgroup with another process, as a login's shell does: only
# the root may then pass controllers on.
sess=$cg/session.1
mkdir -p $sess
(echo 0 >$sess/cgroup.procs && exec sleep 600) &
other=$!
printf '%s\n' "$kcdef" >/tmp/kc.sh
rm -f /tmp/go $home/recipe.json $home/where
mkfifo -m 666 /tmp/go
# the user's shell: waits for the recipe, says where it is, runs kcage through kc
cat >/tmp/user-shell.sh <<EOF
read -r _ </tmp/go
cut -d: -f3 /proc/self/cgroup >$home/where
. /tmp/kc.sh
kc bench --quiet --repeat 2 --min-repeat-ms 200 --timeout 3 --memory 256M --json $home/recipe.json \
  --args '$args' /kernels/naive.so /kernels/memory_bomb.so /kernels/fork.so
EOF
chmod 644 /tmp/kc.sh /tmp/user-shell.sh
(echo 0 >$sess/cgroup.procs && POSIXLY_CORRECT=1 exec su -s /bin/sh $user -c \
  "cd && exec env -i PATH=/usr/bin:/bin:/sbin HOME=$home sh /tmp/user-shell.sh" \
  >/tmp/kr.out 2>/tmp/kr.err) &
shell=$!
i=0
while [ "$(cat /proc/$shell/cgroup 2>/dev/null)" != "0::/session.1" ] && [ $i -lt 100 ]; do
  sleep 0.1
  i=$((i + 1))
done
printf '%s\n' "$recipe" | sed "1s/^user=alice pid=12345/user=$user pid=$shell/" | sh -e >/tmp/rc.out 2>&1
rc=$?
[ $rc = 0 ] && r=1 || r=0
rcase $r "ran as root, exit $rc $(head -c 300 /tmp/rc.out | tr '\n' ' ')"
now=$(cat /proc/$shell/cgroup 2>/dev/null)
[ "$now" = "0::/kcage-$user/shell" ] && [ "$(cat /proc/$other/cgroup)" = "0::/session.1" ] && r=1 || r=0
rcase $r "the user's shell moved to '$now', the other process left in '$(cat /proc/$other/cgroup)'"
echo go >/tmp/go
wait $shell
rc=$?
kill $other
wait $other 2>/dev/null
rmdir $sess
got=
for k in naive:ok memory_bomb:memory fork:syscall; do
  line=$(tr -d ' ' < $home/recipe.json 2>/dev/null | grep "\"kernel\":\"[^\"]*/${k%%:*}.so\"")
  st=$(echo "$line" | grep -o '"status":"[a-z_]*"' | head -1 | cut -d'"' -f4)
  echo "$line" | grep -q '"limits":{"memory":"cgroup","pids":"cgroup"}' || st="$st(limits?)"
  got="$got ${k%%:*}:$st"
done
[ $rc = 0 ] && [ "$got" = " naive:ok memory_bomb:memory fork:syscall" ] && r=1 || r=0
rcase $r "kc bench from the user's shell in $(cat $home/where 2>/dev/null): rc=$rc,$got; $(head -c 300 /tmp/kr.err | tr '\n' ' ') $(head -c 400 $home/recipe.json 2>/dev/null)"
runs=$(ls -d $cg/kcage-$user/run.*/kcage 2>/dev/null | wc -l)
[ "$runs" = 1 ] && r=1 || r=0
rcase $r "kcage made its cgroups in the fresh cgroup kc made ($runs run.*/kcage)"
rm -f /tmp/go /tmp/kc.sh /tmp/user-shell.sh /tmp/rc.out

# nothing left: no process of the user, no sandbox cgroup in any scope
sleep 0.2
left=$(ps -o user,args 2>/dev/null | grep -c "^$user ")
leaves=$(find $slice -path '*/kcage/*' -type d 2>/dev/null | wc -l)
if [ "$left" = 0 ] && [ "$leaves" = 0 ]; then
  ok "no process of $user left, no sandbox cgroup left"
else
  bad "$left processes of $user, $leaves sandbox cgroups left: $(find $slice -path '*/kcage/*' -type d | head -3 | tr '\n' ' ')"
fi
rm -f /tmp/kr.out /tmp/kr.err
echo "KR2 DONE pass=$pass fail=$fail"
[ $fail = 0 ]
