/* The per-worker ring (docs/architecture.md, reference/measurement.md §4): one sealed memfd,
 * mapped only by the parent and its worker, holding one SPSC submission ring (parent
 * -> worker) and one SPSC completion ring (worker -> parent) with fixed-size slots.
 *
 * Every record carries a sequence number and the generation of the worker it was
 * meant for (the generation changes at every restart), so a stale or forged
 * completion is recognised.  The parent trusts nothing the worker can write: it keeps
 * its own copies of every index and size, copies a completion's header out before
 * validating it, bounds every length, and never follows a worker-written offset.  The
 * memfd's size is sealed, so a worker cannot SIGBUS the parent by truncating it.
 *
 * Wake-ups (eventcount pattern: the fast path makes no syscall):
 *  - parent -> worker: the worker spins briefly, then sets sq_waiters and sleeps on the
 *    futex word sq_epoch; the parent bumps sq_epoch after publishing and calls
 *    FUTEX_WAKE only when sq_waiters is set.
 *  - worker -> parent: the parent spins briefly, then naps on the futex word
 *    cq_epoch (cq_waiters = KC_CQ_NAP) for at most KC_PARENT_NAP_NS, then sleeps in
 *    poll() on an eventfd together with the worker's pidfd and seccomp listener
 *    (cq_waiters = KC_CQ_POLL: it must wake on death and violations too, and a pool
 *    waits on many workers at once, which one futex cannot do).  The worker bumps
 *    cq_epoch and wakes the futex, or writes the eventfd, only when cq_waiters says
 *    so.  The nap is there for the round trip on a shared CPU, where every hop is a
 *    sleep: a futex wait and wake cost 1.1-1.6 us less a round trip than ppoll() on
 *    three fds, an eventfd write and its read.  The nap lasts longer than the
 *    scheduler's tick (4 ms at HZ=250), so that its timer is not the CPU's next event
 *    while the tick runs: with a 0.2 ms nap the timer was reprogrammed at every nap,
 *    and on this guest one round trip in five paid ~14 us for it (p90 18.7 us against
 *    6.5 us with 5 ms).  A death ends the nap at once: the worker registers
 *    worker_tid (its tid) as its robust futex list, so the kernel marks the word
 *    FUTEX_OWNER_DIED and wakes its waiter when the worker exits, however it dies, and
 *    the parent waits on both words (futex_waitv).  A worker that unregisters it, or a
 *    kernel without futex_waitv, leaves the nap's end to see its death.  A violation
 *    during the nap is seen when the nap ends, at most KC_PARENT_NAP_NS late; a
 *    deadline is never passed (the nap ends at it).
 *
 * Spinning adapts to contention (spin.c).  Each side publishes the CPU it runs on; a
 * waiter whose peer last ran on its own CPU never spins (the peer cannot run until it
 * leaves the CPU) but sleeps at once (spin.c says why not a yield).
 * A waiter's spin budget halves after every wait that ended asleep anyway and doubles
 * after one the spin satisfied, so a peer that is slow or descheduled turns the wait
 * into a sleep.  The worker's CPU is a hint it may forge: the worst it can do is make
 * the parent sleep instead of pause for the same bounded budget. */
#ifndef KCAGE_RING_H
#define KCAGE_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KC_RING_MAGIC 0x6b63726eu /* "kcrn" */
#define KC_RING_FN_MAX 255
#define KC_RING_MSG_MAX 1023 /* exception message bytes carried back */

/* How the parent sleeps (kc_ring_ctl.cq_waiters), so how a completion wakes it. */
enum { KC_CQ_AWAKE = 0, KC_CQ_POLL = 1, KC_CQ_NAP = 2 };

/* Completion statuses written by the worker (the parent maps them to kc_call_status). */
enum { KC_CQE_COMPLETE = 1, KC_CQE_EXCEPTION = 2 };

/* Shared control page.  Fields on separate cache lines so the two sides do not
 * false-share. */
