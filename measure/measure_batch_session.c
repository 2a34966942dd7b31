/* A batch's session: the directory of staged kernels, the view a worker sees, the
 * inputs file; and the refusals of a problem the measuring worker's memory limit
 * cannot hold. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cgroup.h"
#include "kcage/cleanup.h"

/* Paths are built from directories whose length was checked when they were made; a
 * truncated name fails at open(), never silently. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "measure_batch.h"

int kc_batch_copy_file(const char *from, const char *to, char *sha256, kc_error *err) {
  kc_cleanup_free char *data = NULL;
  size_t len;
  if (kc_read_file(from, &data, &len, 1u << 30, err) < 0)
    return -1;
  if (sha256)
    kc_sha256_hex(data, len, sha256);
  return kc_write_file(to, data, len, 0444, err);
}

/* Inputs of a round: distinct sets so that calls each get their own input where
 * kc_round_input_budget allows (never fewer than --sets); outputs: up to 128 MiB of
 * regions (and a quarter of the worker's memory), one per call of a round, never fewer
 * than two. */
#define KC_ROUND_OUTPUT_BYTES (128ull << 20)

/* What the worker holds besides the tensors: its code, libraries, ring and stack. */
#define KC_WORKER_OVERHEAD (48ull << 20)

/* The sets of inputs the file holds: a round uses up to this many. */
static uint32_t input_slots(const session *s) {
  return kc_round_input_slots(kc_args_region_bytes(&s->spec, false), s->n_sets);
}

/* Is the measuring worker's memory limit an RLIMIT_AS?  So it is without a memory
 * cgroup (--limits-fallback rlimit) and in a plain process (--no-isolation).  That
 * limit counts address space, not memory: the name of the option that chose it. */
static const char *address_space_limit(const kc_measure_config *cfg) {
  if (cfg->no_isolation)
    return "--no-isolation";
  const char *how = kc_cgroup_enforcement(&cfg->settings, "memory");
  return how && !strcmp(how, "rlimit") ? "--limits-fallback rlimit" : NULL;
}

/* The address space the inputs file takes in the worker (one mapping of it). */
static uint64_t input_views_bytes(const session *s) {
  uint64_t len = kc_args_region_bytes(&s->spec, false) * input_slots(s);
  return (len + 4095) / 4096 * 4096;
}

/* The output area of the largest round: at most a quarter of the worker's memory (the
 * area must never be what kills it) and KC_ROUND_OUTPUT_BYTES, never fewer than two
 * calls.  Under an RLIMIT_AS also no more than the address space the inputs and the
 * worker itself leave. */
static uint64_t area_calls(const kc_measure_config *cfg, const session *s) {
  uint64_t mem = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30);
  uint64_t budget = mem / 4 < KC_ROUND_OUTPUT_BYTES ? mem / 4 : KC_ROUND_OUTPUT_BYTES;
  if (address_space_limit(cfg)) {
    uint64_t used = input_views_bytes(s) + KC_WORKER_OVERHEAD;
    uint64_t left = mem > used ? mem - used : 0;
    budget = left < budget ? left : budget;
  }
  uint64_t calls = s->out_region ? budget / s->out_region : 1ull << 32;
  return calls > 2 ? calls : 2;
}

/* The largest tensor of the problem, formatted, for the refusals below. */
static uint32_t largest_tensor(const session *s, char *name, size_t len) {
  uint32_t big = 0;
  for (uint32_t i = 1; i < s->spec.n; i++)
    if (s->spec.t[i].nbytes > s->spec.t[big].nbytes)
      big = i;
  kc_args_spec one = {.n = 1};
  one.t[0] = s->spec.t[big];
  kc_args_format(&one, name, len);
  return big;
}

/* An RLIMIT_AS must also hold the inputs: refused up front, naming the limit,
 * rather than the worker failing to map its inputs ("Cannot allocate memory"). */
