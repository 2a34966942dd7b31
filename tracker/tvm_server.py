# TVM's own RPC server loop for one session, run by `kcage agent` inside the session's
# sandbox with the session's socket as fd 0.  It is TVM's _server_env and _serve_loop
# (tvm/rpc/server.py) with two changes: every path a client names must stay inside the
# session's work directory, and the kcage constructor and session info are registered.
# The agent has already applied what the client asked for (limits, policy) before this
# process started: nothing here enforces a limit.
import json
import os
import sys


def main():
    info = json.loads(os.environ.get("KCAGE_TVM_SESSION", "{}"))
    work = os.path.realpath(info.get("work", os.getcwd()))
    os.chdir(work)

    import tvm  # noqa: F401  (registers TVM's globals: rpc.LocalSession, the runtime)
    import tvm_ffi
    from tvm.rpc import _ffi_api
    from tvm.runtime.module import load_module as _load_module

    def inside(name):
        path = os.path.realpath(os.path.join(work, name))
        if path != work and not path.startswith(work + os.sep):
            raise ValueError(
                "kcage: %r is outside the session's work directory: refused" % (name,)
            )
        return path

    @tvm_ffi.register_global_func("tvm.rpc.server.workpath", override=True)
    def workpath(name):
        return inside(name)

    @tvm_ffi.register_global_func("tvm.rpc.server.load_module", override=True)
    def load_module(name):
        return _load_module(inside(name))

    @tvm_ffi.register_global_func("tvm.rpc.server.download_linked_module", override=True)
    def download_linked_module(name):
        from tvm.support import cc, tar, utils  # pylint: disable=import-outside-toplevel

        path = inside(name)
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
        return ",".join(os.listdir(inside(name)))

    # The kcage constructor: its arguments were read and applied (clamped to the
    # operator's caps) by the agent before this sandbox started; it serves as TVM's
    # default session does.
    @tvm_ffi.register_global_func("kcage.sandbox", override=True)
    def sandbox(*_args):
        return tvm_ffi.get_global_func("rpc.LocalSession")()

    # What this session runs under: the limits, what the client asked for and what the
    # operator's caps lowered, as one JSON object.
    session = {"text": json.dumps(info.get("session", {}), sort_keys=True)}

    @tvm_ffi.register_global_func("kcage.sandbox.info", override=True)
    def sandbox_info():
        return session["text"]

    if info.get("standby"):
        # Started ahead of its session: fd 0 is the agent's end of a socketpair, which
        # brings the session's description and its socket.
        import socket  # pylint: disable=import-outside-toplevel

        ctl = socket.socket(fileno=0)
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 1)
        ctl.detach()
        if len(fds) != 1:
            sys.exit(3)
        session["text"] = json.dumps(json.loads(msg.decode())["session"], sort_keys=True)
        os.dup2(fds[0], 0)
        os.close(fds[0])

    sys.stdout.flush()
    _ffi_api.ServerLoop(0)


main()
