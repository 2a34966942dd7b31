#!/usr/bin/env bash
# `make demo`: the main job on the bundled example kernels, every verdict shown.
set -euo pipefail
build=${1:-build}
exec "$build/kcage" bench --reference examples/kernels/reference.c \
  --args "$(cat examples/kernels/ARGS)" examples/kernels/*.c
