"""Where a difference from TVM's PopenWorker is not needed for safety, kcage behaves as
TVM does; where it is, the error says so and names the switch."""

import os
import signal
import tempfile
import time

import pytest

import hostile_workers as hw
import kc_helpers as h
import slow_import_mod as slow


def _running(pid):
    """The parent's own check, as TVM's tests make it with psutil.pid_exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid, encoding="utf-8") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_recycled_workers_have_pids_the_parent_can_check(kc):
    w = kc.PopenWorker(maximum_uses=2)
    try:
        w.send(os.getpid)
        first = w.recv()
        assert first == w.pid and _running(first)
        w.send(os.getpid)
        assert w.recv() == first
        w.send(os.getpid)
        second = w.recv()
        assert second != first and second == w.pid
        assert _running(second) and not _running(first)
    finally:
        w.kill()
    pool = kc.PopenPoolExecutor(max_workers=1, maximum_process_uses=2)
    try:
        pids = [pool.submit(os.getpid).result() for _ in range(3)]
        assert pids[0] == pids[1] != pids[2]
    finally:
        pool.shutdown()


def test_the_timeout_counts_the_task_not_loading_its_function(kc):
    # a fresh worker imports slow_import_mod (0.5 s) before it can run identity
    w = kc.PopenWorker()
    try:
        w.send(slow.identity, (7,), timeout=0.1)
        assert w.recv() == 7
    finally:
        w.kill()


def test_load_timeout_zero_counts_the_load(kc):
    w = kc.PopenWorker(load_timeout=0)
    try:
        w.send(slow.identity, (7,), timeout=0.1)
        with pytest.raises(TimeoutError):
            w.recv()
    finally:
        w.kill()


def test_a_load_that_never_ends_is_bounded_by_load_timeout(kc):
    w = kc.PopenWorker(load_timeout=1.0)
    try:
        start = time.monotonic()
        # unpickling the argument sleeps: the load phase never says the task began
        w.send(len, ([hw.Reduce(time.sleep, (30,))],), timeout=0.5)
        with pytest.raises(TimeoutError):
            w.recv()
        assert time.monotonic() - start < 20
    finally:
        w.kill()


def test_a_death_is_reported_as_a_death_even_with_a_short_timeout(kc):
    pool = kc.PopenPoolExecutor(max_workers=1, timeout=0.01)
    try:
        with pytest.raises(ChildProcessError):
            pool.submit(slow.exit_now, -1).result()
        # the replacement loads the function again; the instant task is on time
        assert pool.submit(slow.identity, 3).result() == 3
    finally:
        pool.shutdown()


def test_os_abort_reads_as_sigabrt(kc):
    w = kc.PopenWorker()
    try:
        w.send(os.abort)
        with pytest.raises(ChildProcessError) as e:
            w.recv()
        assert e.value.signal == signal.SIGABRT and "SIGABRT" in str(e.value)
    finally:
        w.kill()


def test_the_callers_working_directory_is_readable(kc, monkeypatch):
    d = tempfile.mkdtemp(prefix="kcage-cwd-")
    os.chmod(d, 0o755)
    with open(os.path.join(d, "data.txt"), "w", encoding="utf-8") as f:
        f.write("hello")
    os.chmod(os.path.join(d, "data.txt"), 0o644)
    monkeypatch.chdir(d)
    try:
        w = kc.PopenWorker()
        w.send(os.getcwd)
        assert w.recv() == d
        w.send(hw.read_text, ("data.txt",))
        assert w.recv() == "hello"
        w.kill()
        # read-only: a worker cannot change the caller's files
        w.send(h.write_file, (d, "x"))
        with pytest.raises(OSError):
            w.recv()
        w.kill()
        w = kc.PopenWorker(cwd=False)
        w.send(os.getcwd)
        assert w.recv() == "/tmp"
        w.kill()
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)


def test_tmp_is_the_sandboxs_own(kc):
    """A needed difference (documented): /tmp is a tmpfs of the sandbox's own."""
    name = "/tmp/kcage-test-%d" % os.getpid()
    w = kc.PopenWorker()
    try:
        w.send(hw.write_text, (name, "x"))
        w.recv()
        assert not os.path.exists(name)
    finally:
        w.kill()


def test_the_payload_cap_names_its_switch(kc):
    w = kc.PopenWorker(max_payload=1 << 20)
    try:
        w.send(len, (b"x" * (2 << 20),))
        with pytest.raises(ChildProcessError, match="max_payload="):
            w.recv()
    finally:
        w.kill()
