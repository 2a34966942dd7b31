#!/usr/bin/env bash
# health_test.sh KCAGE KERNELS_DIR: the fleet says what is wrong at once and reports its
# health.  A fresh tracker's and agent's /metrics carry every family (and a build-info
# series with the version) before any connection, /healthz answers; `kcage bench
# --tracker` with a key no agent has registered fails within seconds in one line, and
# with a key whose devices are all busy says it waits and where it is in the queue.
set -euo pipefail
kcage=$1 kernels=$2
tmp=$(mktemp -d /tmp/kcage-health.XXXXXX)
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
get() { # URL -> "STATUS BODY..." (never fails)
  python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print(r.status, r.read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(), end="")
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
has() { # BODY LINE: the exact line is in the body
  printf '%s\n' "$1" | grep -qxF -- "$2"
}
version=$("$kcage" --version | awk '{print $2}')

"$kcage" tracker --host 127.0.0.1 --port 0 --metrics 127.0.0.1:0 >"$tmp/trk.out" 2>"$tmp/trk.err" &
pids+=($!)
tport=$(wait_line "$tmp/trk.out" 'tracker listening on .*:([0-9]+)$')
tm=$(wait_line "$tmp/trk.out" 'metrics listening on 127.0.0.1:([0-9]+)$')

# Before anything has connected: every family is there.
t=$(get "http://127.0.0.1:$tm/metrics")
has "$t" "200 # HELP kcage_tracker_build_info the running kcage, by version (always 1)" ||
  fail "tracker metrics at start-up: $t"
has "$t" "kcage_tracker_build_info{version=\"$version\"} 1" || fail "build info: $t"
has "$t" "kcage_tracker_connections_total 0" || fail "connections at start-up: $t"
has "$t" "kcage_tracker_connections_closed_total 0" || fail "closed at start-up: $t"
for fam in drops_total leases_total lease_wait_seconds_total; do
  has "$t" "# TYPE kcage_tracker_$fam counter" || fail "$fam at start-up: $t"
done
for fam in queue_free queue_pending start_time_seconds; do
  has "$t" "# TYPE kcage_tracker_$fam gauge" || fail "$fam at start-up: $t"
done
h=$(get "http://127.0.0.1:$tm/healthz")
[ "$h" = "200 ok kcage_tracker $version" ] || fail "tracker /healthz: $h"

"$kcage" agent --tracker "127.0.0.1:$tport" --key cpu --host 127.0.0.1 --port 0 --workers 1 \
  --metrics 127.0.0.1:0 >"$tmp/agent.out" 2>"$tmp/agent.err" &
pids+=($!)
am=$(wait_line "$tmp/agent.out" 'metrics listening on 127.0.0.1:([0-9]+)$')
a=$(get "http://127.0.0.1:$am/metrics")
has "$a" "kcage_agent_build_info{version=\"$version\"} 1" || fail "agent build info: $a"
has "$a" "kcage_agent_sessions_started_total 0" || fail "agent sessions at start-up: $a"
has "$a" "kcage_agent_sessions_ended_total 0" || fail "agent sessions ended at start-up: $a"
has "$a" "kcage_agent_connections_total 0" || fail "agent connections at start-up: $a"
has "$a" "# TYPE kcage_agent_drops_total counter" || fail "agent drops at start-up: $a"
h=$(get "http://127.0.0.1:$am/healthz")
[ "$h" = "200 ok kcage_agent $version" ] || fail "agent /healthz: $h"

args=$(cat "$kernels/ARGS")
# A key nobody serves: one line, within seconds, naming the key and what to do.
start=$(date +%s)
rc=0
timeout 60 "$kcage" bench --tracker "127.0.0.1:$tport" --key nope --args "$args" \
  "$kernels/naive.c" >/dev/null 2>"$tmp/nope.err" || rc=$?
took=$(($(date +%s) - start))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a key nobody serves: exit $rc after $took s"
[ "$took" -le 30 ] || fail "a key nobody serves took $took s"
[ "$(wc -l <"$tmp/nope.err")" -eq 1 ] || fail "not one line: $(cat "$tmp/nope.err")"
grep -q '^kcage: bench: no agent has registered key "nope" with the tracker at 127.0.0.1:[0-9]* (it knows cpu); start one with `kcage agent --tracker 127.0.0.1:[0-9]* --key nope`$' \
  "$tmp/nope.err" || fail "the line: $(cat "$tmp/nope.err")"

# A key whose one device is leased to someone else: a waiting line with the position.
python3 - "$tport" >"$tmp/holder.out" 2>"$tmp/holder.err" <<'PY' &
import json, socket, struct, sys, time
port = int(sys.argv[1])
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(struct.pack("<i", 0x2F271))
    assert struct.unpack("<i", s.recv(4))[0] == 0x2F271
    return s
def call(s, msg):
    b = json.dumps(msg).encode()
    s.sendall(struct.pack("<i", len(b)) + b)
    n = struct.unpack("<i", s.recv(4))[0]
    buf = b""
    while len(buf) < n:
        buf += s.recv(n - len(buf))
    return json.loads(buf)
srv = conn()
call(srv, [5, {"key": "server:busy", "addr": [None, 9]}])
call(srv, [3, "busy", [9, "busy:0.1"], None])
cli = conn()
print(call(cli, [4, "busy", "", 1]), flush=True)
time.sleep(60)
PY
pids+=($!)
wait_line "$tmp/holder.out" '^(\[0, .*)$' >/dev/null
rc=0
KCAGE_REQUEST_TIMEOUT=2 timeout 60 "$kcage" bench --tracker "127.0.0.1:$tport" --key busy \
  --args "$args" "$kernels/naive.c" >/dev/null 2>"$tmp/busy.err" || rc=$?
[ "$rc" -ne 0 ] || fail "a busy key with a 2 s patience succeeded"
grep -q 'kcage bench: waiting for a "busy" device: 1 registered, all busy; this request is number 1 in the queue$' \
  "$tmp/busy.err" || fail "no waiting line: $(cat "$tmp/busy.err")"
[ "$(tail -1 "$tmp/busy.err")" = "kcage: bench: no busy device became free within 2 s" ] ||
  fail "the end of the wait: $(cat "$tmp/busy.err")"

# A keyed agent: a peer that leases it and never proves the key is dropped within
# --auth-timeout, and counted under drops_total{reason="auth"}.
printf 'delta-secret-key-0123456789abcdef\n' >"$tmp/fleet.key"
chmod 600 "$tmp/fleet.key"
"$kcage" agent --tracker "127.0.0.1:$tport" --key keyed --host 127.0.0.1 --port 0 \
  --auth-key "$tmp/fleet.key" --auth-timeout 1 --metrics 127.0.0.1:0 \
  >"$tmp/kagent.out" 2>"$tmp/kagent.err" &
pids+=($!)
km=$(wait_line "$tmp/kagent.out" 'metrics listening on 127.0.0.1:([0-9]+)$')
python3 - "$tport" <<'PY' || fail "the keyless peer"
import json, socket, struct, sys, time
port = int(sys.argv[1])
t = socket.create_connection(("127.0.0.1", port), timeout=20)
t.sendall(struct.pack("<i", 0x2F271)); t.recv(4)
def call(s, msg):
    b = json.dumps(msg).encode()
    s.sendall(struct.pack("<i", len(b)) + b)
    n = struct.unpack("<i", s.recv(4))[0]
    buf = b""
    while len(buf) < n:
        buf += s.recv(n - len(buf))
    return json.loads(buf)
for _ in range(100):
    if call(t, [6])[1].get("queue_info", {}).get("keyed", {}).get("free"):
        break
    time.sleep(0.1)
code, (host, aport, mk) = call(t, [4, "keyed", "", 1])
a = socket.create_connection((host, aport), timeout=20)
key = ("client:" + mk).encode()
a.sendall(struct.pack("<ii", 0xFF271, len(key)) + key)
assert struct.unpack("<i", a.recv(4))[0] == 0xFF271
t0 = time.time()
a.settimeout(20)
while a.recv(4096):  # said nothing: wait for the agent to close
    pass
held = time.time() - t0
sys.exit(0 if held < 8 else f"held the keyed agent for {held:.1f} s")
PY
for _ in $(seq 100); do
  has "$(get "http://127.0.0.1:$km/metrics")" 'kcage_agent_drops_total{reason="auth"} 1' && break
  sleep 0.1
done
k=$(get "http://127.0.0.1:$km/metrics")
has "$k" 'kcage_agent_drops_total{reason="auth"} 1' || fail "no auth drop counted: $k"
echo "health test: ok"
