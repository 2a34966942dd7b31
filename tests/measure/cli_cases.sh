#!/usr/bin/env bash
# One `kcage bench` command-line case (see CMakeLists.txt).  Bad input must give exit
# status 2 and exactly one line on stderr that names the problem.
set -uo pipefail
kcage=$1 ex=$2 cache=$3 case=$4
export XDG_CACHE_HOME=$cache
tmp=$(mktemp -d)
# shellcheck source=records_check.sh
. "$(dirname "$0")/records_check.sh"
trap 'records_check "$kcage" "$tmp"; rc=$?; rm -rf "$tmp"; exit $rc' EXIT
small='f32[8,8] f32[8,8] f32[8,8]:out'

bad() { # bad EXPECTED-REGEX ARGS...
  local want=$1
  shift
  "$kcage" bench "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  # Sanitizer runtime chatter (LeakSanitizer's "==PID==Can't open /proc/..." when it
  # cannot stop the world) is not kcage's output; a real sanitizer error changes rc.
  # Nor are the progress lines of finished kernels ("kcage bench: [1/2] ...").
  grep -v '^==[0-9]*==' "$tmp/err" | grep -v '^kcage bench: \[[0-9]*/[0-9]*\] ' >"$tmp/err.kc" || true
  mv "$tmp/err.kc" "$tmp/err"
  local lines
  lines=$(wc -l <"$tmp/err")
  echo "exit $rc; stderr:"
  cat "$tmp/err"
  [[ $rc == "${WANT_RC:-2}" ]] || { echo "FAIL: want exit ${WANT_RC:-2}"; exit 1; }
  [[ $lines == 1 ]] || { echo "FAIL: want one line on stderr, got $lines"; exit 1; }
  grep -Eq "^kcage: bench: .*$want" "$tmp/err" || { echo "FAIL: stderr does not match /$want/"; exit 1; }
}

case $case in
help)
  # (read whole: grep -q leaving a pipe early would SIGPIPE kcage mid-text)
  h=$("$kcage" bench --help) || exit 1
  grep -q '^usage: kcage bench' <<<"$h" && grep -q -- '--min-repeat-ms' <<<"$h"
  ;;
missing_file)
  bad 'no-such-kernel.c: No such file or directory' --args "$small" "$tmp/no-such-kernel.c" ;;
bad_args)
  bad "--args: expected '\]'" --args 'f32[8,8 f32[8]:out' "$ex/naive.c" ;;
unknown_dtype)
  bad "--args: unknown dtype 'f33'" --args 'f33[8] f32[8]:out' "$ex/naive.c" ;;
no_output)
  bad '--args: no output tensor' --args 'f32[8,8] f32[8,8]' "$ex/naive.c" ;;
wrong_tensor_count)
  # The reference refuses two tensors: the batch cannot have a truth.
  bad 'reference.*returned -1' --reference "$ex/reference.c" --args 'f32[8,8] f32[8,8]:out' "$ex/naive.c" ;;
reference_no_entry)
  bad "reference.*no symbol 'kernel'" --reference "$ex/no_entry.c" --args "$small" "$ex/naive.c" ;;
no_entry_record)
  # A candidate without the entry point is a record (status error), not a failed batch.
  "$kcage" bench --args "$small" --json "$tmp/r.jsonl" "$ex/no_entry.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/out" "$tmp/err"
  [[ $rc == 0 ]] && grep -q '"status": *"error"' "$tmp/r.jsonl" && grep -q "no symbol 'kernel'" "$tmp/r.jsonl"
  ;;
escaped_build_error)
  # A compiler message carrying terminal escapes reaches the table and stderr escaped:
  # no ESC byte at all, the text visible as \e[...
  printf '#error "\033[32mok 99.99x\033[0m\033]0;pwned\007"\nint kernel(void *a, int n) { return 0; }\n' >"$tmp/esc.c"
  "$kcage" bench --args "$small" "$tmp/esc.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat -v "$tmp/out" "$tmp/err"
  [[ $rc == 0 ]] || { echo "FAIL: exit $rc"; exit 1; }
  if LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$tmp/out" "$tmp/err"; then
    echo "FAIL: a control character reached the terminal"; exit 1
  fi
  grep -q 'build_error' "$tmp/out" && grep -qF '\e[32mok 99.99x' "$tmp/out"
  ;;
