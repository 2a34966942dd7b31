#!/bin/sh
# make check: the Python tests, when the venv can be made (no network, no python3:
# skipped with the reason).  pytest's exit 5 (nothing collected) is not a failure.
set -u
build=${1:-build}
if ! ./scripts/python-venv.sh "$build"; then
  echo "kcage: python tests skipped: $build/venv could not be made" >&2
  exit 0
fi
KCAGE_LIB="$(cd "$build" && pwd)/libkcage.so.1"
export KCAGE_LIB
cd python && "../$build/venv/bin/python" -m pytest -q ${PYTEST_ARGS--m "not slow"} tests
rc=$?
[ "$rc" -eq 5 ] && rc=0
exit "$rc"
