"""kcage: TVM's PopenWorker / PopenPoolExecutor with every worker in a kcage sandbox.

    from kcage import PopenPoolExecutor          # instead of tvm.support.popen_pool
    pool = PopenPoolExecutor(max_workers=2, timeout=10, memory="1G")
    print(list(pool.map_with_error_catching(abs, [-1, -2])))

kcage.tvm.install() makes TVM itself (MetaSchedule's LocalBuilder and LocalRunner, the
RPC server and tracker helpers) use these classes.
"""

__all__ = ["MapResult", "PopenPoolExecutor", "PopenWorker", "StatusKind", "WorkerException",
           "stats"]
__version__ = "0.1.0"


def __getattr__(name):
    # Lazily: inside a worker only kcage._child is imported, and libkcage is not there.
    if name in __all__:
        from . import popen_pool

        return getattr(popen_pool, name)
    raise AttributeError("module 'kcage' has no attribute %r" % name)
