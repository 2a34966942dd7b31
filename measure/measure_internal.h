/* Private to the measurement code: helpers, and the wire format between the parent
 * (measure.c) and the in-worker handler (measure_handler.c).
 *
 * Every request and reply is a flat little-endian struct plus bytes; the parent checks
 * every reply's length against what it asked for and never follows anything in it. */
#ifndef KCAGE_MEASURE_INTERNAL_H
#define KCAGE_MEASURE_INTERNAL_H

#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "kcage/error.h"
#include "kcage/measure.h"
#include "kcage/sandbox.h"

int kc_mkdir_p(const char *path, kc_error *err);
int kc_read_file(const char *path, char **data, size_t *len, size_t max, kc_error *err);
int kc_write_file(const char *path, const void *data, size_t len, mode_t mode, kc_error *err);
void kc_rm_rf(const char *path);
/* read (wr=false) or write exactly len bytes; -1 on error or EOF. */
int kc_io_all(int fd, void *buf, size_t len, bool wr);

/* kc_result helpers that do not need the sandbox library to be linked. */
static inline void kc_result_init_local(kc_result *r) {
  memset(r, 0, sizeof *r);
  r->exit_code = -1;
  r->cpu_s = r->wall_s = -1;
  r->peak_memory_bytes = -1;
}
static inline const char *kc_status_name_local(const kc_result *r) {
  static const char *const names[] = {"ok",      "exited", "signaled", "timeout",    "memory",
                                      "syscall", "pids",   "output",   "setup_error"};
  return (unsigned)r->status < sizeof names / sizeof names[0] ? names[r->status] : "?";
}

#define KC_MPROTO_MAGIC 0x6b636d31u /* "kcm1" */
#define KC_MPROTO_MAX_CHECKS 16

enum kc_mop {
  KC_MOP_LOAD = 1,  /* load the artifact, map the inputs, then seal */
  KC_MOP_RUN = 2,   /* `number` calls back to back (the parent times the request) */
  KC_MOP_FLUSH = 3, /* evict all tensors from the CPU caches (untimed) */
  KC_MOP_WAKE = 4,  /* answer at once (untimed): wakes the worker and the parent's CPUs
                       right before a timed round, so neither wake-up is timed */
  KC_MOP_PREP = 5,  /* poison the output regions the next prepared RUN uses (untimed) */
  KC_MOP_FETCH = 6, /* copy a piece of one output region back (untimed) */
};

/* RUN flags.  PREPARED: the outputs were poisoned by a PREP; the RUN only calls the
 * kernel (nothing else inside the parent's clock), call i writes output region
 * (first_out + i) % n_outs, at most n_outs calls, and nothing comes back (FETCH). */
#define KC_MRUN_PREPARED 1u

/* Largest piece one FETCH returns: the ring's result buffer is sized for this, not
 * for the tensors, so an output of any size comes back in pieces. */
#define KC_MFETCH_MAX (8u << 20)

typedef struct kc_mreq_load {
  uint32_t magic, op;
  uint32_t n_sets;
  uint32_t n_outs; /* output regions (>= n_sets; 0 = n_sets) */
  /* then four NUL-terminated strings: artifact path, entry symbol, inputs file,
   * --args text */
} kc_mreq_load;

typedef struct kc_mreq_run {
  uint32_t magic, op;
  uint64_t number;    /* calls in this request */
  uint32_t first_set; /* call i uses set (first_set + i) % n_sets */
  uint32_t n_checks;  /* calls whose outputs come back */
  uint64_t poison_seed;
  uint64_t checks[KC_MPROTO_MAX_CHECKS]; /* call indices, strictly increasing */
  uint32_t flags;                        /* KC_MRUN_* */
  uint32_t first_out;                    /* PREPARED: output region of call 0 */
} kc_mreq_run;

typedef struct kc_mreq_prep {
  uint32_t magic, op;
  uint32_t first_out, count; /* regions first_out.. (mod n_outs), count <= n_outs */
  uint64_t poison_seed;      /* region of call i gets kc_poison_word(poison_seed, i) */
} kc_mreq_prep;

typedef struct kc_mreq_fetch {
  uint32_t magic, op;
  uint32_t region, pad;
  uint64_t offset, len; /* len <= KC_MFETCH_MAX; the reply is exactly these bytes */
} kc_mreq_fetch;

/* RUN reply: this header, then n_checks copies of the whole output region
 * (kc_args_region_bytes(out)), in the order of checks. */
