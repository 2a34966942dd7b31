"""`make bench`: kcage agent against TVM's own `python -m tvm.exec.rpc_server`, both
registered on `kcage tracker` on this machine, driven by TVM's own client (the pinned
apache-tvm wheel), interleaved in one process so that both see the same load:

- request-to-first-call: `connect_tracker().request(key)` until the session's first
  call (`tvm.rpc.server.workpath`) has answered; spaced requests (3 s apart, the
  server idle) and back-to-back ones (each the moment the last session closed, as
  MetaSchedule's RPCRunner runs its trials);
- RPCRunner trials per minute: one built matmul run as TRIALS MetaSchedule runner
  inputs through RPCRunner (one session per trial, TVM's default evaluator);
- both again for an agent started with --no-tvm-zygote (key "kf"), whose sessions each
  start their interpreter in a sandbox made ahead instead of forking it from a zygote;
- memory: PSS and RSS summed over each server's process tree (its sessions and, for
  the agent, its TVM zygote and the next session's process forked from it) with 0 sessions, and with 8 sessions open at once
  on 8 servers of each (an agent, like TVM's server, serves one session at a time).

Prints a ratio table (kcage / TVM) and adds the figures to $KC_BENCH_DIR/results.json."""

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPS = int(os.environ.get("KC_BENCH_TVM_REPS", "5"))
TRIALS = int(os.environ.get("KC_BENCH_TVM_TRIALS", "12"))
HERE = os.path.dirname(os.path.abspath(__file__))


def _kcage():
    lib = os.environ.get("KCAGE_LIB", "")
    exe = os.environ.get("KCAGE_BIN") or os.path.join(os.path.dirname(lib), "kcage")
    if not os.access(exe, os.X_OK):
        sys.exit("bench_tvm_rpc: no kcage program (KCAGE_BIN or KCAGE_LIB)")
    return exe


class Stack:
    """kcage's tracker, n kcage agents (key "ka") and n TVM rpc_servers (key "tvm"),
    and with fresh one more agent with --no-tvm-zygote (key "kf")."""

    def __init__(self, n, log, fresh=False):
        exe = _kcage()
        self.procs = []
        self.tracker = self._daemon([exe, "tracker", "--host", "127.0.0.1", "--port", "0"], log)
        self.port = self._port(self.tracker, "tracker")
        trk = "127.0.0.1:%d" % self.port
        self.agents = [self._daemon([exe, "agent", "--tracker", trk, "--key", "ka", "--host",
                                     "127.0.0.1", "--port", "0", "--tvm-python", sys.executable,
                                     "--max-memory", "1G", "--max-session", "300"], log)
                       for _ in range(n)]
        if fresh:
            self.agents.append(self._daemon([exe, "agent", "--tracker", trk, "--key", "kf",
                                             "--host", "127.0.0.1", "--port", "0",
                                             "--tvm-python", sys.executable, "--max-memory",
                                             "1G", "--max-session", "300", "--no-tvm-zygote"],
                                            log))
        self.keys = ("ka", "tvm", "kf") if fresh else ("ka", "tvm")
        for a in self.agents:
            self._port(a, "agent")
        self.servers = [self._daemon([sys.executable, "-m", "tvm.exec.rpc_server", "--tracker",
                                      trk, "--key", "tvm", "--host", "127.0.0.1", "--port",
                                      str(9590 + 40 * i), "--port-end", str(9629 + 40 * i)],
                                     log, out=subprocess.DEVNULL)
                        for i in range(n)]
        self.wait_free(n)

    def _daemon(self, argv, log, out=subprocess.PIPE):
        p = subprocess.Popen(argv, stdout=out, stderr=log)  # pylint: disable=consider-using-with
        self.procs.append(p)
        return p

    @staticmethod
    def _port(p, what):
        line = p.stdout.readline().decode()
        if "%s listening on" % what not in line:
            sys.exit("bench_tvm_rpc: %s did not start: %r" % (what, line))
        return int(line.rsplit(":", 1)[1])

    def wait_free(self, n, timeout=120):
        from kcage import tracker  # pylint: disable=import-outside-toplevel

        t = tracker.connect_tracker("127.0.0.1", self.port)
        deadline = time.time() + timeout
        while True:
            q = t.summary()["queue_info"]
            if all(q.get(k, {}).get("free", 0) >= (1 if k == "kf" else n) for k in self.keys):
                return
            if time.time() > deadline:
                sys.exit("bench_tvm_rpc: servers not registered: %r" % q)
            time.sleep(0.2)

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _request(port, key):
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    return rpc.connect_tracker("127.0.0.1", port).request(key, session_timeout=120,
                                                         max_retry=100)


def first_call(port, key):
    """Seconds from the request to the first call's answer; the session closed after."""
    t0 = time.perf_counter()
    remote = _request(port, key)
    remote.get_function("tvm.rpc.server.workpath")("x")
    took = time.perf_counter() - t0
    del remote
    gc.collect()
    return took


def latencies(stack):
    out = {(k, m): [] for k in stack.keys for m in ("spaced", "b2b")}
    for _ in range(REPS):
        for key in stack.keys:
            time.sleep(3)
            out[(key, "spaced")].append(first_call(stack.port, key))
    for key in stack.keys:  # back to back: a run of sessions, one key at a time
        time.sleep(3)
        first_call(stack.port, key)
        for _ in range(REPS):
            out[(key, "b2b")].append(first_call(stack.port, key))
    return {k: statistics.median(v) for k, v in out.items()}, out


