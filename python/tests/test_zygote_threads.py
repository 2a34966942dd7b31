"""A zygote that imported numpy (TVM does) forks workers that can fork and run BLAS:
a fork copies only the forking thread, so OpenBLAS's thread pool, started at import,
must not exist in the zygote (its fork handler and its large products waited for the
threads the workers do not have)."""

import pytest

import kc_helpers as h


def test_fork_and_blas_after_numpy_preload(kc):
    pytest.importorskip("numpy")
    w = kc.PopenWorker(preload=["numpy"])
    try:
        w.send(h.numpy_matmul, (512,), timeout=60)
        assert w.recv() == 512.0
        w.send(h.fork_child, timeout=60)
        assert w.recv() == 7
    finally:
        w.kill()
