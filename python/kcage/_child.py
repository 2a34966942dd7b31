"""Inside a kcage worker: the embedded interpreter's side of a call.

kcage-worker's zygote runs the boot code (kcage._sandbox.boot_source) once, then every
worker forked from it passes each request's bytes to `call` and returns the bytes it
gives back.  A request is pickle((op, fn, args, kwargs)) (kcage._pickle: the C pickler
where it is exact, else cloudpickle), or, for a function that travels by reference,
"K", op, the length of fn's pickle (4 bytes, little-endian), fn's pickle, and
pickle((args, kwargs)) unless both are empty: fn's pickle is made once in the parent
and the arguments are all that is pickled per call.  The answer is
pickle((status, value)) as TVM's popen_worker sends it, so exceptions keep
their type and carry the child's formatted traceback as their message.
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


def boot(paths, modules):
    """In the zygote: the parent's import path, then what the pool will need."""
    # Workers are forks of this process, and a fork copies only the forking thread: a
    # library that starts threads at import (OpenBLAS, under numpy, which TVM imports)
    # would leave each worker believing in threads it does not have, and its fork
    # handler waits for them (os.fork(), thus tvm.rpc.Server's sessions, hung) as does
    # any BLAS call it splits among them.  Its own variable keeps it single-threaded.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path[:] = list(paths)
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


def _run(data):
    global _initialized
    try:
        op, fn, args, kwargs = _decode(data)
        if op == OP_INIT:
            if _initialized:
                return (COMPLETE, None)
            _initialized = True
        result = fn(*args, **kwargs)
        return (COMPLETE, result)
    except Exception as exc:  # pylint: disable=broad-except
        msg = traceback.format_exc()
        return (EXCEPTION, type(exc)(msg))


def call(data):
    try:
        ret = _run(data)
        try:
            return _pickle.dumps(ret)
        finally:
            _flush()
    except BaseException:  # pylint: disable=broad-except
        # What ends TVM's worker (SystemExit, an exception type whose constructor
        # rejects one string, an unpicklable result) ends this one: the parent sees
        # the death and raises ChildProcessError.
        traceback.print_exc()
        _flush()
        os._exit(1)
