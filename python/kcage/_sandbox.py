"""The sandbox of a Python pool: policy, limits, mounts, the embedded interpreter, and
the zygotes shared by every worker with the same configuration."""

import ctypes
import errno
import os
import queue
import stat
import sys
import sysconfig
import threading

from . import _lib
from ._lib import lib

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value):
    """Bytes from an int or a size such as "256M" (K, M, G, T: powers of 1024)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("memory: a size in bytes or a string such as '256M'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("memory: negative size %d" % value)
        return value
    if not isinstance(value, str):
        raise TypeError("memory: a size in bytes or a string such as '256M'")
    text = value.strip().upper()
    if text.endswith("IB"):
        text = text[:-2]
    elif text.endswith("B"):
        text = text[:-1]
    unit = text[-1:] if text[-1:] in _SUFFIX else ""
    number = text[: len(text) - len(unit)]
    try:
        amount = float(number)
    except ValueError:
        raise ValueError("memory: cannot read size %r" % value) from None
    if amount < 0:
        raise ValueError("memory: negative size %r" % value)
    return int(amount * _SUFFIX[unit])


def libpython_path():
    """The shared libpython of this very interpreter (the zygote embeds it)."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    names = [sysconfig.get_config_var(n) for n in ("INSTSONAME", "LDLIBRARY")]
    dirs = [libdir]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(os.path.join("/usr/lib", multiarch))
    for d in dirs:
        for n in names:
            if n and n.endswith((".so", ".so.1.0")) or (n and ".so." in n):
                p = os.path.join(d, n)
                if os.path.exists(p):
                    return os.path.realpath(p)
    raise RuntimeError(
        "kcage: no shared libpython for %s (Debian: apt-get install libpython3-dev; "
        "pyenv: build with --enable-shared)" % sys.version.split()[0]
    )


def _others_can_read(path):
    """When kcage runs as root each sandbox runs as host ids of its own (a slot of a
    reserved range that no account uses), "others" to every file of the host.  kcage
    opens every bind itself before giving up its ids, so the directories on the way
    (a home that only its owner may enter) do not matter: the bound directory itself
    must be searchable by others, as everything the interpreter reads below it."""
    if os.geteuid() != 0:
        return True
    try:
        return bool(os.stat(os.path.realpath(path)).st_mode & stat.S_IXOTH)
    except OSError:
        return False


def _under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


# what the sandbox builds for itself: never replaced by the host's (device nodes, the
# kernel's views, the policy's /etc)
_SANDBOX_OWN = ("/dev", "/proc", "/sys", "/etc", "/run")


def interpreter_mounts(cwd=None):
    """Read-only binds for this interpreter's files outside /usr (the policy has /usr):
    its prefix, its import path (a venv, a development checkout, a test directory), and
    the caller's working directory (caller_cwd: already known to be readable)."""
    paths = [sys.base_prefix, sys.prefix, os.path.dirname(libpython_path())] + import_path()
    paths += [cwd] if cwd else []
    out = []
    for p in paths:
        p = os.path.realpath(p)
        if not os.path.isdir(p):
            p = os.path.dirname(p)  # a zip on sys.path
        if (not os.path.isdir(p) or _under(p, "/usr") or p == "/"
                or any(_under(p, d) for d in _SANDBOX_OWN)):
            continue  # the sandbox's own (a '' on sys.path run from / or /dev)
        if any(_under(p, q) for q in out):
            continue
        out = [q for q in out if not _under(q, p)] + [p]
    for p in out:
        if not _others_can_read(p):
            raise RuntimeError(
                "kcage: %s is not searchable by others (the sandbox's own host ids): use a Python "
                "installed under /usr or in a world-readable directory" % p
            )
    return out


def import_path():
    """The parent's sys.path, with this package's own directory (an editable install
    is found through a .pth hook that an embedded interpreter would not run)."""
    here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    paths = [os.path.realpath(p or os.getcwd()) for p in sys.path]
    return paths + ([here] if here not in paths else [])


def caller_cwd(want):
    """The caller's working directory, for the workers to start in (read-only), as
    TVM's start in theirs; None where it cannot be shown: not wanted (cwd=False), the
    file system's root or /tmp (the sandbox's own), or a directory the sandbox's ids
    cannot reach."""
    if want is False:
        return None
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        return None
    if cwd in ("/", "/tmp") or any(_under(cwd, d) for d in _SANDBOX_OWN):
        return None
    return cwd if _others_can_read(cwd) else None


