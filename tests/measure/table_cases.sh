#!/usr/bin/env bash
# table_cases.sh KCAGE EXAMPLES CACHE CASE: what `kcage bench` prints for a person (the
# table, its summary, progress and colour), checked on real batches.
set -uo pipefail
kcage=$1 ex=$2 cache=$3 case=$4
export XDG_CACHE_HOME=$cache
tmp=$(mktemp -d)
# shellcheck source=records_check.sh
. "$(dirname "$0")/records_check.sh"
trap 'records_check "$kcage" "$tmp"; rc=$?; rm -rf "$tmp"; exit $rc' EXIT
small='f32[8,8] f32[8,8] f32[8,8]:out'
fast=(--repeat 2 --min-repeat-ms 1)
fail() { echo "FAIL: $*"; exit 1; }

# bench ARGS...: the batch's stdout in $tmp/out, stderr in $tmp/err; fails on exit != 0.
bench() {
  "$kcage" bench "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  cat "$tmp/out" "$tmp/err"
  [[ $rc == 0 ]] || fail "exit $rc"
}

case $case in
build_error_line)
  # The compiler's first `error:` line, not its "In function" preamble, under the
  # path the user gave.
  mkdir "$tmp/src"
  printf 'int kernel(void *a, int n) {\n  return undeclared_x;\n}\n' >"$tmp/src/syn.c"
  bench --args "$small" "$tmp/src/syn.c"
  row=$(grep '^[^ ]*syn.c  *build_error' "$tmp/out") || fail "no build_error row"
  [[ $row == *"$tmp/src/syn.c:2:"*"error: 'undeclared_x' undeclared"* ]] || fail "row: $row"
  [[ $row != *"In function"* ]] || fail "the preamble, not the error: $row"
  ;;
own_names)
  # A file that is no shared object is named by the user's path, never by the copy a
  # worker loaded; a reference likewise.
  echo garbage >"$tmp/junk.so"
  bench --args "$small" "$tmp/junk.so"
  grep -q "junk.so  *error .*$tmp/junk.so: file too short" "$tmp/out" || fail "row"
  grep -q 'kcage-bench\|/view/\|kernel.so' "$tmp/out" "$tmp/err" && fail "a temporary path"
  cp "$tmp/junk.so" "$tmp/ref.so"
  "$kcage" bench --args "$small" --reference "$tmp/ref.so" "$ex/naive.c" >"$tmp/out" 2>"$tmp/err"
  cat "$tmp/err"
  grep -q "$tmp/ref.so: file too short" "$tmp/err" || fail "reference not named"
  grep -q 'kcage-bench\|/view/' "$tmp/err" && fail "a temporary path"
  exit 0
  ;;
display_width)
  # Names with accented and double-width characters: every row's status column starts
  # at the same terminal column (counted as a terminal counts cells).
  cp "$ex/naive.c" "$tmp/véctör_äddé.c" && cp "$ex/naive.c" "$tmp/漢字.c" && cp "$ex/naive.c" "$tmp/n.c"
  (cd "$tmp" && bench --args "$small" "${fast[@]}" véctör_äddé.c 漢字.c n.c) || exit 1
  python3 - "$tmp/out" <<'PY' || fail "misaligned"
import sys, unicodedata
def cells(s):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
rows = [l for l in lines if l.startswith(("kernel ", "véctör", "漢字", "n.c"))]
assert len(rows) == 4, rows
cols = {cells(l[: l.index("  ", l.index(" ")) + 2].rstrip()) for l in rows}
starts = set()
for l in rows:
    i = l.index(" ")  # end of the name (no spaces in these names)
    while l[i] == " ":
        i += 1
    starts.add(cells(l[:i]))
print("status column at", starts)
sys.exit(len(starts) != 1)
PY
  ;;
