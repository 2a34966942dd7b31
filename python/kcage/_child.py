"""Inside a kcage worker: the embedded interpreter's side of a call.

kcage-worker's zygote runs the boot code (kcage._sandbox.boot_source) once, then every
worker forked from it passes each request's bytes to `call` and returns the bytes it
gives back.  A request is pickle((op, fn, args, kwargs)) (kcage._pickle: the C pickler
where it is exact, else cloudpickle); the answer is
pickle((status, value)) as TVM's popen_worker sends it, so exceptions keep
their type and carry the child's formatted traceback as their message.
"""

import os
import sys
import traceback

from . import _pickle

COMPLETE, EXCEPTION = 1, 2
OP_CALL, OP_INIT = 0, 1

_initialized = False


def boot(paths, modules):
    """In the zygote: the parent's import path, then what the pool will need."""
    sys.path[:] = list(paths)
    for name in modules:
        try:
            __import__(name)
        except Exception:  # pylint: disable=broad-except
            # a module that cannot be imported here fails at the call, with its
            # traceback, as it would in TVM's worker
            pass


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # pylint: disable=broad-except
            pass


def _run(data):
    global _initialized
    try:
        op, fn, args, kwargs = _pickle.loads(data)
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