cache_dir_refused)
  # A cache directory others can write (or someone else owns) is refused up front, in
  # one line naming it, and nothing is written into it.
  mkdir -m 0777 "$tmp/open" && chmod 0777 "$tmp/open"
  WANT_RC=3 bad "$tmp/open: writable by others" --cache-dir "$tmp/open" --args "$small" "$ex/naive.c"
  [[ -z $(ls -A "$tmp/open") ]] || { echo "FAIL: something was written"; exit 1; }
  ;;
missing_compiler)
  # The machinery, not the input: one line and exit 3 before anything runs, not an
  # error record per kernel.
  WANT_RC=3 bad "compiler 'no-such-cc' not found" --cc no-such-cc --args "$small" "$ex/naive.c"
  ;;
env_overrides)
  # $KCAGE_WORKER and $KCAGE_POLICY_DIR replace what every sandbox rests on: a place
  # someone else could change is refused up front, in one line (exit 3), never used and
  # never silently skipped; a trusted one is used, and the use is logged.
  worker=$(dirname "$kcage")/kcage-worker
  chmod 0755 "$tmp" # (the pool's ids must reach the worker's copy)
  mkdir -m 0777 "$tmp/open" "$tmp/mine" && chmod 0777 "$tmp/open" && chmod 0755 "$tmp/mine"
  cp "$worker" "$tmp/open/kcage-worker" && cp "$worker" "$tmp/mine/kcage-worker" || exit 1
  KCAGE_WORKER=$tmp/open/kcage-worker WANT_RC=3 \
    bad "[$]KCAGE_WORKER: $tmp/open: writable by others" --args "$small" "$ex/naive.c"
  chmod 0666 "$tmp/mine/kcage-worker"
  KCAGE_WORKER=$tmp/mine/kcage-worker WANT_RC=3 \
    bad "[$]KCAGE_WORKER: $tmp/mine/kcage-worker: writable by others" --args "$small" "$ex/naive.c"
  chmod 0755 "$tmp/mine/kcage-worker"
  cp "$ex/../../policies/"*.policy "$tmp/open/" || exit 1
  KCAGE_POLICY_DIR=$tmp/open WANT_RC=3 \
    bad "[$]KCAGE_POLICY_DIR: $tmp/open: writable by others" --args "$small" "$ex/naive.c"
  KCAGE_POLICY_DIR=$tmp/open "$kcage" run -- /bin/true 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  [[ $rc == 125 ]] && grep -q 'KCAGE_POLICY_DIR.*writable by others' "$tmp/err" || exit 1
  # (a worker copied elsewhere finds no policies of its own: both variables)
  mkdir -m 0755 "$tmp/pol" && cp "$tmp/open/"*.policy "$tmp/pol/" || exit 1
  KCAGE_WORKER=$tmp/mine/kcage-worker KCAGE_POLICY_DIR=$tmp/pol "$kcage" bench --args "$small" \
    --repeat 2 --json "$tmp/r.jsonl" "$ex/tiled.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err" "$tmp/r.jsonl"
  [[ $rc == 0 ]] && grep -q '"status": *"ok"' "$tmp/r.jsonl" &&
    grep -q "KCAGE_WORKER=$tmp/mine/kcage-worker in use" "$tmp/err" &&
    grep -q "KCAGE_POLICY_DIR=$tmp/pol in use" "$tmp/err"
  ;;
bad_option)
  bad 'unknown option' --args "$small" --frobnicate "$ex/naive.c" ;;
