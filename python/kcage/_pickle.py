"""Pickling for both sides of a call: the C pickler where it gives the same bytes'
meaning as cloudpickle, cloudpickle otherwise.

cloudpickle.dumps builds a Python-level pickler per call (~10-30 us here), the C
pickler ~1-5 us.  For what pickle can write by reference (module-level functions and
classes, builtins, plain data) the two agree; what only cloudpickle can write (lambdas,
local functions, dynamic classes) makes pickle raise, and anything that refers to
__main__ (by value in cloudpickle, a dangling reference in pickle) is detected in the
bytes.  Loading needs no choice: cloudpickle's output is a plain pickle stream."""

import pickle
import sys
import types

import cloudpickle

_PROTO = pickle.HIGHEST_PROTOCOL
loads = pickle.loads


def _by_value_registered():
    return bool(getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", None))


def dumps(obj):
    """obj's pickle: by the C pickler where that keeps cloudpickle's meaning."""
    if not _by_value_registered():
        try:
            data = pickle.dumps(obj, protocol=_PROTO)
        except Exception:  # pylint: disable=broad-except
            data = None
        if data is not None and b"__main__" not in data:
            return data
    return cloudpickle.dumps(obj, protocol=_PROTO)


def dumps_by_value(obj):
    """cloudpickle's pickle, for what holds a function that does not travel by
    reference (fn_ref gave None): trying the C pickler first would only fail or be
    refused."""
    return cloudpickle.dumps(obj, protocol=_PROTO)


# --- a callable sent by reference, pickled once -------------------------------------
#
# TVM pickles the function on every send.  A module-level function, class or builtin
# travels by reference (its module and qualified name), so its pickle never changes
# while that name still resolves to that very object: the pickle is kept per callable
# and the name is resolved again at every use, as pickle itself checks it (a rebound
# name falls back to dumps, which then pickles by value as cloudpickle would).

_REF_TYPES = (types.FunctionType, types.BuiltinFunctionType, type)
_refs = {}  # id(fn) -> (fn, module, qualname parts, pickle); fn is kept so the id stays its own
_REFS_MAX = 256


def resolve(module, parts):
    """module.qualname among the modules already imported (None when not there)."""
    obj = sys.modules.get(module)
    for part in parts:
        obj = getattr(obj, part, None)
    return obj


def fn_ref(fn):
    """fn's pickle by reference, or None when fn does not travel by reference."""
    if _by_value_registered():
        return None
    hit = _refs.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[3] if resolve(hit[1], hit[2]) is fn else None
    if type(fn) not in _REF_TYPES:  # bound methods and partials carry state
        return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__":
        return None
    self = getattr(fn, "__self__", None)
    if isinstance(fn, types.BuiltinFunctionType) and not isinstance(self, types.ModuleType):
        return None
    parts = tuple(qualname.split("."))
    if resolve(module, parts) is not fn:
        return None
    try:
        data = pickle.dumps(fn, protocol=_PROTO)
        if b"__main__" in data or pickle.loads(data) is not fn:
            return None
    except Exception:  # pylint: disable=broad-except
        return None
    if len(_refs) >= _REFS_MAX:
        _refs.clear()
    _refs[id(fn)] = (fn, module, parts, data)
    return data


# --- the parent's side: results come from a hostile process ---------------------------
#
# A pickle is a program: unpickling what a compromised worker wrote would run any
# callable of the parent's choosing (os.system, subprocess.Popen) outside the sandbox.
# So the parent resolves only names of modules it has already imported (no import runs
# on a worker's word, and names are read from the module's and classes' own
# dictionaries: no module __getattr__ or descriptor runs either) and, of those, only
# what cannot act when called: plain data types, Exception classes (built without
# running any constructor of their own), enums and namedtuples whose construction is
# the standard library's, numpy arrays and dtypes, and whatever the caller trusts by
# name (result_types=).  State (pickle's BUILD) is applied only to an object this very
# load created: a worker cannot rewrite an enum member, a class or any other object
# the parent already holds.  Nothing that is not an Exception can reach `raise`:
# SystemExit, KeyboardInterrupt, GeneratorExit and the other BaseExceptions end
# processes, not calls.

import builtins  # noqa: E402
import enum  # noqa: E402
import io  # noqa: E402
import re  # noqa: E402

COMPLETE, EXCEPTION = 1, 2
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python

_SAFE_BUILTINS = {
    "dict", "list", "tuple", "set", "frozenset", "bytes", "bytearray", "str", "int",
    "float", "complex", "bool", "slice", "range", "object",
}
_SAFE_NAMES = {
    ("copyreg", "_reconstructor"),
    ("collections", "OrderedDict"),
    ("collections", "deque"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
    ("datetime", "datetime"),
    ("datetime", "date"),
    ("datetime", "timedelta"),
}


class RefusedResult(pickle.UnpicklingError):
    pass


class WorkerException(Exception):
    """A worker raised an exception whose class the parent cannot rebuild safely (not
    imported here, not an Exception, or with a constructor of its own): its type's name
    and the worker's traceback, as text."""

    def __init__(self, type_name, message):
        super().__init__("%s: %s" % (type_name, message))
        self.type_name = type_name


def lookup(module, parts):
    """module.qualname among the modules already imported, read from the dictionaries
    themselves (None when not there)."""
    obj = sys.modules.get(module)
    for part in parts:
        if not isinstance(obj, (types.ModuleType, type)):
            return None
        obj = vars(obj).get(part)
    return obj


# What unpickling, or dropping, an object can call on it: hashing and comparing (a dict
# key, a set element), iterating, converting, attribute hooks, finalisers.  A class of
# the caller's that defines one of these is not rebuilt from a worker's bytes.
_HOOKS = frozenset((
    "__hash__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__iter__",
    "__len__", "__bool__", "__index__", "__int__", "__float__", "__complex__", "__bytes__",
    "__getattr__", "__getattribute__", "__setattr__", "__delattr__", "__del__",
    "__setstate__", "__contains__", "__getitem__", "__setitem__", "__missing__",
))
_STDLIB_BASES = ("builtins", "enum", "collections")


def _inert(cls):
    """No class of cls's own (written in Python, outside the standard library's enum
    and namedtuple machinery) defines a hook that loading or dropping would call."""
    for klass in cls.__mro__:
        if not klass.__flags__ & _HEAPTYPE or klass.__module__ in _STDLIB_BASES:
            continue
        if _HOOKS.intersection(vars(klass)):
            return False
    return True


# The builtin types a pickle may call (REDUCE) only with plain data: called with one of
# the objects above, they would run its hooks (str(x) runs x.__str__, set(x) x.__iter__).
_DATA_CALLS = frozenset((str, int, float, complex, bool, bytes, bytearray, list, tuple,
                         set, frozenset, dict, slice, range, object))
_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray)


def _plain(obj, depth=0):
    if isinstance(obj, _PLAIN) and type(obj) in _PLAIN:
        return True
    if depth > 32 or type(obj) not in (tuple, list, set, frozenset, dict):
        return False
    items = obj.items() if type(obj) is dict else ((x, None) for x in obj)
    return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in items)


