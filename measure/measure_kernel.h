/* Private: measuring one kernel (measure.c), used by the batch (measure_batch.c) and
 * the benchmark program. */
#ifndef KCAGE_MEASURE_KERNEL_H
#define KCAGE_MEASURE_KERNEL_H

#include <stdarg.h>

#include "measure_internal.h"

/* The inputs file as the parent keeps it: which input set's data sits in each slot (the
 * kernel sees slots, at fixed addresses).  Between rounds the parent moves the sets to
 * other slots, so a cache keyed by the input's address replays the wrong answer. */
typedef struct kc_minputs {
  int fd;                    /* read-write, the parent's own; -1 = never permute */
  const unsigned char *data; /* n_sets input regions, set order */
  uint64_t in_region;
  uint32_t n_sets;
  uint32_t slot_set[64];
} kc_minputs;

/* Put set perm[j] into slot j, for every slot.  -1 on a write failure. */
int kc_minputs_place(kc_minputs *in, const uint32_t *perm, kc_error *err);

typedef struct kc_mctx {
  kc_mrunner *runner;
  const kc_args_spec *spec;
  const char *args_text;
  const char *artifact; /* path readable inside the worker */
  const char *entry;
  const char *inputs; /* inputs file */
  uint32_t n_sets;
  const unsigned char *ref; /* n_sets output regions from the reference, or NULL */
  double rtol, atol;
  uint64_t number;
  uint32_t repeat;
  double min_repeat_ms, cooldown_ms;
  bool flush_cache;
  uint32_t checks;
  double deadline;   /* kc_now_s() clock */
  kc_minputs *slots; /* NULL: slot i always holds set i */
} kc_mctx;

typedef struct kc_kmeasure {
  kc_bench_status status;
  char message[1024];
  double *run_secs; /* repeat entries (malloc'd) */
  uint32_t repeat;  /* rounds completed */
  uint64_t number;
  double max_abs_err; /* NAN when nothing was compared */
} kc_kmeasure;

/* Returns 0 with m->status set (whatever the kernel did), -1 on a parent failure. */
int kc_measure_kernel(kc_mctx *x, kc_kmeasure *m, kc_error *err);

#endif
