/* Pool: TVM's PopenPoolExecutor (reference/tvm.md §1.6) over kcage workers.  One
 * zygote per pool; max_workers workers forked from it, each in its own per-slot
 * cgroup.  The pool has no threads of its own: progress is made by whichever call
 * waits (kc_future_wait, map, shutdown), so it is single-threaded - use one pool per
 * thread.  Calls are pipelined: each worker's submission ring holds several requests,
 * so a busy pool never waits for a wake-up between calls. */
#ifndef KCAGE_POOL_H
#define KCAGE_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "kcage/error.h"
#include "kcage/worker.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

typedef struct kc_pool_opts {
  unsigned max_workers;  /* 0 = number of online CPUs */
  double timeout_s;      /* per call; <= 0 = none (like TVM's pool timeout) */
  kc_worker_opts worker; /* initializer, initargs, maximum_uses (TVM:
                            maximum_process_uses), stdout/stderr, policy, limits... */
} kc_pool_opts;

void kc_pool_opts_init(kc_pool_opts *o);

typedef struct kc_pool kc_pool;
typedef struct kc_future kc_future;

int kc_pool_new(const kc_pool_opts *opts, kc_pool **out, kc_error *err);

/* Queue one call on the least-loaded worker; returns a future (NULL + err on a
 * parent-side failure such as a payload over the limit).  arg is copied. */
kc_future *kc_pool_submit(kc_pool *p, const char *fn, const void *arg, size_t len, kc_error *err);

/* Drive the pool until the future is done or timeout_s passes (< 0 = until done; the
 * call's own deadline bounds it anyway).  Returns 1 when done (*res filled, ownership
 * of res->value passes to the caller), 0 when not done yet.  A future's result can be
 * taken once. */
int kc_future_wait(kc_future *f, double timeout_s, kc_call_result *res);
bool kc_future_done(kc_future *f);
/* Free a future (its result, if not taken, is dropped).  A still-running call keeps
 * running; its result is discarded. */
void kc_future_free(kc_future *f);

typedef struct kc_blob {
  const void *data;
  size_t len;
} kc_blob;

/* TVM's map_with_error_catching: every args[i] through fn, results[i] in input order
 * (each one of the four outcomes; the caller clears them).  Returns 0, or -1 on a
 * parent-side failure. */
int kc_pool_map_with_error_catching(kc_pool *p, const char *fn, const kc_blob *args, size_t n,
                                    kc_call_result *results, kc_error *err);

unsigned kc_pool_size(const kc_pool *p);
/* The host pid of each worker slot (0 when that slot has no live worker). */
pid_t kc_pool_worker_pid(const kc_pool *p, unsigned slot);

/* Kill every worker and the zygote, remove the cgroups, free.  With wait, finish the
 * outstanding calls first (each bounded by its deadline).  Futures not yet freed stay
 * valid (done, with CHILD_ERROR "pool shut down" when they had not finished) and must
 * still be freed.  Safe with NULL. */
void kc_pool_shutdown(kc_pool *p, bool wait);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