json_unwritable)
  # Records that could not be written are a failure of the batch (exit 3, one line),
  # never a silent exit 0 with a file that lacks them.
  WANT_RC=3 bad '--json /dev/full: cannot write the records: No space left on device' \
    --args "$small" --repeat 2 --json /dev/full "$ex/tiled.c"
  h=$("$kcage" bench --help) || exit 1
  grep -q 'could not write the --json records' <<<"$h" ;;
not_a_worker)
  # A trusted $KCAGE_WORKER that is no kcage worker: the error names the binary and
  # says what it is not (not "zygote: bad answer").
  KCAGE_WORKER=/bin/true "$kcage" bench --args "$small" --repeat 2 "$ex/tiled.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  [[ $rc == 3 ]] || { echo "FAIL: want exit 3, got $rc"; exit 1; }
  [[ $(grep -vc 'in use instead of' "$tmp/err") == 1 ]] || { echo "FAIL: want one error line"; exit 1; }
  grep -q '^kcage: bench: .*/bin/true is not a kcage worker.*exited with status 0' "$tmp/err" ;;
address_space_limit)
  # --no-isolation holds --memory as an RLIMIT_AS, which also counts the worker's
  # mapping of its inputs (every slot of the inputs file): a --memory too small for
  # them is refused up front naming the tensor and the limit (not "map inputs: Cannot
  # allocate memory"); enough runs.
  big='f32[256,256] f32[256,256] f32[256,256]:out'
  "$kcage" bench --no-isolation --memory 52M --args "$big" "$ex/naive.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  [[ $rc == 2 ]] || { echo "FAIL: want exit 2, got $rc"; exit 1; }
  grep -q 'tensor 0 (f32\[256,256\].*raise --memory' "$tmp/err" || exit 1
  grep -q 'Cannot allocate memory' "$tmp/err" && exit 1
  need=$(sed -n 's/.*at least \([0-9]*\)M.*/\1/p' "$tmp/err")
  "$kcage" bench --no-isolation --memory "${need:-96}M" --args "$big" --repeat 2 --json "$tmp/r.jsonl" \
    "$ex/naive.c" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err" "$tmp/r.jsonl"
  [[ $rc == 0 ]] && grep -q '"status": *"ok"' "$tmp/r.jsonl" ;;
json_lines)
  # Exactly the record fields of docs/contracts.md (plus "limits": memory, pids), one
  # object per line, input order.
  "$kcage" bench --args "$small" --reference "$ex/reference.c" --repeat 2 --min-repeat-ms 1 \
    --json "$tmp/r.jsonl" "$ex/naive.c" "$ex/wrong_result.c" >"$tmp/out" 2>"$tmp/err" || exit 1
  cat "$tmp/out"
  [[ $(wc -l <"$tmp/r.jsonl") == 2 ]] || exit 1
  head -1 "$tmp/r.jsonl" | grep -q '"kernel": *"[^"]*naive.c"' || exit 1
  for f in kernel status message run_secs median_s min_s cv number repeat max_abs_err build_s device \
    mean_s stddev_s max_s warmup_secs unstable timeout reference_median_s speedup seed cc cflags \
    kcage_version started_at ended_at; do
    [[ $(grep -c "\"$f\":" "$tmp/r.jsonl") == 2 ]] || { echo "missing field $f"; exit 1; }
  done
  keys=$(head -1 "$tmp/r.jsonl" | grep -o '"[a-z_0-9]*":' | sort | tr -d '\n')
  [[ $keys == '"abi":"args":"atol":"build_s":"cached":"cc":"cflags":"checked_calls":"cpu":"cv":"device":"ended_at":"entry":"isolation":"kcage_version":"kernel":"limits":"max_abs_err":"max_s":"mean_s":"median_s":"memory":"message":"min_s":"number":"pids":"reference":"reference_median_s":"reference_sha256":"repeat":"rtol":"run_secs":"seed":"sha256":"speedup":"started_at":"status":"stddev_s":"threads":"timed":"timeout":"unstable":"verified":"warmup_secs":' ]] || { echo "fields: $keys"; exit 1; }
  # RFC 3339 timestamps, the speed-up against the reference's own median, and numbers
  # in their shortest form (never 17 digits).
  head -1 "$tmp/r.jsonl" | grep -Eq '"started_at":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z"' || exit 1
  head -1 "$tmp/r.jsonl" | grep -Eq '"reference_median_s":[0-9.e-]+,"speedup":[0-9.e-]+' || exit 1
  # (at most 12 significant digits in any number: mantissa digits without leading zeros)
  long=$(jq -c '.. | numbers' "$tmp/r.jsonl" | sed 's/e.*//; s/[-.]//g; s/^0*//' | awk 'length($0) > 12')
  [[ -z $long ]] || { echo "long floats: $long"; exit 1; }
  # (the inputs came from a secret seed: no --seed)
  grep -q '"seed":"secret","cc":"[^"]*","cflags":"' "$tmp/r.jsonl" || exit 1
  grep -q '"status": *"wrong_result"' "$tmp/r.jsonl"
  ;;
