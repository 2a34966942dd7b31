/* The parent's half of measuring one kernel: TVM's time evaluator (reference/tvm.md
 * §3.2) driven from outside the worker, plus the integrity checks of docs/contracts.md.
 * The clock is read here, around each request; the worker only runs `number` calls.
 *
 * A round, as the parent runs it (the README's threat model says which attack each step
 * answers):
 *   1. PREPARE (untimed): the worker sizes its output area, one region per call, and
 *      poisons every region;
 *   2. the parent stops the worker (SIGSTOP, waits until the kernel says it stopped),
 *      reads every region back (each must hold its call's poison: the poison is what
 *      tells a skipped call from a made one, so it rests on what the parent read, not
 *      on the worker's reply) and writes the inputs of the round's first piece: in a
 *      timed round every call reads data of its own, never met before in the round (the
 *      slots of the inputs file are rewritten before each piece when calls outnumber
 *      them), from the run's seed (secret unless --seed), one call's a near-copy of
 *      call 0's;
 *   3. the request (number and slots only: nothing says which calls are checked) is
 *      published, the worker continued, and stopped again the moment its completion
 *      is seen;
 *   4. with the worker stopped, the parent reads every call's output from its memory
 *      (process_vm_readv): every one must be written (in the untimed round, calls of
 *      the same input must agree bit for bit), and calls chosen now, after the round,
 *      are compared in full with the reference, run in its own worker on their inputs
 *      written again.
 * A kernel that ends the round early (forging a completion) is stopped with outputs
 * unwritten; one that skips calls cannot know which are compared; a cache of any key
 * (content, address, slot, call count) never meets a repeat to replay, only the
 * near-copy that a sampled key takes for call 0 (docs/measurement-integrity.md). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache_size.h"
#include "clock.h"
#include "kcage/cleanup.h"

#include "measure_internal.h"
#include "measure_kernel.h"

/* A failed call -> the kernel's status.  Returns true when the call completed. */
static bool outcome(kc_kmeasure *m, const kc_mcall *c, const char *what) {
  switch (c->status) {
  case KC_MCALL_OK:
    return true;
  case KC_MCALL_EXCEPTION:
    if (!strncmp(c->message, "suspicious: ", 12))
      kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS, "%s", c->message + 12);
    else if (!strncmp(c->message, "error: ", 7))
      kc_kmeasure_status(m, KC_MEASURE_ERROR, "%s", c->message + 7);
    else
      kc_kmeasure_status(m, KC_MEASURE_ERROR, "%s: %s", what, c->message);
    return false;
  case KC_MCALL_TIMEOUT:
    kc_kmeasure_status(m, KC_MEASURE_TIMEOUT, "%s: no answer within the time limit", what);
    return false;
  case KC_MCALL_DIED:
    break;
  }
  const kc_result *v = &c->verdict;
  switch (v->status) {
  case KC_STATUS_MEMORY:
    kc_kmeasure_status(m, KC_MEASURE_MEMORY, "%s: the worker ran out of memory", what);
    break;
  case KC_STATUS_SYSCALL:
    kc_kmeasure_status(
        m, KC_MEASURE_SYSCALL, "%s: forbidden syscall %s", what,
        v->syscall[0]
            ? v->syscall
            : "(unnamed: SIGSYS arrived while signals were blocked, as in thread creation)");
    break;
  case KC_STATUS_PIDS:
    kc_kmeasure_status(m, KC_MEASURE_SYSCALL, "%s: tried to start a process or thread", what);
    break;
  case KC_STATUS_TIMEOUT:
    kc_kmeasure_status(m, KC_MEASURE_TIMEOUT, "%s: %s time limit", what,
                       v->limit ? v->limit : "the");
    break;
  case KC_STATUS_SIGNALED:
    kc_kmeasure_status(m, KC_MEASURE_CRASH, "%s: killed by %s", what, kc_signal_name(v->signal));
    break;
  case KC_STATUS_EXITED:
  case KC_STATUS_OK:
    kc_kmeasure_status(m, KC_MEASURE_CRASH, "%s: the worker exited (status %d)", what,
                       v->exit_code);
    break;
  default:
    kc_kmeasure_status(m, KC_MEASURE_ERROR, "%s: %s", what,
                       v->message[0] ? v->message : "worker failed");
  }
  return false;
}

