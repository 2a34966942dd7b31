/* One chunk of a timed round, as the parent drives it: the outputs are poisoned by an
 * untimed PREP, the cache optionally flushed, the worker woken, then the only timed
 * request (RUN, PREPARED: nothing but the kernel's calls), then the checked outputs
 * read back by untimed FETCHes, in pieces no larger than KC_MFETCH_MAX so an output
 * of any size fits the ring. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "measure_kernel.h"

/* Untimed requests (poison, flush, fetch) touch whole tensors: allow them time in
 * proportion, never less than the per-call limit. */
static double untimed_limit(const kc_mlimits *l, uint64_t bytes) {
  double t = 30 + (double)bytes / 100e6;
  return t > l->call_s ? t : l->call_s;
}

/* One request under the tighter of its own limit and the budget.  Returns 1 when it
 * completed, 0 when it failed (o->fail, o->what, o->limit), -1 on a parent error. */
static int step(kc_mrunner *r, const kc_mlimits *l, const void *req, size_t len, double own_s,
                double expect_s, const char *what, kc_mchunk_out *o, kc_error *err) {
  double left = l->deadline > 0 ? l->deadline - kc_now_s() : own_s;
  bool by_budget = l->deadline > 0 && left < own_s;
  kc_mcall *c = &o->fail;
  o->what = what;
  if (left <= 0) {
    memset(c, 0, sizeof *c);
    c->status = KC_MCALL_TIMEOUT;
    o->limit = "budget";
    return 0;
  }
  if (kc_mrunner_call_expect(r, req, len, by_budget ? left : own_s, expect_s, c, err) < 0)
    return -1;
  if (c->status == KC_MCALL_OK)
    return 1;
  if (c->status == KC_MCALL_TIMEOUT)
    o->limit = by_budget ? "budget" : "call";
  return 0;
}

int kc_mchunk_run(kc_mrunner *r, const kc_args_spec *spec, const kc_mchunk *ch, const kc_mlimits *l,
                  kc_mchunk_out *o, kc_error *err) {
  memset(o, 0, sizeof *o);
  uint64_t region = kc_args_region_bytes(spec, true);
  kc_mreq_prep prep = {KC_MPROTO_MAGIC, KC_MOP_PREP, ch->first_out, ch->count, ch->poison_seed};
  int rc =
      step(r, l, &prep, sizeof prep, untimed_limit(l, region * ch->count), 0, "prepare", o, err);
  if (rc <= 0)
    return rc;
  kc_mcall_clear(&o->fail);
  if (ch->flush) {
    kc_mreq_load f = {KC_MPROTO_MAGIC, KC_MOP_FLUSH, 0, 0};
    if ((rc = step(r, l, &f, 8, untimed_limit(l, region * ch->count), 0, "flush", o, err)) <= 0)
      return rc;
    kc_mcall_clear(&o->fail);
  }
  /* Untimed wake-up, the parent polling for its answer: the timed request then finds
   * the worker spinning on its ring and this thread awake, instead of paying two
   * idle-vCPU wake-ups (tens to hundreds of us here) inside the round. */
  kc_mreq_load wk = {KC_MPROTO_MAGIC, KC_MOP_WAKE, 0, 0};
  if ((rc = step(r, l, &wk, 8, untimed_limit(l, 0), 1e-6, "wake", o, err)) <= 0)
    return rc;
  kc_mcall_clear(&o->fail);

  kc_mreq_run run = {.magic = KC_MPROTO_MAGIC,
                     .op = KC_MOP_RUN,
                     .number = ch->count,
                     .first_set = ch->first_set,
                     .flags = KC_MRUN_PREPARED,
                     .first_out = ch->first_out};
  double t0 = kc_now_s();
  if ((rc = step(r, l, &run, sizeof run, l->call_s * ch->count, ch->expect_s, ch->what, o, err)) <=
      0)
    return rc;
  double t1 = kc_now_s();
  /* The runner's own view (published -> completion seen) when it has one. */
  o->elapsed_s = o->fail.elapsed_s > 0 ? o->fail.elapsed_s : t1 - t0;
  kc_mreply_run rep;
  bool good = o->fail.value_len == sizeof rep;
  if (good) {
    memcpy(&rep, o->fail.value, sizeof rep);
    good = rep.magic == KC_MPROTO_MAGIC && rep.n_checks == 0;
  }
  kc_mcall_clear(&o->fail);
  if (!good) {
    o->malformed = true;
    return 0;
  }
  if (!ch->n_fetch)
    return 1;
  o->outs = malloc((size_t)(ch->n_fetch * region));
  if (!o->outs)
    return kc_error_set(err, ENOMEM, "outputs (%u x %llu bytes)", ch->n_fetch,
                        (unsigned long long)region);
  for (uint32_t k = 0; k < ch->n_fetch; k++) {
    uint32_t reg = (uint32_t)((ch->first_out + ch->fetch[k]) % ch->n_outs);
    for (uint64_t off = 0; off < region;) {
      uint64_t len = region - off < KC_MFETCH_MAX ? region - off : KC_MFETCH_MAX;
      kc_mreq_fetch f = {KC_MPROTO_MAGIC, KC_MOP_FETCH, reg, 0, off, len};
      if ((rc = step(r, l, &f, sizeof f, untimed_limit(l, len), 0, "fetch", o, err)) <= 0)
        return rc;
      /* Hostile reply: exactly the bytes asked for, or the kernel's word is void. */
      if (o->fail.value_len != len) {
        kc_mcall_clear(&o->fail);
        o->malformed = true;
        return 0;
      }
      memcpy(o->outs + k * region + off, o->fail.value, (size_t)len);
      kc_mcall_clear(&o->fail);
      off += len;
    }
  }
  return 1;
}

void kc_mchunk_out_clear(kc_mchunk_out *o) {
  kc_mcall_clear(&o->fail);
  free(o->outs);
  o->outs = NULL;
}
