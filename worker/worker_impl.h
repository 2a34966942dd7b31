/* Private to worker/worker*.c: the state of one kc_worker and the steps its files
 * share.  The files depend one way: worker.c (lifecycle, send) -> worker_wait.c
 * (completions, deadlines, failures) -> worker_spawn.c (a process from the zygote) ->
 * worker_death.c (kill, reap, verdict); worker_result.c is kc_call_result's own. */
#ifndef KCAGE_WORKER_IMPL_H
#define KCAGE_WORKER_IMPL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/cgroup.h"
#include "kcage/error.h"
#include "kcage/worker.h"
#include "ring.h"
#include "worker_internal.h"

#define KC_DEFAULT_DEPTH 16

/* Killed workers not reaped yet: a timeout is reported as soon as SIGKILL is sent,
 * and the zombie (our own child, so its pid cannot be reused) is collected later. */
#define KC_GRAVE_MAX 8

typedef struct pending {
  uint64_t sent_ns;
  double timeout_s;
} pending;

struct kc_worker {
  kc_worker_opts o;
  char *initializer, *policy, *worker_path, *python_lib, *python_boot;
  void *initargs;
  kc_mount *mounts; /* deep copy of opts.mounts: callers may pass a stack array */
  kc_zygote *zyg;
  bool own_zyg;
  kc_zygote *slot; /* forked from zyg, lives in cg: workers are born in the cgroup */
  /* a slot asked of zyg along with the spawn in flight: its socket (-1: none) */
  int slot_sock;
  uint32_t slot_gen;
  kc_cgroup *cg;
  bool cg_tried;
  int64_t oom_base, pids_base;
  long maxrss_kb;      /* the reaped worker's peak RSS (the kernel's rusage), -1 unknown */
  long hwm_at_send_kb; /* its peak RSS when the last call was sent (rlimit fallback) */
  /* the live process (pid 0 when none) */
  pid_t pid;
  /* listener: the seccomp listener, or where relayed, our end of the sysinfo relay's
   * socket, which carries the listener's notifications but sysinfo's */
  int pidfd, evfd, listener;
  bool relayed;
  kc_ring ring;
  uint32_t gen;
  uint32_t uses_left;
  bool recycle_due;
  pending *q;
  uint64_t head_start_ns;                 /* when the oldest outstanding call could start */
  kc_spin spin;                           /* how long waiting for this worker spins (ring.h) */
  uint32_t spin_limit_ns, worker_spin_ns; /* kc_worker_set_spin */
  char violation[48];                     /* syscall name from the seccomp listener */
  /* calls lost with a killed worker, still owed to recv (FIFO before new ones) */
  uint64_t orphans;
  char orphan_msg[128];
  uint32_t orphan_gen;
  pid_t orphan_pid;
  int graves[KC_GRAVE_MAX];
  unsigned ngraves;
  /* a replacement asked of the zygote but not yet handed over (eager respawn after a
   * timeout, crash or recycle): its socket, -1 when none */
  int handoff;
  bool spawning;         /* the zygote's answer (pid) for w->gen is still to be read */
  unsigned extra;        /* kc_worker_set_extra */
  int fdsock;            /* KC_WORKER_PASS_FDS: the live worker's socket until used, else -1 */
  uint64_t last_done_ns; /* when the last call completed */
};

/* bounded copy that always terminates (and keeps -Wformat-truncation quiet) */
static inline void kc__scopy(char *d, size_t cap, const char *s) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < cap; i++)
    d[i] = s[i];
  d[i] = 0;
}

/* worker_death.c */
/* Has the process behind pidfd ended (a poll() that does not wait)? */
bool kc__pidfd_dead(int pidfd);
/* Collect the killed workers' zombies (block: wait for each). */
void kc__worker_reap_graves(kc_worker *w, bool block);
/* SIGKILL the tree without waiting; the pidfd joins the graves. */
void kc__worker_kill_async(kc_worker *w);
/* Kill the whole tree and reap the worker; *si gets its end. */
void kc__worker_kill_and_reap(kc_worker *w, siginfo_t *si);
/* The worker's peak RSS so far (VmHWM), read from outside; -1 unknown. */
long kc__worker_hwm_kb(pid_t pid);
/* Calls still queued behind a failure (beyond skip) are owed a CHILD_ERROR each. */
void kc__worker_orphan_rest(kc_worker *w, uint64_t skip, const char *why);
/* The reaped worker's end as the parent saw it, decided by the sandbox's decider. */
void kc__worker_verdict(kc_worker *w, const siginfo_t *si, kc_result *v, char *msg, size_t cap);

/* worker_spawn.c */
/* Close the process's fds and ring; a spawn still in flight is collected and killed. */
void kc__worker_drop_process(kc_worker *w);
/* First half of a spawn: cgroup, ring, request to the zygote (no wait). */
int kc__worker_spawn_start(kc_worker *w, kc_error *err);
/* Second half: the pid, pidfd, cgroup attach, the worker's hand-off. */
int kc__worker_spawn_finish(kc_worker *w, kc_error *err);

#endif
