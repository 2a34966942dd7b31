"""A pool that shares the host's network (a policy without a net namespace, such as
python-net) must not hand that namespace to the pools made after it: sandboxed pools
share one empty network namespace, the first one made.  Probe: an abstract AF_UNIX
name (scoped by network namespace) that the host listens on, which a sandbox in its own
namespace cannot reach.  In a fresh process, so the host-network pool is its first."""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = r'''
import os, socket, sys
import kcage, kc_helpers as h
name = "kcage-test-%d" % os.getpid()
lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
lsock.bind("\0" + name)
lsock.listen(4)
policy = sys.argv[1]
first = kcage.PopenPoolExecutor(max_workers=1, timeout=60, policy=policy)
reach_first = first.submit(h.abstract_unix_reaches, name).result()
plain = kcage.PopenPoolExecutor(max_workers=1, timeout=60, pids=64)
reach_plain = plain.submit(h.abstract_unix_reaches, name).result()
first.shutdown()
plain.shutdown()
print(reach_first, reach_plain)
'''


def test_host_net_pool_first_then_plain(kc):
    # python-net refuses AF_UNIX, so the probe needs its namespaces with AF_UNIX open;
    # the zygote reads the file as the sandbox's ids (others, under root)
    d = tempfile.mkdtemp()
    pol = os.path.join(d, "hostnet.policy")
    try:
        os.chmod(d, 0o755)
        with open(pol, "w", encoding="utf-8") as f:
            f.write("include python\nnamespaces user pid mount ipc uts cgroup\n")
        os.chmod(pol, 0o644)
        env = dict(os.environ,
                   PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
        p = subprocess.run([sys.executable, "-c", SCRIPT, pol], capture_output=True, text=True,
                           timeout=300, env=env, check=False)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    # the host-network pool reaches the host's name (the probe works); the plain pool
    # made after it, in the shared empty namespace, does not
    assert p.stdout.split() == ["True", "False"], p.stdout + p.stderr
