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

/* expect_s: how long the call should take (0 = unknown); see kc_mrunner_call_expect. */
static int do_call_expect(kc_mctx *x, const void *req, size_t len, double expect_s, kc_mcall *c,
                          kc_error *err) {
  double left = x->deadline - kc_now_s();
  if (left <= 0) {
    memset(c, 0, sizeof *c);
    c->status = KC_MCALL_TIMEOUT;
    return 0;
  }
  return kc_mrunner_call_expect(x->runner, req, len, left, expect_s, c, err);
}

static int do_call(kc_mctx *x, const void *req, size_t len, kc_mcall *c, kc_error *err) {
  return do_call_expect(x, req, len, 0, c, err);
}

/* Check the outputs of one call (set `set`, poisoned with `word`).  false when the
 * kernel's status was set. */
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

static size_t fill_load(kc_mctx *x, unsigned char *buf, size_t cap) {
  kc_mreq_load h = {KC_MPROTO_MAGIC, KC_MOP_LOAD, x->n_sets, 0};
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

/* One RUN request.  Returns 1 completed (reply validated, *rep points at the outputs),
 * 0 kernel status set, -1 parent error. */
static int run_req(kc_mctx *x, kc_kmeasure *m, const kc_mreq_run *req, double expect_s,
                   kc_mcall *c, const unsigned char **outs, double *elapsed, const char *what,
                   kc_error *err) {
  double t0 = kc_now_s();
  if (do_call_expect(x, req, sizeof *req, expect_s, c, err) < 0)
    return -1;
  double t1 = kc_now_s();
  /* The worker's own view (published -> completion seen) leaves out the copy of the
   * checked outputs, which grows with their size; both clocks are the parent's. */
  if (elapsed)
    *elapsed = c->status == KC_MCALL_OK && c->elapsed_s > 0 ? c->elapsed_s : t1 - t0;
  if (!outcome(m, c, what))
    return 0;
  uint64_t region = kc_args_region_bytes(x->spec, true);
  kc_mreply_run rep;
  if (c->value_len != sizeof rep + req->n_checks * region) {
    set_status(m, KC_BENCH_SUSPICIOUS, "%s: the worker's reply has the wrong size", what);
    return 0;
  }
  memcpy(&rep, c->value, sizeof rep);
  if (rep.magic != KC_MPROTO_MAGIC || rep.n_checks != req->n_checks) {
    set_status(m, KC_BENCH_SUSPICIOUS, "%s: the worker's reply is malformed", what);
    return 0;
  }
  *outs = (const unsigned char *)c->value + sizeof rep;
  return 1;
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

int kc_measure_kernel(kc_mctx *x, kc_kmeasure *m, kc_error *err) {
  memset(m, 0, sizeof *m);
  m->status = KC_BENCH_OK;
  m->max_abs_err = NAN;
  uint64_t st;
  if (getrandom(&st, sizeof st, 0) != sizeof st)
    st = (uint64_t)kc_now_s() * 1000003u;
  uint64_t region = kc_args_region_bytes(x->spec, true);
  kc_mcall c;

  /* Every kernel starts with set i in slot i (a previous kernel may have moved them). */
  if (x->slots && x->slots->fd >= 0) {
    uint32_t id[64];
    for (uint32_t j = 0; j < x->n_sets; j++)
      id[j] = j;
    if (kc_minputs_place(x->slots, id, err) < 0)
      return -1;
  }

  /* 1. Load (the worker seals itself once the code is in). */
  unsigned char lbuf[4 * 4096 + 64];
  size_t ln = fill_load(x, lbuf, sizeof lbuf);
  if (!ln)
    return kc_error_set(err, ENAMETOOLONG, "load request");
  if (do_call(x, lbuf, ln, &c, err) < 0)
    return -1;
  bool ok = outcome(m, &c, "load");
  kc_mcall_clear(&c);
  if (!ok)
    return 0;

  /* 2. One untimed warm-up call (TVM).  Its output is judged in the next step, where
   * a wrong answer can be told apart from one that depends on the poison. */
  kc_mreq_run req = {.magic = KC_MPROTO_MAGIC,
                     .op = KC_MOP_RUN,
                     .number = 1,
                     .first_set = 0,
                     .n_checks = 0,
                     .poison_seed = rng_next(&st)};
  const unsigned char *outs;
  int r = run_req(x, m, &req, 0, &c, &outs, NULL, "warm-up", err);
  kc_mcall_clear(&c);
  if (r <= 0)
    return r;

  /* 3. Every set twice, under different poison (seeds differ in the low bit) and, the
   * second time, in another slot (another address): the outputs must match the
   * reference and each other bit for bit. */
  uint32_t nv = x->n_sets < KC_MPROTO_MAX_CHECKS ? x->n_sets : KC_MPROTO_MAX_CHECKS;
  unsigned char *first = malloc((size_t)x->n_sets * region);
  bool seen[64] = {false};
  if (!first)
    return kc_error_set(err, ENOMEM, "verify");
  uint64_t vseed = rng_next(&st) & ~1ull;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && shuffle_slots(x, &st, true, err) < 0) {
      free(first);
      return -1;
    }
    memset(&req, 0, sizeof req);
    req.magic = KC_MPROTO_MAGIC;
    req.op = KC_MOP_RUN;
    req.number = nv;
    req.first_set = 0;
    req.n_checks = nv;
    req.poison_seed = vseed | (uint64_t)pass;
    for (uint32_t i = 0; i < nv; i++)
      req.checks[i] = i;
    r = run_req(x, m, &req, 0, &c, &outs, NULL, "verify", err);
    if (r <= 0) {
      kc_mcall_clear(&c);
      free(first);
      return r;
    }
    for (uint32_t i = 0; i < nv && m->status == KC_BENCH_OK; i++) {
      const unsigned char *g = outs + i * region;
      uint64_t word = kc_poison_word(req.poison_seed, i);
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
    kc_mcall_clear(&c);
    if (m->status != KC_BENCH_OK) {
      free(first);
      return 0;
    }
  }
  free(first);

  /* 4. Timing: `number` grown until a round lasts min_repeat_ms (golden-ratio growth or
   * the predicted count), `repeat` rounds, rotating sets, random calls checked. */
  uint64_t number = x->number ? x->number : 1;
  double per_call = 0; /* the last round's seconds per call: predicts the next round */
  m->run_secs = calloc(x->repeat, sizeof(double));
  if (!m->run_secs)
    return kc_error_set(err, ENOMEM, "run_secs");
  for (uint32_t rep = 0; rep < x->repeat; rep++) {
    for (unsigned zero = 0;;) {
      if (shuffle_slots(x, &st, false, err) < 0) /* untimed: before the clock starts */
        return -1;
      memset(&req, 0, sizeof req);
      req.magic = KC_MPROTO_MAGIC;
      req.op = KC_MOP_RUN;
      req.number = number;
      req.first_set = (uint32_t)(rng_next(&st) % x->n_sets);
      req.poison_seed = rng_next(&st);
      req.n_checks = pick_checks(&st, number, x->checks, req.checks);
      if (x->flush_cache) {
        kc_mreq_load f = {KC_MPROTO_MAGIC, KC_MOP_FLUSH, 0, 0};
        if (do_call(x, &f, 8, &c, err) < 0)
          return -1;
        ok = outcome(m, &c, "flush");
        kc_mcall_clear(&c);
        if (!ok)
          return 0;
      }
      /* Untimed wake-up, the parent polling for its answer: the timed request then
       * finds the worker spinning on its ring and this thread awake, instead of paying
       * two idle-vCPU wake-ups (tens to hundreds of us here) inside the round. */
      kc_mreq_load wk = {KC_MPROTO_MAGIC, KC_MOP_WAKE, 0, 0};
      if (do_call_expect(x, &wk, 8, 1e-6, &c, err) < 0)
        return -1;
      ok = outcome(m, &c, "wake");
      kc_mcall_clear(&c);
      if (!ok)
        return 0;
      double dt;
      r = run_req(x, m, &req, per_call * (double)number, &c, &outs, &dt, "timed run", err);
      if (r <= 0) {
        kc_mcall_clear(&c);
        return r;
      }
      for (uint32_t k = 0; k < req.n_checks; k++) {
        uint32_t slot = (uint32_t)((req.first_set + req.checks[k]) % x->n_sets);
        if (!check_output(x, m, outs + k * region, slot,
                          kc_poison_word(req.poison_seed, req.checks[k]), "timed run")) {
          /* It passed the untimed checks and failed a timed one: it behaves differently
           * when it is being timed. */
          if (m->status == KC_BENCH_WRONG_RESULT) {
            char msg[sizeof m->message];
            snprintf(msg, sizeof msg, "%s", m->message);
            set_status(m, KC_BENCH_SUSPICIOUS, "%s, after passing the untimed checks", msg);
          }
          kc_mcall_clear(&c);
          return 0;
        }
      }
      kc_mcall_clear(&c);
      double ms = dt * 1e3;
      per_call = dt / (double)number;
      if (ms >= x->min_repeat_ms || number >= (1ull << 32)) {
        m->run_secs[rep] = dt / (double)number;
        break;
      }
      if (ms <= 0 && ++zero >= 100) { /* TVM's limit_zero_time_iterations */
        m->run_secs[rep] = 0;
        break;
      }
      double per = ms / (double)number;
      double grow = per > 0 ? x->min_repeat_ms / per + 1 : (double)number * 1.618;
      double g2 = (double)number * 1.618;
      uint64_t next = (uint64_t)(grow > g2 ? grow : g2);
      number = next > number ? next : number + 1;
    }
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
