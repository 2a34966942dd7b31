#!/usr/bin/env bash
# run_cases.sh KCAGE HOSTILE_PROGS CASE: every limit verdict of `kcage run` is said in
# one stderr line (without --report), naming the verdict and the exit status.
set -uo pipefail
kcage=$1 progs=$2 case=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# said WANT_RC REGEX OPTIONS... -- PROGRAM...: exit WANT_RC and exactly one kcage line
# on stderr matching REGEX (the program's own stderr lines are its business).
said() {
  local want=$1 re=$2
  shift 2
  "$kcage" run --ro-bind "$progs:/h" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  grep -v '^==[0-9]*==' "$tmp/err" | grep '^kcage: ' >"$tmp/kc"
  echo "exit $rc; kcage's lines:"
  cat "$tmp/kc"
  [[ $rc == "$want" ]] || fail "want exit $want"
  [[ $(wc -l <"$tmp/kc") == 1 ]] || fail "want one kcage line on stderr"
  grep -Eq "^kcage: run: $re" "$tmp/kc" || fail "the line does not match /$re/"
}

case $case in
time)
  said 124 'timeout: CPU time limit of 0.3 s exceeded \(exit 124\)$' --time 0.3 -- /h/h_cpuspin m
  said 124 'timeout: wall-clock limit of 0.3 s exceeded \(exit 124\)$' --wall 0.3 -- /bin/sleep 30
  ;;
memory)
  said 137 'memory: memory limit of 32 MiB exceeded.*\(exit 137\)$' --memory 32M -- /h/h_membomb m
  ;;
pids)
  "$kcage" run --ro-bind "$progs:/h" --pids 8 --wall 20 -- /h/h_forkbomb m >"$tmp/out" 2>"$tmp/err"
  rc=$?
  cat "$tmp/err"
  [[ $(grep -c '^kcage: ' "$tmp/err") == 1 ]] || fail "want one kcage line"
  grep -Eq "^kcage: run: pids: process limit of 8 reached \(exit $rc\)$" "$tmp/err" || fail "line"
  ;;
output)
  said 137 'output: output limit of 1024 bytes exceeded \(exit 137\)$' --output 1K -- /h/h_flood m
  ;;
syscall)
  said 137 'syscall: forbidden system call ptrace \(exit 137\)$' --policy measure -- /h/h_syscall m ptrace
  ;;
quiet_when_fine)
  # A program that ends on its own gets no kcage line: its exit status is its own.
  "$kcage" run -- /bin/sh -c 'exit 3' 2>"$tmp/err"
  [[ $? == 3 ]] || fail "exit"
  [[ ! -s $tmp/err ]] || fail "stderr: $(cat "$tmp/err")"
  "$kcage" run --memory 64M --time 5 -- /bin/true 2>"$tmp/err" || fail "exit"
  [[ ! -s $tmp/err ]] || fail "stderr: $(cat "$tmp/err")"
  ;;
*) echo "unknown case $case"; exit 1 ;;
esac
