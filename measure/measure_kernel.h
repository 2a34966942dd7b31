/* Private: measuring one kernel (measure.c), used by the batch (measure_batch.c) and
 * the benchmark program. */
#ifndef KCAGE_MEASURE_KERNEL_H
#define KCAGE_MEASURE_KERNEL_H

#include <stdarg.h>
#include <time.h>

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
  double deadline;   /* kc_now_s() clock: the whole measurement (0 = none) */
  double call_s;     /* one kernel call (0 = 10 s) */
  uint32_t n_outs;   /* output regions in the worker (0 = kc_mouts_for) */
  kc_minputs *slots; /* NULL: slot i always holds set i */
} kc_mctx;

typedef struct kc_kmeasure {
  kc_bench_status status;
  char message[1024];
  double *run_secs; /* repeat entries (malloc'd) */
  uint32_t repeat;  /* rounds completed */
  uint64_t number;
  double max_abs_err;  /* NAN when nothing was compared */
  double *warmup_secs; /* untimed warm-up rounds, seconds per call (malloc'd) */
  uint32_t n_warmup;
  const char *limit; /* status timeout: "call" or "budget" */
} kc_kmeasure;

/* Statistics of a sample, as hyperfine reports them (NAN when empty). */
typedef struct kc_mstats {
  double median, min, max, mean, stddev, cv;
} kc_mstats;
void kc_mstats_of(const double *v, uint32_t n, kc_mstats *s);

/* One kernel's record (measure_record.c). */
typedef struct kc_mrecord_in {
  const char *kernel;
  kc_bench_status status;
  const char *message;
  const kc_kmeasure *m; /* NULL when it was never measured */
  double build_s;       /* NAN when not built here */
  const char *device;
  double reference_median_s; /* NAN without a reference */
  double max_cv;             /* unstable above it; 0 = 0.1, negative = never */
  uint64_t seed;
  const char *cc, *cflags;        /* NULL for a .so */
  struct timespec started, ended; /* CLOCK_REALTIME */
} kc_mrecord_in;
json_t *kc_mrecord(const kc_mrecord_in *in);
void kc_rfc3339(const struct timespec *ts, char *buf, size_t len);

/* Frees what kc_measure_kernel allocated in m. */
void kc_kmeasure_clear(kc_kmeasure *m);

/* Returns 0 with m->status set (whatever the kernel did), -1 on a parent failure. */
int kc_measure_kernel(kc_mctx *x, kc_kmeasure *m, kc_error *err);

/* Limits of one kernel's measurement: call_s bounds one kernel call (a request of k
 * calls gets k * call_s); deadline (kc_now_s() clock, 0 = none) bounds the whole
 * measurement.  A timeout says which of the two fired. */
typedef struct kc_mlimits {
  double call_s;
  double deadline;
} kc_mlimits;

/* One chunk of a round (measure_round.c): count calls, call i on input slot
 * (first_set + i) % n_sets and output region (first_out + i) % n_outs, count <= n_outs. */
typedef struct kc_mchunk {
  uint32_t first_set, first_out, count, n_outs;
  uint64_t poison_seed; /* call i's poison: kc_poison_word(poison_seed, i) */
  uint32_t n_fetch;     /* calls whose outputs come back */
  uint64_t fetch[KC_MPROTO_MAX_CHECKS];
  bool flush;
  double expect_s;  /* predicted length of the timed request (0 = unknown) */
  const char *what; /* the timed request's name in messages */
} kc_mchunk;

typedef struct kc_mchunk_out {
  double elapsed_s;    /* the timed request, on the parent's clock */
  unsigned char *outs; /* n_fetch output regions, in fetch order (malloc'd) */
  kc_mcall fail;       /* the last request: the one that failed when 0 came back */
  const char *what;    /* which request that was */
  const char *limit;   /* on a timeout: "call" or "budget" */
  bool malformed;      /* a reply of the wrong shape */
} kc_mchunk_out;

/* 1 done, 0 the kernel failed (see o), -1 parent error. */
int kc_mchunk_run(kc_mrunner *r, const kc_args_spec *spec, const kc_mchunk *ch, const kc_mlimits *l,
                  kc_mchunk_out *o, kc_error *err);
void kc_mchunk_out_clear(kc_mchunk_out *o);

/* Output regions for n_sets sets of out_region bytes: more than the sets when the
 * outputs are small (256 KiB of them in all, at most KC_MOUTS_MAX), so a prepared chunk
 * holds enough calls that its one request's round trip (about a microsecond) is a small
 * part of it even for sub-microsecond kernels. */
#define KC_MOUTS_MAX 4096u
uint32_t kc_mouts_for(uint32_t n_sets, uint64_t out_region);

#endif
