#!/usr/bin/env bash
# `make demo`: the main job on the bundled example kernels (examples/kernels): honest
# matmul variants, a trusted reference, and hostile/cheating kernels.  Prints the
# table, then checks every verdict against examples/kernels/MANIFEST (jq reads the
# JSON Lines records) and fails when one differs.
set -euo pipefail
build=${1:-build}
dir=examples/kernels
json=$(mktemp)
trap 'rm -f "$json"' EXIT
kernels=()
while read -r k _; do
  [[ -z "$k" || "$k" == \#* ]] && continue
  kernels+=("$dir/$k")
done <"$dir/MANIFEST"
"$build/kcage" bench --reference "$dir/reference.c" --args "$(cat "$dir/ARGS")" \
  --atol 1e-4 --timeout 2 --memory 256M --json "$json" "${kernels[@]}"
echo
fail=0
while read -r k want; do
  [[ -z "$k" || "$k" == \#* ]] && continue
  got=$(jq -r --arg k "$dir/$k" 'select(.kernel == $k) | .status' "$json")
  if [[ "$got" == "$want" ]]; then
    printf '  %-20s %-13s as expected\n' "$k" "$got"
  else
    printf '  %-20s %-13s EXPECTED %s\n' "$k" "${got:-?}" "$want"
    fail=1
  fi
done <"$dir/MANIFEST"
if [[ $fail != 0 ]]; then
  echo "demo: some verdicts differ from $dir/MANIFEST (see above)" >&2
  exit 1
fi
echo "demo: every kernel got its expected verdict"
