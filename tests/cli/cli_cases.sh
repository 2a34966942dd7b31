#!/usr/bin/env bash
# cli_cases.sh KCAGE SOURCE_DIR CASE: --version on every subcommand, the man pages'
# EXAMPLES and SEE ALSO, and shell completion of policy names.
set -uo pipefail
kcage=$1 src=$2 case=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
subs=(run bench policy tracker agent query)

case $case in
version)
  want=$("$kcage" --version) || fail "kcage --version"
  [[ $want =~ ^kcage\ [0-9]+\.[0-9]+ ]] || fail "kcage --version: $want"
  for s in "${subs[@]}"; do
    got=$("$kcage" "$s" --version 2>&1) || fail "kcage $s --version: exit $?: $got"
    [[ $got == "$want" ]] || fail "kcage $s --version: '$got', want '$want'"
    # (read whole: grep -q leaving the pipe early would SIGPIPE kcage mid-text)
    h=$("$kcage" "$s" --help) || fail "kcage $s --help"
    grep -q -- '--version' <<<"$h" || fail "kcage $s --help does not name --version"
  done
  # after other options too, and never taken from the program of `kcage run`
  got=$("$kcage" bench --args 'f32[1]:out' --version) && [[ $got == "$want" ]] || fail "bench OPTS --version"
  got=$("$kcage" run -- /bin/sh -c 'echo "$1"' sh --version) && [[ $got == --version ]] || fail "run -- PROG --version: $got"
  ;;
man)
  command -v help2man >/dev/null || { echo "SKIP: no help2man (apt-get install help2man)"; exit 77; }
  sh "$src/man/help2man.sh" "$(command -v help2man)" "$kcage" 0.0-test "$tmp/man" || fail "help2man.sh"
  for p in kcage "${subs[@]/#/kcage-}"; do
    f=$tmp/man/$p.1
    [[ -s $f ]] || fail "no $p.1"
    grep -q '^\.SH EXAMPLES' "$f" || fail "$p.1 has no EXAMPLES"
    grep -q '^\.SH "SEE ALSO"' "$f" || fail "$p.1 has no SEE ALSO"
    sed -n '/^\.SH EXAMPLES/,/^\.SH/p' "$f" | grep -q 'kcage' || fail "$p.1: EXAMPLES without a kcage command"
    if command -v man >/dev/null; then
      out=$(MANWIDTH=80 man -l "$f" 2>&1) || fail "$p.1 does not render: $out"
      grep -q '^SEE ALSO' <<<"$out" || fail "$p.1 renders no SEE ALSO"
    fi
  done
  ;;
completion)
  # --policy NAME and `policy show NAME` offer the installed policies, and those of a
  # trusted $KCAGE_POLICY_DIR.
  mkdir -m 0700 "$tmp/pol" && cp "$src/policies/exec.policy" "$tmp/pol/mine_only.policy" || exit 1
  complete_words() { # WORD...: what _kcage offers for the last one
    KCAGE_POLICY_DIR=$tmp/pol bash -c '
      . "$0/completion/kcage.bash"
      COMP_WORDS=("${@}"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
      _kcage; printf "%s\n" "${COMPREPLY[@]}"' "$src" "$@"
  }
  cd "$tmp" || exit 1 # (no file names that look like policies)
  got=$(complete_words "$kcage" run --policy "")
  echo "--policy offers:" $got
  for p in exec build measure mine_only; do
    grep -qx "$p" <<<"$got" || fail "--policy does not offer $p"
  done
  got=$(complete_words "$kcage" bench --policy me)
  [[ $(grep -x 'measure' <<<"$got") ]] || fail "--policy me: $got"
  got=$(complete_words "$kcage" policy show "")
  grep -qx measure <<<"$got" && grep -qx mine_only <<<"$got" || fail "policy show: $got"
  got=$(complete_words "$kcage" policy "")
  grep -qx list <<<"$got" || fail "policy subcommands: $got"
  # and the list itself: sorted, once each
  "$kcage" policy list >"$tmp/l" || fail "policy list"
  sort -u "$tmp/l" | cmp -s - "$tmp/l" || fail "policy list is not sorted and unique"
  ;;
*) echo "unknown case $case"; exit 1 ;;
esac
