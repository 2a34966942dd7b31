"""Functions the workers run (imported by name in TVM's and kcage's workers)."""

import ctypes
import os
import time

_calls = 0
_state = None


def add(a, b, c=0):
    return a + b + c


def count():
    """Calls served by this process so far (1 for a fresh process)."""
    global _calls
    _calls += 1
    return _calls


def init_state(value):
    global _state
    _state = value


def get_state():
    return _state


def bad_init(*_):
    raise RuntimeError("initializer failed on purpose")


def raise_value_error(text):
    raise ValueError(text)


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def exit_now(code):
    os._exit(code)


def segfault():
    ctypes.string_at(0)


def allocate(nbytes):
    block = bytearray(nbytes)
    for i in range(0, nbytes, 4096):
        block[i] = 1
    return len(block)


def forbidden_mount():
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)


def square_or_fail(x):
    if x == 2:
        raise KeyError("two")
    if x == 3:
        time.sleep(30)
    return x * x