self_describing)
  # A record stands alone: the problem (--args, the entry, the reference and its
  # tolerances), the SHA-256 of the bytes measured, and whether the build was cached
  # (then no build time: nothing was compiled).
  cp "$ex/naive.c" "$tmp/k.c"
  cc -O2 -fPIC -shared -o "$tmp/k.so" "$ex/tiled.c" || exit 1
  run() {
    "$kcage" bench --args "$small" --reference "$ex/reference.c" --atol 1e-3 --repeat 2 \
      --min-repeat-ms 1 --cache-dir "$tmp/cache" --json "$tmp/$1.jsonl" "$tmp/k.c" "$tmp/k.so" \
      >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    cat "$tmp/$1.jsonl"
  }
  run first && run second
  src=$(sha256sum <"$tmp/k.c" | cut -d' ' -f1) so=$(sha256sum <"$tmp/k.so" | cut -d' ' -f1)
  ref=$(sha256sum <"$ex/reference.c" | cut -d' ' -f1)
  want() { # want FILE LINE JQ-FILTER EXPECTED
    local got
    got=$(sed -n "$2p" "$tmp/$1.jsonl" | jq -c "$3")
    [[ $got == "$4" ]] || { echo "FAIL: $1:$2 $3 is $got, want $4"; exit 1; }
  }
  want first 1 '[.args, .entry, .reference, .rtol, .atol]' "[\"$small\",\"kernel\",\"$ex/reference.c\",0.0001,0.001]"
  want first 1 '[.sha256, .reference_sha256]' "[\"$src\",\"$ref\"]"
  want first 1 '[.cached, (.build_s > 0)]' '[false,true]'
  want second 1 '[.cached, .build_s]' '[true,null]'
  want first 2 '[.sha256, .cached, .build_s]' "[\"$so\",null,null]"
  want first 1 '.kcage_version | length > 0' 'true'
  # without a reference: no tolerances, nothing to name
  "$kcage" bench --args "$small" --repeat 2 --json "$tmp/n.jsonl" "$tmp/k.so" >"$tmp/out" 2>&1 || exit 1
  want n 1 '[.reference, .reference_sha256, .rtol, .atol]' '[null,null,null,null]'
  ;;