def _builtin_new(cls):
    """The __new__ that cls(...) would run, when it is the interpreter's own (a static
    type's) rather than a class's Python code; else None."""
    for klass in cls.__mro__:
        if "__new__" in vars(klass):
            return None if klass.__flags__ & _HEAPTYPE else klass.__new__
    return None


def make_exception(cls, args):
    """An instance of the Exception class cls with args, made by the interpreter's own
    __new__ (no __init__, no Python __new__ of the class runs); None when cls is not an
    Exception class or defines its own __new__."""
    if not isinstance(cls, type) or not issubclass(cls, Exception) or not _inert(cls):
        return None
    new = _builtin_new(cls)
    if new is None:
        return None
    exc = new(cls, *args)
    return exc if type(exc) is cls else None


def _exception_factory(cls):
    def build(*args):
        exc = make_exception(cls, args)
        if exc is None:
            raise RefusedResult("%s.%s (an exception class with a __new__ of its own)"
                                % (cls.__module__, cls.__qualname__))
        return exc

    build.kcage_exception = cls
    return build


def _std_enum(cls):
    # EnumType.__call__ looks a member up; only _missing_ could run a class's own code
    missing = getattr(cls, "_missing_", None)
    return getattr(missing, "__module__", None) == "enum"


def _std_namedtuple(cls):
    # collections.namedtuple's generated __new__ (globals named namedtuple_<name>) and
    # no __init__ or __setstate__ of a subclass
    new = vars(cls).get("__new__")
    for klass in cls.__mro__:
        if "__new__" in vars(klass):
            new = vars(klass)["__new__"]
            break
    glob = getattr(getattr(new, "__func__", new), "__globals__", {})
    return (str(glob.get("__name__", "")).startswith("namedtuple_")
            and cls.__init__ is object.__init__ and not hasattr(cls, "__setstate__"))