/* The limits of one request: `own_s` (a timed round: --timeout per call, times its
 * calls; an untimed request: its own allowance) and what is left of the budget
 * (--budget, the whole measurement), whichever ends first.  *limit names it, so that a
 * timeout says which one fired. */
static double limit_for(const kc_mctx *x, double own_s, const char **limit) {
  *limit = "call";
  if (x->deadline <= 0)
    return own_s;
  double left = x->deadline - kc_now_s();
  if (left < own_s) {
    *limit = "budget";
    return left;
  }
  return own_s;
}

/* A timeout, as the kernel's status: which limit fired. */
static void timed_out(const kc_mctx *x, kc_kmeasure *m, const char *limit, const char *what) {
  m->limit = limit;
  if (!strcmp(limit, "budget"))
    kc_kmeasure_status(m, KC_MEASURE_TIMEOUT, "%s: the measurement ran past its budget (--budget)",
                       what);
  else
    kc_kmeasure_status(m, KC_MEASURE_TIMEOUT,
                       "%s: a call ran past the per-call limit of %g s (--timeout)", what,
                       x->call_s);
}

/* Untimed requests (prepare, flush) touch whole output areas: time in proportion to
 * the bytes, never less than the per-call limit. */
static double untimed_limit(const kc_mctx *x, uint64_t bytes) {
  double t = 30 + (double)bytes / 100e6;
  return t > x->call_s ? t : x->call_s;
}

static size_t fill_load(kc_mctx *x, unsigned char *buf, size_t cap) {
  kc_mreq_load h = {KC_MPROTO_MAGIC, KC_MOP_LOAD, x->n_slots, (uint32_t)x->abi};
  size_t n = sizeof h;
  memcpy(buf, &h, n);
  const char *strs[4] = {x->artifact, x->entry, x->inputs, x->args_text};
  for (int i = 0; i < 4; i++) {
    size_t l = strlen(strs[i]) + 1;
    if (n + l > cap)
      return 0;
    memcpy(buf + n, strs[i], l);
    n += l;
  }
  return n;
}

/* An untimed request whose reply is `want` bytes, allowed own_s.  1 done, 0 status
 * set, -1 error. */
static int untimed(kc_mctx *x, kc_kmeasure *m, const void *req, size_t len, double own_s,
                   void *reply, size_t want, const char *what, kc_error *err) {
  const char *limit;
  double t = limit_for(x, own_s, &limit);
  kc_mcall c;
  if (t <= 0) {
    timed_out(x, m, limit, what);
    return 0;
  }
  if (kc_mrunner_call(x->runner, req, len, t, &c, err) < 0)
    return -1;
  bool ok = c.status != KC_MCALL_TIMEOUT && outcome(m, &c, what);
  if (c.status == KC_MCALL_TIMEOUT)
    timed_out(x, m, limit, what);
  if (ok && c.value_len != want) {
    kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS, "%s: the worker's reply has the wrong size", what);
    ok = false;
  }
  if (ok && want)
    memcpy(reply, c.value, want);
  kc_mcall_clear(&c);
  return ok;
}

/* The scheduler's account of the worker's CPU time over the round must fit in the
 * wall time during which it could run at all: it is stopped before the request and
 * stopped again when its completion is seen, so dt is the parent's clock around that
 * whole call (not the publish-to-completion time, which leaves out the continue and
 * the stop: on a loaded or emulated host those took tens of ms and honest kernels
 * were flagged).  One thread cannot run longer than that clock, so more means work
 * done outside it.  1 fine (or no account available), 0 status set. */