def _runner_inputs(work):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import te  # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    a = te.placeholder((32, 32), "float32", name="A")
    b = te.placeholder((32, 32), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    path = os.path.join(work, "matmul.tar")
    lib.export_library(path)
    args = ms.arg_info.ArgInfo.from_prim_func(func)
    return [ms.runner.RunnerInput(path, "cpu", args) for _ in range(TRIALS)]


def trials_per_minute(stack, key, inputs):
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    runner = ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(tracker_host="127.0.0.1", tracker_port=stack.port,
                                       tracker_key=key, session_timeout_sec=120),
        evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=10),
        max_workers=1)
    t0 = time.perf_counter()
    results = [f.result() for f in runner.run(inputs)]
    took = time.perf_counter() - t0
    bad = [r.error_msg for r in results if r.error_msg or not r.run_secs]
    if bad:
        sys.exit("bench_tvm_rpc: %s: %d invalid trials: %s" % (key, len(bad), bad[0][:400]))
    best = min(float(s) for r in results for s in r.run_secs)
    return TRIALS * 60 / took, best


def _tree(pid):
    pids, unseen = [], [pid]
    while unseen:
        p = unseen.pop()
        pids.append(p)
        try:
            for t in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, t)) as f:
                    unseen += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return pids


def _mem(pids):
    pss = rss = 0
    for p in pids:
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except OSError:
            pass
    return pss / 1024, rss / 1024


def _zygotes_ready(log_path, n, timeout=300):
    """Wait until n agents logged that their TVM zygote imported TVM."""
    deadline = time.time() + timeout
    while True:
        with open(log_path, "rb") as f:
            if f.read().count(b"TVM zygote ready") >= n:
                return
        if time.time() > deadline:
            sys.exit("bench_tvm_rpc: %d agents' TVM zygotes not ready" % n)
        time.sleep(0.5)


def memory(stack, log_path):
    """MiB (PSS, RSS) of every agent's and every rpc_server's tree, idle and in session."""

    def total(procs):
        return _mem([p for proc in procs for p in _tree(proc.pid)])

    _zygotes_ready(log_path, len(stack.agents))
    time.sleep(3)  # and forked the first session's process
    idle = {"ka": total(stack.agents[:1]), "tvm": total(stack.servers[:1])}
    sessions = []
    for key in ("ka", "tvm"):
        for _ in range(len(stack.agents)):
            r = _request(stack.port, key)
            r.get_function("tvm.rpc.server.workpath")("x")
            sessions.append(r)
    time.sleep(8)  # the agents' next sessions' processes are forked beside them
    busy = {"ka": total(stack.agents), "tvm": total(stack.servers)}
    del sessions
    gc.collect()
    return idle, busy


def _row(name, ka, tvm, unit, fmt="%.3g"):
    print("%-34s %12s %12s %8.2f" % (name, (fmt % ka) + unit, (fmt % tvm) + unit, ka / tvm))


def main():
    work = tempfile.mkdtemp(prefix="kc-bench-tvm-")
    log = open(os.path.join(work, "servers.log"), "wb")  # pylint: disable=consider-using-with
    stack = Stack(1, log, fresh=True)
    _zygotes_ready(os.path.join(work, "servers.log"), 1)
    try:
        med, raw = latencies(stack)
        inputs = _runner_inputs(work)
        tpm = {}
        for key in stack.keys * 2:  # interleaved, the best of two each
            got = trials_per_minute(stack, key, inputs)
            tpm[key] = max(tpm.get(key, (0, 0)), got)
    finally:
        stack.stop()
    log8 = open(os.path.join(work, "servers8.log"), "wb")  # pylint: disable=consider-using-with
    stack = Stack(8, log8)
    try:
        idle, busy = memory(stack, os.path.join(work, "servers8.log"))
    finally:
        stack.stop()
    print("kcage agent vs TVM rpc_server (both on kcage tracker), median of %d" % REPS)
    print("%-34s %12s %12s %8s" % ("", "kcage agent", "TVM server", "ratio"))
    for mode, name in (("spaced", "request-to-first-call, spaced"),
                       ("b2b", "request-to-first-call, back2back")):
        _row(name, med[("ka", mode)] * 1e3, med[("tvm", mode)] * 1e3, " ms")
    _row("RPCRunner trials/min (%d trials)" % TRIALS, tpm["ka"][0], tpm["tvm"][0], "")
    _row("best matmul latency", tpm["ka"][1] * 1e6, tpm["tvm"][1] * 1e6, " us")
    for mode, name in (("spaced", "no zygote: first call, spaced"),
                       ("b2b", "no zygote: first call, back2back")):
        _row(name, med[("kf", mode)] * 1e3, med[("tvm", mode)] * 1e3, " ms")
    _row("no zygote: RPCRunner trials/min", tpm["kf"][0], tpm["tvm"][0], "")
    _row("PSS, 1 server, 0 sessions", idle["ka"][0], idle["tvm"][0], " MiB", "%.0f")
    _row("PSS, 8 servers, 8 sessions", busy["ka"][0], busy["tvm"][0], " MiB", "%.0f")
    _row("RSS, 1 server, 0 sessions", idle["ka"][1], idle["tvm"][1], " MiB", "%.0f")
    _row("RSS, 8 servers, 8 sessions", busy["ka"][1], busy["tvm"][1], " MiB", "%.0f")
    figures = {"first_call_s": {"%s_%s" % k: v for k, v in raw.items()},
               "trials_per_min": {k: v[0] for k, v in tpm.items()},
               "best_latency_s": {k: v[1] for k, v in tpm.items()},
               "memory_mib": {"idle_1": idle, "sessions_8": busy}}
    out = os.path.join(os.environ.get("KC_BENCH_DIR", work), "results.json")
    try:
        with open(out) as f:
            allfig = json.load(f)
    except (OSError, ValueError):
        allfig = {}
    allfig["tvm_rpc"] = figures
    with open(out, "w") as f:
        json.dump(allfig, f, indent=1)


if __name__ == "__main__":
    main()
