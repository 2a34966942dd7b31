"""kcage.tvm.install(): TVM's popen_pool classes replaced by kcage's wherever TVM uses
them (MetaSchedule's LocalBuilder, LocalRunner and RPCRunner, RPC's server, tracker and
proxy helpers), so every build and every run happens in a kcage sandbox.

The sandboxes have no network, except those whose work is networking: RPCRunner's pool
(TVM's RPC client connects to a tracker and to the devices it hands out) and the pools
of tvm.rpc.Server, Tracker and Proxy (they listen) run under the python-net policy, the
python one plus the host's network for TCP/UDP only (policies/python-net.policy says
why not a socket handed over by the parent: TVM's own code picks the addresses).

    import kcage.tvm
    kcage.tvm.install(memory="2G")     # then tune as usual

TVM's builder writes each artifact to tempfile.mkdtemp() and its runner (another
worker) and the tuner (this process) read it there, so install() makes one scratch
directory, binds it writable at the same path into every sandbox and points TMPDIR and
tempfile at it.  Only that directory is shared; the rest of the sandbox is read-only.
"""

import importlib
import os
import shutil
import sys
import tempfile

from . import _child
from . import popen_pool as _kc

# The pools whose work is networking (TVM's RPC client in RPCRunner; the RPC server,
# tracker and proxy, which listen): these, and only these, get the python-net policy.
_NET_MODULES = {
    "tvm.s_tir.meta_schedule.runner.rpc_runner",
    "tvm.meta_schedule.runner.rpc_runner",
    "tvm.rpc.server",
    "tvm.rpc.tracker",
    "tvm.rpc.proxy",
}

_MODULES = [
    "tvm.support.popen_pool",
    "tvm.contrib.popen_pool",
    "tvm.s_tir.meta_schedule.builder.local_builder",
    "tvm.s_tir.meta_schedule.runner.local_runner",
    "tvm.s_tir.meta_schedule.runner.rpc_runner",
    "tvm.meta_schedule.builder.local_builder",
    "tvm.meta_schedule.runner.local_runner",
    "tvm.meta_schedule.runner.rpc_runner",
    "tvm.rpc.server",
    "tvm.rpc.tracker",
    "tvm.rpc.proxy",
]

# calls sent through the installed classes, by the module of the function (the
# builder's and the runner's: tests assert every build and run went through kcage)
calls = {}
_saved = []
_state = {}


def _category(fn):
    mod = getattr(fn, "__module__", "") or ""
    if ".builder." in mod:
        return "build"
    if ".runner." in mod:
        return "run"
    return "other"


def _check_artifact(path, scratch):
    """A builder's answer is a path the tuner later reads, hands to the runner and
    removes (shutil.rmtree of its directory): from a hostile worker it must lie inside
    the shared scratch directory, with no symbolic link on the way."""
    real = os.path.realpath(path)
    if real != os.path.abspath(path) or not real.startswith(scratch.rstrip("/") + "/"):
        raise ChildProcessError(
            "Subprocess terminated: the builder answered with a path outside %s: %r"
            % (scratch, path))


def _classes(opts, scratch):
    """kcage's PopenWorker and PopenPoolExecutor with these sandbox options, counting
    the calls and checking a builder's answer."""

    # One candidate per process: TVM keeps a builder's or runner's worker for many
    # candidates, so one candidate's code could leave something behind (a patched
    # module, a thread, a cached result) for the next one to meet.  A fork of the
    # zygote per call costs about a millisecond.
    class PopenWorker(_kc.PopenWorker):
        def __init__(self, initializer=None, initargs=(), maximum_uses=None, *args, **kwargs):
            for k, v in opts.items():
                kwargs.setdefault(k, v)
            super().__init__(initializer, initargs, 1, *args, **kwargs)

        def send(self, fn, args=(), kwargs=None, timeout=None):
            cat = _category(fn)
            calls[cat] = calls.get(cat, 0) + 1
            super().send(fn, args, kwargs, timeout)

    class PopenPoolExecutor(_kc.PopenPoolExecutor):
        def __init__(self, max_workers=None, timeout=None, initializer=None, initargs=(),
                     maximum_process_uses=None, *args, **kwargs):
            for k, v in opts.items():
                kwargs.setdefault(k, v)
            kwargs.pop("maximum_process_uses", None)
            super().__init__(max_workers, timeout, initializer, initargs, 1, *args, **kwargs)

        def _worker_run(self, fn, args, kwargs):
            cat = _category(fn)
            calls[cat] = calls.get(cat, 0) + 1
            result = super()._worker_run(fn, args, kwargs)
            if cat == "build" and isinstance(result, str):
                _check_artifact(result, scratch)
                # under root each configuration of sandbox runs as host ids of its
                # own, and RPCRunner's pool (python-net) is another than the builder's
                super()._worker_run(_child.share_dir, (result,), {})
            return result

    return {"PopenWorker": PopenWorker, "PopenPoolExecutor": PopenPoolExecutor}


def install(net_policy="python-net", **sandbox):
    """Swap TVM's PopenWorker/PopenPoolExecutor for kcage's.  Keyword arguments are
    kcage's sandbox options (policy, memory, cpus, pids, mounts, preload); the pools of
    TVM's RPC client and servers (RPCRunner, tvm.rpc.Server, Tracker, Proxy) run under
    net_policy instead, which adds the host's network and nothing else (see
    policies/python-net.policy).  Returns the scratch directory shared by the tuner and
    its sandboxes."""
    if _state:
        return _state["scratch"]
    scratch = tempfile.mkdtemp(prefix="kcage-tvm-")
    # under root every sandbox runs as host ids of its own (a reserved range), not ours
    os.chmod(scratch, 0o1777)
    os.environ["TMPDIR"] = scratch  # inherited by the zygote, read by the workers
    tempfile.tempdir = scratch
    opts = dict(sandbox)
    opts["mounts"] = [(scratch, scratch, "rw")] + list(opts.get("mounts", ()))
    opts["preload"] = ["tvm", "tvm.s_tir.meta_schedule"] + list(opts.get("preload", ()))
    plain = _classes(opts, scratch)
    net = _classes(dict(opts, policy=net_policy), scratch)

    originals = {}
    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if name.endswith(".popen_pool"):
            for attr in ("PopenWorker", "PopenPoolExecutor"):
                if hasattr(mod, attr):
                    originals[id(getattr(mod, attr))] = attr
    # every tvm module that holds TVM's classes under any name (imported with `from
    # ... import`); modules imported later find the plain ones in popen_pool itself
    # (the networking modules are all imported above)
    for name, mod in list(sys.modules.items()):
        if not name.startswith("tvm") or mod is None:
            continue
        new = net if name in _NET_MODULES else plain
        for attr, value in list(vars(mod).items()):
            if id(value) in originals:
                _saved.append((mod, attr, value))
                setattr(mod, attr, new[originals[id(value)]])
    _state["scratch"] = scratch
    return scratch


def uninstall():
    """Put TVM's own classes back."""
    while _saved:
        mod, attr, old = _saved.pop()
        setattr(mod, attr, old)
    if _state:
        tempfile.tempdir = None
        # rmtree opens each level without following symbolic links: what the sandboxes
        # left there cannot point it elsewhere
        shutil.rmtree(_state["scratch"], ignore_errors=True)
        _state.clear()
        os.environ.pop("TMPDIR", None)


def installed():
    return bool(_state)


__all__ = ["install", "uninstall", "installed", "calls"]
