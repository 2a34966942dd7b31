/* The measuring phase of a batch: the reference, loaded and sealed in its own worker
 * (the truth every round is compared with), then each kernel in a fresh worker. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcage/cleanup.h"

#include "measure_batch.h"

static void fill_ctx(kc_mctx *x, const kc_measure_config *cfg, const session *s, kc_mrunner *r,
                     const char *artifact, kc_mrunner *ref) {
  memset(x, 0, sizeof *x);
  x->runner = r;
  x->spec = &s->spec;
  x->args_text = cfg->args;
  x->artifact = artifact;
  x->abi = cfg->abi;
  x->entry = cfg->entry ? cfg->entry : kc_abi_default_entry(cfg->abi);
  x->inputs = s->inputs;
  x->n_sets = s->n_sets;
  x->n_slots = s->n_slots;
  x->max_calls = s->max_calls;
  x->in_map = s->in_map;
  x->data_seed = s->data_seed;
  x->ref = ref;
  x->rtol = cfg->rtol < 0 ? 1e-4 : cfg->rtol;
  x->atol = cfg->atol < 0 ? 1e-5 : cfg->atol;
  x->number = cfg->number ? cfg->number : 1;
  x->repeat = cfg->repeat ? cfg->repeat : 5;
  x->min_repeat_ms = cfg->min_repeat_ms < 0 ? 20 : cfg->min_repeat_ms;
  x->cooldown_ms = cfg->cooldown_ms;
  x->flush_cache = cfg->flush_cache;
  x->piece_bytes = cfg->piece_bytes;
  x->cpu = cfg->pin_cpu ? (int)cfg->cpu : -1;
  x->checks = cfg->checks ? cfg->checks : 2;
  x->call_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10;
  x->deadline = cfg->budget_s < 0 ? 0 : kc_now_s() + (cfg->budget_s > 0 ? cfg->budget_s : 300);
}

/* The user's own name for a kernel in a message that names the copy a worker loaded
 * (a loader's "…/view/kernel.so: file too short"): that path means nothing to them. */
static void own_name(char *msg, size_t cap, const char *copy, const char *user) {
  size_t cl = strlen(copy), ul = strlen(user);
  char *p = msg;
  while (cl && (p = strstr(p, copy))) {
    size_t rest = strlen(p + cl);
    if ((size_t)(p - msg) + ul + rest + 1 > cap)
      return;
    memmove(p + ul, p + cl, rest + 1);
    memcpy(p, user, ul);
    p += ul;
  }
}

/* The truth: the reference, loaded and sealed in its own worker, which stays up for
 * the whole batch and computes the outputs of whatever sets the parent picks after
 * each round.  A first evaluation (of all-zero inputs) finds a reference that does not
 * work with --args before any kernel is measured. */
int kc_batch_reference_load(const kc_measure_config *cfg, const session *s, kc_mrunner *r,
                            const char *staged, kc_error *err) {
  if (kc_batch_show_kernel(s, staged, err) < 0)
    return -1;
  kc_mctx x;
  fill_ctx(&x, cfg, s, r, s->kernel, NULL);
  unsigned char lbuf[4 * 4096 + 64];
  kc_mreq_load h = {KC_MPROTO_MAGIC, KC_MOP_LOAD, s->n_slots, (uint32_t)x.abi};
  size_t n = sizeof h;
  memcpy(lbuf, &h, n);
  const char *strs[4] = {s->kernel, x.entry, s->inputs, cfg->args};
  for (int i = 0; i < 4; i++) {
    size_t l = strlen(strs[i]) + 1;
    if (n + l > sizeof lbuf)
      return kc_error_set(err, ENAMETOOLONG, "reference load");
    memcpy(lbuf + n, strs[i], l);
    n += l;
  }
  kc_mcall c;
  /* Loading faults in the inputs file: time in proportion to its size. */
  int rc = kc_mrunner_call(r, lbuf, n, 30 + (double)s->in_len / 100e6, &c, err);
  unlink(s->kernel);
  if (rc < 0)
    return -1;
  if (c.status != KC_MCALL_OK) {
    if (c.status == KC_MCALL_DIED)
      kc_error_set(err, 0, "%s", c.verdict.message);
    else if (c.status == KC_MCALL_TIMEOUT)
      kc_error_set(err, 0, "timed out while loading");
    else {
      own_name(c.message, sizeof c.message, s->kernel, cfg->reference);
      kc_error_set(err, 0, "%s", !strncmp(c.message, "error: ", 7) ? c.message + 7 : c.message);
    }
    kc_mcall_clear(&c);
    return -1;
  }
  kc_mcall_clear(&c);
  kc_cleanup_free unsigned char *probe = malloc(s->out_region + 1);
  uint32_t set0 = 0;
  if (!probe)
    return kc_error_set(err, ENOMEM, "reference");
  double limit = (cfg->timeout_s > 10 ? cfg->timeout_s : 10) + (double)s->out_region / 100e6;
  if (kc_reference_eval(r, &set0, 1, s->out_region, limit, probe, err) < 0) {
    const char *m = err->msg, *p = strstr(m, "error: ");
    kc_error_set(err, 0, "%s", p ? p + 7 : m);
    return -1;
  }
  return 0;
}

