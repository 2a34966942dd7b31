"""Pickling for both sides of a call: the C pickler where it gives the same bytes'
meaning as cloudpickle, cloudpickle otherwise.

cloudpickle.dumps builds a Python-level pickler per call (~10-30 us here), the C
pickler ~1-5 us.  For what pickle can write by reference (module-level functions and
classes, builtins, plain data) the two agree; what only cloudpickle can write (lambdas,
local functions, dynamic classes) makes pickle raise, and anything that refers to
__main__ (by value in cloudpickle, a dangling reference in pickle) is detected in the
bytes.  Loading needs no choice: cloudpickle's output is a plain pickle stream."""

import pickle

import cloudpickle

_PROTO = pickle.HIGHEST_PROTOCOL
loads = pickle.loads


def _by_value_registered():
    return bool(getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", None))


def dumps(obj):
    if not _by_value_registered():
        try:
            data = pickle.dumps(obj, protocol=_PROTO)
        except Exception:  # pylint: disable=broad-except
            data = None
        if data is not None and b"__main__" not in data:
            return data
    return cloudpickle.dumps(obj, protocol=_PROTO)
