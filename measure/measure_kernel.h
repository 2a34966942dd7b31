/* Private: measuring one kernel (measure.c), used by the batch (measure_batch.c) and
 * the benchmark program. */
#ifndef KCAGE_MEASURE_KERNEL_H
#define KCAGE_MEASURE_KERNEL_H

#include <stdarg.h>
#include <time.h>

#include "keyed.h"
#include "measure_internal.h"

typedef struct kc_mctx {
  kc_mrunner *runner;
  const kc_args_spec *spec;
  const char *args_text;
  const char *artifact; /* path readable inside the worker */
  kc_kernel_abi abi;
  const char *entry;
  const char *inputs;    /* inputs file */
  uint32_t n_sets;       /* sets of the first (untimed) round, each called twice */
  uint32_t n_slots;      /* sets the inputs file holds: a timed round uses up to this many */
  uint64_t max_calls;    /* calls whose outputs fit the worker's output area */
  unsigned char *in_map; /* the parent's writable mapping of the inputs file */
  uint64_t data_seed;    /* the inputs of round r derive from it (secret unless --seed) */
  kc_mrunner *ref;       /* the reference, loaded and sealed, or NULL */
  double rtol, atol;
  uint64_t number;
  uint32_t repeat;
  double min_repeat_ms, cooldown_ms;
  bool flush_cache;
  uint64_t piece_bytes; /* kc_measure_config's; 0 = the caches decide */
  int cpu;              /* the worker's CPU during rounds (--cpu); -1 = the scheduler's */
  uint32_t checks;
  double deadline; /* kc_now_s() clock: the whole measurement, --budget (0 = none) */
  double call_s;   /* one kernel call, --timeout (0 = 10 s); a round of N calls gets N times it */
  uint64_t round;  /* rounds so far (each has its own inputs) */
} kc_mctx;

typedef struct kc_kmeasure {
  kc_measure_status status;
  char message[1024];
  double *run_secs; /* repeat entries (malloc'd) */
  uint32_t repeat;  /* rounds completed */
  uint64_t number;
  double max_abs_err;     /* NAN when nothing was compared */
  uint64_t checked_calls; /* timed calls whose output was verified against the reference */
  uint64_t timed_calls;
  double *warmup_secs; /* warm-up rounds (verified like the others, never counted), seconds
                          per call (malloc'd) */
  uint32_t n_warmup;
  const char *limit; /* status timeout: "call" or "budget" */
  unsigned threads;  /* the measuring process's threads in its last run (0: never ran) */
} kc_kmeasure;

