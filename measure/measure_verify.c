/* After a round, with the worker stopped: every call's output read from the worker's
 * memory by the parent, and calls chosen only now compared in full with the reference,
 * which runs on the same inputs written again (a timed round's calls each had data of
 * their own, long overwritten by later pieces). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcage/cleanup.h"
#include "measure_kernel.h"

/* The reference failed: a setup error, not the kernel's. */
static int reference_failed(const kc_mcall *c, kc_error *err) {
  if (c->status == KC_MCALL_EXCEPTION)
    return kc_error_set(err, 0, "the reference failed: %s", c->message);
  if (c->status == KC_MCALL_TIMEOUT)
    return kc_error_set(err, 0, "the reference ran past the time limit");
  if (c->status == KC_MCALL_DIED)
    return kc_error_set(err, 0, "the reference died: %s", c->verdict.message);
  return kc_error_set(err, 0, "the reference's reply is malformed");
}

/* One call of the reference on set `set`, its outputs read from its memory like a
 * kernel's: an output of any size, with nothing but a header on the ring. */
static int reference_one(kc_mrunner *ref, uint32_t set, uint64_t region, double timeout_s,
                         unsigned char *out, kc_error *err) {
  kc_mreq_prepare pr = {KC_MPROTO_MAGIC, KC_MOP_PREPARE, 1, (uint64_t)(kc_now_s() * 1e9)};
  kc_mcall c;
  if (kc_mrunner_call(ref, &pr, sizeof pr, timeout_s, &c, err) < 0)
    return -1;
  kc_mreply_prepare rep;
  if (c.status != KC_MCALL_OK || c.value_len != sizeof rep) {
    int r = reference_failed(&c, err);
    kc_mcall_clear(&c);
    return r;
  }
  memcpy(&rep, c.value, sizeof rep);
  kc_mcall_clear(&c);
  if (rep.region != region)
    return kc_error_set(err, 0, "the reference's reply is malformed");
  kc_mreq_run req = {.magic = KC_MPROTO_MAGIC,
                     .op = KC_MOP_RUN,
                     .number = 1,
                     .first_set = set,
                     .flags = KC_MRUN_AREA};
  if (kc_mrunner_call(ref, &req, sizeof req, timeout_s, &c, err) < 0)
    return -1;
  if (c.status != KC_MCALL_OK || c.value_len != sizeof(kc_mreply_run)) {
    int r = reference_failed(&c, err);
    kc_mcall_clear(&c);
    return r;
  }
  kc_mcall_clear(&c);
  return kc_observe_read(kc_mrunner_pid(ref), rep.base, out, (size_t)region, err);
}

int kc_reference_eval(kc_mrunner *ref, const uint32_t *sets, uint32_t n, uint64_t region,
                      double timeout_s, unsigned char *out, kc_error *err) {
  for (uint32_t k = 0; k < n; k++)
    if (reference_one(ref, sets[k], region, timeout_s, out + k * region, err) < 0)
      return -1;
  return 0;
}

/* Some aligned 8 bytes of the output still hold a random poison word (never the
 * all-ones one, which honest integer outputs can hold): the call was interrupted, or
 * never finished, when the worker said the round was done.  One chance in 2^64 per
 * word for an honest output. */
static bool poison_partly(const unsigned char *p, uint64_t len, uint64_t word) {
  if (word == ~0ull)
    return false;
  for (uint64_t i = 0; i + 8 <= len; i += 8)
    if (!memcmp(p + i, &word, 8))
      return true;
  return false;
}

/* Read call i's output region.  1 read, 0 the worker's memory is not there (its own
 * doing: status set), -1 the parent cannot read it at all. */
static int read_call(const kc_round_view *v, kc_kmeasure *m, uint64_t i, unsigned char *buf,
                     kc_error *err) {
  if (kc_observe_read(v->pid, v->base + i * v->region, buf, v->region, err) == 0)
    return 1;
  if (err->code != EFAULT)
    return -1;
  kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS,
                     "the outputs of call %llu are gone from the worker's memory",
                     (unsigned long long)i);
  return 0;
}

