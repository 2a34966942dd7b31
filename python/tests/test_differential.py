"""Each scenario once with TVM's PopenWorker/PopenPoolExecutor and once with kcage's:
the outcomes must be the same.  Deadlines are generous (a loaded 2-vCPU machine)."""

import concurrent.futures
import os
import signal
import threading
import time

import pytest

import kc_helpers as h

T_LONG = 60.0  # a call that must not time out


def last_line(exc):
    return str(exc).strip().splitlines()[-1]


def test_values_and_kwargs(impl):
    w = impl.PopenWorker()
    assert not w.is_alive()
    w.send(h.add, (1, 2), {"c": 3}, timeout=T_LONG)
    assert w.recv() == 6
    assert w.is_alive()
    w.send(h.add, ("a", "b"), {"c": "c"})
    assert w.recv() == "abc"
    w.kill()
    assert not w.is_alive()


def test_exception_keeps_type_and_traceback(impl):
    w = impl.PopenWorker()
    w.send(h.raise_value_error, ("boom",))
    with pytest.raises(ValueError) as info:
        w.recv()
    text = str(info.value)
    assert text.startswith("Traceback (most recent call last):")
    assert "raise_value_error" in text
    assert last_line(info.value) == "ValueError: boom"
    w.kill()


def test_worker_survives_exception_same_process(impl):
    w = impl.PopenWorker()
    w.send(h.count)
    assert w.recv() == 1
    w.send(h.raise_value_error, ("x",))
    with pytest.raises(ValueError):
        w.recv()
    w.send(h.count)
    assert w.recv() == 2
    w.kill()


def test_timeout_then_restart(impl):
    w = impl.PopenWorker()
    w.send(h.count)
    assert w.recv() == 1
    w.send(h.sleep_then, (30, "late"), timeout=0.5)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        w.recv()
    assert time.monotonic() - t0 < 20
    assert not w.is_alive()
    w.send(h.count)
    assert w.recv() == 1  # a new process
    w.kill()


@pytest.mark.parametrize("death", ["exit", "segfault"])
def test_death_then_restart(impl, death):
    w = impl.PopenWorker()
    w.send(h.count)
    assert w.recv() == 1
    if death == "exit":
        w.send(h.exit_now, (3,))
    else:
        w.send(h.segfault)
    with pytest.raises(ChildProcessError) as info:
        w.recv()
    assert str(info.value).startswith("Subprocess terminated")
    w.send(h.count)
    assert w.recv() == 1
    w.kill()


def test_maximum_uses_recycles(impl):
    w = impl.PopenWorker(maximum_uses=2)
    seen = []
    for _ in range(5):
        w.send(h.count)
        seen.append(w.recv())
    assert seen == [1, 2, 1, 2, 1]
    w.kill()


def test_maximum_uses_zero_means_never(impl):
    w = impl.PopenWorker(maximum_uses=0)
    seen = []
    for _ in range(3):
        w.send(h.count)
        seen.append(w.recv())
    assert seen == [1, 2, 3]
    w.kill()


def test_initializer_runs_at_every_start(impl):
    w = impl.PopenWorker(initializer=h.init_state, initargs=("ready",))
    w.send(h.get_state)
    assert w.recv() == "ready"
    w.send(h.exit_now, (1,))
    with pytest.raises(ChildProcessError):
        w.recv()
    w.send(h.get_state)
    assert w.recv() == "ready"
    w.kill()


def test_initializer_error_raised_from_send(impl):
    w = impl.PopenWorker(initializer=h.bad_init)
    with pytest.raises(RuntimeError) as info:
        w.send(h.count)
    assert last_line(info.value) == "RuntimeError: initializer failed on purpose"
    w.kill()


def test_initializer_must_be_callable(impl):
    with pytest.raises(TypeError):
        impl.PopenWorker(initializer=42)
    with pytest.raises(TypeError):
        impl.PopenPoolExecutor(max_workers=1, initializer="nope")


def test_map_with_error_catching_order_and_status(impl):
    pool = impl.PopenPoolExecutor(max_workers=2, timeout=2.0)
    try:
        out = list(pool.map_with_error_catching(h.square_or_fail, [1, 2, 3, 4, 5]))
    finally:
        pool.shutdown()
    statuses = [r.status for r in out]
    SK = impl.StatusKind
    assert statuses == [SK.COMPLETE, SK.EXCEPTION, SK.TIMEOUT, SK.COMPLETE, SK.COMPLETE]
    assert [out[i].value for i in (0, 3, 4)] == [1, 16, 25]
    assert isinstance(out[1].value, KeyError)
    assert isinstance(out[2].value, TimeoutError)
    assert type(out[0]).__name__ == "MapResult"
    assert out[0] == impl.MapResult(SK.COMPLETE, 1)


