"""MetaSchedule (LocalBuilder + LocalRunner) tunes a small matmul on the CPU, once with
TVM's own popen_pool and once after kcage.tvm.install(): every build and every run in
a kcage sandbox (counted), the tuned result valid in both.  Minutes on 2 vCPUs."""

import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow

# One LLVM build of a candidate took 33 s on this 2-vCPU machine under the team's load
# (load average 8): a few trials, generous timeouts.  KCAGE_TUNE_TRIALS=32 for more.
TRIALS = int(os.environ.get("KCAGE_TUNE_TRIALS", "8"))


def _matmul():
    from tvm import te  # pylint: disable=import-outside-toplevel

    a = te.placeholder((32, 32), "float32", name="A")
    b = te.placeholder((32, 32), "float32", name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")


def _tune(tmp_path):
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    mod = tvm.IRModule({"main": _matmul()})
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    db = ms.tune_tir(mod, target, str(tmp_path), max_trials_global=TRIALS,
                     num_trials_per_iter=min(TRIALS, 8), cost_model="random",
                     database="memory",
                     builder=ms.builder.LocalBuilder(max_workers=1, timeout_sec=900),
                     runner=ms.runner.LocalRunner(timeout_sec=300), num_tuning_cores=1,
                     seed=1)
    sch = ms.tir_integration.compile_tir(db, mod, target)
    assert sch is not None, "no valid schedule was tuned"
    lib = tvm.compile(sch.mod, target=target)
    a = np.random.rand(32, 32).astype("float32")
    b = np.random.rand(32, 32).astype("float32")
    dev = tvm.cpu()
    c = tvm.runtime.tensor(np.zeros((32, 32), "float32"), dev)
    lib["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)
    return db


def test_tune_with_tvm_pool(tmp_path):
    pytest.importorskip("tvm")
    db = _tune(tmp_path)
    assert len(db.get_all_tuning_records()) >= TRIALS // 2


def test_tune_in_kcage(tmp_path, kc, monkeypatch):
    pytest.importorskip("tvm")
    from tvm.support import popen_pool  # pylint: disable=import-outside-toplevel

    import kcage.tvm  # pylint: disable=import-outside-toplevel

    # TVM's own worker must not start a single process while kcage is installed
    unsandboxed = []
    real_start = popen_pool.PopenWorker._start  # pylint: disable=protected-access
    monkeypatch.setattr(popen_pool.PopenWorker, "_start",
                        lambda self: unsandboxed.append(1) or real_start(self))
    kcage.tvm.install()
    try:
        kcage.tvm.calls.clear()
        db = _tune(tmp_path)
        records = db.get_all_tuning_records()
        measured = [r for r in records if r.run_secs]
        assert len(records) >= TRIALS // 2, "MetaSchedule measured too few candidates"
        # every candidate was built and run through kcage (plus the sanity checks)
        assert kcage.tvm.calls.get("build", 0) >= len(records)
        assert kcage.tvm.calls.get("run", 0) >= len(measured)
        assert not unsandboxed
    finally:
        kcage.tvm.uninstall()
