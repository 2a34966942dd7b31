"""make bench: kcage's Python PopenWorker/PopenPoolExecutor against TVM's own
(tvm.support.popen_pool from the venv), measured in one run on the same machine.

  warm      send(fn) + recv() on a started worker: median and p99, fn by reference
            (int) and by value (a __main__ function, cloudpickled); TVM's and kcage's
            workers take turns in blocks of 100 calls, so a load that drifts during
            the run weighs on both alike
  cold      a new PopenWorker to its first result (TVM: a new interpreter that imports
            tvm; kcage: a fork of the pool's zygote, which already imported it)
  timeout   send(sleep, timeout=T) -> TimeoutError, then send(noop) -> result: the
            cycle minus T (what each adds past the deadline), and the whole cycle
  pool      map_with_error_catching over N items with 2 workers: calls/s, fn by
            reference (abs) and by value (a lambda); the two pools take turns, ten
            maps each
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("KCAGE_BENCH", "1")

import kcage  # noqa: E402

try:
    from tvm.support import popen_pool as tvm_pool  # noqa: E402
except ImportError:
    from tvm.contrib import popen_pool as tvm_pool  # noqa: E402


def noop():
    return None


def sleep_long():
    time.sleep(30)


def pctl(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def warm(classes, n, fn=noop, block=100):
    """send(fn) + recv() on one started worker of each class, in alternating blocks of
    `block` calls (the load of a shared machine drifts: both see the same): the median
    and p99 of each."""
    ws = [cls() for cls in classes]
    for w in ws:
        for _ in range(101):
            w.send(fn)
            w.recv()
    ts = [[] for _ in ws]
    for _ in range(max(1, n // block)):
        for w, t in zip(ws, ts):
            for _ in range(block):
                t0 = time.perf_counter()
                w.send(fn)
                w.recv()
                t.append(time.perf_counter() - t0)
    for w in ws:
        w.kill()
    return [(statistics.median(t), pctl(t, 0.99)) for t in ts]


def cold(cls, n, **kw):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        w = cls(**kw)
        w.send(noop)
        w.recv()
        ts.append(time.perf_counter() - t0)
        w.kill()
    return statistics.median(ts)


def timeout_cycle(cls, n, limit):
    w = cls()
    w.send(noop)
    w.recv()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        w.send(sleep_long, timeout=limit)
        try:
            w.recv()
        except TimeoutError:
            pass
        w.send(noop)
        w.recv()
        ts.append(time.perf_counter() - t0)
    w.kill()
    return statistics.median(ts)


def pool(classes, n, fn, rounds=10):
    """map_with_error_catching over n items with 2 workers, for each class, as `rounds`
    alternating maps of n / rounds items: calls/s of each."""
    ps = [cls(max_workers=2) for cls in classes]
    for p in ps:
        list(p.map_with_error_catching(fn, range(20)))
    k = max(1, n // rounds)
    spent = [0.0 for _ in ps]
    for _ in range(rounds):
        for i, p in enumerate(ps):
            t0 = time.perf_counter()
            out = list(p.map_with_error_catching(fn, range(k)))
            spent[i] += time.perf_counter() - t0
            assert len(out) == k and all(r.status == 1 for r in out)
    for p in ps:
        p.shutdown()
    return [k * rounds / t for t in spent]


def main():
    quick = "--quick" in sys.argv
    n_warm, n_cold, n_to, n_pool = (300, 3, 3, 500) if quick else (2000, 8, 8, 3000)
    limit = 0.05
    rows = []
    load0 = os.getloadavg()[0]
    # by reference: an importable function (int() -> 0), what TVM's own callers send
    both = (tvm_pool.PopenWorker, kcage.PopenWorker)
    t_warm, k_warm = warm(both, n_warm, int)
    rows.append(("warm round trip (by reference), median", t_warm[0] * 1e6,
                 k_warm[0] * 1e6, "us", 3))
    rows.append(("warm round trip (by reference), p99", t_warm[1] * 1e6, k_warm[1] * 1e6,
                 "us", None))
    # by value: a __main__ function, cloudpickled both ways on both sides
    t_warm, k_warm = warm(both, n_warm)
    rows.append(("warm round trip (by value), median", t_warm[0] * 1e6, k_warm[0] * 1e6,
                 "us", None))
    # kcage's zygote for this configuration is started by the warm run above
    t_cold = cold(tvm_pool.PopenWorker, n_cold)
    k_cold = cold(kcage.PopenWorker, n_cold)
    rows.append(("cold start to first result", t_cold * 1e3, k_cold * 1e3, "ms", 10))
    t_to = timeout_cycle(tvm_pool.PopenWorker, n_to, limit)
    k_to = timeout_cycle(kcage.PopenWorker, n_to, limit)
    rows.append(("timeout+next result, past the %g s deadline" % limit,
                 (t_to - limit) * 1e3, (k_to - limit) * 1e3, "ms", 15))
    rows.append(("timeout+next result, whole cycle", t_to * 1e3, k_to * 1e3, "ms", None))
    # by reference (abs, as TVM's own callers send module functions), then by value (a
    # lambda, cloudpickled per item on both sides)
    pools = (tvm_pool.PopenPoolExecutor, kcage.PopenPoolExecutor)
    t_pool, k_pool = pool(pools, n_pool, abs)
    rows.append(("pool of 2, map_with_error_catching (by ref)", t_pool, k_pool, "calls/s",
                 None))
    t_pool, k_pool = pool(pools, n_pool, lambda x: x)
    rows.append(("pool of 2, map_with_error_catching (by value)", t_pool, k_pool, "calls/s",
                 None))
    print("load average before: %.1f, after: %.1f; %d CPUs" % (load0, os.getloadavg()[0],
                                                            os.cpu_count()))
    print("%-46s %12s %12s %8s  %s" % ("python (TVM popen_pool vs kcage)", "TVM", "kcage",
                                       "ratio", "target"))
    results = {}
    for name, t, k, unit, target in rows:
        ratio = (k / t) if unit == "calls/s" else (t / k if k > 0 else float("inf"))
        print("%-46s %9.1f %-2s %9.1f %-2s %7.1fx  %s" % (
            name, t, unit if unit != "calls/s" else "", k, unit if unit != "calls/s" else "",
            ratio, ("%dx" % target) if target else ""))
        results[name] = {"tvm": t, "kcage": k, "unit": unit, "ratio": ratio, "target": target}
    out = os.environ.get("KC_BENCH_DIR")
    if out:
        with open(os.path.join(out, "python.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