static int check_cpu(kc_kmeasure *m, pid_t pid, int64_t cpu0, double dt, const char *what) {
  int64_t cpu1 = kc_observe_cpu_ns(pid);
  if (cpu0 < 0 || cpu1 < 0)
    return 1;
  double used = (double)(cpu1 - cpu0) * 1e-9;
  if (used <= dt * 1.25 + 0.005)
    return 1;
  kc_kmeasure_status(
      m, KC_MEASURE_SUSPICIOUS,
      "%s: the worker used %.3g s of CPU in a round of %.3g s (work outside the clock)", what, used,
      dt);
  return 0;
}

/* Where a timed round is cut into pieces for warm outputs, each piece's regions
 * poisoned again by the parent right before it, as a harness poisons each call's output
 * right before the call.
 *
 * Only calls of a millisecond or more whose output fits half of L2 go in pieces, of as
 * many calls as the memory they touch (inputs and outputs) fits in that half, one call
 * at least: a harness's output sits in L2 when its call starts, and such a call pays
 * for a stop and continue of its own.  A 256x256 matmul, whose 256 KiB output is
 * written in strided rows, read 1.037 and 1.043x a harness in one-call pieces and 1.067
 * and 1.075x whole (bench_accuracy, alternated in one hour).
 *
 * Every other round runs whole, its outputs poisoned before it, even where they
 * outgrow the last-level cache and each call writes an output evicted long before.
 * Pieces sized by half of that cache cost more than the warm outputs buy, with the
 * parent waiting asleep on the worker's CPU (a context switch at each end of a piece):
 * a 32x32 matmul (16000 calls of 1.3 us, 4 KiB outputs) read 1.053-1.077x a harness in
 * 12 or 48 pieces (six runs) and 1.020-1.047x whole (ten runs); a 4 MiB memset
 * 1.034-1.036x in pieces of four calls and 1.019-1.023x whole (four runs each), all
 * alternated within one hour.  A call whose own tensors fill that cache (a 1M vector
 * add, 12 MiB) read no better in one-call pieces either.
 *
 * A non-zero piece_bytes (kc_measure_config's) overrides all of this: pieces of as many
 * calls as their tensors fit in it. */
uint64_t kc_round_piece_calls(uint64_t number, uint64_t out_region, uint64_t in_region,
                              double per_call_s, uint64_t piece_bytes) {
  uint64_t budget = piece_bytes;
  if (!budget) {
    uint64_t l2 = kc_cache_bytes(2) / 2;
    if (per_call_s < 1e-3 || !l2 || out_region > l2)
      return number;
    budget = l2;
  }
  if (number * out_region <= budget)
    return number;
  uint64_t k = budget / (out_region + in_region);
  return k < 1 ? 1 : k < number ? k : number;
}

/* Whether each piece's regions are poisoned again by the parent right before it (else
 * they keep the poison it read back before the round).  Pieces cut for warm outputs,
 * always.  Pieces cut because the calls outnumber the input slots, where their outputs
 * fit half of L2: the poison leaves them warm for the piece's calls (a 32x32 matmul's
 * pieces of 128 calls, 512 KiB of outputs, read 1.095-1.111x a harness so, 1.123-1.181x
 * without; bench_accuracy, alternated three times each).  Never where they outgrow it:
 * poison written through process_vm_writev left a 1M vector add's 4 MiB outputs slower
 * to write than the worker's own stores leave them (in one process, that add read
 * 653-681 us after the one poison and 625-644 us after the other; through kcage,
 * 1.16-1.23x the same round run in-process with its own stores before each piece,
 * 1.08-1.16x with none, in alternated runs).  A call could write junk into a later
 * piece's regions first; it pays for that inside the clock, as it would writing junk
 * in its own, which only the comparison with the reference sees. */
bool kc_round_repoison(uint64_t number, uint64_t piece, uint64_t warm, uint64_t out_region) {
  if (piece >= number)
    return false;
  if (warm < number)
    return true;
  uint64_t l2 = kc_cache_bytes(2) / 2;
  return l2 && piece * out_region <= l2;
}

static uint64_t piece_calls(const kc_mctx *x, uint64_t number, uint64_t out_region,
                            uint64_t in_region, double per_call_s) {
  if (x->flush_cache) /* cold caches asked for: nothing to keep warm */
    return number;
  return kc_round_piece_calls(number, out_region, in_region, per_call_s, x->piece_bytes);
}

