/* kc_measure_run_batch: the whole `kcage bench` job.  Inputs generated once per batch
 * into a read-only file, builds in parallel (content-addressed cache), the reference's
 * outputs computed in their own worker, then every kernel measured in a fresh worker,
 * one after another (parallel measurements on a small machine would time each other). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Paths are built from directories whose length was checked when they were made; a
 * truncated name fails at open(), never silently. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "measure_batch.h"

void kc_measure_config_init(kc_measure_config *c) {
  memset(c, 0, sizeof *c);
  c->rtol = -1;
  c->atol = -1;
  c->min_repeat_ms = -1;
}

static bool has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int kc_measure_run_batch(const kc_measure_config *cfg, const char *const *kernels, size_t n,
                         json_t **records, kc_error *err) {
  return kc_measure_run_batch_ex(cfg, kernels, n, records, NULL, err);
}

/* One local batch: the kernels (then the reference, unless it is one of them), their
 * session and the two runners. */
typedef struct batch {
  const kc_measure_config *cfg;
  const char *const *kernels;
  size_t n, total;
  item *items;
  size_t ref_index; /* the reference's item; SIZE_MAX without one */
  session s;
  bool have_session;
  kc_mrunner *runner, *ref_runner;
  char device[512];
  const char *isolation;
} batch;

/* "0-3,6": the CPUs of a set, as the kernel lists them. */
static const char *cpu_list(const cpu_set_t *set, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && len < cap; c++) {
    if (!CPU_ISSET(c, set) || (c > 0 && CPU_ISSET(c - 1, set)))
      continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
      e++;
    int w = e > c ? snprintf(buf + len, cap - len, "%s%d-%d", len ? "," : "", c, e)
                  : snprintf(buf + len, cap - len, "%s%d", len ? "," : "", c);
    len += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

/* --cpu: a CPU the caller itself may run on (one outside its set would be a pin the
 * caller's own placement forbids, or no CPU at all). */
static int check_cpu_choice(const kc_measure_config *cfg, kc_error *err) {
  cpu_set_t mine;
  if (!cfg->pin_cpu)
    return 0;
  if (sched_getaffinity(0, sizeof mine, &mine) < 0)
    return kc_error_set(err, errno, "--cpu");
  if (cfg->cpu >= CPU_SETSIZE || !CPU_ISSET(cfg->cpu, &mine))
    return kc_error_set(err, 0, "--cpu %u: not one of the CPUs this process may run on (%s)",
                        cfg->cpu, cpu_list(&mine, (char[256]){0}, 256));
  return 0;
}

/* What can be refused before anything is read or built. */
static int check_batch(batch *b, kc_error *err) {
  const kc_measure_config *cfg = b->cfg;
  if (kc_args_parse(cfg->args, &b->s.spec, err) < 0)
    return kc_error_prefix(err, "--args");
  b->s.n_sets = cfg->sets ? cfg->sets : 4;
  if (b->s.n_sets > 64)
    return kc_error_set(err, 0, "too many input sets (at most 64)");
  b->s.out_region = kc_args_region_bytes(&b->s.spec, true);
  if (kc_batch_check_fits(cfg, &b->s, err) < 0 || check_cpu_choice(cfg, err) < 0)
    return -1;
  if (b->n == 0)
    return kc_error_set(err, 0, "no kernels given");
  for (size_t i = 0; i < b->n; i++)
    if (access(b->kernels[i], R_OK) < 0)
      return kc_error_set(err, errno, "%s", b->kernels[i]);
  if (cfg->reference && access(cfg->reference, R_OK) < 0)
    return kc_error_set(err, errno, "--reference %s", cfg->reference);
  return 0;
}

/* Items: the kernels, then the reference (built and measured like any kernel, for the
 * speed-up); a source read, and marked when an earlier one is the same text. */
static int plan_items(batch *b, kc_error *err) {
  item *items = b->items;
  for (size_t i = 0; i < b->total; i++) {
    item *it = &items[i];
    it->path = i < b->n ? b->kernels[i] : b->cfg->reference;
    it->dup_of = -1;
    if (has_suffix(it->path, ".so"))
      continue;
    if (!has_suffix(it->path, ".c"))
      return kc_error_set(err, 0, "%s: not a kernel (want a .c source or a .so shared object)",
                          it->path);
    it->is_source = true;
    if (kc_read_file(it->path, &it->src, &it->src_len, 16u << 20, err) < 0)
      return -1;
    for (size_t j = 0; j < i; j++)
      if (items[j].is_source && items[j].dup_of < 0 && items[j].src_len == it->src_len &&
          !memcmp(items[j].src, it->src, it->src_len)) {
        it->dup_of = (int)j;
        break;
      }
  }
  b->ref_index = SIZE_MAX;
  if (b->cfg->reference) { /* one of the kernels, or its own item */
    b->ref_index = b->n;
    char x[PATH_MAX], y[PATH_MAX];
    if (realpath(b->cfg->reference, x))
      for (size_t i = 0; i < b->n; i++)
        if (realpath(b->kernels[i], y) && !strcmp(x, y)) {
          b->ref_index = i;
          break;
        }
  }
  return 0;
}

/* Each kernel that built (or came built) copied into the session. */
static int stage_items(batch *b, kc_error *err) {
  for (size_t i = 0; i < b->total; i++) {
    item *it = &b->items[i];
    const char *art = it->path;
    if (it->is_source) {
      if (!kc_batch_build_verdict(it))
        continue;
      art = it->build.artifact;
    }
    snprintf(it->staged, sizeof it->staged, "%s/k%zu.so", b->s.dir, i);
    /* a .so is hashed as it is staged: the bytes the worker loads */
    if (kc_batch_copy_file(art, it->staged, it->is_source ? NULL : it->sha256, err) < 0)
      return -1;
  }
  return 0;
}

/* The kernels' runner, and the reference's (its outputs are read from its memory too:
 * nothing large on the ring); the device line says how the kernels were isolated. */
static int start_runners(batch *b, kc_error *err) {
  const kc_measure_config *cfg = b->cfg;
  kc_mrunner_opts ro = {.bind_dir = b->s.view,
                        .inputs_dir = b->s.in_dir[0] ? b->s.in_dir : NULL,
                        .inputs_at = b->s.in_at,
                        .memory_bytes = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30),
                        .max_arg_bytes = 64 * 1024,
                        .max_result_bytes = 4096,
                        .plain = cfg->no_isolation,
                        .settings = cfg->settings};
  if (kc_mrunner_new(&ro, &b->runner, err) < 0)
    return -1;
  if (cfg->reference && kc_mrunner_new(&ro, &b->ref_runner, err) < 0)
    return -1;
  const char *kind = kc_mrunner_kind(b->runner);
  b->isolation = strcmp(kind, "sandbox") ? "none" : "sandbox";
  size_t dl = strlen(b->device);
  snprintf(b->device + dl, sizeof b->device - dl, " [%s]", kind);
  return 0;
}