class _Unpickler(pickle._Unpickler):  # pylint: disable=protected-access
    """pickle's Python unpickler, whose every opcode can be checked (the C one's
    BUILD calls whatever __setstate__ the object has)."""

    _trusted = frozenset()
    dispatch = dict(pickle._Unpickler.dispatch)  # pylint: disable=protected-access

    def __init__(self, file):
        super().__init__(file)
        self._fresh = {}  # id -> object made by this load (kept: the ids stay theirs)

    def find_class(self, module, name):
        full = "%s.%s" % (module, name)
        obj = lookup(module, name.split(".")) if "." not in name else None
        if obj is None:
            raise RefusedResult("%s (not imported in the parent)" % full)
        if (module == "builtins" and name in _SAFE_BUILTINS) or (module, name) in _SAFE_NAMES:
            return obj
        if full in self._trusted:
            return obj
        if isinstance(obj, type) and _inert(obj):
            if issubclass(obj, Exception):
                return _exception_factory(obj)
            if issubclass(obj, enum.Enum) and _std_enum(obj):
                return obj
            if issubclass(obj, tuple) and hasattr(obj, "_fields") and _std_namedtuple(obj):
                return obj
        raise RefusedResult("%s (not on the result allow-list: result_types=)" % full)

    def _made(self):
        obj = self.stack[-1]
        if not isinstance(obj, (type, enum.Enum, types.ModuleType)):
            self._fresh[id(obj)] = obj

    def load_reduce(self):
        if self.stack[-2] in _DATA_CALLS and not _plain(self.stack[-1]):
            raise RefusedResult("%s() of objects" % self.stack[-2].__name__)
        super().load_reduce()
        self._made()

    def load_newobj(self):
        if not isinstance(self.stack[-2], type):
            raise RefusedResult("NEWOBJ of %r" % (self.stack[-2],))
        super().load_newobj()
        self._made()

    def load_newobj_ex(self):
        if not isinstance(self.stack[-3], type):
            raise RefusedResult("NEWOBJ_EX of %r" % (self.stack[-3],))
        super().load_newobj_ex()
        self._made()

    def load_build(self):
        inst = self.stack[-2]
        if self._fresh.get(id(inst)) is not inst:
            raise RefusedResult("state for an object this result did not create (%s)"
                                % type(inst).__name__)
        cls = type(inst)
        if isinstance(inst, Exception):
            state = self.stack.pop()
            if not isinstance(state, dict) or not all(type(k) is str for k in state):
                raise RefusedResult("exception state that is not a dict of names")
            vars(inst).update(state)  # its own dictionary: no setattr, no descriptor
            return
        if "%s.%s" % (cls.__module__, cls.__qualname__) not in self._trusted and not (
                cls.__module__ in ("numpy", "collections")):
            raise RefusedResult("state for %s.%s (result_types=)" % (cls.__module__,
                                                                    cls.__qualname__))
        super().load_build()

    def persistent_load(self, pid):
        raise RefusedResult("persistent ids")

    for _op, _fn in ((pickle.REDUCE, load_reduce), (pickle.NEWOBJ, load_newobj),
                     (pickle.NEWOBJ_EX, load_newobj_ex), (pickle.BUILD, load_build)):
        dispatch[_op[0]] = _fn
    del _op, _fn


# One class per set of trusted names.
_unpicklers = {frozenset(): _Unpickler}
# The answer of a call that returned None, the commonest one: loading these very bytes
# can only give this value.
_NONE_ANSWER = pickle.dumps((COMPLETE, None), protocol=_PROTO)


# Every opcode that can look a name up (GLOBAL, STACK_GLOBAL, INST, EXT1/2/4), call or
# build an object (REDUCE, BUILD, OBJ, NEWOBJ, NEWOBJ_EX) or reach persistent_load
# (PERSID, BINPERSID).  A stream in which none of these byte values occurs anywhere
# (operands included: a false alarm only costs the slow path) can only build plain
# data (None, bools, numbers, str, bytes, tuples, lists, dicts, sets), whatever it
# says: the C loader with no allow-list is then exactly as safe and 3x as fast.
_ACTING = re.compile(b"[ci\x93\x82\x83\x84Rbo\x81\x92PQ]").search


def safe_loads(data, trusted=frozenset()):
    """Unpickle a worker's bytes with the allow-list above."""
    if _ACTING(data) is None:
        return loads(data)
    cls = _unpicklers.get(trusted)
    if cls is None:
        cls = _unpicklers[trusted] = type("_Unpickler", (_Unpickler,), {"_trusted": trusted})
    return cls(io.BytesIO(data)).load()


def exception_answer(exc):
    """The worker's side: an exception travels as plain data (its class's module and
    qualified name, and its formatted traceback), never as an object to construct."""
    cls = type(exc)
    return (EXCEPTION, (str(cls.__module__), str(cls.__qualname__), exc.args[0]
                        if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)))


def _rebuild_exception(value):
    if (type(value) is not tuple or len(value) != 3
            or not all(type(v) is str for v in value)):
        raise RefusedResult("an exception answer that is not (module, name, message)")
    module, qualname, message = value
    cls = lookup(module, qualname.split("."))
    exc = make_exception(cls, (message,)) if isinstance(cls, type) else None
    if exc is None:
        # not an Exception class here (SystemExit, KeyboardInterrupt, ...), not imported,
        # or one whose constructor is its own: the name and the text, nothing run
        exc = WorkerException("%s.%s" % (module, qualname), message)
    return exc


def decode_answer(data, trusted=frozenset(), unsafe=False):
    """A worker's answer: (True, value) for a result, (False, exc) for its exception,
    where exc is always an instance of an Exception class.  Raises RefusedResult (or
    another Exception) for anything else."""
    if data == _NONE_ANSWER:
        return True, None
    answer = loads(data) if unsafe else safe_loads(data, trusted)
    if type(answer) is not tuple or len(answer) != 2 or type(answer[0]) is not int:
        raise RefusedResult("an answer that is not (status, value)")
    status, value = answer
    if status == COMPLETE:
        return True, value
    if status != EXCEPTION:
        raise RefusedResult("an answer of status %d" % status)
    if unsafe and issubclass(type(value), Exception):
        return False, value
    return False, _rebuild_exception(value)


_ = builtins
