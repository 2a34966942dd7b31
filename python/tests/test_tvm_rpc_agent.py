"""TVM's own RPC clients against `kcage agent`: one client script (upload a built
module, load_module, device arrays and copies, time_evaluator, remove) run against
TVM's `python -m tvm.exec.rpc_server` and against `kcage agent`, both registered on
`kcage tracker`, with the same results; then hostile uploads, each contained in its
session's sandbox and reported to the client as an RPC error naming the verdict, with
the agent serving the next tenant afterwards.  Skipped with the reason without TVM or
the kcage program."""

import gc
import json
import os
import socket
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

N = 1024


def _kcage():
    lib = os.environ.get("KCAGE_LIB")
    exe = os.environ.get("KCAGE_BIN") or (
        os.path.join(os.path.dirname(lib), "kcage") if lib else None
    )
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("no kcage program (set KCAGE_BIN, or KCAGE_LIB next to it)")
    return exe


def _searchable_by_others(path):
    p = os.path.realpath(path)
    while p != "/":
        if not os.stat(p).st_mode & stat.S_IXOTH:
            return False
        p = os.path.dirname(p)
    return True


def _shared_libpython():
    from kcage._sandbox import libpython_path  # pylint: disable=import-outside-toplevel

    try:
        return libpython_path()
    except RuntimeError:
        return None


class Daemon:
    """A server process that prints `<what> listening on HOST:PORT` when ready."""

    def __init__(self, argv, what, log):
        self.log = open(log, "w+b")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            argv, stdout=subprocess.PIPE, stderr=self.log
        )
        line = self.proc.stdout.readline().decode()
        if "%s listening on" % what not in line:
            self.stop()
            raise RuntimeError("%s did not start: %r %s" % (what, line, self.text()))
        self.port = int(line.rsplit(":", 1)[1])

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """kcage's tracker, a kcage agent under key "ka" and TVM's rpc_server under "tvm"."""
    pytest.importorskip("tvm")
    exe = _kcage()
    if not _searchable_by_others(sys.prefix) and not _shared_libpython():
        # The agent's TVM zygote opens the interpreter's directories with the agent's own
        # ids; without a shared libpython there is no zygote, and a sandbox of its own
        # per session runs python as host ids that cannot pass the directory.
        pytest.skip(
            "%s cannot be entered by other users and this Python has no shared libpython: "
            "the agent's sandboxes (host ids of their own) could not run it" % sys.prefix
        )
    logs = tmp_path_factory.mktemp("logs")
    tracker = Daemon([exe, "tracker", "--host", "127.0.0.1", "--port", "0"], "tracker",
                     logs / "tracker.log")
    trk = "127.0.0.1:%d" % tracker.port
    agent = Daemon(
        [exe, "agent", "--tracker", trk, "--key", "ka", "--host", "127.0.0.1", "--port", "0",
         "--tvm-python", sys.executable, "--max-memory", "1G", "--max-pids", "128",
         "--max-session", "120", "--reput", "1", "--tvm-policy", "tvm", "--tvm-policy",
         "python"],
        "agent", logs / "agent.log")
    tvm_server = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", trk, "--key", "tvm",
         "--host", "127.0.0.1", "--port", "9590", "--port-end", "9690"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield {"tracker": tracker, "agent": agent, "port": tracker.port}
    tvm_server.terminate()
    tvm_server.wait()
    agent.stop()
    tracker.stop()


