"""kcage.PopenWorker and kcage.PopenPoolExecutor: TVM's tvm.support.popen_pool API and
semantics, with every worker in a kcage sandbox.

What TVM does and this keeps: lazy start; the initializer run at each (re)start with no
timeout, its exception raised from send(); maximum_uses recycling at the send after N
uses; send() then recv() with COMPLETE / EXCEPTION (the child's exception type, its
formatted traceback as the message) / TimeoutError / ChildProcessError, the worker
replaced after a timeout or a death; the pool's thread per worker, submit,
map_with_error_catching in input order, shutdown.

What differs (on purpose):
  * the timeout is enforced by the parent (kcage kills the worker's cgroup at the
    deadline): a stopped, wedged or GIL-holding child still times out; as in TVM it
    counts the task, not the function's load, which load_timeout bounds;
  * ChildProcessError("Subprocess terminated: <verdict>") names why the worker died
    (memory limit, a forbidden syscall by name, a signal by name), also as the
    attributes verdict, signal, syscall of the exception;
  * requests and results travel over kcage's shared-memory ring, not pipes, bounded
    by max_payload (default 16 MiB each way);
  * workers are forks of a zygote that embeds this interpreter and already imported
    cloudpickle, the initializer's module and preload=..., so a (re)start is a fork;
  * results are unpickled with an allow-list (see PopenWorker), so a compromised
    worker cannot run code in the parent through its answer, and recv() raises
    only Exceptions (never SystemExit and the like);
  * stdout=subprocess.PIPE is refused (nothing could read it);
  * map_with_error_catching keeps at most max_workers calls in flight, not a future
    per item (see there).
"""

import concurrent.futures
import ctypes
import errno
import itertools
import os
import signal as _signal
import threading
from collections import namedtuple
from enum import IntEnum

from . import _child, _lib, _pickle, _sandbox
from ._child import OP_CALL, OP_INIT
from ._lib import lib

WorkerException = _pickle.WorkerException

# the per-call functions, looked up once
_send, _recv, _clear = lib.kc_worker_send, lib.kc_worker_recv, lib.kc_call_result_clear


class StatusKind(IntEnum):
    """Running and return value status (TVM's numbering)."""

    RUNNING = 0
    COMPLETE = 1
    EXCEPTION = 2
    TIMEOUT = 3


_COMPLETE = int(StatusKind.COMPLETE)


class MapResult(namedtuple("MapResult", ["status", "value"])):
    """Result of map_with_error_catching."""

    __slots__ = []


# Process-wide counters: tests and kcage.tvm assert that calls ran sandboxed.
stats = {"calls": 0, "workers_started": 0}
_stats_lock = threading.Lock()


def _count(key, n=1):
    with _stats_lock:
        stats[key] += n


# kcage's own limit, not TVM's (its pipes take any size): said where it is met
_PAYLOAD_HINT = (" (kcage bounds a call's pickled arguments and result, 16 MiB each way "
                 "by default: max_payload= on PopenWorker/PopenPoolExecutor raises it)")


def _verdict_error(res):
    v = res.verdict
    status = (lib.kc_status_name(v.status) or b"").decode()
    signo = v.signal
    if status == "exited" and v.exit_code == 128 + _signal.SIGABRT:
        # a worker is pid 1 of its namespace, where its own SIGABRT cannot kill it: the
        # embedded interpreter's handler ends it with the status a shell gives an abort
        # (the worker's own word, as any exit status is)
        status, signo = "signaled", int(_signal.SIGABRT)
    if status == "memory":
        what = "memory limit exceeded (killed by the OOM killer)"
    elif status == "syscall":
        what = "forbidden system call %s" % v.syscall.decode(errors="replace")
    elif status == "signaled" and signo:
        try:
            name = _signal.Signals(signo).name
        except ValueError:
            name = "signal %d" % signo
        what = "killed by signal %d (%s)" % (signo, name)
    elif status == "exited":
        what = "exited with status %d" % v.exit_code
    elif status == "pids":
        what = "process limit reached"
    else:
        what = res.message.decode(errors="replace") or status
    exc = ChildProcessError("Subprocess terminated: " + what)
    exc.verdict = status
    exc.signal = signo or None
    exc.syscall = v.syscall.decode(errors="replace") or None
    return exc