/* Calls [c0, c0 + cnt) of a round, in the regions of the area from the first on, the
 * worker stopped before and after: continued for the request, stopped again the moment
 * its completion is seen.  *wall: the parent's clock for it.  1 passed, 0 status set,
 * -1 parent error. */
static int run_piece(kc_mctx *x, kc_kmeasure *m, const kc_round_view *v, uint64_t c0, uint64_t cnt,
                     double expect_s, double *wall, kc_error *err) {
  const char *what = v->timed ? "timed run" : "verify";
  int64_t cpu0 = kc_observe_cpu_ns(v->pid);
  kc_mreq_run req = {.magic = KC_MPROTO_MAGIC,
                     .op = KC_MOP_RUN,
                     .number = cnt,
                     .first_set = (uint32_t)(c0 % v->in.n_slots),
                     .n_sets = v->in.n_slots,
                     .flags = KC_MRUN_AREA,
                     .first_call = c0};
  const char *limit;
  double left = limit_for(x, x->call_s * (double)cnt, &limit);
  if (left <= 0) {
    timed_out(x, m, limit, what);
    return 0;
  }
  kc_mcall c;
  double t_cont = kc_now_s();
  if (kc_mrunner_call_timed(x->runner, &req, sizeof req, left, expect_s, v->stay, &c, err) < 0)
    return -1;
  double could_run = kc_now_s() - t_cont;
  *wall = c.elapsed_s > 0 ? c.elapsed_s : 0;
  bool ok = c.status != KC_MCALL_TIMEOUT && outcome(m, &c, what);
  if (c.status == KC_MCALL_TIMEOUT)
    timed_out(x, m, limit, what);
  if (ok && (c.value_len != sizeof(kc_mreply_run) || kc_mrunner_pid(x->runner) != v->pid)) {
    kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS, "%s: the worker's reply is malformed", what);
    ok = false;
  }
  kc_mcall_clear(&c);
  /* each of its threads could run the whole time (a TVM-FFI module's pool) */
  if (ok)
    m->threads = kc_mrunner_threads(x->runner);
  return ok ? check_cpu(m, v->pid, cpu0, could_run * m->threads, what) : 0;
}

/* Before a piece, where kc_round_repoison says so (worker stopped): its regions
 * poisoned again from outside, from wherever place_round put the parent (the worker's
 * CPU when it could go there), call c0 + i's with call c0 + i's word.  1 done, else
 * kc_memory_gone. */
static int poison_piece(kc_kmeasure *m, const kc_round_view *v, uint64_t c0, uint64_t cnt,
                        kc_error *err) {
  int r = 0;
  for (uint64_t i = 0; r == 0 && i < cnt; i++)
    r = kc_observe_poison(v->pid, v->base + (c0 + i) * v->region, v->region,
                          kc_poison_word(v->poison_seed, c0 + i), err);
  return r == 0 ? 1 : kc_memory_gone(m, err);
}

/* Where a round runs.  The worker (stopped) is kept on one CPU for the whole round: the
 * one --cpu names, else the one it last ran on, where the caches hold what it touched.
 * The parent moves there for the round: it writes the round's inputs and each piece's
 * poison there, so that the lines are warm for the worker as a harness's own writes are
 * for its calls (lines another core wrote must first be fetched from that core), and it
 * waits there, asleep, while the worker runs (v->stay): the worker's completion wakes it
 * on that CPU, a context switch away.  A parent that waited on the other CPU had to spin
 * near the end (an idle vCPU takes up to 0.4 ms to wake), and read the clock only when
 * the host ran that vCPU: a 32x32 matmul, whose round runs in 12 pieces, read 1.09, 1.15,
 * 1.37 and 1.26x a harness that way, and 1.08, 1.07, 1.08 and 1.06x asleep on its CPU,
 * the two alternated in one hour (bench_accuracy).  The price is a context switch at
 * each end of a piece: bench_measure's fixed-work kernel reads 0.4-0.9 % over its
 * unsandboxed time in whole batches, against -0.2-0.0 % the other way; a 256x256 matmul
 * and a 4 MiB memset read no worse (medians of six runs 1.038 and 1.044, against 1.035
 * and 1.063).  Done every round: a worker that died was replaced by one that was never
 * pinned.  *had: the worker's CPUs before, to restore after the round (*restore).  0, or
 * -1 with err when --cpu cannot be held. */