/* Every output written; calls of the same input equal bit for bit. */
static int check_complete(kc_mctx *x, kc_kmeasure *m, const kc_round_view *v, uint64_t *must,
                          uint32_t *n_must, kc_error *err) {
  const kc_args_spec *a = x->spec;
  kc_cleanup_free unsigned char *cur = malloc(v->region ? v->region : 1);
  kc_cleanup_free unsigned char *first = malloc(v->region ? v->region : 1);
  if (!cur || !first)
    return kc_error_set(err, ENOMEM, "verify");
  for (uint64_t i = 0; i < v->number; i++) {
    int r = read_call(v, m, i, cur, err);
    if (r <= 0)
      return r;
    uint64_t word = kc_poison_word(v->poison_seed, i);
    for (uint32_t t = 0; t < a->n; t++) {
      const unsigned char *o = cur + kc_args_offset(a, t);
      if (a->t[t].out && v->timed && !kc_poison_equal(o, a->t[t].nbytes, word) &&
          poison_partly(o, a->t[t].nbytes, word)) {
        kc_kmeasure_status(
            m, KC_MEASURE_SUSPICIOUS,
            "timed run: the worker said the round was done while output %u of call %llu of %llu "
            "was only partly written (it ended the round before finishing its work)",
            t, (unsigned long long)i, (unsigned long long)v->number);
        return 0;
      }
      if (!a->t[t].out || !kc_poison_equal(o, a->t[t].nbytes, word))
        continue;
      if (word == ~0ull && x->ref) {
        /* All ones is also an honest answer (-1 everywhere, NaN): the reference decides,
         * for the first few such sets; a kernel that skips the calls poisoned with all
         * ones cannot tell which of them those are. */
        uint64_t call = i % v->in.n_data;
        if (*n_must == KC_MPROTO_MAX_CHECKS / 2)
          continue;
        bool have = false;
        for (uint32_t q = 0; q < *n_must; q++)
          have |= must[q] == call;
        if (!have)
          must[(*n_must)++] = call;
        continue;
      }
      if (v->timed)
        kc_kmeasure_status(
            m, KC_MEASURE_SUSPICIOUS,
            "timed run: the worker said the round was done, but output %u of call %llu of %llu "
            "was never written (it skipped calls, or ended the round before finishing them)",
            t, (unsigned long long)i, (unsigned long long)v->number);
      else
        kc_kmeasure_status(
            m, KC_MEASURE_SUSPICIOUS,
            "verify: output %u is still the poison (the kernel skipped its work, or its result "
            "depends on the output's old contents)",
            t);
      return 0;
    }
    if (i < v->in.n_data) /* a timed round: every call has data of its own */
      continue;
    r = read_call(v, m, i % v->in.n_data, first, err);
    if (r <= 0)
      return r;
    for (uint32_t t = 0; t < a->n; t++) {
      uint64_t off = kc_args_offset(a, t);
      if (a->t[t].out && memcmp(cur + off, first + off, a->t[t].nbytes)) {
        kc_kmeasure_status(
            m, KC_MEASURE_SUSPICIOUS,
            "%s: output %u for input set %u changed between two calls (it depends on the "
            "poison or is not deterministic)",
            v->timed ? "timed run" : "verify", t, (unsigned)(i % v->in.n_data));
        return 0;
      }
    }
  }
  return 1;
}

/* Add call c to the picks unless it is there already. */
static void pick(uint64_t *calls, uint32_t *n, uint64_t c) {
  for (uint32_t q = 0; q < *n; q++)
    if (calls[q] == c)
      return;
  calls[(*n)++] = c;
}

/* Which calls to compare in full with the reference: one call of every set in the
 * untimed round (the others were compared with it bit for bit); after a timed one,
 * calls drawn now, after the round (the kernel could not know them), plus call 0 and
 * the near-copy of its inputs. */