record_schema)
  # Records of every kind of kernel (each verdict of the examples, a .so, no reference,
  # --no-isolation) against docs/record.schema.json; the other cases check theirs too.
  mapfile -t all < <(sed -n 's/^\([a-z_]*\.c\) .*/\1/p' "$ex/MANIFEST")
  ((${#all[@]} > 10)) || { echo "FAIL: no kernels in $ex/MANIFEST"; exit 1; }
  "$kcage" bench --reference "$ex/reference.c" --args "$(cat "$ex/ARGS")" --atol 1e-4 \
    --timeout 2 --memory 256M --repeat 2 --json "$tmp/all.jsonl" "${all[@]/#/$ex/}" \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  "$kcage" bench --no-isolation --args "$small" --seed 7 --repeat 2 --json "$tmp/plain.jsonl" \
    "$ex/tiled.c" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  [[ $(wc -l <"$tmp/all.jsonl") == "${#all[@]}" ]] || { echo "FAIL: records missing"; exit 1; }
  py=$(dirname "$kcage")/venv/bin/python
  [[ -x $py ]] || py=python3
  "$py" "$(dirname "$0")/validate_records.py" "$(dirname "$0")/../../docs/record.schema.json" \
    "$tmp/all.jsonl" "$tmp/plain.jsonl"
  rc=$?
  [[ $rc == 77 ]] && exit 77
  [[ $rc == 0 ]] || exit 1
  # the schema admits nothing it does not name
  jq -c '. + {"surprise": 1}' "$tmp/plain.jsonl" >"$tmp/extra.json"
  "$py" "$(dirname "$0")/validate_records.py" "$(dirname "$0")/../../docs/record.schema.json" \
    "$tmp/extra.json" && { echo "FAIL: an unknown field passed"; exit 1; }
  exit 0
  ;;
timing_options)
  # TVM's knobs reach the record: number fixed when min-repeat-ms is 0, repeat rounds.
  "$kcage" bench --args "$small" --number 3 --repeat 2 --min-repeat-ms 0 --cooldown-ms 1 \
    --flush-cache --sets 2 --checks 3 --json "$tmp/r.jsonl" "$ex/vectorised.c" >"$tmp/out" 2>"$tmp/err" || exit 1
  cat "$tmp/r.jsonl"
  grep -q '"status": *"ok"' "$tmp/r.jsonl" && grep -q '"number": *3[,}]' "$tmp/r.jsonl" &&
    grep -q '"repeat": *2[,}]' "$tmp/r.jsonl" && grep -Eq '"run_secs": *\[[^],]+,[^],]+\]' "$tmp/r.jsonl"
  ;;
shared_object)
  # A .so skips the build (build_s null) and is measured like a source.
  cc -O2 -fPIC -shared -o "$tmp/k.so" "$ex/tiled.c" || exit 1
  "$kcage" bench --args "$small" --reference "$ex/reference.c" --json "$tmp/r.jsonl" "$tmp/k.so" \
    >"$tmp/out" 2>"$tmp/err" || exit 1
  cat "$tmp/out" "$tmp/r.jsonl"
  grep -q '"status": *"ok"' "$tmp/r.jsonl" && grep -q '"build_s": *null' "$tmp/r.jsonl" &&
    grep -q '1.00x\|[0-9]x' "$tmp/out"
  ;;
no_isolation)
  # Only an explicit flag runs kernels unsandboxed: a warning, and the records say so;
  # never with --tracker.  The environment variable of old changes nothing.
  "$kcage" bench --args "$small" --no-isolation --repeat 2 --json "$tmp/r.jsonl" "$ex/tiled.c" \
    >"$tmp/out" 2>"$tmp/err" || exit 1
  cat "$tmp/err" "$tmp/r.jsonl"
  grep -q 'warning: --no-isolation' "$tmp/err" && grep -q '"isolation": *"none"' "$tmp/r.jsonl" || exit 1
  KCAGE_BENCH_PLAIN=1 "$kcage" bench --args "$small" --repeat 2 --json "$tmp/r2.jsonl" \
    "$ex/tiled.c" >"$tmp/out" 2>"$tmp/err" || exit 1
  if grep -q '\[sandbox\]' "$tmp/r2.jsonl"; then
    grep -q '"isolation": *"sandbox"' "$tmp/r2.jsonl" || exit 1
  fi
  "$kcage" bench --args "$small" --no-isolation --tracker 127.0.0.1:1 --key k "$ex/tiled.c" \
    >"$tmp/out" 2>"$tmp/err"
  [[ $? == 2 ]] && grep -q 'no-isolation' "$tmp/err"
  ;;
bad_abi)
  bad "--abi: bad value 'tvm' \\(want dlpack or tvm-ffi\\)" --abi tvm --args "$small" "$ex/naive.c" ;;
