#!/usr/bin/env bash
# One `kcage bench` behaviour case around measurement (see CMakeLists.txt): large
# outputs, the per-call timeout and the budget, an interrupted batch, the CV flag, --cpu.
# Behaviour only: no case asserts a speed.
set -uo pipefail
kcage=$1 kernels=$2 cache=$3 case=$4
export XDG_CACHE_HOME=$cache
tmp=$(mktemp -d)
# shellcheck source=records_check.sh
. "$(dirname "$0")/records_check.sh"
trap 'records_check "$kcage" "$tmp"; rc=$?; rm -rf "$tmp"; exit $rc' EXIT
one='f32[1] f32[1]:out'

field() { # field NAME FILE [LINE]: a record's field, as jq prints it
  sed -n "${3:-1}p" "$2" | jq -c ".$1"
}

descendants() { # every process below $1
  local p
  for p in $(pgrep -P "$1"); do
    echo "$p"
    descendants "$p"
  done
}

interrupted() { # interrupted SIGNAL EXPECTED-STATUS
  local sig=$1 want=$2
  "$kcage" bench --args "$one" --number 1 --min-repeat-ms 0 --repeat 200 --timeout 5 \
    --json "$tmp/r.jsonl" "$kernels/fill.c" "$kernels/slow_call.c" "$kernels/fill.c" \
    >"$tmp/out" 2>"$tmp/err" &
  local pid=$! i
  # The first kernel's record is on the file as soon as it is done: wait for it,
  # then for the second kernel's worker to be busy.
  for ((i = 0; i < 600; i++)); do
    [[ -s $tmp/r.jsonl ]] && break
    sleep 0.1
  done
  [[ -s $tmp/r.jsonl ]] || { echo "FAIL: no record streamed"; kill -KILL $pid; exit 1; }
  sleep 1
  local procs
  procs=$(descendants $pid)
  echo "kcage $pid, below it: $procs"
  [[ -n $procs ]] || { echo "FAIL: no worker running"; exit 1; }
  kill -"$sig" $pid
  local rc=0
  wait $pid || rc=$?
  cat "$tmp/out" "$tmp/err"
  [[ $rc == "$want" ]] || { echo "FAIL: exit $rc, want $want"; exit 1; }
  # Every process kcage started is gone.
  for ((i = 0; i < 50; i++)); do
    local left=""
    for p in $procs; do
      [[ -d /proc/$p ]] && [[ $(awk '{print $3}' /proc/$p/stat 2>/dev/null) != Z ]] && left+=" $p"
    done
    [[ -z $left ]] && break
    sleep 0.1
  done
  [[ -z $left ]] || { echo "FAIL: left running:$left"; exit 1; }
  # The finished record stayed, whole; the interrupted kernel has none.
  [[ $(wc -l <"$tmp/r.jsonl") == 1 ]] || { echo "FAIL: want 1 record"; exit 1; }
  jq -e '.status == "ok" and (.kernel | endswith("fill.c"))' "$tmp/r.jsonl" >/dev/null || exit 1
  grep -q 'fill.c.* ok ' "$tmp/out" || { echo "FAIL: the table lacks the finished kernel"; exit 1; }
  grep -q 'interrupted' "$tmp/err"
}

case $case in
large_output)
  # 256 MiB of output per call: the outputs come back in pieces, whatever their size.
  "$kcage" bench --args 'f32[1] f32[67108864]:out' --sets 2 --checks 1 --repeat 2 \
    --min-repeat-ms 0 --memory 1G --json "$tmp/r.jsonl" "$kernels/fill.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/out" "$tmp/err"
  [[ $rc == 0 ]] && [[ $(field status "$tmp/r.jsonl") == '"ok"' ]] &&
    [[ $(field repeat "$tmp/r.jsonl") == 2 ]]
  ;;
too_large)
  # Over the worker's memory limit: refused up front, naming the tensor and the limit.
  "$kcage" bench --args 'f32[1] f32[67108864]:out' --memory 256M "$kernels/fill.c" \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  [[ $rc == 2 ]] && [[ $(wc -l <"$tmp/err") == 1 ]] &&
    grep -q 'tensor 1 (f32\[67108864\]:out, 256.0 MiB) does not fit.*memory limit of 256.0 MiB' "$tmp/err"
  ;;