static int place_round(const kc_mctx *x, kc_round_view *v, cpu_set_t *had, bool *restore,
                       kc_error *err) {
  *restore = false;
  v->cpu = x->cpu >= 0 ? x->cpu : kc_observe_last_cpu(v->pid);
  if (x->cpu >= 0) {
    if (kc_observe_pin(v->pid, x->cpu) < 0)
      return kc_error_set(err, errno, "--cpu %d: pin the measuring worker", x->cpu);
  } else if (v->cpu >= 0 && sched_getaffinity(v->pid, sizeof *had, had) == 0 &&
             CPU_ISSET(v->cpu, had) && CPU_COUNT(had) > 1) {
    *restore = kc_observe_pin(v->pid, v->cpu) == 0;
  }
  /* on a parent confined to the worker's one CPU, it is there already */
  v->stay = kc_observe_move_to(v->cpu, v->home) ||
            (v->home && v->cpu >= 0 && v->cpu < CPU_SETSIZE && CPU_ISSET(v->cpu, v->home) &&
             CPU_COUNT(v->home) == 1);
  return 0;
}

/* The round's calls, in pieces when they do not fit the cache (piece_calls) or when
 * they outnumber the slots of the inputs file, then its checks.  Before each piece the
 * parent writes its calls' inputs into their slots (data no earlier call of the round
 * met: a slot that comes back holds other data), on the worker's CPU, so they sit in its
 * caches as a harness's inputs would.  Each call writes its own region of the area, so
 * the checks read every output after the round, as from a round run at once: nothing is
 * copied out between pieces, which would push the next calls' inputs out of the cache.
 * *wall: the sum of the pieces' clocks.  1 passed, 0 status set, -1 parent error. */
static int run_calls(kc_mctx *x, kc_kmeasure *m, kc_round_view *v, uint64_t piece, kc_draws *draws,
                     double expect_s, double *wall, kc_error *err) {
  *wall = 0;
  int r = 1;
  for (uint64_t c0 = 0; r > 0 && c0 < v->number; c0 += piece) {
    uint64_t cnt = v->number - c0 < piece ? v->number - c0 : piece;
    double w = 0;
    kc_round_write(&v->in, x->in_map, c0, cnt < v->in.n_slots ? cnt : v->in.n_slots,
                   x->flush_cache);
    if (v->repoison && (r = poison_piece(m, v, c0, cnt, err)) <= 0)
      return r;
    r = run_piece(x, m, v, c0, cnt, expect_s * (double)cnt / (double)v->number, &w, err);
    *wall += w;
  }
  return r > 0 ? kc_verify_round(x, m, v, draws, err) : r;
}

/* The round's output area: sized and poisoned by the worker (prepare), and read back
 * by the parent with the worker stopped (kc_verify_poisoned), which is how the poison
 * comes to rest on what the parent saw rather than on the worker's reply.  With
 * --flush-cache the worker is continued once more to evict its tensors (flush), so
 * that the parent's reading leaves none of them warm: that request's own code runs
 * between the check and the round.  Returns with the worker stopped (before the
 * inputs exist: it meets them only inside the clock); v->pid and v->base filled.
 * 1 ready, 0 status set, -1 parent error (the worker continued again on both). */
