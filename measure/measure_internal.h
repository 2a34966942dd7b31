/* Private to the measurement code: helpers, and the wire format between the parent
 * (measure.c) and the in-worker handler (measure_handler.c).
 *
 * Every request and reply is a flat little-endian struct plus bytes; the parent checks
 * every reply's length against what it asked for and never follows anything in it. */
#ifndef KCAGE_MEASURE_INTERNAL_H
#define KCAGE_MEASURE_INTERNAL_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "clock.h"
#include "fdio.h"
#include "kcage/error.h"
#include "kcage/measure.h"
#include "kcage/sandbox.h"
#include "signame.h"

int kc_mkdir_p(const char *path, kc_error *err);
int kc_read_file(const char *path, char **data, size_t *len, size_t max, kc_error *err);
int kc_write_file(const char *path, const void *data, size_t len, mode_t mode, kc_error *err);
void kc_rm_rf(const char *path);
/* SHA-256 of data as 64 hex digits and a NUL (nettle's). */
void kc_sha256_hex(const void *data, size_t len, char out[65]);
/* A batch's inputs file of `len` bytes (inputs_file.c): in a fresh directory in memory
 * (its path to `dir`, to bind into workers at SESSION/in and to remove after), else
 * view/inputs.bin (dir ""); the path the parent and its workers open to `path`.  The fd
 * (read-write), or -1 with err. */
int kc_inputs_file(size_t len, const char *session, const char *view, char *dir, size_t dircap,
                   char *path, size_t cap, kc_error *err);
/* Removes the inputs directories of runs that died (ours, named for a pid that is gone):
 * done by every batch that puts its inputs in memory, and by a starting agent. */
void kc_inputs_sweep(void);
/* The compiler when no --cc is given: $CC (not in a set-id process), else cc. */
const char *kc_build_default_cc(void);
/* read (wr=false) or write exactly len bytes; -1 on error or EOF. */

#define KC_MPROTO_MAGIC 0x6b636d31u /* "kcm1" */
#define KC_MPROTO_MAX_CHECKS 16
#define KC_MPROTO_MAX_SETS 4096 /* input sets one inputs file holds */

enum kc_mop {
  KC_MOP_LOAD = 1,    /* load the artifact, map the inputs, then seal */
  KC_MOP_RUN = 2,     /* `number` calls back to back (the parent times the request) */
  KC_MOP_FLUSH = 3,   /* evict all tensors from the CPU caches (untimed) */
  KC_MOP_WAKE = 4,    /* answer at once (untimed): wakes the worker and the parent's CPUs
                         right before a timed round, so neither wake-up is timed */
  KC_MOP_PREPARE = 5, /* (untimed) size the output area for `number` calls and poison
                         every call's own region; reply: kc_mreply_prepare */
};

typedef struct kc_mreq_load {
  uint32_t magic, op;
  uint32_t n_sets;
  uint32_t abi; /* kc_kernel_abi */
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
  uint32_t n_sets; /* sets the calls rotate through; 0 = all the inputs file holds */
  uint32_t flags;  /* KC_MRUN_AREA */
  /* call i is call first_call + i of its round (a round run in pieces): the pass over
   * the sets, and so the inputs' addresses, continue where the last piece left off,
   * and with KC_MRUN_AREA it writes region first_call + i */
  uint64_t first_call;
} kc_mreq_run;

/* Call first_call + i writes that region of the output area that the last PREPARE
 * poisoned, and the calls themselves touch nothing else: the parent reads every call's
 * output from outside once the round is over.  Without it (the reference, tests) each set has one
 * output region, poisoned before every call, and only `checks` come back. */
#define KC_MRUN_AREA 1u

typedef struct kc_mreq_prepare {
  uint32_t magic, op;
  uint64_t number;
  uint64_t poison_seed; /* call i's region holds kc_poison_word(poison_seed, i) */
} kc_mreq_prepare;

typedef struct kc_mreply_prepare {
  uint32_t magic, pad;
  uint64_t base;   /* the area's address in the worker (the parent reads it from outside) */
  uint64_t region; /* bytes per call */
} kc_mreply_prepare;

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
int kc_mstate_load(kc_mstate **out, const char *artifact, kc_kernel_abi abi, const char *entry,
                   const char *inputs, const char *args, uint32_t n_sets, bool seal, char *errbuf,
                   size_t errcap);
/* out receives n_checks output regions; returns 0, or -1 with errbuf filled. */
int kc_mstate_run(kc_mstate *s, const kc_mreq_run *req, void *out, size_t out_cap, size_t *out_len,
                  char *errbuf, size_t errcap);
