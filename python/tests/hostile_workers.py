"""What a compromised worker does to its parent: functions that replace the worker's
answer with bytes of the test's choosing, and classes whose construction would act in
the parent.  Imported by name in the workers and in the tests."""

import collections
import os
import time

# What a class below did in the process that built it (the parent must stay empty).
ACTED = []


def answer_with(data):
    """From now on every answer of this worker is `data` (the worker's pickler is ours)."""
    from kcage import _pickle  # pylint: disable=import-outside-toplevel

    _pickle.dumps = lambda obj, _data=bytes(data): _data
    return None


class InitActs(Exception):
    def __init__(self, *args):
        ACTED.append(("__init__", args))
        super().__init__(*args)


class NewActs(Exception):
    def __new__(cls, *args):
        ACTED.append(("__new__", args))
        return super().__new__(cls, *args)


class SetstateActs(Exception):
    def __setstate__(self, state):
        ACTED.append(("__setstate__", state))


class TupleActs(collections.namedtuple("TupleActs", "a")):
    def __new__(cls, a):
        ACTED.append(("namedtuple", a))
        return super().__new__(cls, a)


class Reduce:
    """Pickles as cls(*args) with state: a __reduce__ any class can be given."""

    def __init__(self, cls, args, state=None):
        self.r = (cls, args) if state is None else (cls, args, state)

    def __reduce__(self):
        return self.r


def touch(mib):
    """Write mib MiB, page by page."""
    buf = bytearray(mib << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    return len(buf) >> 20


def fork_many(n):
    """Fork n children that sleep; how many forks succeeded."""
    made = 0
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
    return made


_seen = []


def remember(x):
    """What earlier calls of this process left behind, then this call's x."""
    before = list(_seen)
    _seen.append(x)
    return before


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class HashActs(Exception):
    def __hash__(self):
        ACTED.append(("__hash__", self.args))
        return 0


class StrActs(Exception):
    def __str__(self):
        ACTED.append(("__str__", self.args))
        return "x"


class DelActs(Exception):
    def __del__(self):
        ACTED.append(("__del__", self.args))