def _request(port, key, **kw):
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    deadline = time.time() + 60
    while True:  # TVM's rpc_server takes seconds to register
        try:
            return rpc.connect_tracker("127.0.0.1", port).request(key, max_retry=1, **kw)
        except RuntimeError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def _modules(workdir):
    """y = 2x + 1 over N floats, exported as a .so and as MetaSchedule's default .tar."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import te  # pylint: disable=import-outside-toplevel
    from tvm.support import tar  # pylint: disable=import-outside-toplevel

    a = te.placeholder((N,), "float32", name="A")
    b = te.compute((N,), lambda i: a[i] * 2.0 + 1.0, name="B")
    lib = tvm.compile(te.create_prim_func([a, b]).with_attr("global_symbol", "main"),
                      target="llvm")
    so, tarf = os.path.join(workdir, "addone.so"), os.path.join(workdir, "addone.tar")
    lib.export_library(so)
    lib.export_library(tarf, fcompile=tar.tar)
    return so, tarf


def client_script(port, key, so, tarf):
    """What a TVM user runs against a device server: every answer it got."""
    import tvm  # pylint: disable=import-outside-toplevel

    remote = _request(port, key, session_timeout=60)
    out = {}
    dev = remote.cpu(0)
    x = np.arange(N, dtype="float32")
    for path in (so, tarf):
        name = os.path.basename(path)
        remote.upload(path)
        mod = remote.load_module(name)
        a = tvm.runtime.tensor(x, dev)
        b = tvm.runtime.empty((N,), "float32", dev)
        mod["main"](a, b)
        c = tvm.runtime.empty((N,), "float32", dev)
        b.copyto(c)
        # MetaSchedule's RPCRunner fills its arguments on the device with this global
        fill = remote.get_function("tvm.contrib.random.random_fill_for_measure")
        r = tvm.runtime.empty((N,), "float32", dev)
        fill(r)
        timer = mod.time_evaluator("main", dev, number=3, repeat=2)
        res = timer(a, b)
        out[name] = {"result": c.numpy().tolist(), "repeats": len(res.results),
                     "filled": bool(np.any(r.numpy() != 0)),
                     "positive": all(t > 0 for t in res.results)}
        remote.remove(name)
        try:
            remote.download(name)
            out[name]["removed"] = False
        except Exception:  # pylint: disable=broad-except
            out[name]["removed"] = True
    return out


def test_same_results_as_tvm_rpc_server(servers, tmp_path):
    so, tarf = _modules(str(tmp_path))
    theirs = client_script(servers["port"], "tvm", so, tarf)
    ours = client_script(servers["port"], "ka", so, tarf)
    assert ours == theirs
    expect = (np.arange(N, dtype="float32") * 2 + 1).tolist()
    assert ours["addone.so"]["result"] == expect
    assert ours["addone.tar"]["repeats"] == 2 and ours["addone.tar"]["positive"]
    assert ours["addone.tar"]["filled"] and ours["addone.so"]["removed"]


def test_parallel_loops_get_the_threads_tvm_gives_them(servers):
    """TVM's thread pool in a session: as many threads as under TVM's server (the
    agent sets no --max-cpus here; TVM takes half the host's CPUs on x86), and as many
    as the CPUs a tenant asks for."""
    theirs = _request(servers["port"], "tvm", session_timeout=30)
    ours = _request(servers["port"], "ka", session_timeout=30)
    assert (ours.get_function("runtime.NumThreads")() ==
            theirs.get_function("runtime.NumThreads")())
    del theirs, ours
    gc.collect()
    two = _request(servers["port"], "ka", session_timeout=30,
                   session_constructor_args=["kcage.sandbox", "cpus=2"])
    assert two.get_function("runtime.NumThreads")() == 2
    del two
    gc.collect()


def test_another_policy_gets_a_sandbox_of_its_own(servers, tmp_path):
    """A tenant naming a policy other than the zygote's gets a sandbox that starts the
    interpreter itself, under that policy, and the same session otherwise."""
    so, _ = _modules(str(tmp_path))
    remote = _request(servers["port"], "ka", session_timeout=60,
                      session_constructor_args=["kcage.sandbox", "policy=python"])
    assert json.loads(remote.get_function("kcage.sandbox.info")())["policy"] == "python"
    remote.upload(so)
    import tvm  # pylint: disable=import-outside-toplevel

    mod = remote.load_module("addone.so")
    a = tvm.runtime.tensor(np.arange(N, dtype="float32"), remote.cpu(0))
    b = tvm.runtime.empty((N,), "float32", remote.cpu(0))
    mod["main"](a, b)
    assert b.numpy().tolist() == (np.arange(N, dtype="float32") * 2 + 1).tolist()
    del remote, mod, a, b
    gc.collect()


def test_next_tenant_finds_nothing(servers, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("tenant one")
    first = _request(servers["port"], "ka", session_timeout=30)
    first.upload(str(secret))
    assert "secret.txt" in first.listdir(".")
    del first
    second = _request(servers["port"], "ka", session_timeout=30)
    assert second.listdir(".") == ""
    with pytest.raises(Exception):
        second.download("secret.txt")


def test_kcage_sandbox_constructor_is_clamped(servers):
    remote = _request(servers["port"], "ka", session_timeout=30,
                      session_constructor_args=["kcage.sandbox", "memory=4G", "pids=64",
                                                "timeout=20"])
    info = json.loads(remote.get_function("kcage.sandbox.info")())
    assert info["constructor"] == "kcage.sandbox"
    assert info["limits"]["memory_bytes"] == 1 << 30
    assert info["clamped"]["memory_bytes"] == {"asked": float(4 << 30), "cap": float(1 << 30)}
    assert info["limits"]["pids"] == 64 and "pids" not in info["clamped"]
    assert info["limits"]["session_s"] == 20


def test_any_tvm_constructor(servers):
    remote = _request(servers["port"], "ka", session_timeout=30,
                      session_constructor_args=["rpc.LocalSession"])
    info = json.loads(remote.get_function("kcage.sandbox.info")())
    assert info["constructor"] == "rpc.LocalSession"


def test_bad_kcage_sandbox_request_is_refused(servers):
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    with pytest.raises(RuntimeError, match="kcage.sandbox: cannot use"):
        rpc.connect_tracker("127.0.0.1", servers["port"]).request(
            "ka", max_retry=1, session_constructor_args=["kcage.sandbox", "network=on"])


# ---- hostile uploads: a module whose constructor runs at load_module -----------------

HOSTILE = {
    # writes outside the work directory: the host's path is not even there
    "write_outside": r"""
        int fd = open(MARKER, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) _exit(17);
        write(fd, "escaped", 7);
    """,
    "read_shadow": r"""
        char buf[4096];
        int fd = open("/etc/shadow", O_RDONLY);
        if (fd < 0) _exit(13);
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) write(2, buf, (size_t)n);
    """,
    "fork_bomb": r"""
        for (;;) fork();
    """,
    "allocate": r"""
        for (size_t i = 0; i < 64; i++) {
            char *p = malloc(64u << 20);
            if (!p) _exit(12);
            memset(p, 1, 64u << 20);
        }
    """,
    "never_returns": r"""
        for (volatile unsigned long i = 0;; i++) {}
    """,
    "connect_out": r"""
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) _exit(97);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) _exit(111);
    """,
}

# (session_constructor_args, session_timeout, the verdict the client must see)
EXPECT = {
    "write_outside": ([], 60, "kcage verdict: exited"),
    "read_shadow": ([], 60, "kcage verdict: exited"),
    "fork_bomb": (["kcage.sandbox", "pids=32", "timeout=8"], 60, "kcage verdict: pids"),
    "allocate": (["kcage.sandbox", "memory=768M"], 60, "kcage verdict: memory"),
    "never_returns": ([], 6, "RPCSessionTimeoutError"),
    "connect_out": ([], 60, "kcage verdict: exited"),
}


def _hostile_so(tmp_path, name, marker, port):
    src = tmp_path / (name + ".c")
    src.write_text(
        "#include <arpa/inet.h>\n#include <fcntl.h>\n#include <netinet/in.h>\n"
        "#include <stdlib.h>\n#include <string.h>\n#include <sys/socket.h>\n"
        "#include <unistd.h>\n#define MARKER %s\n#define PORT %d\n"
        "__attribute__((constructor)) static void attack(void) {%s}\n"
        % (json.dumps(marker), port, HOSTILE[name]))
    so = tmp_path / (name + ".so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return str(so)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_upload_is_contained(servers, tmp_path, name):
    if name == "read_shadow" and not os.path.exists("/etc/shadow"):
        pytest.skip("no /etc/shadow on this host")
    marker = str(tmp_path / "escaped")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    so = _hostile_so(tmp_path, name, marker, listener.getsockname()[1])
    ctor, timeout, verdict = EXPECT[name]
    remote = _request(servers["port"], "ka", session_timeout=timeout,
                      session_constructor_args=ctor)
    remote.upload(so)
    t0 = time.time()
    with pytest.raises(Exception) as info:
        remote.load_module(os.path.basename(so))
    assert verdict in str(info.value), str(info.value)
    assert time.time() - t0 < 60
    assert not os.path.exists(marker)
    assert "root:" not in str(info.value)
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
    # the agent serves the next tenant
    after = _request(servers["port"], "ka", session_timeout=30)
    assert after.listdir(".") == ""
    # The sessions end with their client objects, which the exception's traceback holds
    # in a cycle: the next test's request would wait for this one's timeout.
    del remote, after, info
    gc.collect()


def test_upload_outside_the_work_dir_is_refused(servers, tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("x")
    remote = _request(servers["port"], "ka", session_timeout=30)
    for target in ("../x.txt", "/tmp/x.txt", "a/../../x.txt"):
        with pytest.raises(Exception, match="outside the session's work directory"):
            remote.upload(str(f), target=target)
        with pytest.raises(Exception, match="outside the session's work directory"):
            remote.remove(target)
    remote.upload(str(f), target="inside.txt")
    assert remote.listdir(".") == "inside.txt"
    del remote
    gc.collect()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__] + sys.argv[1:]))


def _children(pid):
    """The agent's child processes (sessions, the standby) from /proc."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _status(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return line.split()[1:]
    except OSError:
        pass
    return []