typedef struct kc_ring_ctl {
  uint32_t magic;
  uint32_t depth; /* informational for the worker; the parent keeps its own */
  uint64_t sq_slot_size, cq_slot_size, sq_off, cq_off;
  uint32_t generation;
  uint32_t max_arg, max_result;
  _Alignas(64) _Atomic uint64_t sq_tail;  /* parent writes */
  _Atomic int32_t parent_cpu;             /* parent writes: where it last ran (a hint) */
  _Atomic uint32_t worker_spin_ns;        /* parent writes: the worker's spin limit */
  _Alignas(64) _Atomic uint64_t sq_head;  /* worker writes (informational) */
  _Alignas(64) _Atomic uint32_t sq_epoch; /* futex word the worker sleeps on */
  _Atomic uint32_t sq_waiters;            /* worker sets while (about to be) asleep */
  _Alignas(64) _Atomic uint64_t cq_tail;  /* worker writes: untrusted */
  _Atomic int32_t worker_cpu;             /* worker writes: untrusted, a hint only */
  _Atomic uint32_t cq_epoch;              /* worker bumps: futex word the parent naps on */
  _Atomic uint32_t worker_tid;            /* worker's death notice (robust futex), 0 if none */
  _Alignas(64) _Atomic uint64_t cq_head;  /* parent writes */
  _Atomic uint32_t cq_waiters;            /* parent sets while asleep: KC_CQ_NAP/POLL */
  _Atomic uint32_t parent_gone;           /* parent sets at shutdown */
  /* worker writes (untrusted, only ever printed): the syscall number its seal filter
   * trapped, set by the worker's SIGSYS handler just before it dies. */
  _Alignas(64) _Atomic uint32_t trapped_syscall;
  /* worker writes (untrusted, clamped by the parent to the call's own window): the call
   * whose task began (its seq + 1; 0 = none yet) and when (CLOCK_MONOTONIC), for a
   * handler that loads what it runs before it runs it (the python handler). */
  _Alignas(64) _Atomic uint64_t began_seq;
  _Atomic uint64_t began_ns;
  /* parent writes before the first request: the worker's pid as the parent sees it
   * (the worker, pid 1 of its namespace, cannot know it otherwise) */
  _Atomic int32_t host_pid;
} kc_ring_ctl;

typedef struct kc_sqe {
  uint64_t seq;
  uint32_t generation;
  uint16_t fn_len;
  uint16_t flags;
  uint64_t arg_len;
  uint64_t reserved;
  /* fn[fn_len] then arg[arg_len] follow */
} kc_sqe;

typedef struct kc_cqe {
  uint64_t seq;
  uint32_t generation;
  uint32_t status; /* KC_CQE_* */
  uint64_t len;    /* payload bytes (value, or message without NUL) */
  uint64_t reserved;
  /* payload follows */
} kc_cqe;

typedef struct kc_ring_params {
  uint32_t depth;      /* power of two */
  uint32_t max_arg;    /* payload bytes per request */
  uint32_t max_result; /* payload bytes per completion (>= KC_RING_MSG_MAX) */
} kc_ring_params;

/* One side's view.  For the parent every field is its own, trusted copy. */
typedef struct kc_ring {
  uint8_t *base;
  size_t size;
  kc_ring_ctl *ctl;
  uint32_t depth, mask;
  uint64_t sq_slot_size, cq_slot_size, sq_off, cq_off;
  uint32_t max_arg, max_result;
  uint32_t generation;
  uint64_t sent;   /* parent: requests published */
  uint64_t reaped; /* parent: completions taken */
  int memfd;
} kc_ring;

/* Layout for params (sizes rounded, offsets page-aligned). */
size_t kc_ring_layout(const kc_ring_params *p, uint64_t *sq_off, uint64_t *sq_slot,
                      uint64_t *cq_off, uint64_t *cq_slot);

