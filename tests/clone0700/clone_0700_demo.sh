#!/usr/bin/env bash
# clone_0700_demo.sh SOURCE_DIR BUILD_DIR: kcage kept where only its owner may enter.
#
# SOURCE_DIR is cloned (with its uncommitted changes) into a fresh `mktemp -d` directory
# (mode 0700), BUILD_DIR's kcage is installed below it, and $TMPDIR and the build cache
# are put there too.  From the clone: the demo's script with every expected verdict,
# `kcage run` of a bind from there, a Python worker importing from there, and a tracker
# and agent serving `kcage bench --tracker`.  As root every sandbox runs as host ids
# that cannot enter the directory (checked first): whatever a sandbox needs from it
# must be handed over by kcage, never reached by path.  KC_CLONE_0700_BUILD=1 builds
# the clone's own kcage instead of installing BUILD_DIR's (several minutes).
set -euo pipefail
src=$1
build=$2
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }
[ -d "$src/.git" ] || [ -f "$src/.git" ] || { echo "SKIP: $src is not a git checkout"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: no jq (the demo's script reads the records with it)"; exit 77; }

d=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$d"
}
trap cleanup EXIT
[ "$(stat -c %a "$d")" = 700 ] || fail "mktemp -d made $d with mode $(stat -c %a "$d"), not 700"

git -c advice.detachedHead=false clone -q "$src" "$d/src"
git -C "$src" diff HEAD --binary | (cd "$d/src" && git apply --allow-empty)
(cd "$src" && git ls-files --others --exclude-standard -z) |
  (cd "$src" && xargs -0 -r cp --parents -t "$d/src")

if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  # the premise: an id of no account cannot read the clone's policies by path
  if setpriv --reuid=65534 --regid=65534 --clear-groups cat "$d/src/policies/measure.policy" \
    >/dev/null 2>&1; then
    fail "uid 65534 can read below $d: the test would prove nothing"
  fi
elif [ "$(id -u)" != 0 ]; then
  echo "note: not root: the sandboxes run as $(id -un), who may enter $d anyway"
fi

if [ "${KC_CLONE_0700_BUILD:-0}" = 1 ]; then
  echo "== building the clone"
  cmake -S "$d/src" -B "$d/src/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKC_BUILD_TESTS=OFF \
    >/dev/null
  cmake --build "$d/src/build" -j 2 --target kcage kcage-worker kcage_shared >/dev/null
  bin=$d/src/build
  lib=$d/src/build/libkcage.so.1
else
  cmake --install "$build" --prefix "$d/prefix" >/dev/null
  bin=$d/prefix/bin
  lib=$(find "$d/prefix" -name libkcage.so.1 | head -1)
fi
[ -x "$bin/kcage" ] || fail "no kcage at $bin"

unset KCAGE_POLICY_DIR KCAGE_WORKER
mkdir -m 0700 "$d/tmp" "$d/cache"
export TMPDIR=$d/tmp XDG_CACHE_HOME=$d/cache
cd "$d/src"

echo "== the demo, from $d/src"
./scripts/demo.sh "$bin"

echo "== kcage run with a bind from $d"
out=$("$bin/kcage" run --ro-bind "$d/src/examples/kernels:/k" -- /bin/cat /k/ARGS) ||
  fail "kcage run: exit $?"
[ "$out" = "$(cat examples/kernels/ARGS)" ] || fail "kcage run read '$out' from the bind"
"$bin/kcage" run --policy "$d/src/policies/exec.policy" -- /bin/true ||
  fail "kcage run --policy $d/src/policies/exec.policy: exit $?"

echo "== a Python worker importing from $d"
if python3 -c 'import cloudpickle, sysconfig, sys; sys.exit(not sysconfig.get_config_var("Py_ENABLE_SHARED"))' \
  2>/dev/null; then
  mkdir "$d/probe"
  printf 'def read_here():\n    return open(__file__.rsplit("/", 1)[0] + "/data.txt").read()\n' \
    >"$d/probe/mod0700.py"
  echo "in 0700" >"$d/probe/data.txt"
  got=$(cd "$d/probe" && KCAGE_LIB=$lib PYTHONPATH=$d/src/python python3 -c '
import mod0700
from kcage import PopenWorker
w = PopenWorker()
w.send(mod0700.read_here)
print(w.recv().strip())') || fail "Python worker: exit $?"
  [ "$got" = "in 0700" ] || fail "Python worker answered '$got'"
else
  echo "   (python3 has no cloudpickle or no shared libpython: skipped)"
fi

echo "== a tracker and an agent, kcage bench --tracker"
"$bin/kcage" tracker --host 127.0.0.1 --port 19390 --port-end 19490 >"$d/tracker.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  grep -q "listening on" "$d/tracker.out" && break
  sleep 0.1
done
tport=$(sed -n 's/.*listening on [^:]*:\([0-9]*\).*/\1/p' "$d/tracker.out" | head -1)
[ -n "$tport" ] || fail "the tracker did not start: $(cat "$d/tracker.out")"
"$bin/kcage" agent --tracker "127.0.0.1:$tport" --key k0700 --host 127.0.0.1 --port 0 \
  --workers 1 >"$d/agent.out" 2>&1 &
pids+=($!)
"$bin/kcage" bench --tracker "127.0.0.1:$tport" --key k0700 --args "$(cat examples/kernels/ARGS)" \
  --reference examples/kernels/reference.c --repeat 2 --timeout 30 --json "$d/remote.json" \
  examples/kernels/naive.c examples/kernels/segfault.c ||
  fail "kcage bench --tracker: exit $? (agent: $(cat "$d/agent.out"))"
got=$(jq -r '.status' "$d/remote.json" | tr '\n' ' ')
[ "$got" = "ok crash " ] || fail "kcage bench --tracker verdicts: $got, want: ok crash"
echo "clone_0700_demo: ok"