def _zygote(agent):
    """The agent's TVM zygote: the oldest kcage-worker below it in the host's pid
    namespace (a session's worker is pid 1 of a namespace of its own)."""
    found = []
    for hub in _children(agent):
        for c in _children(hub):
            if _status(c, "Name") == ["kcage-worker"] and len(_status(c, "NSpid")) == 1:
                with open("/proc/%d/stat" % c) as f:
                    found.append((int(f.read().rsplit(")", 1)[1].split()[19]), c))
    return min(found)[1] if found else None


def test_tvm_is_imported_once_per_agent(servers):
    """Sessions are forks of one zygote that imported TVM, each in a pid namespace of
    its own: the zygote outlives them, and a session sees no process but its own."""
    agent = servers["agent"].proc.pid
    remote = _request(servers["port"], "ka", session_timeout=60)
    zygote = _zygote(agent)
    assert zygote, "no TVM zygote below the agent"
    del remote
    gc.collect()
    for _ in range(3):
        remote = _request(servers["port"], "ka", session_timeout=60)
        assert json.loads(remote.get_function("kcage.sandbox.info")())["limits"]
        del remote
        gc.collect()
    assert _zygote(agent) == zygote


LEAVES = r"""
    int fd = open("/tmp/left-by-one", O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
    fd = open("left-by-one", O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
    shmget(0x6b6361, 4096, IPC_CREAT | 0666);
    if (fork() == 0) {
        setsid();
        prctl(PR_SET_NAME, "kcleftover");
        for (;;) pause();
    }
"""

