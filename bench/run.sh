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
echo "all figures: $KC_BENCH_DIR/results.json"
exit $status
