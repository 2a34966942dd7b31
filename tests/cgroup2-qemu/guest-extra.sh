#!/bin/sh
# In the qemu guest (pure cgroup v2), after the cgroup payload: the hostile limit cases
# (memory, pids, CPU time, output) through the real kcage binary.  Prints KC2 OK|FAIL lines and
# "KC2 DONE pass=N fail=M"; run.sh decides from them.
export KCAGE_POLICY_DIR=/policies
pass=0
fail=0
ok() { echo "KC2 OK $*"; pass=$((pass + 1)); }
bad() { echo "KC2 FAIL $*"; fail=$((fail + 1)); }
field() { # field NAME: a string field of /tmp/r.json
  grep -o "\"$1\": *\"[a-z_]*\"" /tmp/r.json 2>/dev/null | head -1 | sed 's/.*"\([a-z_]*\)"$/\1/'
}

# case NAME WANT_STATUS KEY=VALUE|- KCAGE_RUN_ARGS... -- PROGRAM...
#   KEY=VALUE: one more string field of the record that must match (limit=cpu, ...)
case_() {
  name=$1 want=$2 wantkv=$3
  shift 3
  rm -f /tmp/r.json
  t0=$(cut -d' ' -f1 /proc/uptime)
  timeout 120 /kcage run --report /tmp/r.json --ro-bind /payload "$@" >/tmp/out 2>/tmp/err
  rc=$?
  t1=$(cut -d' ' -f1 /proc/uptime)
  st=$(field status)
  got=
  if [ "$wantkv" != - ]; then
    got="${wantkv%%=*}=$(field "${wantkv%%=*}")"
  else
    wantkv=
    [ -n "$(field limit)" ] && got="limit=$(field limit)"
  fi
  if [ "$st" = "$want" ] && [ "$got" = "$wantkv" ]; then
    ok "$name: status=$st${got:+ $got} rc=$rc ($t0 -> $t1 s)"
  else
    bad "$name: status='$st' $got rc=$rc, want $want${wantkv:+ $wantkv}; $(head -c 300 /tmp/err | tr '\n' ' ')"
    head -c 600 /tmp/r.json 2>/dev/null
    echo
  fi
}

mounts0=$(wc -l < /proc/self/mountinfo)
case_ ok ok - -- /payload hostile ok
case_ memory memory - --memory 32M -- /payload hostile memory
case_ cpu timeout limit=cpu --time 0.5 -- /payload hostile spin
case_ wall timeout limit=wall --wall 0.5 -- /payload hostile sleep
# (the bomb's parent spins on the refused fork: --wall ends it, the pids verdict wins)
case_ pids pids - --pids 16 --wall 3 -- /payload hostile forkbomb
case_ output output - --output 64K -- /payload hostile flood
case_ segfault signaled - -- /payload hostile segv
case_ daemon ok - -- /payload hostile daemon
case_ syscall syscall syscall=socket --policy measure -- /payload hostile socket
# a time namespace and sysinfo answered by kcage on this guest's (older) kernel; the
# guest has been up for longer than the payload allows its own uptime to be
if [ "$(cut -d. -f1 /proc/uptime)" -gt 10 ]; then
  case_ clock ok - -- /payload hostile clock
else
  echo "KC2 SKIP clock: the guest is up for 10 s or less, too short to tell"
fi

# kcage itself SIGKILLed mid-run: its cgroup stays until the next kcage reaps it
leaves() { find /sys/fs/cgroup/kcage -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }
# (a limit, so that this run has a cgroup: kcage makes one only when a limit needs it)
/kcage run --memory 64M --ro-bind /payload -- /payload hostile sleep >/dev/null 2>&1 &
kpid=$!
i=0
while [ "$(leaves)" = 0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.3
kill -9 $kpid
wait $kpid 2>/dev/null
before=$(leaves)
case_ after-sigkill ok - -- /payload hostile ok
after=$(leaves)
if [ "$before" = 1 ] && [ "$after" = 0 ]; then
  ok "stale cgroup of a SIGKILLed kcage reaped by the next one"
else
  bad "stale cgroup: $before leaf after SIGKILL (want 1), $after after the next run (want 0)"
fi

# nothing left behind: no hostile process, no kcage cgroup leaf
sleep 0.2
# (busybox timeout leaves its watcher, whose args also name the case, for up to 1 s)
left=$(ps -o args 2>/dev/null | grep -c '^/payload hostile')
[ "$left" = 0 ] && ok "no process left" || bad "$left hostile processes left: $(ps -o pid,args | grep ' /payload hostile' | head -3 | tr '\n' ' ')"
leaves=$(find /sys/fs/cgroup/kcage -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
[ "$leaves" = 0 ] && ok "no cgroup left" || bad "cgroups left: $(ls /sys/fs/cgroup/kcage | head -3 | tr '\n' ' ')"
mounts1=$(wc -l < /proc/self/mountinfo)
[ "$mounts0" = "$mounts1" ] && ok "no mount left" || bad "mounts: $mounts0 before, $mounts1 after"
tmpleft=$(ls /tmp | grep -v '^r.json$\|^out$\|^err$' | wc -l)
[ "$tmpleft" = 0 ] && ok "no file left in /tmp" || bad "files left in /tmp: $(ls /tmp | head -5 | tr '\n' ' ')"
echo "KC2 DONE pass=$pass fail=$fail"
[ $fail = 0 ]