per_call_timeout)
  # Calls of 0.25 s under a 1 s per-call limit: ok, although the measurement lasts
  # longer than 1 s; under a 0.1 s limit: timeout, and the record says "call".
  "$kcage" bench --args "$one" --sets 1 --number 1 --min-repeat-ms 0 --repeat 3 --timeout 1 \
    --json "$tmp/a.jsonl" "$kernels/slow_call.c" >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
  cat "$tmp/out"
  [[ $(field status "$tmp/a.jsonl") == '"ok"' ]] || exit 1
  start=$(field started_at "$tmp/a.jsonl" | tr -d '"') end=$(field ended_at "$tmp/a.jsonl" | tr -d '"')
  (($(date -d "$end" +%s%N) - $(date -d "$start" +%s%N) > 1000000000)) || { echo "FAIL: too short"; exit 1; }
  "$kcage" bench --args "$one" --sets 1 --timeout 0.1 --json "$tmp/b.jsonl" "$kernels/slow_call.c" \
    >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
  cat "$tmp/out"
  [[ $(field status "$tmp/b.jsonl") == '"timeout"' ]] && [[ $(field timeout "$tmp/b.jsonl") == '"call"' ]] &&
    grep -q -- '--timeout' "$tmp/out"
  ;;
budget)
  # Every call within --timeout, the whole measurement past --budget.
  "$kcage" bench --args "$one" --sets 1 --number 1 --min-repeat-ms 0 --repeat 50 --timeout 5 \
    --budget 1 --json "$tmp/r.jsonl" "$kernels/slow_call.c" >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
  cat "$tmp/out"
  [[ $(field status "$tmp/r.jsonl") == '"timeout"' ]] && [[ $(field timeout "$tmp/r.jsonl") == '"budget"' ]] &&
    grep -q -- '--budget' "$tmp/out"
  ;;
interrupted_term) interrupted TERM 143 ;;
interrupted_int) interrupted INT 130 ;;
cv_flag)
  # Rounds of 1 ms and 20 ms: unstable (record flag, '!' in the table); not with a
  # threshold above any CV two such rounds can have.
  "$kcage" bench --args "$one" --sets 1 --number 1 --min-repeat-ms 0 --repeat 6 \
    --json "$tmp/a.jsonl" "$kernels/jitter.c" >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
  cat "$tmp/out"
  [[ $(field status "$tmp/a.jsonl") == '"ok"' ]] && [[ $(field unstable "$tmp/a.jsonl") == true ]] &&
    grep -Eq 'jitter.c +ok .*%! ' "$tmp/out" || exit 1
  "$kcage" bench --args "$one" --sets 1 --number 1 --min-repeat-ms 0 --repeat 6 --max-cv 100 \
    --json "$tmp/b.jsonl" "$kernels/jitter.c" >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
  cat "$tmp/out"
  [[ $(field unstable "$tmp/b.jsonl") == false ]] && ! grep -q '%!' "$tmp/out"
  ;;
cpu_pin)
  # --cpu N: every round of the worker runs on CPU N.  For each CPU this process may
  # use, a kernel that writes the CPU it runs on agrees, call after call and round after
  # round, with a reference that writes N; the record says which CPU.
  cpus=()
  for ((c = 0; c < $(nproc --all); c++)); do
    taskset -c "$c" true 2>/dev/null && cpus+=("$c")
  done
  if ((${#cpus[@]} < 2)); then
    echo "SKIP: needs two CPUs this process may use (has ${#cpus[@]})"
    exit 77
  fi
  for c in "${cpus[@]}"; do
    sed "s/(float)sched_getcpu()/(float)$c/" "$kernels/where_cpu.c" >"$tmp/ref$c.c"
    "$kcage" bench --args "$one" --repeat 8 --min-repeat-ms 2 --cpu "$c" --reference "$tmp/ref$c.c" \
      --json "$tmp/c$c.jsonl" "$kernels/where_cpu.c" >"$tmp/out" 2>&1 || { cat "$tmp/out"; exit 1; }
    cat "$tmp/out"
    [[ $(field status "$tmp/c$c.jsonl") == '"ok"' && $(field cpu "$tmp/c$c.jsonl") == "$c" ]] ||
      { echo "FAIL: --cpu $c"; cat "$tmp/c$c.jsonl"; exit 1; }
  done
  # Not a CPU this process may use: refused before anything runs, in one line.
  "$kcage" bench --args "$one" --cpu 4095 "$kernels/fill.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  [[ $rc == 2 && $(wc -l <"$tmp/err") == 1 ]] &&
    grep -q "^kcage: bench: --cpu 4095: not one of the CPUs this process may run on" "$tmp/err"
  ;;
*)
  echo "unknown case $case"
  exit 1
  ;;
esac