static int ready_area(kc_mctx *x, kc_kmeasure *m, kc_round_view *v, kc_error *err) {
  const char *what = v->timed ? "timed run" : "verify";
  kc_mreq_prepare pr = {KC_MPROTO_MAGIC, KC_MOP_PREPARE, v->number, v->poison_seed};
  kc_mreply_prepare rep;
  uint64_t area = v->number * v->region;
  int r = untimed(x, m, &pr, sizeof pr, untimed_limit(x, area), &rep, sizeof rep, what, err);
  if (r <= 0)
    return r;
  if (rep.magic != KC_MPROTO_MAGIC || rep.region != v->region) {
    kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS, "%s: the worker's reply is malformed", what);
    return 0;
  }
  v->pid = kc_mrunner_pid(x->runner);
  v->base = rep.base;
  if (kc_observe_stop(v->pid) < 0 && kill(v->pid, 0) < 0)
    return 1; /* gone: the round's first request reports how */
  r = kc_verify_poisoned(m, v, err);
  if (r < 0 && err->code == ESRCH)
    r = 1; /* died since (its memory with it): the same */
  if (r > 0 && x->flush_cache) {
    kc_observe_cont(v->pid);
    kc_mreq_load f = {KC_MPROTO_MAGIC, KC_MOP_FLUSH, 0, 0};
    if ((r = untimed(x, m, &f, 8, untimed_limit(x, area), NULL, 0, "flush", err)) > 0)
      kc_observe_stop(v->pid);
    return r;
  }
  if (r <= 0)
    kc_observe_cont(v->pid);
  return r;
}

/* Which call of a round reads a near-copy of call 0's inputs: the last set of the
 * untimed round; in a timed round, a call drawn now, so that a kernel that reads the
 * request cannot know which.  UINT32_MAX: none (a round of one call, or of one set). */
static uint64_t near_copy_of_first(bool timed, uint64_t number, uint32_t n_sets, kc_draws *draws) {
  if (!timed)
    return n_sets >= 2 ? n_sets - 1 : UINT32_MAX;
  return number >= 2 ? 1 + kc_draws_next(draws) % (number - 1) : UINT32_MAX;
}

/* One round (see the top of this file).  *dt: the parent's clock, request published
 * -> completion seen, for `want` calls.  1 passed, 0 status set, -1 parent error.
 *
 * A timed round of one call would hold no near-copy, and a memoiser keyed on a sample
 * of the input would meet one only in the untimed round, where a sample that happens
 * to cover a changed element lets it through: such a round makes a second call, on the
 * near-copy of the first one's input, and its time is the mean of the two. */
static int round_once(kc_mctx *x, kc_kmeasure *m, uint64_t want, bool timed, double expect_s,
                      kc_draws *draws, double *dt, kc_error *err) {
  uint64_t number = timed && want == 1 && x->max_calls >= 2 ? 2 : want;
  expect_s *= (double)number / (double)want;
  /* Untimed: --sets sets, each called twice.  Timed: data of its own for every call, in
   * as many slots as the inputs file holds; more calls than that run in pieces, the
   * slots rewritten with fresh data before each. */
  uint32_t n_sets = (uint32_t)(number < x->n_sets ? number : x->n_sets);
  uint32_t n_slots = timed ? (uint32_t)(number < x->n_slots ? number : x->n_slots) : n_sets;
  uint64_t region = kc_args_region_bytes(x->spec, true);
  /* pieces for warm outputs (piece_calls), else as many calls as the slots hold */
  uint64_t warm = timed ? piece_calls(x, number, region, kc_args_region_bytes(x->spec, false),
                                      expect_s / (double)number)
                        : number;
  uint64_t piece = warm < n_slots || !timed ? warm : n_slots;
  /* Odd in timed rounds: call 0 (often the only one) gets a random pattern, which a
   * partly written output still shows (measure_verify.c). */
  uint64_t pseed = timed ? kc_draws_next(draws) | 1 : kc_draws_next(draws);
  kc_round_view v = {.region = region,
                     .number = number,
                     .in = {.spec = x->spec,
                            .in_region = kc_args_region_bytes(x->spec, false),
                            .seed = x->data_seed,
                            .round = x->round++,
                            .n_data = timed ? number : n_sets,
                            .n_slots = n_slots,
                            .dup = near_copy_of_first(timed, number, n_sets, draws)},
                     .poison_seed = pseed,
                     .timed = timed,
                     /* --flush-cache: outputs as cold as its flush leaves them */
                     .repoison = timed && !x->flush_cache &&
                                 kc_round_repoison(number, piece, warm, region)};
  int r = ready_area(x, m, &v, err);
  if (r <= 0)
    return r;
  cpu_set_t home, had;
  bool restore;
  v.home = sched_getaffinity(0, sizeof home, &home) == 0 ? &home : NULL;
  if (place_round(x, &v, &had, &restore, err) < 0) {
    kc_observe_cont(v.pid);
    return -1;
  }
  double wall = 0;
  r = run_calls(x, m, &v, piece, draws, expect_s, &wall, err);
  if (v.home)
    sched_setaffinity(0, sizeof home, &home);
  if (restore)
    sched_setaffinity(v.pid, sizeof had, &had);
  *dt = wall * (double)want / (double)number;
  if (r > 0 && timed)
    m->timed_calls += number;
  kc_observe_cont(v.pid);
  return r;
}

