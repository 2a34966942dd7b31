"""kcage.tracker: TVM's TrackerSession.request(key, priority, session_timeout,
max_retry, session_constructor_args) over libkcage, against the real `kcage tracker`,
the real `kcage agent` and a fake agent that shows what arrives on the wire."""

import json
import os
import socket
import struct
import subprocess
import threading
import time

import pytest

RPC_MAGIC, TRACKER_MAGIC = 0xFF271, 0x2F271


def _kcage():
    lib = os.environ.get("KCAGE_LIB")
    exe = os.environ.get("KCAGE_BIN") or (
        os.path.join(os.path.dirname(lib), "kcage") if lib else None)
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("no kcage program (set KCAGE_BIN, or KCAGE_LIB next to it)")
    return exe


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tracker_port():
    port = _free_port()
    p = subprocess.Popen([_kcage(), "tracker", "--host", "127.0.0.1", "--port", str(port),
                          "--port-end", str(port + 1)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        p.kill()
        p.wait()


def _wait_free(trk, key, want, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        q = trk.summary()["queue_info"].get(key, {})
        if q.get("free", 0) == want:
            return
        time.sleep(0.05)
    pytest.fail("tracker: %s never had %d free" % (key, want))


def _recv_all(sock, n):
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def _send_frame(sock, obj):
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("<I", len(data)) + data)


def _recv_frame(sock):
    (n,) = struct.unpack("<I", _recv_all(sock, 4))
    return json.loads(_recv_all(sock, n))


class FakeAgent(threading.Thread):
    """Registers like TVM's rpc_server (UPDATE_INFO, PUT), answers TVM's handshake and
    one kcage session: the hello it got is kept, and answered with `hello`."""

    def __init__(self, tracker_port, hello):
        super().__init__(daemon=True)
        self.hello_reply, self.hello_got, self.files = hello, None, {}
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.port = self.lsock.getsockname()[1]
        self.trk = socket.create_connection(("127.0.0.1", tracker_port))
        self.trk.sendall(struct.pack("<i", TRACKER_MAGIC))
        _recv_all(self.trk, 4)
        for msg in ([5, {"key": "server:fake", "addr": [None, self.port]}],
                    [3, "fake", [self.port, "fake:0.1"], None]):
            data = json.dumps(msg).encode()
            self.trk.sendall(struct.pack("<i", len(data)) + data)
            (n,) = struct.unpack("<i", _recv_all(self.trk, 4))
            _recv_all(self.trk, n)

    def run(self):
        conn, _ = self.lsock.accept()
        with conn:
            magic, n = struct.unpack("<ii", _recv_all(conn, 8))
            assert magic == RPC_MAGIC
            _recv_all(conn, n)
            key = b"server:fake"
            conn.sendall(struct.pack("<ii", RPC_MAGIC, len(key)) + key)
            try:
                while True:
                    m = _recv_frame(conn)
                    if m["op"] == "hello":
                        self.hello_got = m
                        _send_frame(conn, self.hello_reply)
                    elif m["op"] == "file":
                        self.files[m["name"]] = _recv_all(conn, m["size"])
                        _send_frame(conn, {"op": "ok"})
                    else:
                        break
            except (EOFError, OSError):
                pass

    def stop(self):
        self.trk.close()
        self.lsock.close()


def test_constructor_args_on_the_wire(tracker_port):
    from kcage import tracker  # pylint: disable=import-outside-toplevel

    trk = tracker.connect_tracker("127.0.0.1", tracker_port)
    ack = {"op": "hello", "version": 1, "device": "fake@127.0.0.1",
           "session_constructor": {"name": "kcage.sandbox", "args": ["memory=256M", "2"],
                                   "clamped": {"memory_bytes": {"asked": 268435456,
                                                                "cap": 134217728}}}}
    agent = FakeAgent(tracker_port, ack)
    agent.start()
    try:
        _wait_free(trk, "fake", 1)
        with trk.request("fake", session_timeout=30,
                         session_constructor_args=["kcage.sandbox", "memory=256M", 2]) as sess:
            assert agent.hello_got["session_constructor_args"] == [
                "kcage.sandbox", "memory=256M", "2"]
            assert sess.constructor["clamped"]["memory_bytes"]["cap"] == 134217728
            assert sess.server_key == "server:fake"
            sess.upload("k0-a.c", "int x;\n")
        agent.join(10)
        assert agent.files == {"k0-a.c": b"int x;\n"}
    finally:
        agent.stop()


def test_unacknowledged_constructor_refused(tracker_port):
    from kcage import tracker  # pylint: disable=import-outside-toplevel

    trk = tracker.connect_tracker("127.0.0.1", tracker_port)
    agent = FakeAgent(tracker_port, {"op": "hello", "version": 1})
    agent.start()
    try:
        _wait_free(trk, "fake", 1)
        with pytest.raises(RuntimeError, match="did not acknowledge session_constructor_args"):
            trk.request("fake", session_constructor_args=["kcage.sandbox", "pids=4"])
        agent.join(10)
        assert agent.hello_got["session_constructor_args"] == ["kcage.sandbox", "pids=4"]
        assert not agent.files
    finally:
        agent.stop()


def test_malformed_constructor_refused_before_the_tracker(tracker_port):
    from kcage import tracker  # pylint: disable=import-outside-toplevel

    trk = tracker.connect_tracker("127.0.0.1", tracker_port)
    agent = FakeAgent(tracker_port, {"op": "hello", "version": 1})
    try:
        _wait_free(trk, "fake", 1)
        for bad in ([""], ["a b"], ["kcage.sandbox", "x\ny"]):
            with pytest.raises(ValueError, match="session_constructor_args"):
                trk.request("fake", session_constructor_args=bad)
        with pytest.raises(TypeError):
            trk.request("fake", session_constructor_args="kcage.sandbox")
        _wait_free(trk, "fake", 1, timeout=1)  # nothing was leased
    finally:
        agent.stop()


def test_real_agent(tracker_port):
    """The real `kcage agent`: a plain request opens a session; with constructor args
    the agent either acknowledges them, or the session is refused (never run without)."""
    from kcage import tracker  # pylint: disable=import-outside-toplevel

    agent = subprocess.Popen([_kcage(), "agent", "--tracker", "127.0.0.1:%d" % tracker_port,
                              "--key", "pyk", "--host", "127.0.0.1", "--port", "0"],
                             stderr=subprocess.DEVNULL)
    try:
        trk = tracker.connect_tracker("127.0.0.1", tracker_port)
        _wait_free(trk, "pyk", 1)
        assert "pyk" in trk.text_summary()
        with trk.request("pyk", session_timeout=20) as sess:
            assert sess.hello["device"].startswith("pyk@")
            assert sess.constructor is None
        _wait_free(trk, "pyk", 1)
        try:
            sess = trk.request("pyk", session_constructor_args=["kcage.sandbox"])
        except RuntimeError as e:
            assert "did not acknowledge" in str(e) or "kcage.sandbox" in str(e), e
        else:
            assert sess.constructor["name"] == "kcage.sandbox"
            sess.close()
    finally:
        agent.kill()
        agent.wait()
