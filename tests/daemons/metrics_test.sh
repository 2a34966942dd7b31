#!/usr/bin/env bash
# metrics_test.sh KCAGE KERNELS_DIR: a tracker and an agent with --metrics, scraped by
# a real HTTP client (curl, else Python's urllib) after real traffic: a remote kcage
# bench, a peer speaking garbage to the tracker, a client with the wrong matchkey at
# the agent.  Also the log lines: level and timestamp on a terminal, a syslog priority
# and no timestamp under journald (JOURNAL_STREAM).
set -euo pipefail
kcage=$1 kernels=$2
tmp=$(mktemp -d /tmp/kcage-metrics.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.err; do echo "--- $f"; cat "$f"; done >&2
  exit 1
}
get() { # URL -> body on stdout; fails on a non-200 answer
  if command -v curl >/dev/null; then
    curl -sf --max-time 10 "$1"
  else
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"
  fi
}
status() { # URL -> the HTTP status code
  python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
wait_line() { # FILE REGEX -> the first capture group, within 30 s
  for _ in $(seq 300); do
    v=$(sed -n -E "s/$2/\1/p" "$1" | head -1)
    [ -n "$v" ] && { echo "$v"; return 0; }
    sleep 0.1
  done
  fail "no line /$2/ in $1"
}
metric() { # BODY NAME -> value ("" when absent)
  printf '%s\n' "$1" | awk -v n="$2" '$1 == n {print $2}'
}

"$kcage" tracker --host 127.0.0.1 --port 0 --metrics 127.0.0.1:0 >"$tmp/trk.out" 2>"$tmp/trk.err" &
pids+=($!)
tport=$(wait_line "$tmp/trk.out" 'tracker listening on .*:([0-9]+)$')
tm=$(wait_line "$tmp/trk.out" 'metrics listening on 127.0.0.1:([0-9]+)$')
JOURNAL_STREAM=8:1234 "$kcage" agent --tracker "127.0.0.1:$tport" --key cpu --host 127.0.0.1 \
  --port 0 --workers 1 --metrics 127.0.0.1:0 >"$tmp/agent.out" 2>"$tmp/agent.err" &
pids+=($!)
aport=$(wait_line "$tmp/agent.out" 'agent listening on .*:([0-9]+)$')
am=$(wait_line "$tmp/agent.out" 'metrics listening on 127.0.0.1:([0-9]+)$')
for _ in $(seq 100); do
  [ "$(metric "$(get "http://127.0.0.1:$tm/metrics")" 'kcage_tracker_queue_free{key="cpu"}')" = 1 ] && break
  sleep 0.1
done
[ "$(metric "$(get "http://127.0.0.1:$tm/metrics")" 'kcage_tracker_queue_free{key="cpu"}')" = 1 ] ||
  fail "the agent's free device is not in queue_free"

# A peer that does not speak the protocol: dropped, with its reason.
exec 3<>"/dev/tcp/127.0.0.1/$tport"
printf 'GET / HTTP/1.0\r\n\r\n' >&3
cat <&3 >/dev/null || true
exec 3<&-
# A client with a matchkey the agent never handed out.
python3 - "$aport" <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
key = b"client:not-a-matchkey"
s.sendall(struct.pack("<ii", 0xFF271, len(key)) + key)
code = struct.unpack("<i", s.recv(4))[0]
sys.exit(0 if code == 0xFF273 else f"agent answered {code:#x} to a wrong matchkey")
PY

args=$(cat "$kernels/ARGS")
"$kcage" bench --tracker "127.0.0.1:$tport" --key cpu --session-timeout 120 --timeout 10 \
  --repeat 2 --min-repeat-ms 1 --quiet --json "$tmp/b.json" --args "$args" \
  "$kernels/naive.c" "$kernels/segfault.c" 2>"$tmp/bench.err" || fail "remote kcage bench"

sleep 1 # the tracker publishes its queues every 0.5 s
t=$(get "http://127.0.0.1:$tm/metrics") || fail "scrape the tracker"
a=$(get "http://127.0.0.1:$am/metrics") || fail "scrape the agent"
echo "$t" | grep -q '^# TYPE kcage_tracker_leases_total counter$' || fail "no TYPE line: $t"
[ "$(metric "$t" 'kcage_tracker_leases_total{key="cpu"}')" = 1 ] || fail "leases: $t"
[ -n "$(metric "$t" 'kcage_tracker_lease_wait_seconds_total{key="cpu"}')" ] || fail "wait: $t"
[ "$(metric "$t" 'kcage_tracker_drops_total{reason="bad_magic"}')" = 1 ] || fail "drops: $t"
[ "$(metric "$t" 'kcage_tracker_connections_total')" -ge 3 ] || fail "connections: $t"
[ "$(metric "$t" 'kcage_tracker_queue_pending{key="cpu"}')" = 0 ] || fail "pending: $t"
[ "$(metric "$a" 'kcage_agent_sessions_started_total')" = 1 ] || fail "sessions: $a"
[ "$(metric "$a" 'kcage_agent_drops_total{reason="mismatch"}')" = 1 ] || fail "agent drops: $a"
[ "$(metric "$a" 'kcage_agent_verdicts_total{status="ok"}')" = 1 ] || fail "verdict ok: $a"
[ "$(metric "$a" 'kcage_agent_verdicts_total{status="crash"}')" = 1 ] || fail "verdict crash: $a"
[ "$(metric "$a" 'kcage_agent_verdicts_total{status="memory"}')" = 0 ] || fail "verdict memory: $a"
[ "$(status "http://127.0.0.1:$tm/elsewhere")" = 404 ] || fail "a path other than /metrics"

# Logs: one line per event, with the reason of every drop.
ts='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'
grep -Eq "$ts warning kcage tracker: dropped 127\.0\.0\.1: bad_magic$" "$tmp/trk.err" ||
  fail "the tracker did not log the drop"
grep -q '^<4>kcage agent: dropped a client: mismatch$' "$tmp/agent.err" ||
  fail "the agent (under journald) did not log the drop"
grep -q '^<6>kcage agent: session started' "$tmp/agent.err" || fail "no session start logged"
for _ in $(seq 50); do grep -q '^<6>kcage agent: session ended$' "$tmp/agent.err" && break; sleep 0.1; done
grep -q '^<6>kcage agent: session ended$' "$tmp/agent.err" || fail "no session end logged"
! grep -Eq "$ts" "$tmp/agent.err" || fail "timestamps under journald"
echo "metrics test: ok"
