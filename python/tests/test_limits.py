"""A worker made without explicit limits gets its policy's `limit` lines; a bad policy
or limit fails when the worker is made, not at its first send."""

import os
import shutil
import tempfile

import pytest

import hostile_workers as hw


def test_a_bad_policy_or_limit_fails_at_construction(kc):
    with pytest.raises(ValueError, match="nope"):
        kc.PopenWorker(policy="nope")
    with pytest.raises(ValueError, match="nope"):
        kc.PopenPoolExecutor(max_workers=1, policy="nope")
    with pytest.raises(TypeError):
        kc.PopenWorker(policy=7)
    with pytest.raises(ValueError):
        kc.PopenWorker(memory="lots")
    with pytest.raises(ValueError):
        kc.PopenWorker(pids=-1)
    with pytest.raises(TypeError):
        kc.PopenWorker(cpus="two")


def test_the_policy_memory_limit_holds_without_memory_argument(kc):
    # the zygote reads the file as the sandbox's own ids: a directory others can enter
    # (pytest's tmp_path lies under a 0700 one)
    d = tempfile.mkdtemp(prefix="kcage-test-")
    os.chmod(d, 0o755)
    pol = os.path.join(d, "small.policy")
    with open(pol, "w", encoding="utf-8") as f:
        f.write("include python\nlimit memory 128M\n")
    w = kc.PopenWorker(policy=pol)
    try:
        w.send(hw.touch, (512,), timeout=60)
        with pytest.raises(ChildProcessError) as e:
            w.recv()
        assert e.value.verdict == "memory"
    finally:
        w.kill()
        shutil.rmtree(d)


def test_the_default_policy_pids_limit_holds(kc):
    w = kc.PopenWorker()  # python.policy: limit pids 256
    try:
        w.send(hw.fork_many, (400,), timeout=120)
        assert w.recv() < 300
    finally:
        w.kill()
