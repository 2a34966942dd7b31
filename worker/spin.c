/* How both ends of a ring wait for each other (see ring.h): spin only while spinning
 * can pay, and sleep at once when the peer needs this very CPU.
 *
 * A waiter whose peer last ran on its own CPU does not yield first.  Under EEVDF a
 * yield moves the yielder's virtual deadline a whole slice on, and hands the CPU to the
 * peer only when the peer is eligible: on a busy CPU whichever other task is runnable
 * (a compiler, a busy loop) may run for a slice first, and with the peer in a cgroup of
 * its own the yield does not move the group's entity at all.  With the parent's futex
 * nap (ring.h) a sleep is the cheaper hand-over too: two C processes pinned to one CPU
 * made a round trip in 4.6-5.1 us sleeping at once, against 7.1-7.4 us with one yield
 * before a ppoll() sleep and 15-17 us with one yield before a 0.2 ms nap (bench_worker,
 * medians, the same hour); a pool of 2 made as many calls either way, with and without
 * three busy loops beside it.  A sleeper keeps its lag, so its wake-up runs it
 * promptly. */
#include "clock.h"
#include "ring.h"

#include <sched.h>

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
  /* The peer can make progress only once we leave this CPU: every pause would be a
   * pause of the peer too. */
  if (kc_ring_share_cpu(mine, peer)) {
    sp->shared++;
    return false;
  }
  __builtin_ia32_pause();
  /* a third task may be waiting for this CPU: let it run now and then */
  if (step % 64 == 63)
    sched_yield();
  if (step % 8 != 7) /* the clock costs as much as a pause: read it now and then */
    return true;
  uint64_t now = kc_now_ns();
  return now < until_ns && now - sp->t0 < sp->budget_ns;
}

void kc_spin_end(kc_spinner *sp, bool satisfied) {
  kc_spin *s = sp->state;
  /* Only a spin on a CPU of its own says whether spinning pays. */
  if (sp->shared)
    return;
  uint64_t b = s->budget_ns && s->budget_ns < sp->max_ns ? s->budget_ns : sp->max_ns;
  if (satisfied)
    b = b * 2 > sp->max_ns ? sp->max_ns : b * 2;
  else
    b = b / 2 < KC_SPIN_MIN_NS ? KC_SPIN_MIN_NS : b / 2;
  s->budget_ns = b;
}