tvm_ffi_source)
  # A TVM-FFI kernel built from source: verified and timed, "abi" in its record; the
  # error it raises through TVMFFIErrorSetRaisedFromCStr (served by the worker program,
  # and by kcage itself for --no-isolation) is its record's message.
  tv=$(dirname "$0")/tvmffi
  { cat "$tv/add.c"; echo "/* the reference */"; } >"$tmp/ref.c"
  vec='f32[1000] f32[1000] f32[1000]:out'
  "$kcage" bench --abi tvm-ffi --entry add --args "$vec" --reference "$tmp/ref.c" --repeat 2 \
    --min-repeat-ms 1 --json "$tmp/r.jsonl" "$tv/add.c" "$tv/add_wrong.c" >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
  cat "$tmp/out"
  grep '/add.c"' "$tmp/r.jsonl" | grep '"status": *"ok"' | grep -q '"abi": *"tvm-ffi"' || exit 1
  grep '/add_wrong.c"' "$tmp/r.jsonl" | grep -q '"status": *"wrong_result"' || exit 1
  # The defences do not depend on the ABI: a cheat is caught as such.  (The input
  # writer, add_input_write.c, is the Python suite's: under ASan a fault in the worker
  # ends as `syscall`, for a DLPack kernel too.)
  "$kcage" bench --abi tvm-ffi --entry add --args "$vec" --reference "$tmp/ref.c" --repeat 2 \
    --min-repeat-ms 1 --json "$tmp/c.jsonl" "$tv/add_skip.c" >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
  cat "$tmp/out"
  grep -q '"status": *"suspicious"' "$tmp/c.jsonl" || exit 1
  for iso in "" --no-isolation; do
    "$kcage" bench $iso --abi tvm-ffi --entry add --args 'f32[1000] f32[1000]:out' \
      --json "$tmp/e.jsonl" "$tv/add.c" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    cat "$tmp/e.jsonl"
    grep '"status": *"error"' "$tmp/e.jsonl" |
      grep -q 'the kernel returned -1: TypeError: add wants 3 tensors' || exit 1
  done
  # Called as a DLPack kernel, the same source has no entry point.
  "$kcage" bench --entry add --args "$vec" --json "$tmp/d.jsonl" "$tv/add.c" >"$tmp/out" 2>&1
  grep -q '"abi": *"dlpack"' "$tmp/d.jsonl" && grep -q '"status": *"error"' "$tmp/d.jsonl" ||
    grep -q '"status": *"crash"' "$tmp/d.jsonl"
  ;;
tvm_ffi_parallel)
  # A module's parallel loop runs on the worker's pool, one thread per CPU of --cpus, as
  # TVM's runtime runs it: the kernel fails unless its tasks ran on two threads, and its
  # outputs are still verified against the serial reference.
  ncpu=$(nproc)
  ((ncpu >= 2)) || { echo "SKIP: one CPU here: no second thread to run a task on"; exit 77; }
  tv=$(dirname "$0")/tvmffi
  vec='f32[4096] f32[4096] f32[4096]:out'
  "$kcage" bench --abi tvm-ffi --entry add --args "$vec" --reference "$tv/add.c" --repeat 2 \
    --min-repeat-ms 1 --cpus 2 --json "$tmp/p.jsonl" "$tv/add_parallel.c" "$tv/add.c" \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  cat "$tmp/p.jsonl"
  grep '/add_parallel.c"' "$tmp/p.jsonl" | grep '"status": *"ok"' | grep -q '"threads": *2[,}]' || exit 1
  grep '/add_parallel.c"' "$tmp/p.jsonl" | grep -q '"verified": *[1-9]' || exit 1
  grep '/add.c"' "$tmp/p.jsonl" | grep -q '"threads": *2[,}]' || exit 1
  # One CPU: one thread, as TVM's runtime with one core (the kernel says it ran serially).
  "$kcage" bench --abi tvm-ffi --entry add --args "$vec" --repeat 2 --min-repeat-ms 1 --cpus 1 \
    --json "$tmp/s.jsonl" "$tv/add_parallel.c" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  grep -q 'ran on one thread' "$tmp/s.jsonl" || exit 1
  # A DLPack kernel has no pool.
  "$kcage" bench --args "$small" --repeat 2 --min-repeat-ms 1 --json "$tmp/d.jsonl" \
    "$ex/naive.c" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  grep -q '"threads": *1[,}]' "$tmp/d.jsonl" || exit 1
  WANT_RC=2 bad "--cpus $((ncpu + 1)): this process may run on only $ncpu CPUs" --cpus $((ncpu + 1)) \
    --args "$small" "$ex/naive.c"
  ;;