typedef struct kc_mreply_run {
  uint32_t magic, n_checks;
} kc_mreply_run;

/* Exception messages the handler raises start with a class word the parent maps to a
 * status: "error: ..." (load failure, missing entry, kernel returned non-zero) or
 * "suspicious: ..." (a defence tripped inside the worker).  A worker can only make its
 * own kernel look worse by faking one. */

/* The in-worker half, callable directly (tests, and the unsandboxed comparison in
 * bench_measure): same code as the handler without the call plumbing. */
typedef struct kc_mstate kc_mstate;
int kc_mstate_load(kc_mstate **out, const char *artifact, const char *entry, const char *inputs,
                   const char *args, uint32_t n_sets, bool seal, char *errbuf, size_t errcap);
/* The same with n_outs output regions (>= n_sets) for prepared runs. */
int kc_mstate_load_ex(kc_mstate **out, const char *artifact, const char *entry, const char *inputs,
                      const char *args, uint32_t n_sets, uint32_t n_outs, bool seal, char *errbuf,
                      size_t errcap);
/* PREP and FETCH (see enum kc_mop); -1 with errbuf on a bad request. */
int kc_mstate_prep(kc_mstate *s, const kc_mreq_prep *req, char *errbuf, size_t errcap);
int kc_mstate_fetch(kc_mstate *s, const kc_mreq_fetch *req, void *out, size_t out_cap,
                    size_t *out_len, char *errbuf, size_t errcap);
/* out receives n_checks output regions; returns 0, or -1 with errbuf filled. */
int kc_mstate_run(kc_mstate *s, const kc_mreq_run *req, void *out, size_t out_cap, size_t *out_len,
                  char *errbuf, size_t errcap);
void kc_mstate_flush(kc_mstate *s);
void kc_mstate_free(kc_mstate *s);

/* A measuring process as the parent sees it: the worker pool's kc_worker when it is
 * linked, else a plain forked process (no sandbox) running the same handler. */
typedef struct kc_mrunner kc_mrunner;
typedef struct kc_mrunner_opts {
  const char *bind_dir; /* ro-bound into the worker at the same path */
  uint64_t memory_bytes;
  size_t max_result_bytes;
  size_t max_arg_bytes;
  bool plain; /* force the plain forked process */
} kc_mrunner_opts;

typedef enum kc_mcall_status {
  KC_MCALL_OK,
  KC_MCALL_EXCEPTION, /* message */
  KC_MCALL_TIMEOUT,
  KC_MCALL_DIED, /* verdict */
} kc_mcall_status;

typedef struct kc_mcall {
  kc_mcall_status status;
  void *value;
  size_t value_len;
  char message[1024];
  kc_result verdict;
  double elapsed_s; /* OK: parent's clock, request published -> completion seen (before
                       the result is copied); 0 when the runner cannot tell */
  pid_t pid;        /* host pid of the process that answered (0 when unknown) */
} kc_mcall;

int kc_mrunner_new(const kc_mrunner_opts *o, kc_mrunner **out, kc_error *err);
/* One call of the measure handler, bounded by timeout_s.  -1 only for parent-side
 * failures. */
int kc_mrunner_call(kc_mrunner *r, const void *arg, size_t len, double timeout_s, kc_mcall *res,
                    kc_error *err);
/* The same, for a call expected to take about expect_s (a timed round whose length the
 * parent predicts from the previous one; 0 = unknown).  The parent sleeps through most
 * of it and is awake, polling, when it should end: a parent asleep in poll() when the
 * completion lands adds the wake-up of its idle vCPU to the round, and on this kind of
 * VM that wake-up grows with how long the vCPU slept (~0.35 ms after a 38 ms round,
 * bench_measure).  An early end still wakes the parent at once; a late one costs the
 * polling margin (1 % of the round, >= 0.4 ms) of one CPU. */
int kc_mrunner_call_expect(kc_mrunner *r, const void *arg, size_t len, double timeout_s,
                           double expect_s, kc_mcall *res, kc_error *err);
/* Kill the process (the next call starts a fresh one). */
void kc_mrunner_reset(kc_mrunner *r);
void kc_mrunner_free(kc_mrunner *r);
const char *kc_mrunner_kind(const kc_mrunner *r);
void kc_mcall_clear(kc_mcall *c);

double kc_now_s(void);
const char *kc_signal_name(int sig);

#endif
