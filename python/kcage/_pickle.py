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
# on a worker's word) and, of those, only what cannot act when called: plain data types,
# exception classes, enums, namedtuple classes, numpy arrays and dtypes, and whatever
# the caller trusts by name (result_types=).

import builtins  # noqa: E402
import copyreg  # noqa: E402
import enum  # noqa: E402
import io  # noqa: E402
import re  # noqa: E402

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


def _harmless_class(obj):
    if not isinstance(obj, type):
        return False
    if issubclass(obj, BaseException) or issubclass(obj, enum.Enum):
        return True
    # a namedtuple: a tuple subclass with _fields and no behaviour of its own on creation
    return issubclass(obj, tuple) and hasattr(obj, "_fields") and obj.__new__ is not tuple.__new__


class RefusedResult(pickle.UnpicklingError):
    pass


class _Unpickler(pickle.Unpickler):
    _trusted = frozenset()

    def find_class(self, module, name):
        mod = sys.modules.get(module)
        obj = None
        if mod is not None and "." not in name:
            obj = getattr(mod, name, None)
        if obj is None:
            raise RefusedResult("%s.%s (not imported in the parent)" % (module, name))
        if module == "builtins" and name in _SAFE_BUILTINS:
            return obj
        if (module, name) in _SAFE_NAMES or "%s.%s" % (module, name) in self._trusted:
            return obj
        if _harmless_class(obj):
            return obj
        raise RefusedResult("%s.%s (not on the result allow-list: result_types=)" % (module, name))


# One class per set of trusted names: an instance then costs no Python-level __init__.
_unpicklers = {frozenset(): _Unpickler}
# The answer of a call that returned None, the commonest one: loading these very bytes
# can only give this value.
_NONE_ANSWER = pickle.dumps((1, None), protocol=_PROTO)


# Every opcode that can look a name up (GLOBAL, STACK_GLOBAL, INST, EXT1/2/4), call or
# build an object (REDUCE, BUILD, OBJ, NEWOBJ, NEWOBJ_EX) or reach persistent_load
# (PERSID, BINPERSID).  A stream in which none of these byte values occurs anywhere
# (operands included: a false alarm only costs the slow path) can only build plain
# data (None, bools, numbers, str, bytes, tuples, lists, dicts, sets), whatever it
# says: the C loader with no allow-list is then exactly as safe and 3x as fast.
_ACTING = re.compile(b"[ci\x93\x82\x83\x84Rbo\x81\x92PQ]").search


def safe_loads(data, trusted=frozenset()):
    """Unpickle a worker's answer with the allow-list above."""
    if data == _NONE_ANSWER:
        return (1, None)
    if _ACTING(data) is None:
        return loads(data)
    cls = _unpicklers.get(trusted)
    if cls is None:
        cls = _unpicklers[trusted] = type("_Unpickler", (_Unpickler,), {"_trusted": trusted})
    return cls(io.BytesIO(data)).load()


_ = (builtins, copyreg)
