"""kcage.tvm.install() keeps TVM's RPC working: tvm.rpc.Server and MetaSchedule's
RPCRunner run in kcage sandboxes under the python-net policy (the host's network for
TCP/UDP only, everything else of the python sandbox), while every other pool keeps no
network at all."""

import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kc_helpers as h


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


def _wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail("nothing listens on %d" % port)


@pytest.fixture
def installed(kc):
    pytest.importorskip("tvm")
    import kcage.tvm  # pylint: disable=import-outside-toplevel

    kcage.tvm.install()
    kcage.tvm.calls.clear()
    try:
        yield kcage.tvm
    finally:
        kcage.tvm.uninstall()


def test_network_only_where_needed(installed):
    """A probe per address family: the RPC pools open TCP/UDP sockets and reach the
    host's loopback, nothing else; every other pool has no network at all."""
    from tvm.s_tir.meta_schedule.builder import local_builder  # pylint: disable=import-outside-toplevel
    from tvm.s_tir.meta_schedule.runner import rpc_runner  # pylint: disable=import-outside-toplevel

    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    port = lsock.getsockname()[1]

    def answer():
        for _ in range(2):
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            c.sendall(b"host")
            c.close()

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    plain = local_builder.PopenPoolExecutor(max_workers=1, timeout=60)
    net = rpc_runner.PopenPoolExecutor(max_workers=1, timeout=60)
    try:
        fam = plain.submit(h.socket_families).result()
        assert fam["AF_INET"] == "EAFNOSUPPORT" and fam["AF_INET6"] == "EAFNOSUPPORT"
        assert fam["AF_UNIX"] == 0  # python's own (its netns is empty)
        with pytest.raises(Exception):
            plain.submit(h.connect_to, port).result()
        fam = net.submit(h.socket_families).result()
        assert fam["AF_INET"] == 0 and fam["AF_INET6"] == 0, fam
        # abstract AF_UNIX names would reach the host's services; netlink its routes
        for name in ("AF_UNIX", "AF_NETLINK", "AF_PACKET"):
            assert fam[name] == "EAFNOSUPPORT", fam
        assert net.submit(h.connect_to, port).result() == b"host"
        # still sandboxed: pid 1 of its own pid namespace (os.getpid() answers the pid
        # the parent sees, as in TVM)
        assert net.submit(h.pid_in_namespace).result() == 1
    finally:
        plain.shutdown()
        net.shutdown()
        lsock.close()


def _add_module(tmp_path, fmt):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import te  # pylint: disable=import-outside-toplevel

    a = te.placeholder((64,), "float32", name="A")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="B")
    func = te.create_prim_func([a, b]).with_attr("global_symbol", "main")
    path = str(tmp_path / ("add." + fmt))
    tvm.tirx.build(func, target="llvm").export_library(path)
    return path


def test_rpc_server(tmp_path, installed):
    """tvm.rpc.Server(host="127.0.0.1") starts in a sandbox and serves a whole session:
    upload, load_module, a call, time_evaluator."""
    from tvm import rpc  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel

    path = _add_module(tmp_path, "so")
    server = rpc.Server(host="127.0.0.1", port=_free_port(), port_end=65535, silent=True)
    try:
        assert isinstance(server.proc, installed._kc.PopenWorker)  # pylint: disable=protected-access
        remote = rpc.connect("127.0.0.1", server.port, session_timeout=60)
        remote.upload(path)
        mod = remote.load_module(os.path.basename(path))
        dev = remote.cpu()
        x = np.arange(64, dtype="float32")
        a = tvm.runtime.tensor(x, dev)
        b = tvm.runtime.tensor(np.zeros(64, "float32"), dev)
        mod["main"](a, b)
        np.testing.assert_allclose(b.numpy(), x + 1)
        t = mod.time_evaluator("main", dev, number=3, repeat=2)(a, b)
        assert t.mean > 0
        remote.remove(os.path.basename(path))
    finally:
        server.terminate()


