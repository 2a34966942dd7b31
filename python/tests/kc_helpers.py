"""Functions the workers run (imported by name in TVM's and kcage's workers)."""

import ctypes
import os
import subprocess
import sys
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


def count_arg(_):
    return count()


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


class Point:
    def __init__(self, x):
        self.x = x


def make_point(x):
    return Point(x)


def forge_result(marker):
    """A compromised worker: its next answer is a pickle that would call os.system."""
    import kcage._child as child  # pylint: disable=import-outside-toplevel

    evil = b"cos\nsystem\n(S'touch " + marker.encode() + b"'\ntR."
    child._pickle.dumps = lambda obj: evil  # pylint: disable=protected-access


def hold_the_gil():
    """Catastrophic backtracking: hours inside one C call that never releases the GIL
    (TVM's in-child Timer thread could not run until it returned)."""
    import re  # pylint: disable=import-outside-toplevel

    return bool(re.match(r"(a+)+$", "a" * 64 + "b"))


def write_file(directory, text):
    path = os.path.join(directory, "artifact.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def builder_escape():
    """Looks like a MetaSchedule builder (module name) and answers with a path the tuner
    would rmtree: outside the scratch directory."""
    return "/etc/passwd"


builder_escape.__module__ = "kc_helpers.builder.escape"


def pid_in_namespace():
    """The worker's pid in its own pid namespace (os.getpid() gives the parent's view)."""
    return ctypes.CDLL(None).getpid()


def socket_families():
    """Which address families this process may open sockets of: {name: errno or 0}."""
    import errno as _errno  # pylint: disable=import-outside-toplevel
    import socket  # pylint: disable=import-outside-toplevel

    out = {}
    for name in ("AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK", "AF_PACKET"):
        try:
            socket.socket(getattr(socket, name), socket.SOCK_DGRAM).close()
            out[name] = 0
        except OSError as e:
            out[name] = _errno.errorcode.get(e.errno, e.errno)
    return out


def connect_to(port):
    """Connect to 127.0.0.1:port (the host's loopback when the pool shares its network)
    and read what the listener there sends."""
    import socket  # pylint: disable=import-outside-toplevel

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        return s.recv(64)


def fork_child():
    """os.fork() and the child's exit status (TVM's RPC server forks per session)."""
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    return os.waitpid(pid, 0)[1] >> 8


def numpy_matmul(n):
    import numpy as np  # pylint: disable=import-outside-toplevel

    a = np.ones((n, n))
    return float((a @ a)[0, 0])


def abstract_unix_reaches(name):
    """Connect to the abstract AF_UNIX name (per network namespace): True when
    something listens there in this process's network namespace."""
    import socket  # pylint: disable=import-outside-toplevel

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + name)
        return True
    except OSError:
        return False
    finally:
        s.close()


def sysinfo_view():
    """sysinfo(2) as this process sees it: (loads, totalram, freeram, procs), and the
    wall clock when it returned (time.time: no time namespace moves it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    b = (ctypes.c_ulong * 64)()  # struct sysinfo: uptime, loads[3], totalram, freeram, ...
    assert libc.sysinfo(b) == 0, os.strerror(ctypes.get_errno())
    return (tuple(b[1:4]), b[4], b[5], b[10] & 0xffff), time.time()


def sysinfo_view_exec():
    """The same, as a program that this process execs sees it."""
    code = ("import ctypes\nb=(ctypes.c_ulong*64)()\n"
            "assert ctypes.CDLL(None).sysinfo(b)==0\n"
            "print(b[1],b[2],b[3],b[4],b[5],b[10]&0xffff)")
    out = subprocess.run([sys.executable, "-I", "-c", code], check=True, capture_output=True,
                         text=True, timeout=60).stdout.split()
    v = [int(x) for x in out]
    return (tuple(v[0:3]), v[3], v[4], v[5]), time.time()


def clocks():
    """The boot and monotonic clocks and sysinfo(2)'s uptime as this process reads them."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)  # struct sysinfo, uptime first
    assert libc.sysinfo(buf) == 0, os.strerror(ctypes.get_errno())
    uptime = ctypes.c_long.from_buffer(buf).value
    return (time.clock_gettime(time.CLOCK_BOOTTIME), time.clock_gettime(time.CLOCK_MONOTONIC),
            uptime)
