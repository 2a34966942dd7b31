"""What only kcage's workers do: verdicts, limits, the sandbox itself."""

import os
import time

import pytest

import kc_helpers as h


def test_verdict_signal(kc):
    w = kc.PopenWorker()
    w.send(h.segfault)
    with pytest.raises(ChildProcessError) as info:
        w.recv()
    assert info.value.verdict == "signaled"
    assert "SIGSEGV" in str(info.value)
    w.send(h.add, (1, 1))
    assert w.recv() == 2


def test_verdict_syscall_named(kc):
    w = kc.PopenWorker()
    w.send(h.forbidden_mount)
    with pytest.raises(ChildProcessError) as info:
        w.recv()
    assert info.value.verdict == "syscall", str(info.value)
    assert info.value.syscall == "mount"
    assert "mount" in str(info.value)


def test_verdict_memory(kc):
    w = kc.PopenWorker(memory="64M")
    w.send(h.allocate, (16 << 20,))
    assert w.recv() == 16 << 20
    w.send(h.allocate, (512 << 20,))
    with pytest.raises(ChildProcessError) as info:
        w.recv()
    if info.value.verdict != "memory":
        pytest.skip("no memory cgroup here: %s" % info.value)
    assert "memory" in str(info.value)


def test_memory_sizes(kc):
    from kcage._sandbox import parse_size  # pylint: disable=import-outside-toplevel

    assert parse_size("256M") == 256 << 20
    assert parse_size("1G") == 1 << 30
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError):
        parse_size("lots")
    with pytest.raises(ValueError):
        kc.PopenWorker(memory="-5M")


def test_worker_is_sandboxed(kc):
    """In its own pid namespace (pid 1), no network but loopback, read-only root."""
    w = kc.PopenWorker()
    w.send(h.pid_in_namespace)
    assert w.recv() == 1
    w.send(os.listdir, ("/",))
    assert "root" not in w.recv()
    w.send(os.path.exists, ("/etc/shadow",))
    assert w.recv() is False
    w.send(os.access, ("/usr", os.W_OK))
    assert w.recv() is False


def test_clocks_start_with_the_pool(kc):
    """A worker's boot and monotonic clocks, and sysinfo's uptime, count from its
    zygote's start (shared by the workers of one configuration in this process), not
    the host's boot: they tell no host uptime, on any host up longer than this test
    process."""
    w = kc.PopenWorker()
    try:
        w.send(h.clocks)
        boot, mono, uptime = w.recv()
    finally:
        w.kill()
    with open("/proc/self/stat", encoding="ascii") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - started + 1
    assert 0 <= boot <= since and 0 <= mono <= since and 0 <= uptime <= since, \
        (boot, mono, uptime, since)


@pytest.mark.parametrize("probe", ["sysinfo_view", "sysinfo_view_exec"])
def test_sysinfo_is_the_sandboxes(kc, probe):
    """sysinfo(2) in a worker, and in a program it execs, reads the sandbox's figures
    (no load, all memory free, one process), not the host's, which have other tenants'
    load and memory in them.  It is answered while the parent waits for nothing: a
    call that makes it is over before the parent asks for its result (the exec'd
    program's start is not given a deadline here)."""
    w = kc.PopenWorker()
    try:
        w.send(getattr(h, probe))
        time.sleep(2)
        asked = time.time()
        (loads, total, free, procs), answered = w.recv()
    finally:
        w.kill()
    assert loads == (0, 0, 0) and free == total > 0 and procs == 1, (loads, total, free, procs)
    assert answered < asked or probe == "sysinfo_view_exec"


def test_payload_over_the_ring(kc):
    w = kc.PopenWorker()
    blob = os.urandom(4 << 20)
    w.send(bytes, (blob,))
    assert w.recv() == blob


def test_payload_over_the_limit(kc):
    w = kc.PopenWorker(max_payload=1 << 20)
    w.send(bytes, (b"x" * (2 << 20),))
    with pytest.raises(ChildProcessError):
        w.recv()
    w.send(h.add, (2, 2))
    assert w.recv() == 4


def test_restart_is_a_fork(kc):
    """A fresh worker comes from the zygote, which imported what was preloaded."""
    w = kc.PopenWorker(preload=["json"])
    w.send(h.count)
    assert w.recv() == 1
    before = kc.stats["workers_started"]
    t0 = time.monotonic()
    for _ in range(5):
        w.kill()
        w.send(h.count)
        assert w.recv() == 1
    assert kc.stats["workers_started"] == before + 5
    assert time.monotonic() - t0 < 60


def test_hostile_result_does_not_run_in_parent(kc, tmp_path):
    """The parent unpickles a worker's answer with an allow-list: a forged pickle that
    calls os.system is refused, nothing runs, the worker is replaced."""
    marker = str(tmp_path / "pwned")
    w = kc.PopenWorker()
    w.send(h.forge_result, (marker,))
    with pytest.raises(ChildProcessError) as info:
        w.recv()
    assert "result refused" in str(info.value)
    assert "os.system" in str(info.value) or "posix.system" in str(info.value)
    assert not os.path.exists(marker)
    w.send(h.add, (1, 2))
    assert w.recv() == 3


def test_safe_loads_plain_data_and_refusals():
    """Plain data loads as pickle.loads gives it, whether or not its bytes happen to hold
    an opcode byte that can act (then the allow-list unpickler reads it); anything that
    names a global is still checked and refused."""
    import pickle

    from kcage import _pickle

    values = [(1, 0), (1, "text"), (1, [1, 2.5, {"k": (None, True)}, {3}]),
              (1, b"c\x93R"), (1, "cio\x81"), (1, 10 ** 30), (2, ("a", b"\x00" * 300))]
    for value in values:
        for proto in (4, pickle.HIGHEST_PROTOCOL):  # what the workers write
            assert _pickle.safe_loads(pickle.dumps(value, protocol=proto)) == value
    for hostile in ((1, os.system), (1, pickle.loads), (1, eval)):
        for proto in (0, 2, pickle.HIGHEST_PROTOCOL):
            with pytest.raises(_pickle.RefusedResult):
                _pickle.safe_loads(pickle.dumps(hostile, protocol=proto))


def test_result_types(kc):
    w = kc.PopenWorker()
    w.send(h.make_point, (3,))
    with pytest.raises(ChildProcessError):
        w.recv()
    w2 = kc.PopenWorker(result_types=["kc_helpers.Point"])
    w2.send(h.make_point, (4,))
    assert w2.recv().x == 4
    w3 = kc.PopenWorker(unsafe_results=True)
    w3.send(h.make_point, (5,))
    assert w3.recv().x == 5


def test_gil_holding_child_times_out(kc):
    w = kc.PopenWorker()
    w.send(h.hold_the_gil, timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        w.recv()
    assert time.monotonic() - t0 < 30  # the regex alone would run for hours
    w.send(h.add, (2, 3))
    assert w.recv() == 5