/* TVM's growth of `number` until a round lasts min_repeat_ms: golden-ratio growth or
 * the predicted count, at most what the output area holds. */
static uint64_t grow(const kc_mctx *x, uint64_t number, double ms) {
  double per = ms / (double)number;
  double g1 = per > 0 ? x->min_repeat_ms / per + 1 : (double)number * 1.618;
  double g2 = (double)number * 1.618;
  uint64_t next = (uint64_t)(g1 > g2 ? g1 : g2);
  next = next > number ? next : number + 1;
  return next < x->max_calls ? next : x->max_calls;
}

/* A timed round that lasts min_repeat_ms: `number` grown (TVM) until it does.  Every
 * round run, short ones included, is a whole round: stopped, read and verified.
 * *secs: seconds per call.  1 done, 0 status set, -1 parent error. */
static int sized_round(kc_mctx *x, kc_kmeasure *m, kc_draws *draws, uint64_t *number,
                       double *per_call, double *secs, kc_error *err) {
  for (unsigned zero = 0;;) {
    double dt;
    int r = round_once(x, m, *number, true, *per_call * (double)*number, draws, &dt, err);
    if (r <= 0)
      return r;
    double ms = dt * 1e3;
    *per_call = dt / (double)*number;
    if (ms >= x->min_repeat_ms || *number >= x->max_calls) {
      *secs = dt / (double)*number;
      return 1;
    }
    if (ms <= 0 && ++zero >= 100) { /* TVM's limit_zero_time_iterations */
      *secs = 0;
      return 1;
    }
    *number = grow(x, *number, ms);
  }
}

/* A fresh worker runs its first rounds slow (cold caches, TLB, branch predictors,
 * frequency): rounds, timed and verified like the others but never counted, until two
 * in a row agree within 3 % and neither is more than 3 % above the fastest so far; at
 * most 20 rounds, 2 s, and a quarter of what is left of the budget. */
#define KC_WARMUP_MAX 20
#define KC_WARMUP_MAX_S 2.0
static int warm_up(kc_mctx *x, kc_kmeasure *m, kc_draws *draws, uint64_t *number, double *per_call,
                   kc_error *err) {
  m->warmup_secs = calloc(KC_WARMUP_MAX, sizeof(double));
  if (!m->warmup_secs)
    return kc_error_set(err, ENOMEM, "warm-up");
  double start = kc_now_s(), best = INFINITY;
  double allowance = x->deadline > 0 ? (x->deadline - start) / 4 : INFINITY;
  if (allowance > KC_WARMUP_MAX_S)
    allowance = KC_WARMUP_MAX_S;
  for (uint32_t i = 0; i < KC_WARMUP_MAX; i++) {
    double s;
    int r = sized_round(x, m, draws, number, per_call, &s, err);
    if (r <= 0)
      return r;
    m->warmup_secs[m->n_warmup++] = s;
    best = s < best ? s : best;
    if (i >= 1) {
      double prev = m->warmup_secs[i - 1];
      double lo = s < prev ? s : prev, hi = s < prev ? prev : s;
      if (hi <= lo * 1.03 && hi <= best * 1.03)
        break;
    }
    if (kc_now_s() - start > allowance)
      break;
  }
  return 1;
}