/* The truth, from the reference in its own worker. */
static int load_reference(batch *b, kc_error *err) {
  const kc_measure_config *cfg = b->cfg;
  if (!cfg->reference)
    return 0;
  item *ri = &b->items[b->ref_index];
  if (!ri->staged[0])
    return kc_error_set(err, 0, "--reference %s: %s", cfg->reference, ri->message);
  if (kc_batch_reference_load(cfg, &b->s, b->ref_runner, ri->staged, err) < 0)
    return kc_error_prefix(err, "--reference %s (with --args '%s', %u tensors)", cfg->reference,
                           cfg->args, b->s.spec.n);
  return 0;
}

static int run_steps(batch *b, kc_error *err) {
  if (plan_items(b, err) < 0)
    return -1;
  kc_batch_build(b->cfg, b->items, b->total);
  if (kc_measure_interrupted())
    return kc_error_set(err, EINTR, "interrupted by %s", kc_signal_name(kc_measure_interrupted()));
  if (kc_batch_session_make(b->cfg, &b->s, err) < 0)
    return -1;
  b->have_session = true;
  if (stage_items(b, err) < 0 || start_runners(b, err) < 0 || load_reference(b, err) < 0)
    return -1;
  /* Measure, one kernel per fresh worker (a sealed worker cannot load another): the
   * reference first (its median is every record's speed-up), then the kernels in input
   * order, each record handed out as soon as it is final. */
  return kc_batch_measure_all(b->cfg, &b->s, b->runner, b->ref_runner, b->items, b->n, b->ref_index,
                              b->device, b->isolation, err);
}

static void free_batch(batch *b) {
  kc_mrunner_free(b->runner);
  kc_mrunner_free(b->ref_runner);
  for (size_t i = 0; i < b->total; i++) {
    free(b->items[i].src);
    kc_kmeasure_clear(&b->items[i].m);
    json_decref(b->items[i].rec);
  }
  free(b->items);
  if (b->have_session)
    kc_rm_rf(b->s.dir);
  if (b->s.in_dir[0])
    kc_rm_rf(b->s.in_dir);
  if (b->s.in_map)
    munmap(b->s.in_map, b->s.in_len ? b->s.in_len : 1);
  if (b->s.in_fd >= 0)
    close(b->s.in_fd);
}

int kc_measure_run_batch_ex(const kc_measure_config *cfg, const char *const *kernels, size_t n,
                            json_t **records, json_t **reference_record, kc_error *err) {
  *records = NULL;
  if (reference_record)
    *reference_record = NULL;
  if (cfg->tracker)
    return kc_error_set(err, EINVAL, "a batch for a tracker goes to kc_measure_remote_run");
  batch b = {.cfg = cfg, .kernels = kernels, .n = n};
  if (check_batch(&b, err) < 0)
    return -1;
  b.total = n + (cfg->reference ? 1 : 0);
  b.items = calloc(b.total, sizeof *b.items);
  if (!b.items)
    return kc_error_set(err, ENOMEM, "batch");
  b.s.in_fd = -1;
  kc_batch_device_name(b.device, sizeof b.device);
  int rc = run_steps(&b, err);
  if (rc == 0) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append(arr, b.items[i].rec);
    if (cfg->reference && reference_record) { /* for the speed-up column */
      json_t *r = json_deep_copy(b.items[b.ref_index].rec);
      json_object_set_new(r, "kernel", json_string(cfg->reference));
      *reference_record = r;
    }
    *records = arr;
  }
  free_batch(&b);
  return rc;
}