/* One kernel, alone in the workers' view, in a fresh worker (a sealed worker cannot
 * load another). */
static void measure_one(const kc_measure_config *cfg, const session *s, kc_mrunner *runner,
                        kc_mrunner *ref, item *it, int *rc, kc_error *err) {
  clock_gettime(CLOCK_REALTIME, &it->started);
  *rc = 0;
  if (it->staged[0]) {
    kc_mctx x;
    fill_ctx(&x, cfg, s, runner, s->kernel, ref);
    *rc = kc_batch_show_kernel(s, it->staged, err);
    if (*rc == 0)
      *rc = kc_measure_kernel(&x, &it->m, err);
    kc_mrunner_reset(runner);
    unlink(s->kernel);
    if (*rc < 0)
      kc_error_prefix(err, "%s", it->path);
    it->measured = true;
    it->status = it->m.status;
    snprintf(it->message, sizeof it->message, "%s", it->m.message);
    own_name(it->message, sizeof it->message, s->kernel, it->path);
  }
  clock_gettime(CLOCK_REALTIME, &it->ended);
}

int kc_batch_measure_all(const kc_measure_config *cfg, const session *s, kc_mrunner *runner,
                         kc_mrunner *ref, item *items, size_t n, size_t ref_index,
                         const char *device, const char *isolation, kc_error *err) {
  size_t total = n + (cfg->reference ? 1 : 0), to_measure = 0, measured = 0;
  for (size_t i = 0; i < total; i++)
    to_measure += items[i].staged[0] != 0;
  double ref_median = NAN;
  kc_cleanup_free size_t *order = calloc(total, sizeof *order);
  size_t no = 0;
  if (!order)
    return kc_error_set(err, ENOMEM, "batch");
  if (cfg->reference)
    order[no++] = ref_index;
  for (size_t i = 0; i < n; i++)
    if (!cfg->reference || i != ref_index)
      order[no++] = i;
  for (size_t k = 0; k < no; k++) {
    size_t i = order[k];
    if (kc_measure_interrupted())
      return kc_error_set(err, EINTR, "interrupted by %s",
                          kc_signal_name(kc_measure_interrupted()));
    item *it = &items[i];
    if (cfg->on_start && it->staged[0])
      cfg->on_start(cfg->progress_ctx, it->path);
    if (cfg->progress && it->staged[0])
      cfg->progress(cfg->progress_ctx, "measure", measured, to_measure);
    int rc;
    measure_one(cfg, s, runner, ref, it, &rc, err);
    if (rc < 0)
      return -1;
    measured += it->staged[0] != 0;
    if (cfg->reference && i == ref_index && it->status == KC_MEASURE_OK && it->m.repeat) {
      kc_mstats st;
      kc_mstats_of(it->m.run_secs, it->m.repeat, &st);
      ref_median = st.median;
    }
    kc_batch_source_hash(it);
    if (cfg->reference)
      kc_batch_source_hash(&items[ref_index]);
    it->rec = kc_batch_record(cfg, it, device, isolation, ref_median,
                              cfg->reference ? items[ref_index].sha256 : NULL);
    if (i < n && cfg->on_record)
      cfg->on_record(cfg->record_ctx, it->rec);
  }
  if (cfg->progress)
    cfg->progress(cfg->progress_ctx, "done", to_measure, to_measure);
  return 0;
}