class PopenWorker:
    """A sandboxed subprocess worker with TVM's PopenWorker API.

    Keyword-only sandbox options: policy ("python", a name or a .policy file), memory
    (bytes or "256M"), cpus (CPU bandwidth), pids, mounts (["SRC[:DST]", (SRC, DST, "rw"),
    ("tmpfs", DST, SIZE)]), preload (modules the zygote imports), max_payload.

    Results are unpickled with an allow-list (kcage._pickle.safe_loads: plain data,
    exceptions, enums, namedtuples, numpy arrays): a compromised worker must not run code
    in this process.  result_types=["module.Class", ...] trusts more classes by name;
    unsafe_results=True turns the check off (TVM's behaviour).

    load_timeout: seconds a call's function may take to load (unpickle, import) before
    its timeout starts (default 60; 0: the timeout counts from the send).  cwd: the
    caller's working directory is the worker's, read-only (False: the sandbox's /tmp).
    memory/pids/cpus left out are the policy's `limit` lines; a bad policy or limit, or
    one this host cannot hold, fails here.
    """

    def __init__(self, initializer=None, initargs=(), maximum_uses=None, stdout=None,
                 stderr=None, *, policy="python", memory=None, cpus=None, pids=None,
                 mounts=(), preload=(), max_payload=16 << 20, result_types=(),
                 unsafe_results=False, load_timeout=60.0, cwd=None, _config=None):
        self._w = None
        self._result_types = frozenset(result_types)
        self._unsafe_results = bool(unsafe_results)
        self._live = False
        self._initializer = initializer
        self._initargs = initargs
        self._maximum_uses = maximum_uses
        self._remaining_uses = None
        self._stdout = stdout
        self._stderr = stderr
        self._failed = []
        self._res = _lib.KcCallResult()  # reused: one call in flight per recv
        self._err = _lib.KcError()
        if self._initializer is not None and not callable(self._initializer):
            raise TypeError("initializer must be callable for PopenWorker")
        cfg = _config or _sandbox.Config(policy, memory, cpus, pids, mounts, preload,
                                         max_payload, load_timeout=load_timeout, cwd=cwd)
        if initializer is not None:
            cfg.add_module(getattr(initializer, "__module__", None))
        self._cfg = cfg
        self._opts = cfg.opts(stdout, stderr)
        self._zyg = None

    def __del__(self):
        try:
            self.kill()
            if self._w:
                lib.kc_worker_free(self._w)
                self._w = None
        except Exception:  # pylint: disable=broad-except
            pass

    # -- TVM's API --------------------------------------------------------------------
    def kill(self):
        """Kill the current worker (its whole cgroup); the next send starts a new one."""
        if self._w and self._live:
            lib.kc_worker_kill(self._w)
        self._live = False
        self._remaining_uses = None
        self._failed = []

    def join(self, timeout=None):
        """Wait for the worker process to end (it is not killed)."""
        if self._w and self._live:
            lib.kc_worker_join(self._w, -1.0 if timeout is None else float(timeout))

    @property
    def pid(self):
        """Host pid of the worker process (None when there is none); TVM: _proc.pid."""
        pid = lib.kc_worker_pid(self._w) if self._w and self._live else 0
        return pid or None

    def is_alive(self):
        """Whether the worker process exists and runs."""
        return bool(self._w and self._live and lib.kc_worker_is_alive(self._w))

    def send(self, fn, args=(), kwargs=None, timeout=None):
        """Send fn(*args, **kwargs) to the worker; recv() returns its outcome."""
        if not self._live or self._remaining_uses is not None:
            self._before_send()
        self._send(OP_CALL, fn, args, kwargs or {}, timeout)

    def _before_send(self):
        """Start the worker when there is none, recycle it after maximum_uses, count a
        use."""
        if self._live and self._maximum_uses and self._remaining_uses == 0:
            self.kill()
        if not self._live:
            self._start()
            if self._initializer is not None:
                self._send(OP_INIT, self._initializer, self._initargs, {}, None)
                self.recv()
            self._remaining_uses = self._maximum_uses
        if self._remaining_uses:
            self._remaining_uses -= 1

    def recv(self):
        """The outcome of the oldest send: its value, or TimeoutError,
        ChildProcessError, or the exception the function raised."""
        if self._failed:
            exc = self._failed.pop(0)
            if exc is not None:
                self._live = False
                raise exc
        res, err = self._res, self._err
        # kc_worker_recv fills res whenever it returns 0
        if not self._w or _recv(self._w, res, err) < 0:
            self._live = False
            raise ChildProcessError("Subprocess terminated: " + err.text())
        status = res.status
        try:
            if status == _lib.CALL_COMPLETE:
                n = res.value_len
                data = res.value[:n] if n else b""
            elif status == _lib.CALL_TIMEOUT:
                # kcage killed the worker at the deadline and is starting its
                # replacement; like TVM, the next send runs the initializer
                self._mark_replaced()
                raise TimeoutError()
            elif status == _lib.CALL_EXCEPTION:
                self.kill()
                msg = res.message.decode(errors="replace")
                raise ChildProcessError("Subprocess terminated: " + msg + (
                    _PAYLOAD_HINT if "over the limit" in msg else ""))
            else:
                self._mark_replaced()
                raise _verdict_error(res)
        finally:
            _clear(res)
        try:
            ok, value = _pickle.decode_answer(data, self._result_types, self._unsafe_results)
        except Exception as e:  # pylint: disable=broad-except
            # a worker that answers with something else is not trusted again
            self.kill()
            exc = ChildProcessError(
                "Subprocess terminated: result refused: %s (kcage unpickles a worker's "
                "answer with an allow-list: result_types=[...] trusts more classes by "
                "name, unsafe_results=True none)" % e)
            exc.verdict = "result_refused"
            raise exc from None
        if ok:
            return value
        raise value

    # -- internals -------------------------------------------------------------------
    def _mark_replaced(self):
        self._live = False
        self._remaining_uses = None

    def _start(self):
        if self._w is None or self._zyg is None or not self._zyg.alive():
            if self._w:
                lib.kc_worker_free(self._w)
                self._w = None
            self._zyg = _sandbox.zygote_for(self._cfg)
            ptr = ctypes.c_void_p()
            err = _lib.KcError()
            if lib.kc_worker_new_on(ctypes.byref(self._opts), self._zyg.ptr, ctypes.byref(ptr),
                                    ctypes.byref(err)) < 0:
                raise ChildProcessError("kcage: worker: " + err.text())
            self._w = ptr
        self._live = True
        self._failed = []
        _count("workers_started")

    def _send(self, op, fn, args, kwargs, timeout):
        data = _child.encode(op, fn, args, kwargs)
        t = 0.0 if timeout is None else max(float(timeout), 1e-6)
        err = self._err
        if _send(self._w, b"python", data, len(data), t, err) < 0:
            # TVM swallows a failed write and reports at recv(); so do we
            msg = err.text()
            self._failed.append(ChildProcessError("Subprocess terminated: " + msg + (
                _PAYLOAD_HINT if err.code == errno.E2BIG else "")))
        else:
            self._failed.append(None)
            _count("calls")


