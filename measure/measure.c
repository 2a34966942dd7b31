/* The parent's half of measuring one kernel: TVM's time evaluator (reference/tvm.md
 * §3.2) driven from outside the worker, plus the integrity checks of docs/contracts.md.
 * The clock is read here, around each request; the worker only runs `number` calls. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kcage/cleanup.h"
#include "measure_internal.h"
#include "measure_kernel.h"

static uint64_t rng_next(uint64_t *st) {
  return kc_splitmix64(st);
}

int kc_minputs_place(kc_minputs *in, const uint32_t *perm, kc_error *err) {
  for (uint32_t j = 0; j < in->n_sets; j++) {
    if (in->slot_set[j] == perm[j])
      continue;
    const unsigned char *src = in->data + perm[j] * in->in_region;
    size_t left = (size_t)in->in_region;
    off_t off = (off_t)(j * in->in_region);
    while (left) {
      ssize_t w = pwrite(in->fd, src, left, off);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return kc_error_set(err, errno, "rewrite inputs");
      src += w;
      off += w;
      left -= (size_t)w;
    }
    in->slot_set[j] = perm[j];
  }
  return 0;
}

/* Which set is in slot j now. */
static uint32_t set_of(const kc_mctx *x, uint32_t slot) {
  return x->slots ? x->slots->slot_set[slot] : slot;
}

/* A random arrangement of the sets over the slots; with derange, no set stays. */
static int shuffle_slots(kc_mctx *x, uint64_t *st, bool derange, kc_error *err) {
  if (!x->slots || x->slots->fd < 0 || x->n_sets < 2)
    return 0;
  uint32_t perm[64];
  if (derange) { /* rotate by 1..n-1: every set moves */
    uint32_t r = 1 + (uint32_t)(rng_next(st) % (x->n_sets - 1));
    for (uint32_t j = 0; j < x->n_sets; j++)
      perm[j] = x->slots->slot_set[(j + r) % x->n_sets];
  } else {
    for (uint32_t j = 0; j < x->n_sets; j++)
      perm[j] = j;
    for (uint32_t j = x->n_sets - 1; j > 0; j--) {
      uint32_t k = (uint32_t)(rng_next(st) % (j + 1));
      uint32_t t = perm[j];
      perm[j] = perm[k];
      perm[k] = t;
    }
  }
  return kc_minputs_place(x->slots, perm, err);
}

static void set_status(kc_kmeasure *m, kc_bench_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_status(kc_kmeasure *m, kc_bench_status s, const char *fmt, ...) {
  m->status = s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->message, sizeof m->message, fmt, ap);
  va_end(ap);
}