LOOKS = r"""
    struct dirent *e;
    DIR *d = opendir("/tmp");
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') _exit(21);
    if (shmget(0x6b6361, 0, 0) >= 0) _exit(22);
    d = opendir(".");
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && strcmp(e->d_name, "looks.so")) _exit(23);
"""


def _ctor_so(tmp_path, name, body):
    src = tmp_path / (name + ".c")
    src.write_text(
        "#include <dirent.h>\n#include <fcntl.h>\n#include <string.h>\n"
        "#include <sys/prctl.h>\n#include <sys/shm.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void run(void) {%s}\n" % body)
    so = tmp_path / (name + ".so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return str(so)


def _leftovers():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and _status(int(p), "Name") == ["kcleftover"]:
            out.append(int(p))
    return out


def test_next_tenant_finds_nothing_of_the_last_process(servers, tmp_path):
    """What one session leaves (a detached process, files in /tmp and in its work
    directory, a SysV segment) is gone for the next: sessions forked from one zygote
    each get their own."""
    leaves, looks = _ctor_so(tmp_path, "leaves", LEAVES), _ctor_so(tmp_path, "looks", LOOKS)
    first = _request(servers["port"], "ka", session_timeout=60)
    first.upload(leaves)
    first.load_module("leaves.so")
    deadline = time.time() + 20
    while not _leftovers():  # the detached child names itself after the load returned
        assert time.time() < deadline, "the first session's process did not start"
        time.sleep(0.05)
    del first
    gc.collect()
    deadline = time.time() + 20
    while _leftovers():
        assert time.time() < deadline, "a session's process outlived it"
        time.sleep(0.1)
    second = _request(servers["port"], "ka", session_timeout=60)
    second.upload(looks)
    second.load_module("looks.so")  # exits 21-23 (an RPC error) on what it finds
    del second
    gc.collect()


SYSINFO = r"""
    struct sysinfo s;
    if (sysinfo(&s) != 0) _exit(30);
    if (s.loads[0] || s.loads[1] || s.loads[2]) _exit(31);
    if (s.procs != 1) _exit(32);
"""


@pytest.fixture(scope="module")
def fresh(servers, tmp_path_factory):
    """A second agent, under key "kf", with --no-tvm-zygote: every TVM session's
    interpreter starts in a sandbox of its own, made ahead (the standby)."""
    logs = tmp_path_factory.mktemp("fresh-logs")
    agent = Daemon(
        [_kcage(), "agent", "--tracker", "127.0.0.1:%d" % servers["port"], "--key", "kf",
         "--host", "127.0.0.1", "--port", "0", "--tvm-python", sys.executable,
         "--max-memory", "1G", "--max-pids", "128", "--max-session", "120", "--reput", "1",
         "--no-tvm-zygote"],
        "agent", logs / "agent.log")
    yield agent
    agent.stop()


def test_no_zygote_sessions_start_their_own_interpreter(servers, fresh, tmp_path):
    """--no-tvm-zygote: TVM's client gets the same answers, two sessions in a row, from
    interpreters started in sandboxes of their own (no zygote below the agent)."""
    so, tarf = _modules(str(tmp_path))
    expect = (np.arange(N, dtype="float32") * 2 + 1).tolist()
    for _ in range(2):
        ours = client_script(servers["port"], "kf", so, tarf)
        assert ours["addone.so"]["result"] == expect and ours["addone.so"]["removed"]
        assert ours["addone.tar"]["repeats"] == 2 and ours["addone.tar"]["positive"]
        gc.collect()
    assert _zygote(fresh.proc.pid) is None, "a TVM zygote below a --no-tvm-zygote agent"


@pytest.mark.parametrize("key", ["ka", "kf"])
def test_sessions_read_the_sandboxes_sysinfo(request, servers, tmp_path, key):
    """A module loaded in a session, forked from the zygote (ka) or started in a
    sandbox of its own (kf), reads the sandbox's sysinfo (no load, one process), not
    the host's."""
    if key == "kf":
        request.getfixturevalue("fresh")
    probe = tmp_path / "sysinfo.c"
    probe.write_text("#include <sys/sysinfo.h>\n#include <unistd.h>\n"
                     "__attribute__((constructor)) static void run(void) {%s}\n" % SYSINFO)
    probe_so = str(tmp_path / "sysinfo.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", probe_so, str(probe)], check=True)
    remote = _request(servers["port"], key, session_timeout=60)
    remote.upload(probe_so)
    remote.load_module("sysinfo.so")  # exits 30-32 (an RPC error) on the host's figures
    del remote
    gc.collect()


def test_back_to_back_sessions_answer_their_first_call(servers):
    """Three sessions, each requested the moment the last one closed: each gets its first
    call answered (generous deadlines only; docs/measurements.md has the latencies)."""
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    _request(servers["port"], "ka", session_timeout=30)  # registered and served once
    gc.collect()
    for i in range(3):
        t0 = time.time()
        remote = rpc.connect_tracker("127.0.0.1", servers["port"]).request(
            "ka", session_timeout=30, max_retry=30)
        info = json.loads(remote.get_function("kcage.sandbox.info")())
        took = time.time() - t0
        assert info["limits"]["session_s"] == 30, (i, info)
        assert took < 60, (i, took)
        del remote
        gc.collect()