tvm_ffi_threads_hostile)
  # The pool is the worker's: a kernel that creates a thread of its own, in a call
  # (pthread_create) or in its constructor (a raw clone with glibc's own thread flags,
  # the ones the pool was let through with), is a `syscall` verdict.
  tv=$(dirname "$0")/tvmffi
  vec='f32[1000] f32[1000] f32[1000]:out'
  "$kcage" bench --abi tvm-ffi --entry add --args "$vec" --reference "$tv/add.c" --repeat 2 \
    --min-repeat-ms 1 --json "$tmp/h.jsonl" "$tv/add_thread.c" "$tv/add_ctor_thread.c" \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  cat "$tmp/h.jsonl"
  for k in add_thread add_ctor_thread; do
    grep "/$k.c\"" "$tmp/h.jsonl" | grep -q '"status": *"syscall"' || { echo "FAIL: $k"; exit 1; }
  done
  ;;
tvm_ffi_pool_rogue)
  # A parallel task that takes itself off its launch through the pool's own state and
  # stays, rewriting the output area between rounds (tvmffi/add_pool_rogue.c): the
  # poison the parent reads back before the next round names it.  Its calls are
  # honest, so a parent that trusted the worker's prepare reply would say `ok` (it did).
  # Every round has the untimed round's 8 calls (4 sets, twice): a bigger one maps a new
  # area, where the thread's pointers into the old one would fault (`crash`).
  ncpu=$(nproc)
  ((ncpu >= 2)) || { echo "SKIP: one CPU here: no pool thread to detach"; exit 77; }
  tv=$(dirname "$0")/tvmffi
  vec='f32[1000] f32[1000] f32[1000]:out'
  # The thread rewrites only when the scheduler runs it in the moment between the
  # prepare reply and the stop; on a loaded machine it can miss every round of a run,
  # and then there is nothing to see and `ok` is the truth.  Run on the other CPU while
  # a round runs, it can also write an old output over one a call of the round has
  # just written: the reference check names that one.  So: up to five runs of 30
  # rounds, one of them must name the poison or the wrong output, and none may say
  # anything else.
  for try in 1 2 3 4 5; do
    "$kcage" bench --abi tvm-ffi --entry add --args "$vec" --reference "$tv/add.c" --repeat 30 \
      --sets 4 --number 8 --min-repeat-ms 0 --cpus 2 --json "$tmp/r.jsonl" "$tv/add_pool_rogue.c" \
      >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    cat "$tmp/r.jsonl"
    grep '"status": *"suspicious"' "$tmp/r.jsonl" |
      grep -q -e 'did not hold the poison' -e 'differs from the reference' && exit 0
    grep -q '"status": *"ok"' "$tmp/r.jsonl" || exit 1
  done
  exit 1
  ;;
seed_record)
  # A secret seed by default; --seed N is recorded (the inputs were predictable).
  "$kcage" bench --args "$small" --repeat 2 --json "$tmp/r.jsonl" "$ex/tiled.c" >"$tmp/out" 2>"$tmp/err" || exit 1
  grep -q '"seed": *"secret"' "$tmp/r.jsonl" || exit 1
  "$kcage" bench --args "$small" --seed 5 --repeat 2 --json "$tmp/r.jsonl" "$ex/tiled.c" >"$tmp/out" 2>"$tmp/err" || exit 1
  grep -q '"seed": *5[,}]' "$tmp/r.jsonl"
  ;;
*) echo "unknown case $case"; exit 1 ;;
esac
