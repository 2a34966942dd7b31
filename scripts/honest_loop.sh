#!/usr/bin/env bash
# No false alarms, N times over: every honest kernel (the honest examples with their
# ARGS and reference, and tests/measure/honest/MANIFEST, each its own reference) must
# come out `ok` in every run.  Usage: scripts/honest_loop.sh [build-dir] [runs]
set -uo pipefail
build=${1:-build}
runs=${2:-20}
ex=examples/kernels
hon=tests/measure/honest
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok=0
total=0
for ((r = 1; r <= runs; r++)); do
  "$build/kcage" bench --quiet --args "$(cat "$ex/ARGS")" --reference "$ex/reference.c" \
    --json "$tmp/ex.jsonl" "$ex/naive.c" "$ex/tiled.c" "$ex/vectorised.c" >/dev/null 2>&1
  while read -r line; do
    total=$((total + 1))
    if grep -q '"status": *"ok"' <<<"$line"; then ok=$((ok + 1)); else echo "run $r: $line"; fi
  done <"$tmp/ex.jsonl"
  while read -r k args; do
    [[ -z "$k" || "$k" == \#* ]] && continue
    "$build/kcage" bench --quiet --args "$args" --reference "$hon/$k" --json "$tmp/h.jsonl" \
      "$hon/$k" >/dev/null 2>&1
    total=$((total + 1))
    if grep -q '"status": *"ok"' "$tmp/h.jsonl"; then ok=$((ok + 1)); else
      echo "run $r: $k $args: $(cat "$tmp/h.jsonl")"
    fi
  done <"$hon/MANIFEST"
  echo "run $r: $ok/$total ok so far"
done
echo "honest kernels: $ok of $total runs ok"
[[ $ok == "$total" ]]