def boot_source(paths, modules, cwd=None):
    # site.addsitedir: the .pth files of a venv's site-packages, which the embedded
    # interpreter (whose prefix is the base installation) does not read by itself
    return (
        "import sys, site, os\n"
        "sys.path[:] = %r\n"
        "[site.addsitedir(p) for p in list(sys.path) if p.endswith('-packages')]\n"
        "import kcage._child\n"
        "kcage._child.boot(list(sys.path), %r, %r)\n" % (list(paths), list(modules), cwd)
    )


def _mount_list(mounts):
    """mounts=: "SRC[:DST]" (read-only bind), (SRC, DST[, "rw"]), or
    ("tmpfs", DST[, SIZE])."""
    out = []
    for m in mounts or ():
        if isinstance(m, str):
            src, _, dst = m.partition(":")
            out.append((_lib.MOUNT_RO_BIND, src, dst or src, 0))
        elif m and m[0] == "tmpfs":
            out.append((_lib.MOUNT_TMPFS, None, m[1], parse_size(m[2]) if len(m) > 2 else 0))
        else:
            kind = _lib.MOUNT_BIND if len(m) > 2 and m[2] == "rw" else _lib.MOUNT_RO_BIND
            out.append((kind, m[0], m[1] if len(m) > 1 and m[1] else m[0], 0))
    return out