static uint32_t pick_calls(kc_mctx *x, const kc_round_view *v, kc_draws *draws,
                           const uint64_t *must, uint32_t n_must, uint64_t *calls) {
  uint32_t n = 0;
  if (!v->timed) {
    for (uint64_t j = 0; j < v->in.n_data && n < KC_MPROTO_MAX_CHECKS; j++)
      calls[n++] = j;
    return n;
  }
  uint32_t want = x->checks ? x->checks : 1;
  for (uint32_t q = 0; q < n_must; q++)
    pick(calls, &n, must[q]);
  if (v->in.dup != UINT32_MAX) {
    pick(calls, &n, 0);
    pick(calls, &n, v->in.dup);
  }
  for (uint32_t k = 0; k < want && n < KC_MPROTO_MAX_CHECKS; k++)
    pick(calls, &n, kc_draws_next(draws) % v->number);
  return n;
}

/* Output t of call sets[k] is not the reference's: name the likeliest reason. */
static void explain(kc_mctx *x, kc_kmeasure *m, const kc_round_view *v, const uint64_t *sets,
                    uint32_t n, uint32_t k, uint32_t t, const unsigned char *got,
                    const unsigned char *got0, const unsigned char *ref, double e) {
  const kc_tensor_spec *ts = &x->spec->t[t];
  uint64_t off = kc_args_offset(x->spec, t);
  if (kc_poison_equal(got + off, ts->nbytes, kc_poison_word(v->poison_seed, sets[k]))) {
    kc_kmeasure_status(
        m, KC_MEASURE_SUSPICIOUS,
        "%s: output %u is still the poison (the kernel skipped its work, or its result depends "
        "on the output's old contents)",
        v->timed ? "timed run" : "verify", t);
    return;
  }
  if (sets[k] == v->in.dup && got0 && !memcmp(got + off, got0 + off, ts->nbytes)) {
    kc_kmeasure_status(
        m, KC_MEASURE_SUSPICIOUS,
        "%s: output %u of call %llu, whose inputs are a near-copy of call 0's, is call 0's "
        "answer (a cache keyed on part of the input)",
        v->timed ? "timed run" : "verify", t, (unsigned long long)sets[k]);
    return;
  }
  for (uint32_t q = 0; q < n; q++) {
    double e2;
    if (q != k &&
        kc_tensor_close(ts, got + off, ref + q * v->region + off, x->rtol, x->atol, &e2)) {
      kc_kmeasure_status(
          m, KC_MEASURE_SUSPICIOUS,
          "%s: output %u of call %llu is the answer for call %llu (a memoised or stale result)",
          v->timed ? "timed run" : "verify", t, (unsigned long long)sets[k],
          (unsigned long long)sets[q]);
      return;
    }
  }
  m->max_abs_err = e;
  if (v->timed) /* it passed the untimed round: it behaves differently when timed */
    kc_kmeasure_status(
        m, KC_MEASURE_SUSPICIOUS,
        "timed run: output %u differs from the reference (max abs err %.3g), after passing the "
        "untimed checks",
        t, e);
  else
    kc_kmeasure_status(m, KC_MEASURE_WRONG_RESULT,
                       "verify: output %u differs from the reference (max abs err %.3g)", t, e);
}

/* The reference's outputs for the picked calls: each call's inputs written again into
 * slot 0 (the worker is stopped and done with them), the reference run on it. */
static int reference_outputs(kc_mctx *x, const kc_round_view *v, const uint64_t *calls, uint32_t n,
                             double limit, unsigned char *ref, kc_error *err) {
  uint32_t slot0 = 0;
  for (uint32_t k = 0; k < n; k++) {
    kc_round_data(&v->in, x->in_map, calls[k]);
    if (kc_reference_eval(x->ref, &slot0, 1, v->region, limit, ref + k * v->region, err) < 0)
      return -1;
  }
  return 0;
}

