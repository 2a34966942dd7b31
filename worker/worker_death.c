/* A worker's end: the kill (of the whole tree), the reap and its graves, and the
 * verdict, decided from what the parent observes from outside (siginfo, the seccomp
 * listener, the cgroup's counters, the kernel's rusage). */
#include "worker_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kcage/sandbox_parts.h"
#include "sysname.h"

void kc__worker_reap_graves(kc_worker *w, bool block) {
  unsigned k = 0;
  for (unsigned i = 0; i < w->ngraves; i++) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc;
    do
      rc = waitid(P_PIDFD, (id_t)w->graves[i], &si, WEXITED | (block ? 0 : WNOHANG));
    while (rc < 0 && errno == EINTR);
    if (rc == 0 && !si.si_pid && !block) {
      w->graves[k++] = w->graves[i]; /* still dying */
      continue;
    }
    close(w->graves[i]);
  }
  w->ngraves = k;
}

/* SIGKILL the tree without waiting for it to be gone; the pidfd moves to the graves. */
void kc__worker_kill_async(kc_worker *w) {
  if (!w->pid)
    return;
  syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, NULL, 0);
  /* A sandboxed worker is pid 1 of its own pid namespace: its death makes the kernel
   * SIGKILL every process in that namespace, stopped or not, so the cgroup kill (which
   * waits until the cgroup is empty) is only needed without one. */
  if (w->cg && w->o.isolation != KC_ISOLATION_SANDBOX)
    kc_cgroup_kill(w->cg, NULL);
  if (w->ngraves == KC_GRAVE_MAX)
    kc__worker_reap_graves(w, true);
  w->graves[w->ngraves++] = w->pidfd;
  w->pidfd = -1;
}

/* Kill the whole tree and reap the worker.  *si gets its end. */
void kc__worker_kill_and_reap(kc_worker *w, siginfo_t *si) {
  memset(si, 0, sizeof *si);
  w->maxrss_kb = -1;
  if (!w->pid)
    return;
  /* SIGKILL works on a stopped process too; as pid 1 of its namespace its death takes
   * every other process of the namespace with it (nothing can leave a pid namespace),
   * so the cgroup kill, which waits until the cgroup is empty, is needed only for a
   * worker without one. */
  if (w->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, NULL, 0);
  else
    kill(w->pid, SIGKILL);
  if (w->cg && w->o.isolation != KC_ISOLATION_SANDBOX)
    kc_cgroup_kill(w->cg, NULL);
  /* The raw waitid also returns the child's rusage: its peak RSS is what the kernel
   * saw, the evidence for a memory verdict under the rlimit fallback. */
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  long rc;
  do
    rc = w->pidfd >= 0 ? syscall(SYS_waitid, P_PIDFD, w->pidfd, si, WEXITED, &ru)
                       : syscall(SYS_waitid, P_PID, w->pid, si, WEXITED, &ru);
  while (rc < 0 && errno == EINTR);
  w->maxrss_kb = rc == 0 ? ru.ru_maxrss : -1;
}

/* Under the rlimit fallback the kernel kills nobody at the memory limit: an
 * allocation fails, and a program that does not check it dies of a fault.  A fault
 * death is taken for the limit when the worker's peak RSS (the kernel's count, from
 * waitid) grew during the call by at least a quarter of what was left under its
 * RLIMIT_AS when the call was sent, and by 8 MiB or more: a worker that faults with
 * what it held before the call (its inputs and output buffers) is a crash.  A worker
 * can at most trade one failure verdict (crash) for another (memory) this way. */
static bool rlimit_memory_death(const kc_worker *w, const siginfo_t *si) {
  uint64_t as = kc_cgroup_rlimit_memory(w->cg);
  if (!as || w->maxrss_kb < 0 || (si->si_code != CLD_KILLED && si->si_code != CLD_DUMPED))
    return false;
  int sig = si->si_status;
  if (sig != SIGSEGV && sig != SIGBUS && sig != SIGABRT)
    return false;
  uint64_t base = w->hwm_at_send_kb > 0 ? (uint64_t)w->hwm_at_send_kb * 1024 : 0;
  uint64_t peak = (uint64_t)w->maxrss_kb * 1024;
  uint64_t left = as > base ? as - base : 0;
  return peak > base && peak - base >= left / 4 && peak - base >= (8u << 20);
}

