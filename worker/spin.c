/* How both ends of a ring wait for each other (see ring.h): spin only while spinning
 * can pay, hand the CPU over when the peer needs this very CPU, and sleep when neither
 * helps.
 *
 * The hand-over is a sched_yield, and under EEVDF a yield moves the yielder's virtual
 * deadline a whole slice on: with the peer alone on the CPU the peer runs at once (5.4
 * us per round trip of two C processes pinned together here, against 7-13 us through
 * futex sleeps), but on a busy CPU whichever other task is runnable (a compiler, a busy
 * loop) may run for a slice first.  C pools keep the hand-over (bench_worker's pool of
 * 2: 150-400 k calls/s with three busy loops, 60-100 k/s without it).  A Python
 * worker's ring sleeps at once instead (kc_spin.sleep_shared): its parent is one
 * thread per worker, and with three busy loops yield-then-sleep gave a warm round trip
 * p90 of 4 ms and 0.56x TVM's map throughput, sleeping at once 68 us and 1.9x; on the
 * team's load it was no slower (21-30 us against 25-28 us).  A sleeper keeps its lag,
 * so its wake-up runs it promptly. */
#include "clock.h"
#include "ring.h"

#include <sched.h>

/* Yields a waiter on a shared CPU makes before it sleeps, whatever its budget.  One: a
 * yield hands the CPU over only when the peer is eligible to run (EEVDF), and the worker
 * sits in a cgroup of its own, whose entity a yield inside the group does not move
 * back; a second yield was as often a wasted system call as a hand-over, while a sleep
 * always hands over. */
#define KC_SPIN_SHARED_YIELDS 1u

bool kc_ring_share_cpu(_Atomic int32_t *mine, const _Atomic int32_t *peer) {
  /* glibc reads the CPU from the thread's rseq area: no system call */
  int cpu = sched_getcpu();
  if (cpu < 0)
    return false;
  if (atomic_load_explicit(mine, memory_order_relaxed) != cpu)
    atomic_store_explicit(mine, cpu, memory_order_relaxed);
  return atomic_load_explicit(peer, memory_order_relaxed) == cpu;
}

void kc_spin_begin(kc_spinner *sp, kc_spin *s, uint64_t max_ns, uint64_t min_ns) {
  uint64_t b = s->budget_ns && s->budget_ns < max_ns ? s->budget_ns : max_ns;
  *sp = (kc_spinner){
      .state = s, .max_ns = max_ns, .budget_ns = b > min_ns ? b : min_ns, .t0 = kc_now_ns()};
}

bool kc_spin_step(kc_spinner *sp, _Atomic int32_t *mine, const _Atomic int32_t *peer,
                  uint64_t until_ns) {
  if (!sp->max_ns)
    return false;
  unsigned step = sp->steps++;
  bool shared = kc_ring_share_cpu(mine, peer);
  if (shared && sp->state->sleep_shared) {
    sp->shared++;
    return false;
  }
  if (shared) {
    /* The peer can make progress only once we leave this CPU: every pause would be a
     * pause of the peer too. */
    sched_yield();
    sp->yields++;
  } else {
    __builtin_ia32_pause();
    sp->pauses++;
    /* a third task may be waiting for this CPU: let it run now and then */
    if (step % 64 == 63)
      sched_yield();
    if (step % 8 != 7) /* the clock costs as much as a pause: read it now and then */
      return true;
  }
  uint64_t now = kc_now_ns();
  if (now >= until_ns)
    return false;
  if (!sp->pauses)
    return sp->yields < KC_SPIN_SHARED_YIELDS;
  return now - sp->t0 < sp->budget_ns;
}

void kc_spin_end(kc_spinner *sp, bool satisfied) {
  kc_spin *s = sp->state;
  /* Only a spin on a CPU of its own says whether spinning pays. */
  if (sp->pauses < sp->yields || sp->shared)
    return;
  uint64_t b = s->budget_ns && s->budget_ns < sp->max_ns ? s->budget_ns : sp->max_ns;
  if (satisfied)
    b = b * 2 > sp->max_ns ? sp->max_ns : b * 2;
  else
    b = b / 2 < KC_SPIN_MIN_NS ? KC_SPIN_MIN_NS : b / 2;
  s->budget_ns = b;
}
