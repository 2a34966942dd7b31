"""kcage.tvm.install() puts kcage's classes wherever TVM uses its own, and back."""

import pytest

import kc_helpers as h


def test_install_swaps_and_restores(kc):
    popen_pool = pytest.importorskip("tvm.support.popen_pool")
    local_builder = pytest.importorskip("tvm.s_tir.meta_schedule.builder.local_builder")
    local_runner = pytest.importorskip("tvm.s_tir.meta_schedule.runner.local_runner")
    import kcage.tvm  # pylint: disable=import-outside-toplevel

    theirs = popen_pool.PopenPoolExecutor
    scratch = kcage.tvm.install(memory="2G")
    try:
        for mod in (popen_pool, local_builder, local_runner):
            assert issubclass(mod.PopenPoolExecutor, kc.PopenPoolExecutor)
        assert issubclass(popen_pool.PopenWorker, kc.PopenWorker)
        pool = local_builder.PopenPoolExecutor(max_workers=1, timeout=60)
        try:
            # the shared scratch directory is writable inside and visible outside
            path = pool.submit(h.write_file, scratch, "from-sandbox").result()
            with open(path, encoding="utf-8") as f:
                assert f.read() == "from-sandbox"
            assert pool.submit(h.pid_in_namespace).result() == 1  # sandboxed
            # a builder's path must stay in the scratch dir (the tuner rmtrees it)
            with pytest.raises(ChildProcessError) as info:
                pool.submit(h.builder_escape).result()
            assert "outside" in str(info.value)
        finally:
            pool.shutdown()
    finally:
        kcage.tvm.uninstall()
    assert popen_pool.PopenPoolExecutor is theirs
    assert local_builder.PopenPoolExecutor is theirs
    assert not __import__("os").path.exists(scratch)


def test_installed_classes_never_share_a_process_between_calls(kc):
    popen_pool = pytest.importorskip("tvm.support.popen_pool")
    import hostile_workers as hw  # pylint: disable=import-outside-toplevel
    import kcage.tvm  # pylint: disable=import-outside-toplevel

    kcage.tvm.install()
    try:
        # TVM's builder and runner ask for long-lived workers; a candidate must never
        # meet what an earlier one left in its process
        pool = popen_pool.PopenPoolExecutor(max_workers=1, timeout=60,
                                            maximum_process_uses=100)
        try:
            assert [pool.submit(hw.remember, i).result() for i in range(3)] == [[], [], []]
        finally:
            pool.shutdown()
        w = popen_pool.PopenWorker(maximum_uses=None)
        try:
            for i in range(3):
                w.send(hw.remember, (i,))
                assert w.recv() == []
        finally:
            w.kill()
    finally:
        kcage.tvm.uninstall()