/* A failed call -> the kernel's status.  Returns true when the call completed. */
static bool outcome(kc_kmeasure *m, const kc_mcall *c, const char *what) {
  switch (c->status) {
  case KC_MCALL_OK:
    return true;
  case KC_MCALL_EXCEPTION:
    if (!strncmp(c->message, "suspicious: ", 12))
      set_status(m, KC_BENCH_SUSPICIOUS, "%s", c->message + 12);
    else if (!strncmp(c->message, "error: ", 7))
      set_status(m, KC_BENCH_ERROR, "%s", c->message + 7);
    else
      set_status(m, KC_BENCH_ERROR, "%s: %s", what, c->message);
    return false;
  case KC_MCALL_TIMEOUT:
    set_status(m, KC_BENCH_TIMEOUT, "%s: no answer within the time limit", what);
    return false;
  case KC_MCALL_DIED:
    break;
  }
  const kc_result *v = &c->verdict;
  switch (v->status) {
  case KC_STATUS_MEMORY:
    set_status(m, KC_BENCH_MEMORY, "%s: the worker ran out of memory", what);
    break;
  case KC_STATUS_SYSCALL:
    set_status(m, KC_BENCH_SYSCALL, "%s: forbidden syscall %s", what,
               v->syscall[0]
                   ? v->syscall
                   : "(unnamed: SIGSYS arrived while signals were blocked, as in thread creation)");
    break;
  case KC_STATUS_PIDS:
    set_status(m, KC_BENCH_SYSCALL, "%s: tried to start a process or thread", what);
    break;
  case KC_STATUS_TIMEOUT:
    set_status(m, KC_BENCH_TIMEOUT, "%s: %s time limit", what, v->limit ? v->limit : "the");
    break;
  case KC_STATUS_SIGNALED:
    set_status(m, KC_BENCH_CRASH, "%s: killed by %s", what, kc_signal_name(v->signal));
    break;
  case KC_STATUS_EXITED:
  case KC_STATUS_OK:
    set_status(m, KC_BENCH_CRASH, "%s: the worker exited (status %d)", what, v->exit_code);
    break;
  default:
    set_status(m, KC_BENCH_ERROR, "%s: %s", what, v->message[0] ? v->message : "worker failed");
  }
  return false;
}
static bool check_output(kc_mctx *x, kc_kmeasure *m, const unsigned char *got, uint32_t slot,
                         uint64_t word, const char *when) {
  const kc_args_spec *a = x->spec;
  uint32_t set = set_of(x, slot);
  uint64_t region = kc_args_region_bytes(a, true);
  for (uint32_t i = 0; i < a->n; i++) {
    const kc_tensor_spec *t = &a->t[i];
    if (!t->out)
      continue;
    uint64_t off = kc_args_offset(a, i);
    const unsigned char *g = got + off;
    double err = 0;
    if (x->ref) {
      const unsigned char *want = x->ref + set * region + off;
      if (kc_tensor_close(t, g, want, x->rtol, x->atol, &err)) {
        if (err > m->max_abs_err || isnan(m->max_abs_err))
          m->max_abs_err = err;
        continue;
      }
    }
    if (kc_poison_equal(g, t->nbytes, word)) {
      set_status(m, KC_BENCH_SUSPICIOUS,
                 "%s: output %u is still the poison (the kernel skipped its work, or its result "
                 "depends on the output's old contents)",
                 when, i);
      return false;
    }
    if (!x->ref)
      continue;
    for (uint32_t s = 0; s < x->n_sets; s++) {
      double e2;
      if (s != set && kc_tensor_close(t, g, x->ref + s * region + off, x->rtol, x->atol, &e2)) {
        set_status(m, KC_BENCH_SUSPICIOUS,
                   "%s: output %u for input set %u is the answer for set %u (a memoised or "
                   "stale result)",
                   when, i, set, s);
        return false;
      }
    }
    m->max_abs_err = err;
    set_status(m, KC_BENCH_WRONG_RESULT,
               "%s: output %u differs from the reference (max abs err %.3g)", when, i, err);
    return false;
  }
  return true;
}

/* A failed chunk -> the kernel's status.  A timeout names the limit that fired. */
static void chunk_outcome(kc_mctx *x, kc_kmeasure *m, const kc_mchunk_out *o) {
  if (o->malformed) {
    set_status(m, KC_BENCH_SUSPICIOUS, "%s: the worker's reply is malformed", o->what);
    return;
  }
  if (o->fail.status == KC_MCALL_TIMEOUT) {
    m->limit = o->limit;
    if (o->limit && !strcmp(o->limit, "budget"))
      set_status(m, KC_BENCH_TIMEOUT, "%s: the measurement ran past its budget (--budget)",
                 o->what);
    else
      set_status(m, KC_BENCH_TIMEOUT, "%s: a call ran past the per-call limit of %g s (--timeout)",
                 o->what, x->call_s);
    return;
  }
  outcome(m, &o->fail, o->what);
}

static double call_limit(const kc_mctx *x) {
  return x->call_s > 0 ? x->call_s : 10;
}

/* One chunk.  1 done (o filled), 0 kernel status set, -1 parent error. */
static int chunk(kc_mctx *x, kc_kmeasure *m, const kc_mchunk *ch, kc_mchunk_out *o, kc_error *err) {
  kc_mlimits l = {call_limit(x), x->deadline};
  int r = kc_mchunk_run(x->runner, x->spec, ch, &l, o, err);
  if (r == 0)
    chunk_outcome(x, m, o);
  if (r <= 0)
    kc_mchunk_out_clear(o);
  return r;
}