def _number(what, value, kind):
    if value is None:
        return kind(0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s: a number, not %r" % (what, value))
    if kind is int and value != int(value):
        raise ValueError("%s: a whole number, not %r" % (what, value))
    if value < 0 or value != value or value == float("inf"):
        raise ValueError("%s: must not be negative (%r)" % (what, value))
    return kind(value)


def policy_limits(policy):
    """The `limit` lines of a policy (a name or a .policy file), loaded as the worker
    will load it: a policy that does not load is refused here, not at the first send."""
    if not isinstance(policy, str) or not policy:
        raise TypeError("policy: a policy name or a .policy file, not %r" % (policy,))
    handle = ctypes.c_void_p()
    err = _lib.KcError()
    if lib.kc_policy_load(policy.encode(), ctypes.byref(handle), ctypes.byref(err)) < 0:
        raise ValueError("kcage: policy %r: %s" % (policy, err.text()))
    try:
        spec = _lib.KcLimits()
        lib.kc_policy_get_limits(handle, ctypes.byref(spec))
        return {"memory": spec.memory_bytes or None, "pids": spec.pids or None,
                "cpus": spec.cpus or None}
    finally:
        lib.kc_policy_free(handle)


def check_limits(memory, pids, cpus):
    """A limit this host cannot hold is refused now, with the C side's one line on why
    and what to do (never dropped: the worker would run without it)."""
    for which, value in (("memory", memory), ("pids", pids), ("cpus", cpus)):
        # The worker's settings are the defaults (kc_settings all zero: NULL here).
        if value and lib.kc_cgroup_enforcement(None, which.encode()) is None:
            err = _lib.KcError()
            lib.kc_cgroup_refusal(None, which.encode(), ctypes.byref(err))
            raise OSError(errno.ENOTSUP, "kcage: %s=%s cannot be held here: %s"
                          % (which, value, err.text()))


class Config:
    """Everything a worker's kc_worker_opts holds, with the C strings kept alive."""

    def __init__(self, policy="python", memory=None, cpus=None, pids=None, mounts=(),
                 preload=(), max_payload=16 << 20, sandbox=True, load_timeout=60.0,
                 cwd=None):
        self.sandbox = sandbox
        self.policy = policy
        # None: the policy's own `limit` line; an explicit 0 means no limit
        spec = policy_limits(policy) if sandbox else {}
        self.memory = parse_size(spec.get("memory") if memory is None else memory)
        self.cpus = _number("cpus", spec.get("cpus") if cpus is None else cpus, float)
        self.pids = _number("pids", spec.get("pids") if pids is None else pids, int)
        if sandbox:
            check_limits(self.memory, self.pids, self.cpus)
        self.max_payload = int(max_payload)
        self.load_timeout = _number("load_timeout", load_timeout, float)
        self.paths = import_path()
        self.modules = ["cloudpickle", "kcage._child"] + [m for m in preload if m]
        user = _mount_list(mounts)
        self.cwd = caller_cwd(cwd) if sandbox else None
        auto = [(_lib.MOUNT_RO_BIND, p, p, 0) for p in interpreter_mounts(self.cwd)] if sandbox else []
        self.mounts = auto + user
        self.libpython = libpython_path()
        self._keep = []

    def add_module(self, name):
        if name and name != "__main__" and name not in self.modules:
            self.modules.append(name)

    def key(self):
        return (self.policy, tuple(self.mounts), tuple(self.paths), tuple(self.modules),
                self.sandbox, self.max_payload, self.cwd)

    def _b(self, s):
        if s is None:
            return None
        b = s.encode() if isinstance(s, str) else bytes(s)
        self._keep.append(b)
        return b

    def opts(self, stdout=None, stderr=None):
        o = _lib.KcWorkerOpts()
        lib.kc_worker_opts_init(ctypes.byref(o))
        o.policy = self._b(self.policy)
        o.limits.memory_bytes = self.memory
        o.limits.cpus = self.cpus
        o.limits.pids = self.pids
        arr = (_lib.KcMount * max(1, len(self.mounts)))()
        for i, (kind, src, dst, size) in enumerate(self.mounts):
            arr[i].kind = kind
            arr[i].src = self._b(src)
            arr[i].dst = self._b(dst)
            arr[i].size = size
        self._keep.append(arr)
        o.mounts = arr
        o.n_mounts = len(self.mounts)
        o.max_arg_bytes = self.max_payload
        o.max_result_bytes = self.max_payload
        o.load_s = self.load_timeout
        o.isolation = 0 if self.sandbox else 1
        o.python_lib = self._b(self.libpython)
        o.python_boot = self._b(boot_source(self.paths, self.modules, self.cwd))
        o.stdout_ = _stdio(stdout)
        o.stderr_ = _stdio(stderr)
        return o


def _stdio(stream):
    s = _lib.KcStdio()
    s.fd = -1
    if stream is None:
        s.mode = _lib.STDIO_INHERIT
    elif stream == -3:  # subprocess.DEVNULL
        s.mode = _lib.STDIO_DISCARD
    elif isinstance(stream, int) and stream >= 0:
        s.mode, s.fd = _lib.STDIO_FD, stream
    elif hasattr(stream, "fileno"):
        s.mode, s.fd = _lib.STDIO_FD, stream.fileno()
    else:
        raise ValueError(
            "stdout/stderr: None, subprocess.DEVNULL, a file descriptor or a file "
            "(subprocess.PIPE is not supported: nothing would read it)"
        )
    return s


class _Keeper:
    """One thread that lives as long as the process and starts every shared zygote:
    PDEATHSIG follows the thread that forks, so a pool thread that ends must not be
    the parent of a zygote that other workers still use."""

    def __init__(self):
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._loop, name="kcage-zygotes", daemon=True)
        self._t.start()

    def _loop(self):
        while True:
            fn, box, done = self._q.get()
            try:
                box.append(fn())
            except BaseException as e:  # pylint: disable=broad-except
                box.append(e)
            done.set()

    def run(self, fn):
        box, done = [], threading.Event()
        self._q.put((fn, box, done))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


_keeper = None
_zygotes = {}
_zlock = threading.Lock()


class Zygote:
    def __init__(self, cfg):
        self.cfg = cfg
        self.opts = cfg.opts()
        self.ptr = ctypes.c_void_p()
        err = _lib.KcError()
        if lib.kc_zygote_new(ctypes.byref(self.opts), ctypes.byref(self.ptr), ctypes.byref(err)) < 0:
            raise ChildProcessError("kcage: the sandbox could not start: " + err.text())

    def alive(self):
        return bool(lib.kc_zygote_is_alive(self.ptr))


def zygote_for(cfg):
    """The shared zygote of this configuration, started once (and again if it died)."""
    global _keeper
    key = cfg.key()
    with _zlock:
        z = _zygotes.get(key)
        if z is not None and z.alive():
            return z
        if _keeper is None:
            _keeper = _Keeper()
        z = _keeper.run(lambda: Zygote(cfg))
        _zygotes[key] = z  # a dead one stays referenced: its workers may still use it
        return z
