/* How both ends of a ring wait for each other (see ring.h): spin only while spinning
 * can pay, and sleep when it cannot: at once when the peer needs this very CPU.
 *
 * No sched_yield anywhere: under EEVDF a yield moves the yielder's virtual deadline a
 * whole slice on, so on a busy CPU it hands the CPU to whichever other task is
 * runnable (a compiler, a busy loop), for a slice, not to the peer it waits for, and
 * the peer's answer then waits for it.  Measured with the Python pool on 2 vCPUs with
 * three busy loops: yield-then-sleep gave a warm round trip p90 of 4 ms and 0.56x
 * TVM's map throughput; sleeping at once 68 us and 1.9x.  A sleeper keeps its lag, so
 * the wake-up runs it promptly; on a quiet machine sleeping at once was no slower
 * (21-30 us against 25-28 us). */
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
  if (kc_ring_share_cpu(mine, peer)) {
    /* The peer can make progress only once we leave this CPU: sleep now. */
    sp->shared++;
    return false;
  }
  unsigned step = sp->steps++;
  __builtin_ia32_pause();
  sp->pauses++;
  if (step % 8 != 7) /* the clock costs as much as a pause: read it now and then */
    return true;
  uint64_t now = kc_now_ns();
  return now < until_ns && now - sp->t0 < sp->budget_ns;
}

void kc_spin_end(kc_spinner *sp, bool satisfied) {
  kc_spin *s = sp->state;
  /* Only a spin on a CPU of its own says whether spinning pays. */
  if (sp->shared || !sp->pauses)
    return;
  uint64_t b = s->budget_ns && s->budget_ns < sp->max_ns ? s->budget_ns : sp->max_ns;
  if (satisfied)
    b = b * 2 > sp->max_ns ? sp->max_ns : b * 2;
  else
    b = b / 2 < KC_SPIN_MIN_NS ? KC_SPIN_MIN_NS : b / 2;
  s->budget_ns = b;
}
