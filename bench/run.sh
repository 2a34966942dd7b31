#!/usr/bin/env bash
# `make bench`: runs every benchmark program of the build, one after the other (they
# would disturb each other on 2 vCPUs), each printing its own ratio table.
set -uo pipefail
build=${1:-build}
export KC_BENCH_DIR="$build/bench"
mkdir -p "$KC_BENCH_DIR"
rm -f "$KC_BENCH_DIR/results.json"
status=0
for b in "$build"/bench/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" || { echo "bench: $(basename "$b") failed" >&2; status=1; }
  echo
done
# The Python drop-in against TVM's own popen_pool (needs `make python`).
if [ -x "$build/venv/bin/python" ]; then
  echo "== bench_python"
  KCAGE_LIB="$(cd "$build" && pwd)/libkcage.so.1" "$build/venv/bin/python" bench/bench_python.py ||
    { echo "bench: bench_python failed" >&2; status=1; }
  echo
  # kcage agent against TVM's rpc_server, driven by TVM's own client and RPCRunner
  echo "== bench_tvm_rpc"
  KCAGE_LIB="$(cd "$build" && pwd)/libkcage.so.1" "$build/venv/bin/python" bench/bench_tvm_rpc.py ||
    { echo "bench: bench_tvm_rpc failed" >&2; status=1; }
  echo
else
  echo "== bench_python, bench_tvm_rpc: skipped (no $build/venv: run make python)"
fi
echo "all figures: $KC_BENCH_DIR/results.json"
exit $status