/* Parent: create the sealed memfd, map it, write the control page. */
int kc_ring_create(kc_ring *r, const kc_ring_params *p, uint32_t generation, kc_error *err);
/* Parent: reuse the memory for a new worker generation (indices reset). */
void kc_ring_reset(kc_ring *r, uint32_t generation);
void kc_ring_destroy(kc_ring *r);

/* Worker: map a memfd received from the parent. */
int kc_ring_attach(kc_ring *r, int memfd, kc_error *err);
/* Worker: have the kernel mark worker_tid and wake the parent when this process dies
 * (its robust futex list; done before the filter is loaded). */
void kc_ring_arm_death_notice(kc_ring *r);
/* Parent: sleep until cq_epoch moves from key, the worker dies, or ns pass.  false: the
 * worker's death notice says it is gone (no sleep; its pidfd says how). */
bool kc_ring_nap(kc_ring *r, uint32_t key, uint64_t ns);

/* Parent: publish one request.  -1 (err) when full or too large. */
int kc_ring_submit(kc_ring *r, const char *fn, size_t fn_len, const void *arg, size_t len,
                   kc_error *err);
/* Parent: wake the worker if it sleeps. */
void kc_ring_wake_worker(kc_ring *r);
uint64_t kc_ring_outstanding(const kc_ring *r);

/* A completion copied out of shared memory and validated. */
typedef struct kc_ring_completion {
  uint64_t seq;
  uint32_t status; /* KC_CQE_COMPLETE or KC_CQE_EXCEPTION */
  void *payload;   /* malloc'd copy (NUL-terminated for messages), NULL when len 0 */
  size_t len;
} kc_ring_completion;

/* Parent: take the next completion.  1 = *out filled; 0 = none yet; -1 = the worker
 * broke the protocol (err says how): treat as a child error and kill the worker. */
int kc_ring_reap(kc_ring *r, kc_ring_completion *out, kc_error *err);

/* Validate one completion header against what the parent expects (pure function,
 * the fuzzed decoder).  0 or -1 with err. */
int kc_ring_check_cqe(const kc_cqe *h, uint64_t expect_seq, uint32_t expect_gen,
                      uint32_t max_result, kc_error *err);

/* Adaptive waiting, both sides (spin.c). */
#define KC_SPIN_MIN_NS 2000u
#define KC_WORKER_SPIN_NS 50000u /* covers the parent's next request in a tight loop */
#define KC_PARENT_SPIN_NS 50000u
#define KC_PARENT_NAP_NS 5000000u /* a futex nap before poll(): see the top of this file */
typedef struct kc_spin {
  uint64_t budget_ns; /* learnt spin budget; 0 = not learnt yet: the maximum */
} kc_spin;
/* One wait's spin: kc_spin_begin, then kc_spin_step between looks at the ring until
 * the answer is there or a step says stop (sleep then), then kc_spin_end. */
typedef struct kc_spinner {
  kc_spin *state;
  uint64_t max_ns, budget_ns, t0;
  unsigned steps, shared; /* shared: stopped because the peer shares this CPU */
} kc_spinner;
/* min_ns: a floor for this wait only (the learnt budget is not raised by it). */
void kc_spin_begin(kc_spinner *sp, kc_spin *s, uint64_t max_ns, uint64_t min_ns);
/* One pause; false = stop spinning (the budget is spent, until_ns is reached, or the
 * peer last ran on this CPU). */
bool kc_spin_step(kc_spinner *sp, _Atomic int32_t *mine, const _Atomic int32_t *peer,
                  uint64_t until_ns);
/* satisfied = the answer came while spinning: the budget doubles; else it halves. */
void kc_spin_end(kc_spinner *sp, bool satisfied);
/* Store this side's CPU in *mine; true when *peer names the same CPU. */
bool kc_ring_share_cpu(_Atomic int32_t *mine, const _Atomic int32_t *peer);

/* The futex helpers of both sides. */
int kc_futex_wait(_Atomic uint32_t *word, uint32_t expect, int64_t timeout_ns);
int kc_futex_wake(_Atomic uint32_t *word, int n);

#ifdef __cplusplus
}
#endif
#endif