static int check_reference(kc_mctx *x, kc_kmeasure *m, const kc_round_view *v, kc_draws *draws,
                           const uint64_t *must, uint32_t n_must, kc_error *err) {
  uint64_t sets[KC_MPROTO_MAX_CHECKS];
  uint32_t n = pick_calls(x, v, draws, must, n_must, sets);
  kc_cleanup_free unsigned char *ref = malloc(n * v->region + 1);
  kc_cleanup_free unsigned char *got = malloc(v->region + 1);
  kc_cleanup_free unsigned char *got0 = malloc(v->region + 1);
  if (!ref || !got || !got0)
    return kc_error_set(err, ENOMEM, "verify");
  /* The reference's time is not the kernel's: the budget's deadline moves by as much.
   * Its own limit: the per-call one, the budget's remainder, 10 s, whichever is longest,
   * plus the time to poison its outputs. */
  double t0 = kc_now_s(), left = x->deadline > 0 ? x->deadline - t0 : 0;
  double limit = x->call_s > 10 ? x->call_s : 10;
  limit = (left > limit ? left : limit) + (double)v->region / 100e6;
  if (reference_outputs(x, v, sets, n, limit, ref, err) < 0)
    return -1;
  if (x->deadline > 0)
    x->deadline += kc_now_s() - t0;
  int r = read_call(v, m, 0, got0, err);
  if (r <= 0)
    return r;
  for (uint32_t k = 0; k < n; k++) {
    r = read_call(v, m, sets[k], got, err);
    if (r <= 0)
      return r;
    for (uint32_t t = 0; t < x->spec->n; t++) {
      if (!x->spec->t[t].out)
        continue;
      uint64_t off = kc_args_offset(x->spec, t);
      double e;
      if (kc_tensor_close(&x->spec->t[t], got + off, ref + k * v->region + off, x->rtol, x->atol,
                          &e)) {
        if (e > m->max_abs_err || isnan(m->max_abs_err))
          m->max_abs_err = e;
        continue;
      }
      explain(x, m, v, sets, n, k, t, got, got0, ref, e);
      return 0;
    }
  }
  if (v->timed)
    m->checked_calls += n;
  return 1;
}

int kc_verify_round(kc_mctx *x, kc_kmeasure *m, const kc_round_view *v, kc_draws *draws,
                    kc_error *err) {
  uint64_t must[KC_MPROTO_MAX_CHECKS / 2];
  uint32_t n_must = 0;
  int r = check_complete(x, m, v, must, &n_must, err);
  if (r <= 0 || !x->ref)
    return r;
  return check_reference(x, m, v, draws, must, n_must, err);
}

int kc_memory_gone(kc_kmeasure *m, const kc_error *err) {
  if (err->code != EFAULT)
    return -1;
  kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS,
                     "the output area of a round is gone from the worker's memory");
  return 0;
}

/* Before a round, the worker stopped: every region of the area holds the poison its
 * call was given, as the prepare request asked.  The poison is what tells a call that
 * never ran from one that did; the worker wrote it, with code whose data the kernel had
 * every chance to corrupt in an earlier round, and another of its threads could have
 * written over it since.  So the parent reads it back rather than trusting the reply:
 * a region left holding an earlier round's outputs would let a round that ends early,
 * or skips calls, pass the check that every call wrote its outputs.  Read in batches of
 * regions, about 1 MiB at a time.  1 all poisoned, 0 status set, -1 parent error. */
int kc_verify_poisoned(kc_kmeasure *m, const kc_round_view *v, kc_error *err) {
  uint64_t batch = v->region ? (1u << 20) / v->region : 1;
  batch = batch ? batch : 1;
  size_t cap = (size_t)(batch * v->region);
  kc_cleanup_free unsigned char *buf = malloc(cap ? cap : 1);
  if (!buf)
    return kc_error_set(err, ENOMEM, "check the output area");
  for (uint64_t i = 0; i < v->number; i += batch) {
    uint64_t k = v->number - i < batch ? v->number - i : batch;
    if (kc_observe_read(v->pid, v->base + i * v->region, buf, (size_t)(k * v->region), err) < 0)
      return kc_memory_gone(m, err);
    for (uint64_t j = 0; j < k; j++)
      if (!kc_poison_equal(buf + j * v->region, (size_t)v->region,
                           kc_poison_word(v->poison_seed, i + j))) {
        kc_kmeasure_status(m, KC_MEASURE_SUSPICIOUS,
                           "%s: before the round, the output region of call %llu did not hold "
                           "the poison the worker was asked to write",
                           v->timed ? "timed run" : "verify", (unsigned long long)(i + j));
        return 0;
      }
  }
  return 1;
}
