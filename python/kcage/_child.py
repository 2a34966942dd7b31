"""Inside a kcage worker: the embedded interpreter's side of a call.

kcage-worker's zygote runs the boot code (kcage._sandbox.boot_source) once, then every
worker forked from it passes each request's bytes to `call` and returns the bytes it
gives back.  A request is pickle((op, fn, args, kwargs)) (kcage._pickle: the C pickler
where it is exact, else cloudpickle), or, for a function that travels by reference,
"K", op, the length of fn's pickle (4 bytes, little-endian), fn's pickle, and
pickle((args, kwargs)) unless both are empty: fn's pickle is made once in the parent
and the arguments are all that is pickled per call.  The answer is
pickle((status, value)) as TVM's popen_worker sends it, except that an exception
travels as (module, qualified name, formatted traceback): the parent raises an instance
of that class (if it is an Exception class it can build without running its code) with
the traceback as its message, as TVM's would.
"""

import os
import sys
import traceback
import types

from . import _pickle

COMPLETE, EXCEPTION = 1, 2
OP_CALL, OP_INIT = 0, 1

_initialized = False
_REF = b"K"[0]
_NO_ARGS = ((), {})
_heads = {}  # (op, fn's pickle) -> the request's first bytes, in the parent
_names = {}  # fn's pickle -> (module, qualname parts), in the worker


def encode(op, fn, args, kwargs):
    """The parent's side: the request bytes of fn(*args, **kwargs)."""
    ref = _pickle.fn_ref(fn)
    if ref is None:
        if isinstance(fn, types.FunctionType):
            return _pickle.dumps_by_value((op, fn, args, kwargs))
        return _pickle.dumps((op, fn, args, kwargs))
    head = _heads.get((op, ref))
    if head is None:
        if len(_heads) >= 512:
            _heads.clear()
        head = _heads[(op, ref)] = b"K" + bytes((op,)) + len(ref).to_bytes(4, "little") + ref
    return head + _pickle.dumps((args, kwargs)) if args or kwargs else head


def _load_fn(ref):
    """A function sent by reference: unpickled (imported) the first time, then found by
    the same names in the modules already imported, as the unpickler would find it."""
    names = _names.get(ref)
    if names is not None:
        fn = _pickle.resolve(*names)
        if fn is not None:
            return fn
    fn = _pickle.loads(ref)
    names = (getattr(fn, "__module__", None), tuple(getattr(fn, "__qualname__", "").split(".")))
    if isinstance(names[0], str) and _pickle.resolve(*names) is fn:
        _names[ref] = names
    return fn


def _decode(data):
    if data[0] != _REF:
        return _pickle.loads(data)
    end = 6 + int.from_bytes(data[2:6], "little")
    fn = _load_fn(data[6:end])
    args, kwargs = _pickle.loads(memoryview(data)[end:]) if len(data) > end else _NO_ARGS
    return data[1], fn, args, kwargs


def boot(paths, modules, cwd=None):
    """In the zygote: the parent's import path and working directory, then what the
    pool will need."""
    # Workers are forks of this process, and a fork copies only the forking thread: a
    # library that starts threads at import (OpenBLAS, under numpy, which TVM imports)
    # would leave each worker believing in threads it does not have, and its fork
    # handler waits for them (os.fork(), thus tvm.rpc.Server's sessions, hung) as does
    # any BLAS call it splits among them.  Its own variable keeps it single-threaded.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path[:] = list(paths)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError:
            pass  # stays in the policy's (/tmp)
    for name in modules:
        try:
            __import__(name)
        except Exception:  # pylint: disable=broad-except
            # a module that cannot be imported here fails at the call, with its
            # traceback, as it would in TVM's worker
            pass


def share_dir(path):
    """In a sandbox: let other sandboxes (other host ids) search the directory of a file
    this one made, such as TVM's builder's artifact in a tempfile.mkdtemp() (mode
    0700).  Returns path."""
    d = os.path.dirname(path)
    if d and os.path.isdir(d) and not os.path.islink(d):
        os.chmod(d, os.stat(d).st_mode | 0o011)
    return path


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # pylint: disable=broad-except
            pass


class _Failed:
    """A request that could not be loaded: its answer, made at once."""

    __slots__ = ("answer",)

    def __init__(self, answer):
        self.answer = answer


def _exception_answer(exc):
    # its class by name and its traceback as text: the parent rebuilds it without
    # running anything of the class (kcage._pickle.decode_answer)
    return (EXCEPTION, (str(type(exc).__module__), str(type(exc).__qualname__),
                        traceback.format_exc()))


def _die():
    # What ends TVM's worker (SystemExit, KeyboardInterrupt, an unpicklable result)
    # ends this one: the parent sees the death and raises ChildProcessError.  At once:
    # a death that came after the deadline would read as a timeout, and a traceback's
    # source lines take milliseconds to read.  SystemExit ends quietly with its status,
    # as it ends TVM's worker.
    exc = sys.exc_info()[1]
    if isinstance(exc, SystemExit):
        code = exc.code
        _flush()
        os._exit(code & 0xFF if isinstance(code, int) else 1)
    try:
        sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
    except BaseException:  # pylint: disable=broad-except
        pass
    _flush()
    os._exit(1)


def load(data):
    """The first half of a call: the request decoded (its function unpickled, its
    module imported).  The worker then tells the parent that the task begins: TVM's
    timeout counts the task, not this."""
    try:
        try:
            return _decode(data)
        except Exception as exc:  # pylint: disable=broad-except
            return _Failed(_exception_answer(exc))
    except BaseException:  # pylint: disable=broad-except
        _die()


def run(job):
    """The second half: the loaded call run, its answer's bytes."""
    global _initialized
    try:
        if isinstance(job, _Failed):
            ret = job.answer
        else:
            op, fn, args, kwargs = job
            ret = None
            if op == OP_INIT:
                if _initialized:
                    ret = (COMPLETE, None)
                _initialized = True
            if ret is None:
                try:
                    ret = (COMPLETE, fn(*args, **kwargs))
                except Exception as exc:  # pylint: disable=broad-except
                    ret = _exception_answer(exc)
        try:
            return _pickle.dumps(ret)
        finally:
            _flush()
    except BaseException:  # pylint: disable=broad-except
        _die()


def call(data):
    """Both halves at once."""
    return run(load(data))


# --- what a function sees of its process, as in TVM's worker ----------------------
#
# A sandboxed worker is pid 1 of its own pid namespace.  TVM's callers identify a
# worker by os.getpid() (a recycled worker must show a new one, which the parent can
# look up), so os.getpid() answers the pid the parent sees.  A signal sent to that pid
# goes to this process (pid 1 here).

_host_pid = None


def set_host_pid(pid):
    global _host_pid
    if not pid or _host_pid is not None:
        return
    _host_pid = int(pid)
    import posix  # pylint: disable=import-outside-toplevel

    real_getpid, real_kill = posix.getpid, posix.kill

    def getpid():
        """The worker's pid as the parent sees it."""
        return _host_pid

    def kill(pid, sig):
        return real_kill(real_getpid() if pid == _host_pid else pid, sig)

    for mod in (posix, os):
        mod.getpid = getpid
        mod.kill = kill
    getpid.__module__ = kill.__module__ = "posix"
    getpid.__qualname__, kill.__qualname__ = "getpid", "kill"
