"""The differential suite runs every scenario once with TVM's own popen_pool (from the
installed wheel) and once with kcage's.  The helpers live in kc_helpers, a module both
kinds of worker import by name: TVM's workers find it through PYTHONPATH."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)


def tvm_popen_pool():
    """TVM's module (tvm.support.popen_pool since v0.25, tvm.contrib before), or skip."""
    try:
        from tvm.support import popen_pool  # pylint: disable=import-outside-toplevel
    except ImportError:
        try:
            from tvm.contrib import popen_pool  # pylint: disable=import-outside-toplevel
        except ImportError as e:
            pytest.skip("tvm is not importable here (%s): no differential run" % e)
    return popen_pool


def sandbox_or_skip():
    """kcage's workers need user namespaces and a readable interpreter."""
    import kcage  # pylint: disable=import-outside-toplevel

    w = kcage.PopenWorker()
    try:
        w.send(int, ("7",))
        if w.recv() != 7:
            pytest.fail("a sandboxed worker answered wrongly")
    except ChildProcessError as e:
        pytest.skip("no kcage sandbox on this host: %s" % e)
    finally:
        w.kill()
    return kcage


@pytest.fixture(params=["tvm", "kcage"])
def impl(request):
    """The module under test: TVM's popen_pool or kcage."""
    if request.param == "tvm":
        return tvm_popen_pool()
    return sandbox_or_skip()


@pytest.fixture
def kc():
    return sandbox_or_skip()
