#!/bin/sh
# `kcage policy check/show`: exact output and exit codes.
set -u
KCAGE=$1
d=$(mktemp -d /tmp/kcage-policy-cli-XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

printf 'include exec\nlimit memory 64M\n' > "$d/good.policy"
printf '# x\nallow read\nallow no_such_syscall\n' > "$d/bad.policy"
printf 'include cyc2\n' > "$d/cyc1.policy"
printf 'include cyc1\n' > "$d/cyc2.policy"

out=$("$KCAGE" policy check "$d/good.policy" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "good: rc $rc: $out"
[ "$out" = "$d/good.policy: ok" ] || fail "good: output '$out'"

out=$("$KCAGE" policy check "$d/good.policy" "$d/bad.policy" "$d/cyc1.policy" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "bad: rc $rc"
echo "$out" | grep -qxF "$d/good.policy: ok" || fail "bad: no ok line: $out"
echo "$out" | grep -qxF "$d/bad.policy:3: unknown syscall 'no_such_syscall'" || fail "bad: $out"
echo "$out" | grep -qxF "$d/cyc2.policy:1: include cycle: cyc1.policy -> cyc2.policy -> cyc1.policy" \
  || fail "cycle: $out"

# a file without the .policy suffix, named without a '/'
(cd "$d" && printf 'default allow\n' > plainname && "$KCAGE" policy check plainname) \
  | grep -qx 'plainname: ok' || fail "check of a plain file name"

for n in exec build measure; do
  "$KCAGE" policy check $n >/dev/null || fail "shipped $n"
done

"$KCAGE" policy check >/dev/null 2>&1; [ $? -eq 2 ] || fail "no args must be usage (2)"
"$KCAGE" policy frob x >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown subcommand must be 2"
"$KCAGE" policy show a b >/dev/null 2>&1; [ $? -eq 2 ] || fail "show takes one"
"$KCAGE" policy --help | grep -q 'kcage policy check' || fail "--help"
"$KCAGE" policy show no-such-policy >/dev/null 2>&1; [ $? -eq 1 ] || fail "show missing"

out=$("$KCAGE" policy show "$d/good.policy") || fail "show good"
echo "$out" | grep -qx 'limit memory 64M' || fail "show: limit: $out"
echo "$out" | grep -qx 'default allow' || fail "show: default"
echo "$out" | grep -q '^kill open_by_handle_at' || fail "show: include not expanded"
echo "$out" > "$d/shown.policy"
"$KCAGE" policy check "$d/shown.policy" >/dev/null || fail "show output is not a valid policy"
"$KCAGE" policy show --filter measure | grep -q 'default action' || fail "show --filter"
echo ok
