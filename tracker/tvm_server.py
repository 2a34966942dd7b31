# TVM's own RPC server loop for one session, run by `kcage agent` inside the session's
# sandbox.  It is TVM's _server_env and _serve_loop (tvm/rpc/server.py) with two
# changes: every path a client names must stay inside the session's work directory, and
# the kcage constructor and session info are registered.  The agent has already applied
# what the client asked for (limits, policy) before the session's process started:
# nothing here enforces a limit.
#
# Run two ways: as `python -c` in a sandbox of its own, with the session's socket as
# fd 0 (main); or as the boot code of the agent's TVM zygote (KCAGE_TVM_ZYGOTE set
# before it runs), which imports TVM once: each session is then a worker forked from
# it into a sandbox of its own, handed its socket by the agent (zygote_boot).
import json
import os
import sys

_session = {"work": "/session", "text": "{}"}


def _inside(name):
    work = _session["work"]
    path = os.path.realpath(os.path.join(work, name))
    if path != work and not path.startswith(work + os.sep):
        raise ValueError("kcage: %r is outside the session's work directory: refused" % (name,))
    return path


def setup():
    """TVM imported and the server's globals registered; TVM's ServerLoop returned."""
    import tvm  # noqa: F401  (registers TVM's globals: rpc.LocalSession, the runtime)
    import tvm_ffi
    from tvm.rpc import _ffi_api
    from tvm.runtime.module import load_module as _load_module

    @tvm_ffi.register_global_func("tvm.rpc.server.workpath", override=True)
    def workpath(name):
        return _inside(name)

    @tvm_ffi.register_global_func("tvm.rpc.server.load_module", override=True)
    def load_module(name):
        return _load_module(_inside(name))

    @tvm_ffi.register_global_func("tvm.rpc.server.download_linked_module", override=True)
    def download_linked_module(name):
        from tvm.support import cc, tar, utils  # pylint: disable=import-outside-toplevel

        path = _inside(name)
        if path.endswith(".o"):
            cc.create_shared(path + ".so", path)
        elif path.endswith(".tar"):
            tmp = utils.tempdir(custom_path=path[: -len(".tar")])
            tar.untar(path, tmp.temp_dir)
            cc.create_shared(path + ".so", [tmp.relpath(x) for x in tmp.listdir()])
        elif not path.endswith(".so"):
            raise RuntimeError("Do not know how to link %s" % name)
        else:
            return bytearray(open(path, "rb").read())
        return bytearray(open(path + ".so", "rb").read())

    @tvm_ffi.register_global_func("tvm.rpc.server.listdir", override=True)
    def listdir(name):
        return ",".join(os.listdir(_inside(name)))

    # The kcage constructor: its arguments were read and applied (clamped to the
    # operator's caps) by the agent before this session's process started; it serves as
    # TVM's default session does.
    @tvm_ffi.register_global_func("kcage.sandbox", override=True)
    def sandbox(*_args):
        return tvm_ffi.get_global_func("rpc.LocalSession")()

    # What this session runs under: the limits, what the client asked for and what the
    # operator's caps lowered, as one JSON object.
    @tvm_ffi.register_global_func("kcage.sandbox.info", override=True)
    def sandbox_info():
        return _session["text"]

    return _ffi_api.ServerLoop


def serve(loop, fd, info):
    _session["work"] = os.path.realpath(info.get("work", os.getcwd()))
    _session["text"] = json.dumps(info.get("session", {}), sort_keys=True)
    os.chdir(_session["work"])
    sys.stdout.flush()
    loop(fd)


def main():
    info = json.loads(os.environ.get("KCAGE_TVM_SESSION", "{}"))
    os.chdir(os.path.realpath(info.get("work", os.getcwd())))
    loop = setup()
    if info.get("standby"):
        # Started ahead of its session: fd 0 is the agent's end of a socketpair, which
        # brings the session's description and its socket.
        import socket  # pylint: disable=import-outside-toplevel

        ctl = socket.socket(fileno=0)
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 1)
        ctl.detach()
        if len(fds) != 1:
            sys.exit(3)
        info["session"] = json.loads(msg.decode())["session"]
        os.dup2(fds[0], 0)
        os.close(fds[0])
    serve(loop, 0, info)


def zygote_boot():
    """The worker's "python" handler calls kcage._child's load and run: here they are
    this module's, and a session is one call.  run() takes the session's description
    and socket from the worker's socket to the agent (fd 5) and serves until the client
    leaves."""
    import socket  # pylint: disable=import-outside-toplevel
    import types  # pylint: disable=import-outside-toplevel

    import tvm_ffi  # pylint: disable=import-outside-toplevel

    loop = setup()

    def run(job):
        if job == b"warm":
            # A worker started ahead of its session: the fork's first steps (the
            # interpreter's after-fork, the pages this path touches) are done now, not
            # while a client waits.
            json.loads(json.dumps({"session": {}}))
            tvm_ffi.get_global_func("rpc.LocalSession")
            return b""
        ctl = socket.socket(fileno=5)
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 1)
        ctl.close()
        if len(fds) != 1:
            raise RuntimeError("kcage: the session's socket did not arrive")
        info = json.loads(msg.decode())
        # the zygote's one-thread settings for the BLAS pools it loaded: TVM's own pool
        # would read OMP_NUM_THREADS too, and run parallel loops on one thread
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.pop(name, None)
        threads = info.get("threads")
        if threads:
            # TVM's thread pool: one thread per CPU the session has, not per host core
            os.environ["TVM_NUM_THREADS"] = str(int(threads))
        serve(loop, fds[0], info)
        return b""

    child = types.ModuleType("kcage._child")
    child.load = lambda arg: arg
    child.run = run
    child.set_host_pid = lambda _pid: None
    pkg = types.ModuleType("kcage")
    pkg.__path__ = []
    pkg._child = child
    sys.modules["kcage"] = pkg
    sys.modules["kcage._child"] = child


if globals().get("KCAGE_TVM_ZYGOTE"):
    zygote_boot()
else:
    main()
