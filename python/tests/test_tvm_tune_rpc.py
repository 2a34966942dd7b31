"""MetaSchedule tunes a small matmul with RPCRunner through kcage's tracker, to TVM's
rpc_server (key "tune") and to a kcage agent (key "tune-ka", each trial's session in
its own sandbox), each once with TVM's own popen_pool and once after
kcage.tvm.install(): every trial valid in all four.  The best latencies are printed;
bench/bench_tvm_rpc.py compares them (a test asserts no speed).  The two tunings
through the agent run in `make check` (about a minute and a half on 2 vCPUs); the two
through TVM's rpc_server, the reference, only with the slow tests."""

import os
import socket
import stat
import subprocess
import sys
import time

import pytest

TRIALS = int(os.environ.get("KCAGE_TUNE_TRIALS", "4"))
WHICH = [pytest.param("rpc_server", marks=pytest.mark.slow), "agent"]


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


def _searchable_by_others(path):
    p = os.path.realpath(path)
    while p != "/":
        if not os.stat(p).st_mode & stat.S_IXOTH:
            return False
        p = os.path.dirname(p)
    return True


def _shared_libpython():
    from kcage._sandbox import libpython_path  # pylint: disable=import-outside-toplevel

    try:
        return libpython_path()
    except RuntimeError:
        return None


@pytest.fixture(scope="module")
def device():
    """kcage's tracker with TVM's rpc_server registered under key "tune" and a kcage
    agent under "tune-ka" (None when this Python cannot run in the agent's sandboxes)."""
    pytest.importorskip("tvm")
    port = _free_port()
    trk = subprocess.Popen([_kcage(), "tracker", "--host", "127.0.0.1", "--port", str(port),
                            "--port-end", str(port + 1)], stderr=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL)
    procs = [trk]
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1", "--port",
         str(_free_port()), "--port-end", "65535", "--tracker", "127.0.0.1:%d" % port, "--key",
         "tune"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    keys = ["tune"]
    # As root the agent's sandboxes run as host ids of their own: without the agent's
    # TVM zygote (which needs a shared libpython) they cannot run a Python under a
    # directory that others cannot enter.
    if os.geteuid() != 0 or _searchable_by_others(sys.prefix) or _shared_libpython():
        procs.append(subprocess.Popen(
            [_kcage(), "agent", "--tracker", "127.0.0.1:%d" % port, "--key", "tune-ka", "--host",
             "127.0.0.1", "--port", "0", "--tvm-python", sys.executable, "--max-memory", "1G",
             "--max-session", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        keys.append("tune-ka")
    try:
        from kcage import tracker  # pylint: disable=import-outside-toplevel

        t = tracker.connect_tracker("127.0.0.1", port)
        deadline = time.time() + 60
        while True:
            try:
                q = t.summary()["queue_info"]
                if all(q.get(k, {}).get("free", 0) >= 1 for k in keys):
                    break
            except RuntimeError:
                pass
            assert time.time() < deadline, "a device server never registered: %r" % keys
            time.sleep(0.2)
        yield {"port": port, "keys": keys}
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()


def _key(device, which):
    if which == "agent" and "tune-ka" not in device["keys"]:
        pytest.skip("%s cannot be entered by the agent's sandboxes (host ids of their own) "
                    "and this Python has no shared libpython" % sys.prefix)
    return "tune-ka" if which == "agent" else "tune"


def _matmul():
    from tvm import te  # pylint: disable=import-outside-toplevel

    a = te.placeholder((32, 32), "float32", name="A")
    b = te.placeholder((32, 32), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")


def _unnamed_handlers_off():
    """MetaSchedule lists its logger's handlers by name in a logging config, and a
    handler without one (pytest's capture, added during an earlier tuning in this
    process) makes that config fail (None.format)."""
    import logging  # pylint: disable=import-outside-toplevel

    for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
        lg = logging.getLogger(name)
        for hd in list(lg.handlers):
            if hd.get_name() is None:
                lg.removeHandler(hd)


def _tune(work_dir, port, key):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    _unnamed_handlers_off()
    mod = tvm.IRModule({"main": _matmul()})
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    runner = ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(tracker_host="127.0.0.1", tracker_port=port,
                                       tracker_key=key, session_timeout_sec=300),
        evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=10))
    db = ms.tune_tir(mod, target, str(work_dir), max_trials_global=TRIALS,
                     num_trials_per_iter=min(TRIALS, 8), cost_model="random",
                     database="memory",
                     builder=ms.builder.LocalBuilder(max_workers=1, timeout_sec=900),
                     runner=runner, num_tuning_cores=1, seed=1)
    records = db.get_all_tuning_records()
    assert len(records) >= TRIALS // 2, "MetaSchedule measured too few candidates"
    # every trial valid: a run that failed is stored with no run_secs (or 1e10)
    for r in records:
        assert r.run_secs, "a trial failed"
        assert all(0 < float(s) < 1e9 for s in r.run_secs), r.run_secs
    return min(min(float(s) for s in r.run_secs) for r in records)


@pytest.mark.parametrize("which", WHICH)
def test_tune_rpc_with_tvm_pool(tmp_path, device, which):
    best = _tune(tmp_path, device["port"], _key(device, which))
    print("best latency via %s, TVM's popen_pool: %.3g s" % (which, best))
    assert best > 0


@pytest.mark.parametrize("which", WHICH)
def test_tune_rpc_in_kcage(tmp_path, device, kc, which):
    import kcage.tvm  # pylint: disable=import-outside-toplevel

    key = _key(device, which)
    kcage.tvm.install()
    try:
        kcage.tvm.calls.clear()
        best = _tune(tmp_path, device["port"], key)
        print("best latency via %s, kcage.tvm.install(): %.3g s" % (which, best))
        assert best > 0
        assert kcage.tvm.calls.get("run", 0) >= TRIALS // 2  # RPCRunner's pool: kcage's
        assert kcage.tvm.calls.get("build", 0) >= TRIALS // 2
    finally:
        kcage.tvm.uninstall()