/* The kernel's status and its one-sentence reason (the record's message). */
void kc_kmeasure_status(kc_kmeasure *m, kc_measure_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees what kc_measure_kernel allocated in m. */
void kc_kmeasure_clear(kc_kmeasure *m);

/* Statistics of a sample, as hyperfine reports them (NAN when empty). */
typedef struct kc_mstats {
  double median, min, max, mean, stddev, cv;
} kc_mstats;
void kc_mstats_of(const double *v, uint32_t n, kc_mstats *s);

/* One kernel's record (measure_record.c). */
typedef struct kc_mrecord_in {
  const char *kernel;
  kc_measure_status status;
  const char *message;
  const kc_kmeasure *m; /* NULL when it was never measured */
  double build_s;       /* NAN when not built here */
  const char *device;
  double reference_median_s; /* NAN without a reference */
  double max_cv;             /* unstable above it; 0 = 0.1, negative = never */
  uint64_t seed;
  bool seed_set;         /* false: the record says "secret" */
  const char *isolation; /* "sandbox" or "none" */
  kc_kernel_abi abi;
  const char *cc, *cflags;        /* NULL for a .so */
  struct timespec started, ended; /* CLOCK_REALTIME */
  /* The problem as the caller posed it, so a record stands alone in a tuning log. */
  const char *args, *entry;
  const char *reference, *reference_sha256; /* NULL without a reference */
  double rtol, atol;                        /* NAN without a reference */
  const char *sha256;                       /* of the file kcage read; NULL if unknown */
  int cached;                               /* 1 from the build cache, 0 compiled, -1 no build */
} kc_mrecord_in;
json_t *kc_mrecord(const kc_mrecord_in *in);
void kc_rfc3339(const struct timespec *ts, char *buf, size_t len);

/* The reference's outputs for `n` sets of the current round's inputs (0), or -1 with
 * err (the reference failed: a setup error, not the kernel's). */
int kc_reference_eval(kc_mrunner *ref, const uint32_t *sets, uint32_t n, uint64_t region,
                      double timeout_s, unsigned char *out, kc_error *err);

/* The calls of a timed round's piece (measure.c: why and when a round runs in pieces);
 * number when it runs whole.  piece_bytes: kc_measure_config's, 0 = the caches decide. */
uint64_t kc_round_piece_calls(uint64_t number, uint64_t out_region, uint64_t in_region,
                              double per_call_s, uint64_t piece_bytes);
/* Whether a timed round's pieces (of `piece` calls, `warm` the piece_calls above) have
 * their output regions poisoned again right before each (measure.c says when). */
bool kc_round_repoison(uint64_t number, uint64_t piece, uint64_t warm, uint64_t out_region);
/* The bytes of distinct input sets a round spreads its calls over (measure_inputs.c). */
uint64_t kc_round_input_budget(uint64_t in_region, uint32_t n_sets);
/* The input sets the inputs file holds (that budget over one set, 4096 at most, never
 * fewer than n_sets): a round uses up to this many. */
uint32_t kc_round_input_slots(uint64_t in_region, uint32_t n_sets);

/* What a round's inputs are.  Call c reads data c % n_data (a timed round: n_data is
 * its number of calls, so no two calls meet the same data), placed in slot c % n_slots
 * of the inputs file right before the piece of the round that holds call c; data `dup`
 * (UINT32_MAX: none) is a near-copy of data 0. */
typedef struct kc_round_layout {
  const kc_args_spec *spec;
  uint64_t in_region;
  uint64_t seed, round;
  uint64_t n_data;
  uint32_t n_slots;
  uint64_t dup;
} kc_round_layout;

/* Call `call`'s inputs, written into dst (one region) (measure_inputs.c). */
void kc_round_data(const kc_round_layout *l, unsigned char *dst, uint64_t call);
/* The inputs of calls [c0, c0 + cnt) (cnt <= n_slots) into their slots of map. */
void kc_round_write(const kc_round_layout *l, unsigned char *map, uint64_t c0, uint64_t cnt,
                    bool flush);
/* Write round `round`'s inputs for sets [0, n_sets) into map (one call per set).
 * Returns the set that is a near-copy of set 0, or UINT32_MAX when there is none. */
uint32_t kc_round_inputs(const kc_args_spec *a, unsigned char *map, uint64_t in_region,
                         uint32_t n_sets, uint64_t seed, uint64_t round, bool flush);

/* A finished round as the parent sees it, the worker stopped. */
typedef struct kc_round_view {
  pid_t pid;
  uint64_t base, region; /* call i's outputs: region bytes at base + i * region */
  uint64_t number;
  kc_round_layout in; /* call i read data i % in.n_data; in.dup a near-copy of data 0 */
  uint64_t poison_seed;
  bool timed;
  const cpu_set_t *home; /* the parent's own CPUs, or NULL: it writes from where it is */
  int cpu;               /* the worker's CPU for the round, -1 unknown */
  bool stay;             /* the parent is on the worker's CPU, and sleeps there while it runs */
  bool repoison;         /* each piece's regions poisoned again right before it */
} kc_round_view;

/* measure_verify.c: 1 the round passed, 0 the kernel's status was set, -1 a parent
 * failure (err). */
int kc_verify_round(kc_mctx *x, kc_kmeasure *m, const kc_round_view *v, kc_draws *draws,
                    kc_error *err);
/* A failure to reach the worker's output area: 0 when its memory is gone (its own
 * doing: status set), -1 a parent error. */
int kc_memory_gone(kc_kmeasure *m, const kc_error *err);
/* Before a round: every region still holds its call's poison.  Same returns. */
int kc_verify_poisoned(kc_kmeasure *m, const kc_round_view *v, kc_error *err);

/* measure_audit.c.  0 fine; -1 refused (msg says why: status `suspicious`); -2 the
 * audit could not be made (msg: status `error`). */
int kc_audit_elf_image(const unsigned char *img, size_t len, char *msg, size_t cap);
int kc_audit_elf(const char *path, char *msg, size_t cap);
int kc_audit_maps_line(const char *line, const char *artifact, const char *exe, char *msg,
                       size_t cap);
int kc_audit_maps(pid_t pid, const char *artifact, bool inherited, char *msg, size_t cap);

/* Returns 0 with m->status set (whatever the kernel did), -1 on a parent failure. */
int kc_measure_kernel(kc_mctx *x, kc_kmeasure *m, kc_error *err);

#endif