def test_map_long_in_order(impl):
    pool = impl.PopenPoolExecutor(max_workers=2, timeout=T_LONG)
    try:
        items = list(range(-200, 200))
        out = list(pool.map_with_error_catching(abs, items))
    finally:
        pool.shutdown()
    assert [r.status for r in out] == [impl.StatusKind.COMPLETE] * len(items)
    assert [r.value for r in out] == [abs(x) for x in items]


def test_map_runs_every_item_unread(impl):
    """The items of a map run whether or not its results are read: the worker's next
    call is its sixth."""
    pool = impl.PopenPoolExecutor(max_workers=1, timeout=T_LONG)
    try:
        pool.map_with_error_catching(h.count_arg, range(5))
        assert pool.submit(h.count).result() == 6
    finally:
        pool.shutdown()


def test_rebound_name_sends_the_object(impl):
    """A module-level function travels by reference while its name means it; once the
    name is rebound, the object itself travels (by value, with the parent's globals)."""
    w = impl.PopenWorker()
    original = h.get_state
    h._state = "the parent's"  # pylint: disable=protected-access
    try:
        w.send(original)
        assert w.recv() is None  # by reference: the worker's own module
        h.get_state = h.count
        w.send(original)
        assert w.recv() == "the parent's"
        h.get_state = original
        w.send(original)
        assert w.recv() is None
    finally:
        h.get_state = original
        h._state = None  # pylint: disable=protected-access
        w.kill()


def test_map_child_death_is_exception(impl):
    pool = impl.PopenPoolExecutor(max_workers=1, timeout=T_LONG)
    try:
        out = list(pool.map_with_error_catching(h.exit_now, [7]))
        assert out[0].status == impl.StatusKind.EXCEPTION
        assert isinstance(out[0].value, ChildProcessError)
        # and the pool goes on
        assert pool.submit(h.add, 2, 3).result() == 5
    finally:
        pool.shutdown()


def test_submit(impl):
    pool = impl.PopenPoolExecutor(max_workers=2, timeout=T_LONG)
    try:
        futs = [pool.submit(h.add, i, i, c=1) for i in range(6)]
        assert [f.result() for f in futs] == [2 * i + 1 for i in range(6)]
        bad = pool.submit(h.raise_value_error, "in a pool")
        with pytest.raises(ValueError) as info:
            bad.result()
        assert last_line(info.value) == "ValueError: in a pool"
    finally:
        pool.shutdown()


def test_pool_initializer_and_recycling(impl):
    pool = impl.PopenPoolExecutor(max_workers=1, initializer=h.init_state, initargs=(5,),
                                  maximum_process_uses=2)
    try:
        seen = [pool.submit(h.count).result() for _ in range(4)]
        assert seen == [1, 2, 1, 2]
        assert pool.submit(h.get_state).result() == 5
    finally:
        pool.shutdown()


def test_pool_initializer_error(impl):
    pool = impl.PopenPoolExecutor(max_workers=1, initializer=h.bad_init)
    try:
        with pytest.raises(RuntimeError):
            pool.submit(h.count).result()
    finally:
        pool.shutdown()


def test_shutdown(impl):
    pool = impl.PopenPoolExecutor(max_workers=2, timeout=T_LONG)
    assert pool.submit(h.add, 1, 1).result() == 2
    workers = list(pool._worker_map.values())  # pylint: disable=protected-access
    assert workers and all(w.is_alive() for w in workers)
    pool.shutdown()
    assert not any(w.is_alive() for w in workers)
    with pytest.raises(RuntimeError):
        pool.submit(h.add, 1, 1)


def _pid(impl, w):
    return w._proc.pid if hasattr(w, "_proc") else w.pid  # pylint: disable=protected-access


def test_stopped_child(impl):
    """Deliberately better: TVM's timer lives in the child, so a stopped child never
    times out (the parent blocks); kcage's parent enforces the deadline (stopped while
    it loads the function, it gets load_timeout on top of the timeout)."""
    w = impl.PopenWorker(**({"load_timeout": 1.0} if impl.__name__ == "kcage" else {}))
    w.send(h.count)
    w.recv()
    w.send(h.sleep_then, (5, "value"), timeout=0.5)
    os.kill(_pid(impl, w), signal.SIGSTOP)
    box = []

    def receive():
        try:
            box.append(w.recv())
        except Exception as e:  # pylint: disable=broad-except
            box.append(e)

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    t.join(timeout=20 if impl.__name__ == "kcage" else 3)
    if impl.__name__ == "kcage":
        assert box and isinstance(box[0], TimeoutError)
    else:
        assert not box, "TVM's parent was expected to block on a stopped child"
        os.kill(_pid(impl, w), signal.SIGCONT)
        t.join(timeout=T_LONG)
        # only after SIGCONT does TVM's in-child timer get to answer
        assert box and (box[0] == "value" or isinstance(box[0], TimeoutError))
    w.kill()