def test_rpc_runner_through_tracker(tmp_path, installed):
    """MetaSchedule's RPCRunner, its pool sandboxed, through a tracker (kcage's) to
    TVM's rpc_server: every trial valid."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    port = _free_port()
    trk = subprocess.Popen([_kcage(), "tracker", "--host", "127.0.0.1", "--port", str(port),
                            "--port-end", str(port + 1)], stderr=subprocess.DEVNULL)
    srv = None
    try:
        _wait_port(port)
        env = dict(os.environ)
        env.pop("TMPDIR", None)
        srv = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host",
                                "127.0.0.1", "--port", str(_free_port()), "--port-end", "65535",
                                "--tracker", "127.0.0.1:%d" % port, "--key", "kcpy"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        from kcage import tracker  # pylint: disable=import-outside-toplevel

        t = tracker.connect_tracker("127.0.0.1", port)
        deadline = time.time() + 60
        while t.summary()["queue_info"].get("kcpy", {}).get("free", 0) < 1:
            assert time.time() < deadline, "TVM's rpc_server never registered"
            time.sleep(0.2)
        # where MetaSchedule's builder puts its artifacts: the scratch directory that
        # install() shares with the sandboxes (tempfile's, now)
        import pathlib  # pylint: disable=import-outside-toplevel
        import tempfile  # pylint: disable=import-outside-toplevel

        path = _add_module(pathlib.Path(tempfile.mkdtemp()), "tar")
        from kcage import _child  # pylint: disable=import-outside-toplevel

        _child.share_dir(path)  # as the builder's pool does for its own
        runner = ms.runner.RPCRunner(
            rpc_config=ms.runner.RPCConfig(tracker_host="127.0.0.1", tracker_port=port,
                                           tracker_key="kcpy", session_timeout_sec=120),
            evaluator_config=ms.runner.EvaluatorConfig(number=2, repeat=2, min_repeat_ms=0))
        args = [ms.arg_info.TensorInfo("float32", [64])] * 2
        inputs = [ms.runner.RunnerInput(path, "cpu", args) for _ in range(2)]
        results = [f.result() for f in runner.run(inputs)]
        for r in results:
            assert r.error_msg is None, r.error_msg
            assert r.run_secs and all(float(s) > 0 for s in r.run_secs)
        assert installed.calls.get("run", 0) >= len(inputs)  # through kcage's pool
    finally:
        if srv:
            srv.kill()
            srv.wait()
        trk.kill()
        trk.wait()


def test_rpc_server_on_a_tracker(tmp_path, installed):
    """tvm.rpc.Server registered on a tracker from its sandbox; a TVM client leases it
    through the tracker and runs a module there."""
    from tvm import rpc  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel

    path = _add_module(tmp_path, "so")
    port = _free_port()
    trk = subprocess.Popen([_kcage(), "tracker", "--host", "127.0.0.1", "--port", str(port),
                            "--port-end", str(port + 1)], stderr=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL)
    server = None
    try:
        _wait_port(port)
        server = rpc.Server(host="127.0.0.1", port=_free_port(), port_end=65535,
                            tracker_addr=("127.0.0.1", port), key="sbx", silent=True)
        client = rpc.connect_tracker("127.0.0.1", port)
        deadline = time.time() + 30
        while "sbx" not in client.text_summary():
            assert time.time() < deadline, "the sandboxed server never registered"
            time.sleep(0.2)
        remote = client.request("sbx", session_timeout=60)
        remote.upload(path)
        mod = remote.load_module(os.path.basename(path))
        dev = remote.cpu()
        a = tvm.runtime.tensor(np.full(64, 2, "float32"), dev)
        b = tvm.runtime.tensor(np.zeros(64, "float32"), dev)
        mod["main"](a, b)
        np.testing.assert_allclose(b.numpy(), np.full(64, 3, "float32"))
    finally:
        if server:
            server.terminate()
        trk.kill()
        trk.wait()
