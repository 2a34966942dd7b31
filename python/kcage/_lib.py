"""ctypes binding over libkcage.so.

ctypes rather than cffi: it is in the standard library, so `pip install ./python`
needs neither a compiler nor Python headers nor a build step, and the package works
with any libkcage of the same API without being rebuilt.  The binding is two or three
calls per round trip.  Calls that may block (send can start a worker, recv waits)
go through a CDLL handle, which releases the GIL; the few that never block go through
a PyDLL handle on the same library, which keeps it: releasing and taking the GIL back
around a call of a microsecond lets another pool thread take it in between.
"""

import ctypes
import ctypes.util
import os
import subprocess

c_size = ctypes.c_size_t


class KcError(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]

    def text(self):
        return self.msg.decode("utf-8", "replace")


class KcStdio(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("fd", ctypes.c_int)]


STDIO_INHERIT, STDIO_DISCARD, STDIO_FD = 0, 1, 2


class KcLimits(ctypes.Structure):
    _fields_ = [
        ("memory_bytes", ctypes.c_uint64),
        ("cpu_s", ctypes.c_double),
        ("wall_s", ctypes.c_double),
        ("pids", ctypes.c_uint32),
        ("cpus", ctypes.c_double),
        ("output_bytes", ctypes.c_uint64),
    ]


MOUNT_RO_BIND, MOUNT_BIND, MOUNT_TMPFS = 0, 1, 2


class KcMount(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("src", ctypes.c_char_p),
        ("dst", ctypes.c_char_p),
        ("size", ctypes.c_uint64),
    ]


class KcSettings(ctypes.Structure):
    """kc_settings (kcage/settings.h): all zero = the defaults."""

    _fields_ = [
        ("cgroup_mode", ctypes.c_int),
        ("limits_fallback", ctypes.c_int),
        ("ids_base", ctypes.c_uint32),
        ("ids_count", ctypes.c_uint32),
        ("policy_dir", ctypes.c_char_p),
    ]


class KcWorkerOpts(ctypes.Structure):
    _fields_ = [
        ("initializer", ctypes.c_char_p),
        ("initargs", ctypes.c_void_p),
        ("initargs_len", c_size),
        ("maximum_uses", ctypes.c_uint32),
        ("stdout_", KcStdio),
        ("stderr_", KcStdio),
        ("policy", ctypes.c_char_p),
        ("limits", KcLimits),
        ("mounts", ctypes.POINTER(KcMount)),
        ("n_mounts", c_size),
        ("max_arg_bytes", c_size),
        ("max_result_bytes", c_size),
        ("isolation", ctypes.c_int),
        ("worker_path", ctypes.c_char_p),
        ("python_lib", ctypes.c_char_p),
        ("python_boot", ctypes.c_char_p),
        ("settings", KcSettings),
        ("load_s", ctypes.c_double),
    ]


class KcResult(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        ("exit_code", ctypes.c_int),
        ("signal", ctypes.c_int),
        ("syscall", ctypes.c_char * 48),
        ("limit", ctypes.c_char_p),
        ("cpu_s", ctypes.c_double),
        ("wall_s", ctypes.c_double),
        ("peak_memory_bytes", ctypes.c_int64),
        ("message", ctypes.c_char * 512),
    ]


CALL_COMPLETE, CALL_EXCEPTION, CALL_TIMEOUT, CALL_CHILD_ERROR = 1, 2, 3, 4


class KcCallResult(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        # a char pointer, not c_void_p: value[:n] is the bytes in one step
        ("value", ctypes.POINTER(ctypes.c_char)),
        ("value_len", c_size),
        ("message", ctypes.c_char * 1024),
        ("verdict", KcResult),
        ("pid", ctypes.c_int),
        ("generation", ctypes.c_uint32),
        ("elapsed_s", ctypes.c_double),
    ]


def _candidates():
    env = os.environ.get("KCAGE_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    # a copy shipped inside the package, then the source tree's build directory
    # (the development install of `make python`), then the installed prefixes
    yield os.path.join(here, "libkcage.so.1")
    yield os.path.join(here, "..", "..", "build", "libkcage.so.1")
    found = ctypes.util.find_library("kcage")
    if found:
        yield found
    try:  # `make install` into a prefix that pkg-config knows (PKG_CONFIG_PATH)
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "kcage"],
                                capture_output=True, text=True, timeout=10, check=False)
        if libdir.returncode == 0 and libdir.stdout.strip():
            yield os.path.join(libdir.stdout.strip(), "libkcage.so.1")
    except (OSError, subprocess.SubprocessError):
        pass
    for prefix in ("/usr/local", "/usr"):
        for libdir in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            yield os.path.join(prefix, libdir, "libkcage.so.1")


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "kcage: libkcage.so not found (run `make install`, or set KCAGE_LIB); tried: "
        + ", ".join(tried)
    )


lib = _load()
P = ctypes.POINTER
_sigs = {
    "kc_worker_opts_init": (None, [P(KcWorkerOpts)]),
    "kc_worker_new": (ctypes.c_int, [P(KcWorkerOpts), P(ctypes.c_void_p), P(KcError)]),
    "kc_worker_new_on": (
        ctypes.c_int,
        [P(KcWorkerOpts), ctypes.c_void_p, P(ctypes.c_void_p), P(KcError)],
    ),
    "kc_worker_send": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, c_size, ctypes.c_double, P(KcError)],
    ),
    "kc_worker_recv": (ctypes.c_int, [ctypes.c_void_p, P(KcCallResult), P(KcError)]),
    "kc_worker_kill": (None, [ctypes.c_void_p]),
    "kc_worker_join": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_double]),
    "kc_worker_is_alive": (ctypes.c_bool, [ctypes.c_void_p]),
    "kc_worker_pid": (ctypes.c_int, [ctypes.c_void_p]),
    "kc_worker_free": (None, [ctypes.c_void_p]),
    "kc_call_result_init": (None, [P(KcCallResult)]),
    "kc_call_result_clear": (None, [P(KcCallResult)]),
    "kc_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kc_zygote_new": (ctypes.c_int, [P(KcWorkerOpts), P(ctypes.c_void_p), P(KcError)]),
    "kc_zygote_is_alive": (ctypes.c_bool, [ctypes.c_void_p]),
    "kc_zygote_free": (None, [ctypes.c_void_p]),
    "kc_policy_load": (ctypes.c_int, [ctypes.c_char_p, P(ctypes.c_void_p), P(KcError)]),
    "kc_policy_get_limits": (None, [ctypes.c_void_p, P(KcLimits)]),
    "kc_policy_free": (None, [ctypes.c_void_p]),
    "kc_cgroup_enforcement": (ctypes.c_char_p, [P(KcSettings), ctypes.c_char_p]),
    "kc_cgroup_refusal": (ctypes.c_int, [P(KcSettings), ctypes.c_char_p, P(KcError)]),
}
# never block: called with the GIL held (see above)
_held = {"kc_call_result_clear", "kc_worker_is_alive", "kc_worker_pid", "kc_status_name"}
_lib_held = ctypes.PyDLL(lib._name, handle=lib._handle)  # pylint: disable=protected-access
for _name, (_res, _args) in _sigs.items():
    _f = getattr(_lib_held if _name in _held else lib, _name)
    _f.restype = _res
    _f.argtypes = _args
    setattr(lib, _name, _f)