static size_t fill_load(kc_mctx *x, unsigned char *buf, size_t cap) {
  kc_mreq_load h = {KC_MPROTO_MAGIC, KC_MOP_LOAD, x->n_sets, x->n_outs};
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

/* Parent-chosen, unpredictable: the kernel cannot know which calls are checked. */
static uint32_t pick_checks(uint64_t *st, uint64_t number, uint32_t want, uint64_t *out) {
  if (want > KC_MPROTO_MAX_CHECKS)
    want = KC_MPROTO_MAX_CHECKS;
  if (want >= number) {
    for (uint64_t i = 0; i < number; i++)
      out[i] = i;
    return (uint32_t)number;
  }
  uint32_t n = 0;
  while (n < want) {
    uint64_t c = rng_next(st) % number;
    bool dup = false;
    for (uint32_t j = 0; j < n; j++)
      dup |= out[j] == c;
    if (!dup)
      out[n++] = c;
  }
  for (uint32_t i = 1; i < n; i++) /* insertion sort */
    for (uint32_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
      uint64_t t = out[j];
      out[j] = out[j - 1];
      out[j - 1] = t;
    }
  return n;
}

uint32_t kc_mouts_for(uint32_t n_sets, uint64_t out_region) {
  uint64_t per = (uint64_t)n_sets * (out_region ? out_region : 1);
  uint64_t m = (256u << 10) / per;
  m = m < 1 ? 1 : m;
  uint64_t n = n_sets * m;
  return (uint32_t)(n > KC_MOUTS_MAX ? KC_MOUTS_MAX / n_sets * n_sets : n);
}

/* Every set twice, under different poison (seeds differ in the low bit) and, the
 * second time, in another slot (another address): the outputs must match the
 * reference and each other bit for bit. */
static int verify(kc_mctx *x, kc_kmeasure *m, uint64_t *st, kc_error *err) {
  uint64_t region = kc_args_region_bytes(x->spec, true);
  uint32_t nv = x->n_sets < KC_MPROTO_MAX_CHECKS ? x->n_sets : KC_MPROTO_MAX_CHECKS;
  kc_cleanup_free unsigned char *first = malloc((size_t)(x->n_sets * region));
  bool seen[64] = {false};
  if (!first)
    return kc_error_set(err, ENOMEM, "verify");
  uint64_t vseed = rng_next(st) & ~1ull;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && shuffle_slots(x, st, true, err) < 0)
      return -1;
    kc_mchunk ch = {.first_set = 0,
                    .first_out = (uint32_t)(rng_next(st) % x->n_outs),
                    .count = nv,
                    .n_outs = x->n_outs,
                    .poison_seed = vseed | (uint64_t)pass,
                    .n_fetch = nv,
                    .what = "verify"};
    for (uint32_t i = 0; i < nv; i++)
      ch.fetch[i] = i;
    kc_mchunk_out o;
    int r = chunk(x, m, &ch, &o, err);
    if (r <= 0)
      return r;
    for (uint32_t i = 0; i < nv && m->status == KC_BENCH_OK; i++) {
      const unsigned char *g = o.outs + i * region;
      uint64_t word = kc_poison_word(ch.poison_seed, i);
      uint32_t set = set_of(x, i);
      /* Left as poison first: that is the clearest explanation. */
      for (uint32_t t = 0; t < x->spec->n; t++)
        if (x->spec->t[t].out &&
            kc_poison_equal(g + kc_args_offset(x->spec, t), x->spec->t[t].nbytes, word))
          set_status(m, KC_BENCH_SUSPICIOUS,
                     "verify: output %u is still the poison (the kernel skipped its work, or its "
                     "result depends on the output's old contents)",
                     t);
      if (m->status != KC_BENCH_OK)
        break;
      if (pass == 0) {
        memcpy(first + set * region, g, region);
        seen[set] = true;
        continue;
      }
      /* The reference first: an answer that belongs to another set (the one this slot
       * held before) is a cache keyed by address, the clearer explanation. */
      if (!check_output(x, m, g, i, word, "verify"))
        break;
      for (uint32_t t = 0; t < x->spec->n && seen[set]; t++) {
        uint64_t off = kc_args_offset(x->spec, t);
        if (x->spec->t[t].out &&
            memcmp(first + set * region + off, g + off, x->spec->t[t].nbytes)) {
          set_status(m, KC_BENCH_SUSPICIOUS,
                     "verify: output %u for input set %u changed between two runs (it depends "
                     "on the poison or is not deterministic)",
                     t, set);
          break;
        }
      }
    }
    kc_mchunk_out_clear(&o);
    if (m->status != KC_BENCH_OK)
      return 0;
  }
  return 1;
}