class PopenPoolExecutor:
    """TVM's PopenPoolExecutor over sandboxed PopenWorkers (one per pool thread).

    Sandbox keywords as for PopenWorker (policy, memory, cpus, pids, mounts, preload,
    max_payload); they apply to every worker."""

    def __init__(self, max_workers=None, timeout=None, initializer=None, initargs=(),
                 maximum_process_uses=None, stdout=None, stderr=None, *, policy="python",
                 memory=None, cpus=None, pids=None, mounts=(), preload=(),
                 max_payload=16 << 20, result_types=(), unsafe_results=False,
                 load_timeout=60.0, cwd=None):
        if max_workers is None:
            max_workers = os.cpu_count()
        self._max_workers = max_workers
        self._threadpool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)
        self._timeout = timeout
        self._worker_map = {}
        self._lock = threading.Lock()
        self._initializer = initializer
        self._initargs = initargs
        self._maximum_process_uses = maximum_process_uses
        self._stdout = stdout
        self._stderr = stderr
        self._shutdown = False
        if self._initializer is not None and not callable(self._initializer):
            raise TypeError("initializer must be callable for PopenPoolExecutor")
        self._cfg = _sandbox.Config(policy, memory, cpus, pids, mounts, preload, max_payload,
                                    load_timeout=load_timeout, cwd=cwd)
        self._result_opts = {"result_types": result_types, "unsafe_results": unsafe_results}
        if initializer is not None:
            self._cfg.add_module(getattr(initializer, "__module__", None))

    def __del__(self):
        if not getattr(self, "_shutdown", True):
            self.shutdown(wait=True)

    def shutdown(self, wait=True):
        """Kill every worker and shut the thread pool down."""
        with self._lock:
            for worker in self._worker_map.values():
                worker.kill()
        self._threadpool.shutdown(wait=wait)
        self._shutdown = True

    def _worker_run(self, fn, args, kwargs):
        with self._lock:
            tid = threading.get_ident()
            proc = self._worker_map.get(tid)
            if proc is None:
                proc = PopenWorker(self._initializer, self._initargs,
                                   self._maximum_process_uses, self._stdout, self._stderr,
                                   _config=self._cfg, **self._result_opts)
                self._worker_map[tid] = proc
        proc.send(fn, args, kwargs, self._timeout)
        return proc.recv()

    def _worker_run_with_error_catching(self, fn, args, kwargs) -> MapResult:
        # pylint: disable=broad-except
        try:
            return MapResult(status=StatusKind.COMPLETE, value=self._worker_run(fn, args, kwargs))
        except TimeoutError as exception:
            return MapResult(status=StatusKind.TIMEOUT, value=exception)
        except Exception as exception:
            return MapResult(status=StatusKind.EXCEPTION, value=exception)

    def submit(self, fn, *args, **kwargs) -> concurrent.futures.Future:
        """Submit fn(*args, **kwargs); the future's result() returns or raises as TVM's."""
        kwargs = {} if not kwargs else kwargs
        return self._threadpool.submit(self._worker_run, fn, args, kwargs)

    def map_with_error_catching(self, fn, iterator):
        """fn over every item, in input order, each a MapResult (COMPLETE, TIMEOUT or
        EXCEPTION, ChildProcessError included).

        As TVM's (Executor.map): the iterator is read at the call, every item runs
        whether or not the results are read, and closing the returned generator early
        drops the items not started yet.  Unlike it, the items are not one future each:
        one task per pool thread takes the next item as soon as its worker is free, so
        at most max_workers calls are in flight and a long map costs no queue of
        futures."""
        run = _MapRun(self._worker_run_with_error_catching, fn, list(iterator))
        for _ in range(min(self._max_workers, len(run.items))):
            self._threadpool.submit(run.drain)
        return run.results()


_PENDING = object()


class _Raised:
    def __init__(self, exc):
        self.exc = exc


class _MapRun:
    """One map_with_error_catching: the items, their results as they come, and the
    reader's place."""

    def __init__(self, call, fn, items):
        self.items = items
        self._call = call
        self._fn = fn
        self._next = itertools.count()  # its next() is atomic: each item taken once
        self._out = [_PENDING] * len(items)
        self._cond = threading.Condition()
        self._want = -1
        self._stopped = False

    def drain(self):
        """On a pool thread: run items until there are none left (or the reader left)."""
        n = len(self.items)
        for i in self._next:
            if i >= n or self._stopped:
                return
            try:
                result = self._call(self._fn, (self.items[i],), None)
            except BaseException as e:  # pylint: disable=broad-except
                result = _Raised(e)  # what a future's result() would raise
            with self._cond:
                self._out[i] = result
                if self._want == i:
                    self._cond.notify()

    def results(self):
        try:
            for i in range(len(self.items)):
                with self._cond:
                    while self._out[i] is _PENDING:
                        self._want = i
                        self._cond.wait()
                result, self._out[i] = self._out[i], None
                if isinstance(result, _Raised):
                    raise result.exc
                yield result
        finally:
            self._stopped = True
