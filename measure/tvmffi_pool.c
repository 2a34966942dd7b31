/* The thread pool a module's parallel loops run on, with the semantics of TVM's runtime
 * (src/runtime/thread_pool.cc, c_runtime_api.cc): TVMBackendParallelLaunch runs
 * num_task tasks (0: one per thread), task 0 on the calling thread and task i on pool
 * thread i, and returns when all are done, -1 if any failed; a launch from inside a
 * task is refused; TVMBackendParallelBarrier waits until every task of the launch has
 * reached the same barrier, on one counter per task, a cache line apart.
 *
 * The threads are started by the worker's own code before the kernel is loaded, while
 * its policy (measure-threads) still lets a thread clone through; the worker then
 * forbids any further thread (kc_runtime_seal_threads), so the kernel never creates one.
 * Between launches the threads sleep on a futex: between rounds the parent stops the
 * whole process, and a thread that spun would only burn the CPU it shares. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tvmffi.h"

enum { SYNC_STRIDE = 64 / sizeof(atomic_int), SPIN = 1 << 14 };

static struct {
  int n; /* threads, the caller's included; 0 = no pool (serial) */
  _Atomic uint32_t gen;
  _Atomic uint32_t pending; /* pool threads yet to finish the launch (each one answers
                               every launch, so none is ever a launch behind) */
  atomic_int failed;
  kc_parallel_lambda f;
  void *cdata;
  int num_task;
  kc_parallel_env env;
  atomic_int sync[KC_TVMFFI_MAX_THREADS * SYNC_STRIDE];
} g_pool;

static _Thread_local bool in_task;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *a, uint32_t v) {
  syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *a) {
  syscall(SYS_futex, a, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

/* Until *a != v: spin a little (a launch follows a launch in a kernel's loop nest),
 * then sleep. */
static void wait_change(_Atomic uint32_t *a, uint32_t v) {
  for (int i = 0; i < SPIN; i++) {
    if (atomic_load_explicit(a, memory_order_acquire) != v)
      return;
    cpu_relax();
  }
  while (atomic_load_explicit(a, memory_order_acquire) == v)
    futex_wait(a, v);
}

static void run_task(int id) {
  in_task = true;
  if (g_pool.f(id, &g_pool.env, g_pool.cdata) != 0)
    atomic_store(&g_pool.failed, 1);
  in_task = false;
}

static void *pool_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  uint32_t seen = 0;
  for (;;) {
    wait_change(&g_pool.gen, seen);
    seen = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
    if (id < g_pool.num_task)
      run_task(id);
    if (atomic_fetch_sub_explicit(&g_pool.pending, 1, memory_order_acq_rel) == 1)
      futex_wake(&g_pool.pending);
  }
  return NULL;
}

int kc_tvmffi_pool_start(int threads) {
  if (threads > KC_TVMFFI_MAX_THREADS)
    threads = KC_TVMFFI_MAX_THREADS;
  if (threads <= 1 || g_pool.n)
    return 0;
  pthread_attr_t a;
  if (pthread_attr_init(&a) != 0)
    return -1;
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int started = 1;
  for (int i = 1; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, &a, pool_thread, (void *)(intptr_t)i) != 0)
      break;
    started++;
  }
  pthread_attr_destroy(&a);
  g_pool.n = started > 1 ? started : 0;
  return started == threads ? 0 : -1;
}

int kc_tvmffi_pool_threads(void) {
  return g_pool.n ? g_pool.n : 1;
}

static int serial(kc_parallel_lambda f, void *cdata) {
  atomic_int counter = 0;
  kc_parallel_env env = {&counter, 1};
  return f(0, &env, cdata);
}

int kc_tvmffi_parallel_launch(kc_parallel_lambda f, void *cdata, int num_task) {
  if (in_task) {
    kc_tvmffi_raise_cstr("RuntimeError",
                         "Cannot launch parallel job inside worker, consider fuse then parallel");
    return -1;
  }
  if (!g_pool.n)
    return serial(f, cdata);
  if (num_task == 0)
    num_task = g_pool.n;
  if (num_task < 0 || num_task > g_pool.n) {
    kc_tvmffi_raise_cstr("RuntimeError",
                         "Request parallel sync task larger than number of threads used");
    return -1;
  }
  g_pool.f = f;
  g_pool.cdata = cdata;
  g_pool.num_task = num_task;
  g_pool.env = (kc_parallel_env){g_pool.sync, num_task};
  for (int i = 0; i < num_task; i++)
    atomic_store_explicit(&g_pool.sync[i * SYNC_STRIDE], 0, memory_order_relaxed);
  atomic_store(&g_pool.failed, 0);
  atomic_store(&g_pool.pending, (uint32_t)(g_pool.n - 1));
  atomic_fetch_add_explicit(&g_pool.gen, 1, memory_order_release);
  futex_wake(&g_pool.gen);
  run_task(0);
  uint32_t left;
  while ((left = atomic_load_explicit(&g_pool.pending, memory_order_acquire)) != 0)
    wait_change(&g_pool.pending, left);
  return atomic_load(&g_pool.failed) ? -1 : 0;
}

int kc_tvmffi_parallel_barrier(int task_id, kc_parallel_env *penv) {
  atomic_int *sync = penv->sync_handle;
  int num_task = penv->num_task;
  int old = atomic_fetch_add_explicit(&sync[task_id * SYNC_STRIDE], 1, memory_order_release);
  for (int i = 0; i < num_task; i++)
    while (i != task_id &&
           atomic_load_explicit(&sync[i * SYNC_STRIDE], memory_order_relaxed) <= old)
      sched_yield();
  atomic_thread_fence(memory_order_acquire);
  return 0;
}