/* One round of `number` calls, in chunks of at most n_outs, the calls' times summed;
 * random calls checked.  *secs: seconds per call.  1 done, 0 status set, -1 error. */
static int round_of(kc_mctx *x, kc_kmeasure *m, uint64_t *st, uint64_t number, double per_call,
                    double *secs, kc_error *err) {
  if (shuffle_slots(x, st, false, err) < 0) /* untimed: before the clock starts */
    return -1;
  uint64_t checks[KC_MPROTO_MAX_CHECKS];
  uint32_t n_checks = pick_checks(st, number, x->checks, checks), ci = 0;
  uint32_t first_set = (uint32_t)(rng_next(st) % x->n_sets);
  uint64_t region = kc_args_region_bytes(x->spec, true);
  double total = 0;
  for (uint64_t done = 0; done < number;) {
    uint64_t left = number - done;
    kc_mchunk ch = {.first_set = (uint32_t)((first_set + done) % x->n_sets),
                    .first_out = (uint32_t)(rng_next(st) % x->n_outs),
                    .count = (uint32_t)(left < x->n_outs ? left : x->n_outs),
                    .n_outs = x->n_outs,
                    .poison_seed = rng_next(st),
                    .flush = x->flush_cache,
                    .what = "timed run"};
    ch.expect_s = per_call * ch.count;
    for (; ci < n_checks && checks[ci] < done + ch.count; ci++)
      ch.fetch[ch.n_fetch++] = checks[ci] - done;
    kc_mchunk_out o;
    int r = chunk(x, m, &ch, &o, err);
    if (r <= 0)
      return r;
    total += o.elapsed_s;
    for (uint32_t k = 0; k < ch.n_fetch; k++) {
      uint32_t slot = (uint32_t)((ch.first_set + ch.fetch[k]) % x->n_sets);
      if (!check_output(x, m, o.outs + k * region, slot,
                        kc_poison_word(ch.poison_seed, ch.fetch[k]), "timed run")) {
        /* It passed the untimed checks and failed a timed one: it behaves differently
         * when it is being timed. */
        if (m->status == KC_BENCH_WRONG_RESULT) {
          char msg[sizeof m->message];
          snprintf(msg, sizeof msg, "%s", m->message);
          set_status(m, KC_BENCH_SUSPICIOUS, "%s, after passing the untimed checks", msg);
        }
        kc_mchunk_out_clear(&o);
        return 0;
      }
    }
    kc_mchunk_out_clear(&o);
    done += ch.count;
  }
  *secs = total / (double)number;
  return 1;
}

/* A round that lasts min_repeat_ms: `number` grown (golden-ratio growth or the
 * predicted count, TVM) until it does. */
static int sized_round(kc_mctx *x, kc_kmeasure *m, uint64_t *st, uint64_t *number, double *per_call,
                       double *secs, kc_error *err) {
  for (unsigned zero = 0;;) {
    int r = round_of(x, m, st, *number, *per_call, secs, err);
    if (r <= 0)
      return r;
    double ms = *secs * (double)*number * 1e3;
    *per_call = *secs;
    if (ms >= x->min_repeat_ms || *number >= (1ull << 32))
      return 1;
    if (ms <= 0 && ++zero >= 100) /* TVM's limit_zero_time_iterations */
      return 1;
    double per = ms / (double)*number;
    double grow = per > 0 ? x->min_repeat_ms / per + 1 : (double)*number * 1.618;
    double g2 = (double)*number * 1.618;
    uint64_t next = (uint64_t)(grow > g2 ? grow : g2);
    *number = next > *number ? next : *number + 1;
  }
}

/* A fresh worker runs its first rounds slow (cold caches, TLB, branch predictors,
 * frequency): untimed rounds until two in a row agree within 3 % and neither is more
 * than 3 % above the fastest so far; at most 20 rounds, 2 s, and a quarter of what is
 * left of the budget. */