void kc_mstate_flush(kc_mstate *s);
/* PREPARE: the area for `number` calls, every region poisoned (pages touched). */
int kc_mstate_prepare(kc_mstate *s, const kc_mreq_prepare *req, kc_mreply_prepare *rep,
                      char *errbuf, size_t errcap);
void kc_mstate_free(kc_mstate *s);

/* A measuring process as the parent sees it: the worker pool's kc_worker when it is
 * linked, else a plain forked process (no sandbox) running the same handler. */
typedef struct kc_mrunner kc_mrunner;
typedef struct kc_mrunner_opts {
  const char *bind_dir;   /* ro-bound into the worker at the same path */
  const char *inputs_dir; /* when not NULL: ro-bound into the worker at inputs_at */
  const char *inputs_at;
  uint64_t memory_bytes;
  size_t max_result_bytes;
  size_t max_arg_bytes;
  bool plain;           /* force the plain forked process */
  kc_settings settings; /* the tenant's (kc_measure_config.settings) */
} kc_mrunner_opts;

/* measure_handler.c: in the plain forked process only (no sandbox, no worker runtime):
 * report violations on report_fd and watch the address space against as_limit. */
void kc_mhandler_become_plain(int report_fd, uint64_t as_limit);

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

/* The measuring process seen from outside, by host pid (measure_observe.c). */
int kc_observe_stop(pid_t pid); /* SIGSTOP, then wait until stopped; -1 when gone */
void kc_observe_cont(pid_t pid);
/* A stopped process's scheduler counts, read before its timed request is sent: reading
 * them costs a /proc read (microseconds) that must not fall inside the clock. */
typedef struct kc_arrival {
  pid_t pid;
  bool known;
  long long base[3];
} kc_arrival;
void kc_observe_arrival_base(pid_t pid, kc_arrival *a);
/* SIGCONT (*cont_s: the time right before it), then move the calling thread onto `leave`
 * (unless NULL), then wait (at most 5 ms) until the scheduler has given the process a
 * CPU; returns the seconds it waited for one (its wake-up: it ran nothing meanwhile), 0
 * when unknown.  A caller that sits on the CPU the process is pinned to, and leaves only
 * now, has it queued there at once and counted from then: continued onto an idle CPU
 * instead, it would be queued only once that CPU woke (on this guest up to 0.4 ms), and
 * that wait would be timed. */
double kc_observe_cont_arrived(const kc_arrival *base, const cpu_set_t *leave, double *cont_s);
int64_t kc_observe_cpu_ns(pid_t pid); /* the scheduler's account; -1 when unknown */
int kc_observe_read(pid_t pid, uint64_t addr, void *buf, size_t len, kc_error *err);
/* The CPU the process last ran on (/proc/PID/stat); -1 when unknown. */
int kc_observe_last_cpu(pid_t pid);
/* Move the calling thread onto `cpu`, if `home` (the caller's own CPU set, saved) holds
 * it and another CPU to leave to; false: nothing moved.  The caller restores home when
 * the round is over. */
bool kc_observe_move_to(int cpu, const cpu_set_t *home);
/* Keep the process on `cpu` alone (--cpu); -1 with errno when the kernel refuses. */
int kc_observe_pin(pid_t pid, int cpu);
/* Fill len bytes of its memory at addr with an 8-byte word, as kc_poison_fill does. */
int kc_observe_poison(pid_t pid, uint64_t addr, uint64_t len, uint64_t word, kc_error *err);

/* The process that answers the next call (0 when none is running yet). */
pid_t kc_mrunner_pid(kc_mrunner *r);
/* true: the plain forked process (it holds every mapping of the caller's) */
bool kc_mrunner_plain(const kc_mrunner *r);
/* A timed round: the request is published while the process is stopped, then it is
 * continued, and it is stopped again as soon as its completion is seen - before anything
 * else.  stay: the caller is on the process's CPU and sleeps there until the completion
 * wakes it; else it waits from another CPU, spinning near expect_s, and elapsed_s leaves
 * out the wake-up after SIGCONT (the scheduler's account of the time the process waited
 * for a CPU before it first ran: kc_observe_cont_arrived).  elapsed_s runs from SIGCONT
 * to the completion seen.  So the process sees the round's inputs only inside the clock,
 * and whatever it does after it claims to be done does not happen until the parent has
 * checked the round. */
int kc_mrunner_call_timed(kc_mrunner *r, const void *arg, size_t len, double timeout_s,
                          double expect_s, bool stay, kc_mcall *res, kc_error *err);

#endif
