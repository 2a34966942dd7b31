"""TVM's tracker client over libkcage: connect_tracker(host, port).request(key,
priority, session_timeout, max_retry, session_constructor_args) leases a device and
opens a kcage session on it (a `kcage agent`), with TVM's semantics and TVM's error
text ("Cannot request KEY after N retry, last_error:...").

    from kcage import tracker
    sess = tracker.connect_tracker("127.0.0.1", 9190).request(
        "cpu", session_timeout=60, session_constructor_args=["kcage.sandbox", "memory=256M"])
    sess.upload("k0-add.c", source)
    sess.close()

session_constructor_args: the first element names the constructor the agent makes the
session with, the rest are its arguments (strings; ints and floats are written with
str()).  They travel in the session's hello, after the tracker match; an agent that
does not acknowledge them is refused (include/kcage/tracker.h, docs/fleet.md).
"""

import ctypes
import json
import os

from ._lib import KcError, lib

P = ctypes.POINTER
_MAX_ADDR, _MAX_MATCHKEY, _MAX_KEY = 256, 512, 256


class _RequestOpts(ctypes.Structure):
    _fields_ = [
        ("priority", ctypes.c_double),
        ("session_timeout_s", ctypes.c_double),
        ("max_retry", ctypes.c_uint),
        ("wait_s", ctypes.c_double),
        ("session_constructor_args", P(ctypes.c_char_p)),
        ("n_session_constructor_args", ctypes.c_size_t),
    ]


class _Lease(ctypes.Structure):
    _fields_ = [
        ("host", ctypes.c_char * _MAX_ADDR),
        ("port", ctypes.c_uint16),
        ("matchkey", ctypes.c_char * _MAX_MATCHKEY),
        ("server_key", ctypes.c_char * (_MAX_KEY + 16)),
        ("session_constructor_args", P(ctypes.c_char_p)),
        ("n_session_constructor_args", ctypes.c_size_t),
    ]


class _OpenOpts(ctypes.Structure):
    _fields_ = [
        ("timeout_s", ctypes.c_double),
        ("auth", ctypes.c_void_p),
        ("session_constructor_args", P(ctypes.c_char_p)),
        ("n_session_constructor_args", ctypes.c_size_t),
    ]


_sigs = {
    "kc_request_opts_init": (None, [P(_RequestOpts)]),
    "kc_session_ctor_check": (ctypes.c_int, [P(ctypes.c_char_p), ctypes.c_size_t, P(KcError)]),
    "kc_tracker_request": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_uint16, ctypes.c_char_p, P(_RequestOpts), P(_Lease),
         P(ctypes.c_int), P(KcError)],
    ),
    "kc_session_open_with": (
        ctypes.c_int,
        [ctypes.c_int, P(_OpenOpts), P(ctypes.c_void_p), ctypes.c_void_p, P(KcError)],
    ),
    "kc_session_hello": (ctypes.c_void_p, [ctypes.c_void_p]),
    "kc_session_upload": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                       P(KcError)],
    ),
    "kc_session_close": (None, [ctypes.c_void_p]),
    "kc_tracker_connect": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_uint16, ctypes.c_double, P(ctypes.c_void_p), P(KcError)],
    ),
    "kc_tracker_summary": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_void_p), P(KcError)]),
    "kc_tracker_text_summary": (ctypes.c_void_p, [ctypes.c_void_p]),
    "kc_tracker_close": (None, [ctypes.c_void_p]),
}
_f = {}
for _name, (_res, _args) in _sigs.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args
    _f[_name] = _fn

# jansson and libc, which libkcage already has mapped: a json_t's text, and its free
_jansson = ctypes.CDLL("libjansson.so.4")
_jansson.json_dumps.restype = ctypes.c_void_p
_jansson.json_dumps.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_jansson.json_delete.argtypes = [ctypes.c_void_p]
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