/* The worker's peak RSS so far (VmHWM), read from outside: the baseline of the call
 * about to be sent.  Only under the rlimit fallback (one read of /proc per send). */
long kc__worker_hwm_kb(pid_t pid) {
  char path[64], line[128];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

/* Calls still queued behind a failure are owed a CHILD_ERROR each. */
void kc__worker_orphan_rest(kc_worker *w, uint64_t skip, const char *why) {
  uint64_t left = kc_ring_outstanding(&w->ring);
  if (left > skip) {
    w->orphans += left - skip;
    kc__scopy(w->orphan_msg, sizeof w->orphan_msg, why);
    w->orphan_gen = w->gen;
    w->orphan_pid = w->pid;
  }
}

/* The worker's end as the parent saw it (siginfo, the listener, the cgroup's counters,
 * the seal's trap word), decided by the sandbox layer's one decider. */
void kc__worker_verdict(kc_worker *w, const siginfo_t *si, kc_result *v, char *msg, size_t cap) {
  kc_result_init(v);
  kc_cgroup_counters c = {-1, -1, -1, -1};
  if (w->cg)
    kc_cgroup_read(w->cg, &c, NULL);
  if (c.peak_memory >= 0)
    v->peak_memory_bytes = c.peak_memory;
  bool exited = si->si_code == CLD_EXITED;
  if (!exited && si->si_code != CLD_KILLED && si->si_code != CLD_DUMPED) {
    v->status = KC_STATUS_SETUP_ERROR;
    snprintf(msg, cap, "worker ended");
    kc__scopy(v->message, sizeof v->message, msg);
    return;
  }
  kc_verdict_facts f = {.exit_code = exited ? si->si_status : -1,
                        .signal = exited ? 0 : si->si_status,
                        .lim = &w->o.limits};
  uint32_t trapped = w->ring.ctl ? atomic_load(&w->ring.ctl->trapped_syscall) : 0xffffffffu;
  char nb[48] = "", detail[160];
  if (w->violation[0]) {
    f.killed = KC_KILLED_SYSCALL;
    f.syscall = w->violation;
  } else if (exited && si->si_status == 128 + SIGSYS && trapped != 0xffffffffu) {
    /* the seal filter's trap: the number is the worker's word, so only ever printed */
    f.killed = KC_KILLED_SYSCALL;
    f.syscall = kc_syscall_label(0, (int)(trapped & 0xffff), nb, sizeof nb);
  }
  f.oom = c.oom_kills >= 0 && w->oom_base >= 0 && c.oom_kills > w->oom_base;
  if (!f.oom && rlimit_memory_death(w, si)) {
    f.oom = true;
    snprintf(detail, sizeof detail,
             "died at its memory limit (RLIMIT_AS %" PRIu64 " MiB, peak RSS %ld MiB)",
             kc_cgroup_rlimit_memory(w->cg) >> 20, w->maxrss_kb >> 10);
    f.memory_detail = detail;
  }
  f.pids_hit = c.pids_max_hits >= 0 && w->pids_base >= 0 && c.pids_max_hits > w->pids_base;
  kc_verdict_decide(&f, v);
  snprintf(msg, cap, "worker: %s", v->message);
  kc__scopy(v->message, sizeof v->message, msg);
}

void kc_worker_limit_hits(kc_worker *w, bool *oom, bool *pids) {
  kc_cgroup_counters c = {-1, -1, -1, -1};
  if (w->cg)
    kc_cgroup_read(w->cg, &c, NULL);
  *oom = c.oom_kills >= 0 && w->oom_base >= 0 && c.oom_kills > w->oom_base;
  *pids = c.pids_max_hits >= 0 && w->pids_base >= 0 && c.pids_max_hits > w->pids_base;
}

bool kc__pidfd_dead(int pidfd) {
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}