#define KC_WARMUP_MAX 20
#define KC_WARMUP_MAX_S 2.0
static int warm_up(kc_mctx *x, kc_kmeasure *m, uint64_t *st, uint64_t *number, double *per_call,
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
    int r = sized_round(x, m, st, number, per_call, &s, err);
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

void kc_kmeasure_clear(kc_kmeasure *m) {
  free(m->run_secs);
  free(m->warmup_secs);
  m->run_secs = m->warmup_secs = NULL;
}

int kc_measure_kernel(kc_mctx *x, kc_kmeasure *m, kc_error *err) {
  memset(m, 0, sizeof *m);
  m->status = KC_BENCH_OK;
  m->max_abs_err = NAN;
  uint64_t st;
  if (getrandom(&st, sizeof st, 0) != sizeof st)
    st = (uint64_t)kc_now_s() * 1000003u;
  if (!x->n_outs)
    x->n_outs = kc_mouts_for(x->n_sets, kc_args_region_bytes(x->spec, true));

  /* Every kernel starts with set i in slot i (a previous kernel may have moved them). */
  if (x->slots && x->slots->fd >= 0) {
    uint32_t id[64];
    for (uint32_t j = 0; j < x->n_sets; j++)
      id[j] = j;
    if (kc_minputs_place(x->slots, id, err) < 0)
      return -1;
  }

  /* 1. Load (the worker maps and faults in the tensors, then seals itself). */
  unsigned char lbuf[4 * 4096 + 64];
  size_t ln = fill_load(x, lbuf, sizeof lbuf);
  if (!ln)
    return kc_error_set(err, ENAMETOOLONG, "load request");
  kc_mchunk_out lo = {0};
  double load_s = 30 + (double)(kc_args_region_bytes(x->spec, true) * x->n_outs) / 100e6;
  double left = x->deadline > 0 ? x->deadline - kc_now_s() : load_s;
  if (kc_mrunner_call(x->runner, lbuf, ln, left < load_s ? left : load_s, &lo.fail, err) < 0)
    return -1;
  lo.what = "load";
  lo.limit = left < load_s ? "budget" : "call";
  bool ok = lo.fail.status == KC_MCALL_OK;
  if (!ok)
    chunk_outcome(x, m, &lo);
  if (!ok && lo.fail.status == KC_MCALL_TIMEOUT && left >= load_s) /* not a kernel call */
    set_status(m, KC_BENCH_TIMEOUT, "load: no answer within %.0f s", load_s);
  kc_mcall_clear(&lo.fail);
  if (!ok)
    return 0;

  /* 2. One untimed first call (TVM).  Its output is judged in the next step, where a
   * wrong answer can be told apart from one that depends on the poison. */
  kc_mchunk ch = {.count = 1, .n_outs = x->n_outs, .poison_seed = rng_next(&st), .what = "warm-up"};
  kc_mchunk_out o;
  int r = chunk(x, m, &ch, &o, err);
  if (r <= 0)
    return r;
  kc_mchunk_out_clear(&o);

  /* 3. Correctness, untimed. */
  if ((r = verify(x, m, &st, err)) <= 0)
    return r;

  /* 4. Warm-up rounds until steady, then `repeat` timed rounds. */
  uint64_t number = x->number ? x->number : 1;
  double per_call = 0; /* the last round's seconds per call: predicts the next round */
  if ((r = warm_up(x, m, &st, &number, &per_call, err)) <= 0)
    return r;
  m->run_secs = calloc(x->repeat, sizeof(double));
  if (!m->run_secs)
    return kc_error_set(err, ENOMEM, "run_secs");
  for (uint32_t rep = 0; rep < x->repeat; rep++) {
    if ((r = sized_round(x, m, &st, &number, &per_call, &m->run_secs[rep], err)) <= 0)
      return r;
    m->repeat = rep + 1;
    if (x->cooldown_ms > 0 && rep + 1 < x->repeat) {
      struct timespec ts = {(time_t)(x->cooldown_ms / 1000),
                            (long)(fmod(x->cooldown_ms, 1000) * 1e6)};
      nanosleep(&ts, NULL);
    }
  }
  m->number = number;
  return 0;
}