def _text(ptr):
    """A malloc'd C string from libkcage or jansson, as str, freed."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _libc.free(ptr)


def _json_of(ptr):
    return json.loads(_text(_jansson.json_dumps(ptr, 0)) or "null")


def _ctor_array(args):
    """TVM's session_constructor_args as the C array, checked by libkcage (ValueError
    naming what is wrong, before anything is asked of a tracker)."""
    if args is None:
        return None, 0
    if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
        raise TypeError("session_constructor_args: a list, its first element the constructor")
    items = []
    for a in args:
        if isinstance(a, bool) or not isinstance(a, (str, int, float)):
            raise TypeError("session_constructor_args: strings and numbers only, got %r" % (a,))
        items.append(str(a).encode())
    if not items:
        return None, 0
    arr = (ctypes.c_char_p * len(items))(*items)
    err = KcError()
    if _f["kc_session_ctor_check"](arr, len(items), ctypes.byref(err)) < 0:
        raise ValueError(err.text())
    return arr, len(items)


class Session:
    """A kcage session on a leased device (TVM's RPCSession stands here)."""

    def __init__(self, ptr, lease, keep):
        self._ptr = ptr
        self._keep = keep
        self.host = lease.host.decode("utf-8", "replace")
        self.port = lease.port
        self.matchkey = lease.matchkey.decode("utf-8", "replace")
        self.server_key = lease.server_key.decode("utf-8", "replace")
        self.hello = _json_of(_f["kc_session_hello"](ptr))
        # the agent's acknowledgement of session_constructor_args (what it made the
        # session with, and what the operator's caps clamped); None without them
        self.constructor = self.hello.get("session_constructor")

    def upload(self, name, data):
        if self._ptr is None:
            raise RuntimeError("the session is closed")
        if isinstance(data, str):
            data = data.encode()
        err = KcError()
        if _f["kc_session_upload"](self._ptr, name.encode(), bytes(data), len(data),
                                   ctypes.byref(err)) < 0:
            raise RuntimeError(err.text())

    def close(self):
        if self._ptr is not None:
            _f["kc_session_close"](self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class TrackerSession:
    """TVM's TrackerSession: request() and summary()/text_summary()."""

    def __init__(self, host, port):
        self.host = host
        self.port = int(port)

    def request(self, key, priority=1, session_timeout=0, max_retry=5,
                session_constructor_args=None, wait=None):
        """A device of `key`, as TVM's request(); wait: how long this client waits for a
        free device (None: 60 s; a negative number: forever, like TVM)."""
        arr, n = _ctor_array(session_constructor_args)
        o = _RequestOpts()
        _f["kc_request_opts_init"](ctypes.byref(o))
        o.priority = float(priority)
        o.session_timeout_s = float(session_timeout or 0)
        o.max_retry = int(max_retry)
        if wait is not None:
            o.wait_s = float(wait)
        if arr is not None:
            o.session_constructor_args = arr
            o.n_session_constructor_args = n
        lease, fd, err = _Lease(), ctypes.c_int(-1), KcError()
        if _f["kc_tracker_request"](self.host.encode(), self.port, key.encode(),
                                    ctypes.byref(o), ctypes.byref(lease), ctypes.byref(fd),
                                    ctypes.byref(err)) < 0:
            raise RuntimeError(err.text())
        so = _OpenOpts()
        so.timeout_s = 30
        so.session_constructor_args = lease.session_constructor_args
        so.n_session_constructor_args = lease.n_session_constructor_args
        ptr = ctypes.c_void_p()
        if _f["kc_session_open_with"](fd.value, ctypes.byref(so), ctypes.byref(ptr), None,
                                      ctypes.byref(err)) < 0:
            raise RuntimeError("device %s:%d: %s" % (lease.host.decode("utf-8", "replace"),
                                                     lease.port, err.text()))
        return Session(ptr, lease, arr)

    def _summary_ptr(self, fn):
        conn, err = ctypes.c_void_p(), KcError()
        if _f["kc_tracker_connect"](self.host.encode(), self.port, 10, ctypes.byref(conn),
                                    ctypes.byref(err)) < 0:
            raise RuntimeError(err.text())
        try:
            s = ctypes.c_void_p()
            if _f["kc_tracker_summary"](conn, ctypes.byref(s), ctypes.byref(err)) < 0:
                raise RuntimeError(err.text())
            try:
                return fn(s)
            finally:
                _jansson.json_delete(s)  # the summary's only reference
        finally:
            _f["kc_tracker_close"](conn)

    def summary(self):
        return self._summary_ptr(_json_of)

    def text_summary(self):
        return self._summary_ptr(lambda s: _text(_f["kc_tracker_text_summary"](s)) or "")


def connect_tracker(host=None, port=None):
    """TVM's rpc.connect_tracker; host and port default to TVM_TRACKER_HOST/PORT."""
    host = host or os.environ.get("TVM_TRACKER_HOST") or "127.0.0.1"
    port = port or int(os.environ.get("TVM_TRACKER_PORT") or 9190)
    return TrackerSession(host, port)


__all__ = ["Session", "TrackerSession", "connect_tracker"]