static int check_fits_address_space(const kc_measure_config *cfg, const session *s, kc_error *err) {
  const char *why = address_space_limit(cfg);
  if (!why)
    return 0;
  uint64_t limit = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30);
  uint64_t vb = input_views_bytes(s);
  uint64_t need = vb + 2 * s->out_region + KC_WORKER_OVERHEAD;
  if (need <= limit)
    return 0;
  char name[256];
  uint32_t big = largest_tensor(s, name, sizeof name);
  return kc_error_set(err, 0,
                      "--args: tensor %u (%s, %.1f MiB) does not fit: --memory %.1f MiB is held "
                      "as an RLIMIT_AS (%s), which counts address space, and the measuring "
                      "worker's %.1f MiB of inputs, the outputs of two calls "
                      "and its own mappings need %.1f MiB (raise --memory to at least %lluM)",
                      big, name, (double)s->spec.t[big].nbytes / (1 << 20),
                      (double)limit / (1 << 20), why, (double)vb / (1 << 20),
                      (double)need / (1 << 20), (unsigned long long)((need + (1 << 20) - 1) >> 20));
}

/* The measuring worker holds the inputs of a round and the outputs of its calls at
 * once: refuse, naming the largest tensor, a problem whose smallest round (the --sets
 * inputs, two calls' outputs) cannot fit its memory limit, rather than let the kernel
 * die of it.  Beyond that the round adapts: more input sets only up to 8 MiB, more
 * calls' outputs only up to a quarter of the limit. */
int kc_batch_check_fits(const kc_measure_config *cfg, const session *s, kc_error *err) {
  uint64_t limit = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30);
  uint64_t in = kc_args_region_bytes(&s->spec, false) * s->n_sets;
  uint64_t need = in + 2 * s->out_region + KC_WORKER_OVERHEAD;
  if (need > limit) {
    char name[256];
    uint32_t big = largest_tensor(s, name, sizeof name);
    return kc_error_set(err, 0,
                        "--args: tensor %u (%s, %.1f MiB) does not fit: the inputs of %u sets "
                        "and the outputs of two calls need %.1f MiB in the measuring worker, "
                        "over its memory limit of %.1f MiB (raise --memory or lower --sets)",
                        big, name, (double)s->spec.t[big].nbytes / (1 << 20), s->n_sets,
                        (double)need / (1 << 20), (double)limit / (1 << 20));
  }
  return check_fits_address_space(cfg, s, err);
}

int kc_batch_session_make(const kc_measure_config *cfg, session *s, kc_error *err) {
  const char *tmp = secure_getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/kcage-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(s->dir))
    return kc_error_set(err, errno, "mkdtemp %s", s->dir);
  snprintf(s->view, sizeof s->view, "%s/view", s->dir);
  if (mkdir(s->view, 0755) < 0)
    return kc_error_set(err, errno, "mkdir %s", s->view);
  chmod(s->dir, 0711); /* the workers' ids reach view/ but cannot list the session */
  snprintf(s->kernel, sizeof s->kernel, "%s/kernel.so", s->view);
  uint64_t in_region = kc_args_region_bytes(&s->spec, false);
  s->n_slots = input_slots(s);
  s->max_calls = area_calls(cfg, s);
  if (cfg->seed_set)
    s->data_seed = cfg->seed;
  else if (getrandom(&s->data_seed, sizeof s->data_seed, 0) != sizeof s->data_seed)
    return kc_error_set(err, errno, "getrandom");
  s->in_len = (size_t)(in_region * s->n_slots);
  /* Read-only for the workers (mode, and the read-only bind); the parent writes each
   * round's data through its own mapping while the worker is stopped. */
  s->in_fd = kc_inputs_file(s->in_len, s->dir, s->view, s->in_dir, sizeof s->in_dir, s->inputs,
                            sizeof s->inputs, err);
  if (s->in_fd < 0)
    return -1;
  snprintf(s->in_at, sizeof s->in_at, "%s/in", s->dir);
  s->in_map =
      mmap(NULL, s->in_len ? s->in_len : 1, PROT_READ | PROT_WRITE, MAP_SHARED, s->in_fd, 0);
  if (s->in_map == MAP_FAILED) {
    s->in_map = NULL;
    return kc_error_set(err, errno, "map %s", s->inputs);
  }
  return 0;
}

/* Put one kernel alone into the view (replacing the previous one). */
int kc_batch_show_kernel(const session *s, const char *staged, kc_error *err) {
  unlink(s->kernel);
  return kc_batch_copy_file(staged, s->kernel, NULL, err);
}