summary)
  # Counts by verdict, the fastest correct kernel and its speed-up over the reference.
  bench --args "$small" --reference "$ex/reference.c" "${fast[@]}" "$ex/naive.c" "$ex/tiled.c" \
    "$ex/wrong_result.c"
  grep -Eq '^3 kernels: 2 ok, 1 wrong_result; fastest: [^ ]*(naive|tiled)\.c, [0-9.]+x the reference\.$' \
    "$tmp/out" || fail "summary"
  grep -q 'Nothing was verified' "$tmp/out" && fail "a reference verified them"
  # What to try when a kernel is unstable: any CV is above a --max-cv this small.
  bench --args "$small" --reference "$ex/reference.c" "${fast[@]}" --max-cv 1e-9 "$ex/naive.c"
  grep -Eq '^1 unstable .*--repeat.*--cpu N.*quieter machine' "$tmp/out" || fail "unstable advice"
  ;;
unverified)
  # Without --reference an `ok` is said to be unchecked: a note per row, a summary line,
  # and, when no table is printed, one warning on stderr.
  bench --args "$small" "${fast[@]}" "$ex/naive.c"
  grep -q 'naive.c  *ok .*not verified (no --reference)' "$tmp/out" || fail "row note"
  grep -q '^Nothing was verified: without --reference' "$tmp/out" || fail "summary"
  bench --args "$small" "${fast[@]}" --quiet "$ex/naive.c"
  [[ ! -s $tmp/out ]] || fail "--quiet printed a table"
  grep -q '^kcage: bench: warning: no --reference: nothing was verified' "$tmp/err" || fail "warning"
  ;;
progress_lines)
  # Off a terminal: one line per finished kernel on stderr, no carriage return.
  bench --args "$small" "${fast[@]}" "$ex/naive.c" "$ex/build_error.c" "$ex/tiled.c"
  grep -q '^kcage bench: \[1/3\] .*naive.c: ok, ' "$tmp/err" || fail "line 1"
  grep -q '^kcage bench: \[2/3\] .*build_error.c: build_error$' "$tmp/err" || fail "line 2"
  grep -q '^kcage bench: \[3/3\] .*tiled.c: ok, ' "$tmp/err" || fail "line 3"
  grep -q $'\r' "$tmp/err" && fail "a carriage return off a terminal"
  bench --args "$small" "${fast[@]}" --quiet "$ex/naive.c"
  grep -q '\[1/1\]' "$tmp/err" && fail "--quiet"
  exit 0
  ;;
tty_colour)
  # On a terminal (script(1) gives it a pty): coloured statuses, and progress naming
  # the kernel with an ETA; NO_COLOR set: the same table with no colour at all.
  command -v script >/dev/null || { echo "SKIP: no script(1) to give kcage a terminal"; exit 77; }
  # (--max-cv: every ok stable, so green; an unstable one is yellow)
  cmd="'$kcage' bench --args '$small' --repeat 2 --min-repeat-ms 1 --max-cv 1000 --reference '$ex/reference.c' '$ex/naive.c' '$ex/tiled.c' '$ex/wrong_result.c'"
  script -qec "$cmd" /dev/null >"$tmp/tty" </dev/null || fail "exit $?"
  cat -v "$tmp/tty"
  grep -q $'\033\\[32mok' "$tmp/tty" || fail "no green ok"
  grep -q $'\033\\[31mwrong_result' "$tmp/tty" || fail "no red wrong_result"
  grep -q 'measure .*ETA [0-9]* s  .*tiled.c' "$tmp/tty" || fail "no progress with name and ETA"
  NO_COLOR=1 script -qec "$cmd" /dev/null >"$tmp/nc" </dev/null || fail "exit $?"
  cat -v "$tmp/nc"
  grep -q $'\033\\[[0-9;]*m' "$tmp/nc" && fail "colour with NO_COLOR"
  grep -q 'wrong_result' "$tmp/nc" || fail "no table"
  # Not a terminal: no colour either.
  bench --args "$small" "${fast[@]}" "$ex/naive.c"
  grep -q $'\033' "$tmp/out" && fail "colour off a terminal"
  exit 0
  ;;
*) echo "unknown case $case"; exit 1 ;;
esac