/* Warm-up, then the timed rounds.  0 (status in m), -1 parent error. */
static int timed_rounds(kc_mctx *x, kc_kmeasure *m, kc_draws *draws, kc_error *err) {
  uint64_t number = x->number ? x->number : 1;
  if (number > x->max_calls)
    number = x->max_calls;
  double per_call = 0; /* the last round's seconds per call: predicts the next round */
  int r = warm_up(x, m, draws, &number, &per_call, err);
  if (r <= 0)
    return r;
  m->run_secs = calloc(x->repeat, sizeof(double));
  if (!m->run_secs)
    return kc_error_set(err, ENOMEM, "run_secs");
  for (uint32_t rep = 0; rep < x->repeat; rep++) {
    if ((r = sized_round(x, m, draws, &number, &per_call, &m->run_secs[rep], err)) <= 0)
      return r;
    m->repeat = rep + 1;
    if (x->cooldown_ms > 0 && rep + 1 < x->repeat) {
      time_t sec = (time_t)(x->cooldown_ms / 1000);
      struct timespec ts = {sec, (long)((x->cooldown_ms - 1000.0 * (double)sec) * 1e6)};
      nanosleep(&ts, NULL);
    }
  }
  m->number = number;
  return 0;
}

/* Load (the worker maps and faults in the inputs, then seals itself), allowed time in
 * proportion to the inputs file: its limit is neither --timeout nor, unless the budget
 * is what is left, --budget.  1 loaded, 0 status set, -1 parent error. */
static int load(kc_mctx *x, kc_kmeasure *m, kc_error *err) {
  unsigned char lbuf[4 * 4096 + 64];
  size_t ln = fill_load(x, lbuf, sizeof lbuf);
  if (!ln)
    return kc_error_set(err, ENAMETOOLONG, "load request");
  double load_s = 30 + (double)(kc_args_region_bytes(x->spec, false) * x->n_slots) / 100e6;
  int r = untimed(x, m, lbuf, ln, load_s, NULL, 0, "load", err);
  if (r == 0 && m->status == KC_MEASURE_TIMEOUT && !strcmp(m->limit, "call")) {
    m->limit = NULL; /* not a kernel call */
    kc_kmeasure_status(m, KC_MEASURE_TIMEOUT, "load: no answer within %.0f s", load_s);
  }
  return r;
}

int kc_measure_kernel(kc_mctx *x, kc_kmeasure *m, kc_error *err) {
  memset(m, 0, sizeof *m);
  m->status = KC_MEASURE_OK;
  m->max_abs_err = NAN;
  kc_draws draws; /* keyed: the poison tells the kernel nothing of what is drawn next */
  if (kc_draws_init(&draws, err) < 0)
    return -1;
  if (x->max_calls < 1)
    x->max_calls = 1;
  if (x->call_s <= 0)
    x->call_s = 10;

  /* 1. Refuse what cannot be sealed, load, then audit what is mapped executable. */
  if (kc_audit_elf(x->artifact, m->message, sizeof m->message) < 0) {
    m->status = KC_MEASURE_SUSPICIOUS;
    return 0;
  }
  int r = load(x, m, err);
  if (r <= 0)
    return r;
  int a = kc_audit_maps(kc_mrunner_pid(x->runner), x->artifact, kc_mrunner_plain(x->runner),
                        m->message, sizeof m->message);
  if (a < 0) {
    m->status = a == -1 ? KC_MEASURE_SUSPICIOUS : KC_MEASURE_ERROR;
    return 0;
  }

  /* 2. The untimed round: every set twice, under different poison, every output
   *    compared with the reference. */
  uint64_t sets = x->n_sets < x->max_calls ? x->n_sets : x->max_calls;
  uint64_t number = 2 * sets < x->max_calls ? 2 * sets : x->max_calls;
  double dt;
  r = round_once(x, m, number, false, 0, &draws, &dt, err);
  if (r <= 0)
    return r;

  /* 3. Warm-up until steady, then timing. */
  return timed_rounds(x, m, &draws, err);
}
