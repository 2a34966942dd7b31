/* kc_worker: TVM's PopenWorker with the watchdog in the parent.  Every wait here has a
 * deadline; death arrives through a pidfd, violations through the seccomp listener,
 * completions through the ring (spin, then poll() on an eventfd). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "kcage/cgroup.h"
#include "kcage/policy.h"
#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "sysname.h"
#include "worker_internal.h"

/* bounded copy that always terminates (and keeps -Wformat-truncation quiet) */
static void scopy(char *d, size_t cap, const char *s) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < cap; i++)
    d[i] = s[i];
  d[i] = 0;
}

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
  int pidfd, evfd, listener;
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
  uint64_t last_done_ns; /* when the last call completed */
};

static uint32_t g_gen_counter;

static int respawn_start(kc_worker *w, kc_error *err);

void kc_worker_opts_init(kc_worker_opts *o) {
  memset(o, 0, sizeof *o);
  o->stdout_.fd = -1;
  o->stderr_.fd = -1;
}

void kc_call_result_init(kc_call_result *r) {
  memset(r, 0, sizeof *r);
  kc_result_init(&r->verdict);
}

/* The same without touching the 1.3 KB of message buffers: this is on the path of
 * every completed call (a pool does several hundred thousand a second). */
static void result_init_fast(kc_call_result *r) {
  r->status = KC_CALL_COMPLETE;
  r->value = NULL;
  r->value_len = 0;
  r->message[0] = 0;
  r->verdict.status = KC_STATUS_OK;
  r->verdict.exit_code = -1;
  r->verdict.signal = 0;
  r->verdict.syscall[0] = 0;
  r->verdict.limit = NULL;
  r->verdict.cpu_s = r->verdict.wall_s = -1;
  r->verdict.peak_memory_bytes = -1;
  r->verdict.message[0] = 0;
  r->pid = 0;
  r->generation = 0;
  r->elapsed_s = 0;
}

void kc_call_result_clear(kc_call_result *r) {
  free(r->value);
  r->value = NULL;
  r->value_len = 0;
}

const char *kc_call_status_name(kc_call_status s) {
  switch (s) {
  case KC_CALL_COMPLETE:
    return "complete";
  case KC_CALL_EXCEPTION:
    return "exception";
  case KC_CALL_TIMEOUT:
    return "timeout";
  case KC_CALL_CHILD_ERROR:
    return "child_error";
  }
  return "unknown";
}

static char *dupstr(const char *s) {
  return s ? strdup(s) : NULL;
}

/* The supervising thread asks for a short scheduler slice (EEVDF custom slice, Linux
 * >= 6.12; ignored elsewhere).  Without it, a worker spinning on the parent's CPU keeps
 * it for its whole slice after the parent's deadline timer fires: timeouts overshoot
 * by ~3 ms on this machine.  With it, the woken parent preempts at once. */
void kc_sched_slice(uint64_t ns) {
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t prio;
    uint64_t runtime, deadline, period;
  } a;
  memset(&a, 0, sizeof a);
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) < 0 || a.policy != SCHED_OTHER)
    return;
  a.size = sizeof a;
  a.runtime = ns; /* 0 = the default slice */
  syscall(SYS_sched_setattr, 0, &a, 0);
}

void kc_sched_short_slice(void) {
  static __thread bool done;
  if (done)
    return;
  done = true;
  kc_sched_slice(100000); /* 0.1 ms */
}

int kc_worker_new_shared(const kc_worker_opts *opts, kc_zygote *zyg, kc_worker **out,
                         kc_error *err) {
  kc_sched_short_slice();
  kc_worker *w = calloc(1, sizeof *w);
  if (!w)
    return kc_error_set(err, ENOMEM, "worker");
  w->spin_limit_ns = KC_PARENT_SPIN_NS;
  w->worker_spin_ns = KC_WORKER_SPIN_NS;
  if (opts)
    w->o = *opts;
  else
    kc_worker_opts_init(&w->o);
  w->initializer = dupstr(w->o.initializer);
  char polbuf[4096];
  const char *pol =
      w->o.policy ? w->o.policy : (w->o.isolation == KC_ISOLATION_NONE ? NULL : "measure");
  if (kc_worker_policy_path(&w->o, pol, polbuf, sizeof polbuf, &pol, err) < 0) {
    kc_worker_free(w);
    return kc_error_prefix(err, "worker");
  }
  w->policy = dupstr(pol);
  w->o.settings.policy_dir = NULL; /* resolved: the caller's string is not kept */
  w->worker_path = dupstr(w->o.worker_path);
  w->python_lib = dupstr(w->o.python_lib);
  w->python_boot = dupstr(w->o.python_boot);
  if (w->o.initargs_len) {
    w->initargs = malloc(w->o.initargs_len);
    if (w->initargs)
      memcpy(w->initargs, w->o.initargs, w->o.initargs_len);
  }
  if (w->o.n_mounts) {
    if (w->o.n_mounts > 64 || !w->o.mounts) {
      kc_worker_free(w);
      return kc_error_set(err, EINVAL, "worker: bad mount list");
    }
    w->mounts = calloc(w->o.n_mounts, sizeof *w->mounts);
    for (size_t i = 0; w->mounts && i < w->o.n_mounts; i++) {
      w->mounts[i] = w->o.mounts[i];
      w->mounts[i].src = dupstr(w->o.mounts[i].src);
      w->mounts[i].dst = dupstr(w->o.mounts[i].dst);
    }
    w->o.mounts = w->mounts;
    if (!w->mounts) {
      w->o.n_mounts = 0;
      kc_worker_free(w);
      return kc_error_set(err, ENOMEM, "worker");
    }
  }
  w->o.initializer = w->initializer;
  w->o.policy = w->policy;
  w->o.worker_path = w->worker_path;
  w->o.python_lib = w->python_lib;
  w->o.python_boot = w->python_boot;
  w->o.initargs = w->initargs;
  if (!w->o.max_arg_bytes)
    w->o.max_arg_bytes = 1u << 20;
  if (!w->o.max_result_bytes)
    w->o.max_result_bytes = 1u << 20;
  if (w->o.max_result_bytes < KC_RING_MSG_MAX)
    w->o.max_result_bytes = KC_RING_MSG_MAX;
  if (w->o.max_arg_bytes > (1u << 30) || w->o.max_result_bytes > (1u << 30)) {
    kc_worker_free(w);
    return kc_error_set(err, EINVAL, "worker: payload limits over 1 GiB");
  }
  w->q = calloc(KC_DEFAULT_DEPTH, sizeof *w->q);
  w->pidfd = w->evfd = w->listener = w->handoff = w->slot_sock = -1;
  w->ring.memfd = -1;
  w->zyg = zyg;
  if (!w->q || (w->o.initargs_len && !w->initargs)) {
    kc_worker_free(w);
    return kc_error_set(err, ENOMEM, "worker");
  }
  *out = w;
  return 0;
}

int kc_worker_new(const kc_worker_opts *opts, kc_worker **out, kc_error *err) {
  if (kc_worker_new_shared(opts, NULL, out, err) < 0)
    return -1;
  (*out)->own_zyg = true;
  return 0;
}

static void reap_graves(kc_worker *w, bool block) {
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
static void kill_async(kc_worker *w) {
  if (!w->pid)
    return;
  syscall(SYS_pidfd_send_signal, w->pidfd, SIGKILL, NULL, 0);
  /* A sandboxed worker is pid 1 of its own pid namespace: its death makes the kernel
   * SIGKILL every process in that namespace, stopped or not, so the cgroup kill (which
   * waits until the cgroup is empty) is only needed without one. */
  if (w->cg && w->o.isolation != KC_ISOLATION_SANDBOX)
    kc_cgroup_kill(w->cg, NULL);
  if (w->ngraves == KC_GRAVE_MAX)
    reap_graves(w, true);
  w->graves[w->ngraves++] = w->pidfd;
  w->pidfd = -1;
}

/* Kill the whole tree and reap the worker.  *si gets its end. */
static void kill_and_reap(kc_worker *w, siginfo_t *si) {
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
static long worker_hwm_kb(pid_t pid) {
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

static int collect_pid(kc_worker *w, kc_error *err);

static void drop_process(kc_worker *w) {
  if (w->spawning) {
    /* never leave the requested process behind: learn its pid, then kill it */
    kc_error e = {0};
    if (collect_pid(w, &e) == 0) {
      siginfo_t si;
      kill_and_reap(w, &si);
    }
  }
  kc_close_fd(&w->handoff);
  kc_close_fd(&w->pidfd);
  kc_close_fd(&w->evfd);
  kc_close_fd(&w->listener);
  kc_ring_destroy(&w->ring);
  w->pid = 0;
}

/* Calls still queued behind a failure are owed a CHILD_ERROR each. */
static void orphan_rest(kc_worker *w, uint64_t skip, const char *why) {
  uint64_t left = kc_ring_outstanding(&w->ring);
  if (left > skip) {
    w->orphans += left - skip;
    scopy(w->orphan_msg, sizeof w->orphan_msg, why);
    w->orphan_gen = w->gen;
    w->orphan_pid = w->pid;
  }
}

/* The worker's end as the parent saw it (siginfo, the listener, the cgroup's counters,
 * the seal's trap word), decided by the sandbox layer's one decider. */
static void verdict_from_siginfo(kc_worker *w, const siginfo_t *si, kc_result *v, char *msg,
                                 size_t cap) {
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
    scopy(v->message, sizeof v->message, msg);
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
  scopy(v->message, sizeof v->message, msg);
}

static void fill_common(kc_worker *w, kc_call_result *res, uint64_t now) {
  res->pid = w->pid;
  res->generation = w->gen;
  res->elapsed_s = (double)(now - w->head_start_ns) / 1e9;
}

/* The worker failed while res's call was the oldest: kill, verdict, orphan the rest. */
static void fail_worker(kc_worker *w, kc_call_result *res, kc_call_status st, const char *why) {
  uint64_t now = kc_now_ns();
  fill_common(w, res, now);
  res->status = st;
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (st == KC_CALL_TIMEOUT)
    kill_async(w);
  else
    kill_and_reap(w, &si);
  if (st == KC_CALL_TIMEOUT) {
    kc_result_init(&res->verdict);
    res->verdict.status = KC_STATUS_TIMEOUT;
    res->verdict.limit = "wall";
    scopy(res->message, sizeof res->message, why);
    scopy(res->verdict.message, sizeof res->verdict.message, why);
  } else if (why) {
    kc_result_init(&res->verdict);
    res->verdict.status = KC_STATUS_SETUP_ERROR;
    scopy(res->message, sizeof res->message, why);
    scopy(res->verdict.message, sizeof res->verdict.message, why);
  } else {
    verdict_from_siginfo(w, &si, &res->verdict, res->message, sizeof res->message);
  }
  orphan_rest(w, 1, "worker replaced after an earlier call failed");
  drop_process(w);
  /* The replacement starts at the next send, as in TVM.  Starting it here overlapped
   * little (callers send again at once) and delayed this result by the zygote's fork
   * (~0.3 ms: the woken zygote takes the CPU), against the 1 ms death budget. */
}

static int read_violation(kc_worker *w) {
  kc_seccomp_event ev;
  kc_error e = {0};
  if (kc_seccomp_notify_receive(w->listener, &ev, &e) < 0)
    return 0; /* ENOENT: the task died meanwhile; its death is reported instead */
  /* A pool worker was exec'd before its filter: every notification, the policy's
   * "notify" rules (execve) included, is a violation. */
  scopy(w->violation, sizeof w->violation, ev.name[0] ? ev.name : "unknown");
  return 1;
}

int kc_worker_pollfds(kc_worker *w, int fds[3]) {
  fds[0] = w->evfd;
  fds[1] = w->pidfd;
  fds[2] = w->listener;
  return w->pid ? 3 : 0;
}

void kc_worker_set_waiting(kc_worker *w, bool on) {
  if (w->ring.ctl)
    atomic_store_explicit(&w->ring.ctl->cq_waiters, on ? KC_CQ_POLL : KC_CQ_AWAKE,
                          memory_order_seq_cst);
}

void kc_worker_set_spin(kc_worker *w, uint32_t parent_ns, uint32_t worker_ns) {
  w->spin_limit_ns = parent_ns;
  w->worker_spin_ns = worker_ns;
  w->spin.budget_ns = 0;
  if (w->ring.ctl)
    atomic_store(&w->ring.ctl->worker_spin_ns, worker_ns);
}

void kc_worker_set_zygote(kc_worker *w, kc_zygote *z) {
  w->zyg = z;
}

uint64_t kc_worker_take_orphans(kc_worker *w) {
  uint64_t n = w->orphans;
  w->orphans = 0;
  return n;
}

uint64_t kc_worker_outstanding(kc_worker *w) {
  return w->orphans + (w->pid ? kc_ring_outstanding(&w->ring) : 0);
}

bool kc_worker_can_take(kc_worker *w) {
  uint64_t n = kc_worker_outstanding(w);
  if (n >= KC_DEFAULT_DEPTH)
    return false;
  return !(w->pid && w->o.maximum_uses && w->uses_left == 0 && n);
}

uint32_t kc_worker_depth(kc_worker *w) {
  (void)w;
  return KC_DEFAULT_DEPTH;
}

/* The head call's deadline when its handler says when its task began (load_s): from
 * that moment, which the worker writes and we clamp into [the call's start, now] and
 * to at most load_s after the start.  Until it says so, the earliest the deadline can
 * be is a timeout from now: that is when to look again, and the load's own end
 * (start + load_s + timeout) bounds it all. */
static uint64_t loaded_deadline(kc_worker *w, uint64_t timeout) {
  uint64_t start = w->head_start_ns, now = kc_now_ns();
  double load_s = w->o.load_s < 86400 ? w->o.load_s : 86400; /* no overflow below */
  uint64_t cap = start + (uint64_t)(load_s * 1e9);
  kc_ring_ctl *c = w->ring.ctl;
  if (atomic_load_explicit(&c->began_seq, memory_order_acquire) == w->ring.reaped + 1) {
    uint64_t b = atomic_load_explicit(&c->began_ns, memory_order_relaxed);
    b = b < start ? start : b > now ? now : b;
    return (b < cap ? b : cap) + timeout;
  }
  return (now < cap ? now : cap) + timeout;
}

uint64_t kc_worker_deadline(kc_worker *w) {
  if (w->orphans || !w->pid)
    return w->orphans ? 0 : UINT64_MAX;
  if (!kc_ring_outstanding(&w->ring))
    return UINT64_MAX;
  pending *p = &w->q[w->ring.reaped % KC_DEFAULT_DEPTH];
  if (p->timeout_s <= 0)
    return UINT64_MAX;
  uint64_t timeout = (uint64_t)(p->timeout_s * 1e9);
  if (w->o.load_s <= 0 || !w->ring.ctl)
    return w->head_start_ns + timeout;
  return loaded_deadline(w, timeout);
}

static bool pidfd_dead(int pidfd) {
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Is the process already on its way out (the kernel's PF_EXITING in /proc/PID/stat)?
 * A worker that exits or dies of a signal before its deadline is a death, not a
 * timeout, even when tearing its memory down takes past the deadline: TVM reports a
 * death.  The flag is the kernel's, not the worker's word.  Read at a deadline only. */
static bool exiting(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return false;
  buf[n] = 0;
  /* after the command's closing parenthesis: state ppid pgrp session tty tpgid flags */
  const char *p = strrchr(buf, ')');
  unsigned long flags = 0;
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
    return false;
  return flags & 0x4; /* PF_EXITING */
}

/* A validated completion becomes the oldest call's result. */
static int take(kc_worker *w, kc_call_result *res, kc_ring_completion *c, uint64_t now) {
  result_init_fast(res);
  fill_common(w, res, now);
  if (c->status == KC_CQE_COMPLETE) {
    res->status = KC_CALL_COMPLETE;
    res->value = c->payload;
    res->value_len = c->len;
  } else {
    res->status = KC_CALL_EXCEPTION;
    scopy(res->message, sizeof res->message, c->payload ? (char *)c->payload : "");
    free(c->payload);
  }
  /* the next call starts now, or when it was sent if that is later */
  if (kc_ring_outstanding(&w->ring)) {
    uint64_t s = w->q[w->ring.reaped % KC_DEFAULT_DEPTH].sent_ns;
    w->head_start_ns = s > now ? s : now;
  }
  w->last_done_ns = now;
  return 1;
}

/* look_at_fds false: the caller's next ppoll() watches the pidfd and the listener, so
 * a death or a violation is seen there; two poll() calls per sleep are saved. */
static int try_take(kc_worker *w, kc_call_result *res, bool look_at_fds) {
  if (w->orphans) {
    kc_call_result_init(res);
    res->status = KC_CALL_CHILD_ERROR;
    res->pid = w->orphan_pid;
    res->generation = w->orphan_gen;
    res->verdict.status = KC_STATUS_SIGNALED;
    res->verdict.signal = SIGKILL;
    scopy(res->message, sizeof res->message, w->orphan_msg);
    scopy(res->verdict.message, sizeof res->verdict.message, w->orphan_msg);
    w->orphans--;
    return 1;
  }
  if (!w->pid || !kc_ring_outstanding(&w->ring))
    return -1;
  kc_ring_completion c;
  kc_error rerr; /* not zeroed: 1 KB per call; filled whenever it is read */
  rerr.code = 0;
  rerr.msg[0] = 0;
  /* The call ended when its completion is first seen, before the reap copies the
   * payload: elapsed_s must not grow with the size of the result. */
  uint64_t seen = kc_now_ns();
  int r = kc_ring_reap(&w->ring, &c, &rerr);
  if (r == 1)
    return take(w, res, &c, seen);
  if (r < 0) {
    kc_call_result_init(res);
    char why[sizeof rerr.msg + 32];
    snprintf(why, sizeof why, "worker corrupted its ring: %s", rerr.msg);
    fail_worker(w, res, KC_CALL_CHILD_ERROR, why);
    return 1;
  }
  uint64_t dl = kc_worker_deadline(w);
  bool late = dl != UINT64_MAX && kc_now_ns() >= dl;
  /* a verdict is due at the deadline, and a death or violation outranks it */
  look_at_fds = look_at_fds || late;
  bool violated = false;
  if (look_at_fds && w->listener >= 0) {
    struct pollfd p = {.fd = w->listener, .events = POLLIN};
    violated = poll(&p, 1, 0) > 0 && (p.revents & POLLIN) && read_violation(w);
  }
  bool dead = violated || (look_at_fds && pidfd_dead(w->pidfd));
  dead = dead || (late && exiting(w->pid));
  late = late && !dead;
  if (!dead && !late)
    return 0;
  /* A completion may have landed between the first look and now (the call finished,
   * then the worker died on the next one, or the call ended at its deadline): it is
   * this call's result; the failure belongs to the next call. */
  seen = kc_now_ns();
  r = kc_ring_reap(&w->ring, &c, &rerr);
  if (r == 1)
    return take(w, res, &c, seen);
  kc_call_result_init(res);
  if (late) {
    char why[96];
    snprintf(why, sizeof why, "call timed out after %.3f s",
             w->q[w->ring.reaped % KC_DEFAULT_DEPTH].timeout_s);
    fail_worker(w, res, KC_CALL_TIMEOUT, why);
  } else {
    fail_worker(w, res, KC_CALL_CHILD_ERROR, NULL);
  }
  return 1;
}

int kc_worker_try(kc_worker *w, kc_call_result *res, kc_error *err) {
  (void)err;
  return try_take(w, res, true);
}

/* Sleep on the ring's futex for ns at most, or until a completion lands or the worker
 * dies (ring.h).  false: it died, and napping again would not wait. */
static bool nap(kc_worker *w, uint64_t ns) {
  kc_ring_ctl *c = w->ring.ctl;
  atomic_store_explicit(&c->cq_waiters, KC_CQ_NAP, memory_order_seq_cst);
  uint32_t key = atomic_load_explicit(&c->cq_epoch, memory_order_seq_cst);
  bool alive = true;
  if (atomic_load_explicit(&c->cq_tail, memory_order_seq_cst) == w->ring.reaped)
    alive = kc_ring_nap(&w->ring, key, ns);
  atomic_store_explicit(&c->cq_waiters, KC_CQ_AWAKE, memory_order_seq_cst);
  return alive;
}

/* Spin on the ring alone (no system calls on the fast path but sched_yield) until a
 * completion lands or the spin budget is spent. */
static void spin_wait(kc_worker *w, uint64_t until_ns) {
  kc_ring_ctl *c = w->ring.ctl;
  kc_spinner sp;
  kc_spin_begin(&sp, &w->spin, w->spin_limit_ns, 0);
  while (w->pid && kc_ring_outstanding(&w->ring) && !w->orphans) {
    if (atomic_load_explicit(&c->cq_tail, memory_order_acquire) != w->ring.reaped) {
      kc_spin_end(&sp, true);
      break;
    }
    if (!kc_spin_step(&sp, &c->parent_cpu, &c->worker_cpu, until_ns)) {
      kc_spin_end(&sp, false);
      break;
    }
  }
}

/* Spin (unless !spin), nap, then sleep in poll() until something happens or until_ns.
 * 1 = res filled.  A wait that does not spin still publishes this CPU: a worker that
 * sees the parent on its own CPU sleeps at once after answering, instead of spinning
 * while the parent waits for that CPU. */
static int wait_one(kc_worker *w, kc_call_result *res, uint64_t until_ns, bool spin,
                    kc_error *err) {
  kc_ring_ctl *c = w->ring.ctl;
  if (spin)
    spin_wait(w, until_ns);
  else if (c)
    kc_ring_share_cpu(&c->parent_cpu, &c->worker_cpu);
  (void)err;
  uint64_t nap_end = kc_now_ns() + KC_PARENT_NAP_NS;
  for (bool look = false;;) {
    int r = try_take(w, res, look);
    if (r != 0)
      return r;
    uint64_t now = kc_now_ns();
    uint64_t dl = kc_worker_deadline(w);
    uint64_t until = dl < until_ns ? dl : until_ns;
    if (now >= until_ns)
      return 0;
    if (now < nap_end && now < until && w->pid && !w->orphans) {
      look = !nap(w, (until < nap_end ? until : nap_end) - now);
      if (look)
        nap_end = 0; /* dead: the pidfd, in ppoll, says how */
      continue;
    }
    kc_worker_set_waiting(w, true);
    if (atomic_load_explicit(&w->ring.ctl->cq_tail, memory_order_seq_cst) != w->ring.reaped) {
      kc_worker_set_waiting(w, false);
      continue;
    }
    struct pollfd p[3] = {{.fd = w->evfd, .events = POLLIN},
                          {.fd = w->pidfd, .events = POLLIN},
                          {.fd = w->listener, .events = POLLIN}};
    /* ppoll, not poll: a deadline rounded up to whole ms would overshoot by up to 1 ms */
    uint64_t left = until == UINT64_MAX ? 1000000000u : until - now;
    if (left > 1000000000u)
      left = 1000000000u;
    struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    int pr = ppoll(p, w->listener >= 0 ? 3 : 2, &ts, NULL);
    kc_worker_set_waiting(w, false);
    look = pr != 0 && (pr < 0 || p[1].revents || p[2].revents);
    if (pr > 0 && (p[0].revents & POLLIN)) {
      uint64_t v;
      ssize_t rd = read(w->evfd, &v, sizeof v);
      (void)rd;
    }
  }
}

int kc_worker_recv(kc_worker *w, kc_call_result *res, kc_error *err) {
  if (!kc_worker_outstanding(w))
    return kc_error_set(err, EINVAL, "recv: no call outstanding");
  for (;;) {
    int r = wait_one(w, res, UINT64_MAX, true, err);
    if (r != 0)
      return r == 1 ? 0 : -1;
  }
}

/* The bounded waits: wait_s at most for the oldest call, spinning first or not. */
static int recv_within(kc_worker *w, kc_call_result *res, double wait_s, bool spin, kc_error *err) {
  if (!kc_worker_outstanding(w))
    return kc_error_set(err, EINVAL, "recv: no call outstanding");
  uint64_t until = kc_now_ns() + (wait_s > 0 ? (uint64_t)(wait_s * 1e9) : 0);
  return wait_one(w, res, until, spin, err);
}

int kc_worker_recv_timed(kc_worker *w, kc_call_result *res, double wait_s, kc_error *err) {
  return recv_within(w, res, wait_s, true, err);
}

int kc_worker_recv_asleep(kc_worker *w, kc_call_result *res, double wait_s, kc_error *err) {
  return recv_within(w, res, wait_s, false, err);
}

int kc_worker_poll(kc_worker *w, kc_call_result *res, kc_error *err) {
  return kc_worker_try(w, res, err);
}

/* wait for the worker's ready message: lockdown done, listener fd attached */
static int wait_ready(kc_worker *w, int sock, kc_error *err) {
  struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = w->pidfd, .events = POLLIN}};
  int n;
  do
    n = poll(p, 2, 5000);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return kc_error_set(err, ETIMEDOUT, "worker did not start");
  if (!(p[0].revents & POLLIN))
    return kc_error_set(err, ECHILD, "worker died while starting");
  /* One message: a kc_worker_ready on failure, else the policy layer's hand-off
   * byte ('L' with the listener attached, 'N' without). */
  kc_worker_ready rd;
  int fd = -1, nfd = 1;
  ssize_t r = kc_recv_fds(sock, &rd, sizeof rd, &fd, &nfd);
  if (r == 1) {
    char byte = ((char *)&rd)[0];
    if ((byte == 'L') != (nfd == 1) || (byte != 'L' && byte != 'N')) {
      if (nfd)
        close(fd);
      return kc_error_set(err, EPROTO, "worker: bad hand-off message");
    }
    w->listener = nfd ? fd : -1;
    return 0;
  }
  if (nfd)
    close(fd);
  if (r != (ssize_t)sizeof rd || rd.magic != KC_ZYGOTE_MAGIC)
    return kc_error_set(err, EPROTO, "worker: bad ready message");
  rd.msg[sizeof rd.msg - 1] = 0;
  return kc_error_set(err, 0, "worker lockdown failed: %s", rd.msg);
}

/* The slot's cgroup.  Without one a worker is still killed with its pid namespace,
 * but a limit it was given must hold: a limit that cannot be enforced is refused
 * (kc_cgroup_refusal says why), never dropped. */
static int ensure_cgroup(kc_worker *w, kc_error *err) {
  if (w->cg_tried || w->o.isolation == KC_ISOLATION_NONE)
    return 0;
  static _Atomic unsigned slot;
  char name[64];
  snprintf(name, sizeof name, "worker-%d-%u", (int)getpid(), atomic_fetch_add(&slot, 1));
  kc_cgroup_limits lim = {
      .memory_bytes = w->o.limits.memory_bytes, .pids = w->o.limits.pids, .cpus = w->o.limits.cpus};
  if (lim.pids && w->o.isolation == KC_ISOLATION_SANDBOX)
    lim.pids++; /* the slot's zygote */
  kc_error e = {0};
  if (kc_cgroup_create(name, &lim, &w->o.settings, &w->cg, &e) < 0) {
    w->cg = NULL;
    if (lim.memory_bytes || lim.pids || lim.cpus > 0)
      return kc_error_set(err, e.code, "worker: %s", e.msg); /* tried again next spawn */
  }
  w->cg_tried = true;
  return 0;
}

/* A spawn in two halves, so that a replacement can be on its way while the caller
 * still handles the failure (or recycle) that made it necessary:
 *   respawn_start: ring, eventfd, socket, and the request to the zygote (no wait);
 *   respawn_finish: the zygote's answer (pid), pidfd, cgroup attach, the worker's
 *                   hand-off (lockdown done), the initializer. */
static uint32_t next_gen(void) {
  uint32_t g =
      atomic_fetch_add((_Atomic uint32_t *)&g_gen_counter, 1) * 2654435761u + (uint32_t)getpid();
  return g ? g : 1; /* 0 is the zygote's hello */
}

/* The slot's own zygote, inside the slot's cgroup: asked of the zygote right after a
 * spawn request (the first worker, or one after the slot died, comes from the zygote
 * itself and is attached by pid), collected and attached by settle_slot while that
 * worker locks itself down.  Workers spawned after it are born in the cgroup. */
static void ask_slot(kc_worker *w) {
  if (w->slot && !kc_zygote_alive(w->slot)) {
    kc_zygote_stop(w->slot);
    w->slot = NULL;
  }
  /* Under the rlimit fallback each worker gets its limits itself: a slot's zygote
   * holding RLIMIT_NPROC could not fork the worker (the kernel counts the processes
   * of the pool's whole user namespace). */
  if (w->slot || w->slot_sock >= 0 || !w->cg || w->o.isolation != KC_ISOLATION_SANDBOX ||
      kc_cgroup_uses_rlimits(w->cg))
    return;
  w->slot_gen = next_gen();
  kc_error e = {0};
  if (kc_zygote_slot_request(w->zyg, w->slot_gen, &w->slot_sock, &e) < 0)
    w->slot_sock = -1; /* workers are then attached one by one */
}

static void settle_slot(kc_worker *w) {
  if (w->slot_sock < 0)
    return;
  int sock = w->slot_sock;
  w->slot_sock = -1;
  kc_error e = {0};
  if (!w->zyg) { /* gone with the failed spawn: the slot ends when its socket closes */
    close(sock);
    return;
  }
  if (kc_zygote_slot_collect(w->zyg, w->slot_gen, sock, &w->slot, &e) < 0) {
    w->slot = NULL;
    return;
  }
  /* The OOM killer should pick the worker, not the slot's zygote: it does anyway by
   * size (a few hundred KiB against the worker's allocation), and where we may (with
   * CAP_SYS_RESOURCE, which this CI machine does not give) the zygote is exempted.
   * Were it killed, the next spawn starts a new one. */
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/oom_score_adj", (int)w->slot->pid);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = write(fd, "-1000", 5);
    (void)n;
    close(fd);
  }
  if (!w->cg || kc_cgroup_attach(w->cg, w->slot->pid, &e) < 0) {
    kc_zygote_stop(w->slot);
    w->slot = NULL;
  }
}

/* Ring, eventfd, socket, and the request to the slot (or the zygote). */
static int request_spawn(kc_worker *w, kc_error *err) {
  if (w->slot && !kc_zygote_alive(w->slot)) {
    kc_zygote_stop(w->slot);
    w->slot = NULL;
  }
  uint32_t gen = next_gen();
  kc_ring_params rp = {KC_DEFAULT_DEPTH, (uint32_t)w->o.max_arg_bytes,
                       (uint32_t)w->o.max_result_bytes};
  if (kc_ring_create(&w->ring, &rp, gen, err) < 0)
    return kc_error_prefix(err, "worker");
  atomic_store(&w->ring.ctl->worker_spin_ns, w->worker_spin_ns);
  w->gen = gen;
  int sv[2] = {-1, -1};
  w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->evfd < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    kc_error_set(err, errno, "worker: eventfd/socketpair");
    drop_process(w);
    return -1;
  }
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  int outfd = w->o.stdout_.mode == KC_STDIO_FD        ? w->o.stdout_.fd
              : w->o.stdout_.mode == KC_STDIO_DISCARD ? devnull
                                                      : 1;
  int errfd = w->o.stderr_.mode == KC_STDIO_FD        ? w->o.stderr_.fd
              : w->o.stderr_.mode == KC_STDIO_DISCARD ? devnull
                                                      : 2;
  int fds[5] = {w->ring.memfd, w->evfd, sv[1], outfd, errfd};
  uint32_t flags = 0;
  if (w->o.isolation == KC_ISOLATION_SANDBOX)
    flags |= KC_ZF_NEWPID | KC_ZF_LOCKDOWN;
  /* Not CLONE_INTO_CGROUP: on this kernel (6.18) a child cloned into a v2 cgroup that
   * was ever cgroup.kill'ed is SIGKILLed at birth (the fork path compares the kill
   * sequence of the wrong cgroup), and slots are long-lived and killed on every
   * timeout.  The parent attaches by pid instead (every hierarchy), before the worker
   * is sent anything: until then it runs only our own lockdown code. */
  int rc = kc_zygote_request(w->slot ? w->slot : w->zyg, flags, w->policy, gen, fds, 5, err);
  close(sv[1]);
  if (devnull >= 0)
    close(devnull);
  w->handoff = sv[0];
  if (rc < 0) {
    drop_process(w);
    return kc_error_prefix(err, "worker");
  }
  w->spawning = true;
  return 0;
}

/* A zygote of our own is started here, and everything that does not need it running
 * (cgroup, ring, the requests, queued on its socket) is done while it starts. */
static int respawn_start(kc_worker *w, kc_error *err) {
  bool fresh = !w->zyg;
  if (fresh && kc_zygote_begin(&w->o, &w->zyg, err) < 0)
    return kc_error_prefix(err, "worker");
  int rc = ensure_cgroup(w, err);
  bool request_failed = false;
  if (rc == 0 && (rc = request_spawn(w, err)) < 0)
    request_failed = true;
  else if (rc == 0)
    ask_slot(w);
  kc_error ze = {0};
  if (fresh && kc_zygote_await(&w->o, w->zyg, &ze) < 0) {
    drop_process(w); /* its answer never comes: the zygote is dead */
    kc_zygote_stop(w->zyg);
    w->zyg = NULL;
    if (err) /* a zygote that did not start explains anything else that failed */
      *err = ze;
    return kc_error_prefix(err, "worker");
  }
  if (request_failed && w->own_zyg) {
    kc_zygote_stop(w->zyg); /* a dead zygote is replaced at the next try */
    w->zyg = NULL;
  }
  return rc;
}

int kc_worker_prestart(kc_worker *w, kc_error *err) {
  if (w->pid || w->spawning)
    return 0;
  return respawn_start(w, err);
}

static int collect_worker(kc_worker *w, kc_error *err);

/* The spawn in flight, and the slot asked for with it, whatever became of the spawn. */
static int collect_pid(kc_worker *w, kc_error *err) {
  int rc = collect_worker(w, err);
  settle_slot(w);
  return rc;
}

/* The zygote's answer for the spawn in flight: pid, pidfd, cgroup attach. */
static int collect_worker(kc_worker *w, kc_error *err) {
  w->spawning = false;
  pid_t pid = 0;
  if (kc_zygote_collect(w->slot ? w->slot : w->zyg, w->gen, &pid, err) < 0) {
    drop_process(w);
    if (w->slot) { /* replaced at the next spawn */
      kc_zygote_stop(w->slot);
      w->slot = NULL;
    } else if (w->own_zyg) {
      kc_zygote_stop(w->zyg);
      w->zyg = NULL;
    }
    return kc_error_prefix(err, "worker");
  }
  w->pid = pid;
  atomic_store_explicit(&w->ring.ctl->host_pid, pid, memory_order_release);
  w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  w->violation[0] = 0;
  if (w->pidfd < 0) {
    int e = errno;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    w->pid = 0;
    drop_process(w);
    return kc_error_set(err, e, "worker: pidfd_open");
  }
  /* v1 hierarchies by pid, and rlimits where they stand in for the cgroup: a worker
   * that cannot be held to its limits does not run. */
  if (w->cg && !w->slot && kc_cgroup_attach(w->cg, pid, err) < 0) {
    siginfo_t si;
    kill_and_reap(w, &si);
    drop_process(w);
    return kc_error_prefix(err, "worker");
  }
  kc_cgroup_counters c = {-1, -1, -1, -1};
  if (w->cg)
    kc_cgroup_read(w->cg, &c, NULL);
  w->oom_base = c.oom_kills;
  w->pids_base = c.pids_max_hits;
  return 0;
}

static int respawn_finish(kc_worker *w, kc_error *err) {
  if (w->spawning && collect_pid(w, err) < 0)
    return -1;
  int rc = wait_ready(w, w->handoff, err);
  kc_close_fd(&w->handoff);
  if (rc < 0) {
    siginfo_t si;
    kill_and_reap(w, &si);
    drop_process(w);
    return kc_error_prefix(err, "worker");
  }
  w->uses_left = w->o.maximum_uses;
  w->head_start_ns = kc_now_ns();
  if (w->initializer) {
    size_t sl = strlen(w->initializer);
    size_t n = sl + 1 + w->o.initargs_len;
    char *buf = malloc(n);
    if (!buf)
      return kc_error_set(err, ENOMEM, "initializer");
    memcpy(buf, w->initializer, sl + 1);
    if (w->o.initargs_len)
      memcpy(buf + sl + 1, w->initargs, w->o.initargs_len);
    rc = kc_ring_submit(&w->ring, "@init", 5, buf, n, err);
    free(buf);
    if (rc < 0)
      return kc_error_prefix(err, "initializer");
    w->q[0] = (pending){kc_now_ns(), 0};
    kc_ring_wake_worker(&w->ring);
    kc_call_result res;
    kc_worker_recv(w, &res, err);
    kc_call_result_clear(&res);
    if (res.status != KC_CALL_COMPLETE) {
      if (w->pid) {
        siginfo_t si;
        kill_and_reap(w, &si);
        drop_process(w);
      }
      return kc_error_set(err, 0, "initializer %s: %s", kc_call_status_name(res.status),
                          res.message);
    }
  }
  return 0;
}

int kc_worker_send(kc_worker *w, const char *fn, const void *arg, size_t len, double timeout_s,
                   kc_error *err) {
  if (!fn)
    return kc_error_set(err, EINVAL, "send: no handler name");
  size_t fl = strlen(fn);
  if (fl > KC_RING_FN_MAX || !fl)
    return kc_error_set(err, EINVAL, "send: bad handler name");
  if (len > w->o.max_arg_bytes)
    return kc_error_set(err, E2BIG, "send: argument of %zu bytes over the limit of %zu", len,
                        w->o.max_arg_bytes);
  /* TVM step 1: recycle when the uses are spent (only between calls: with calls still
   * in flight the process may not take one more) */
  if (w->pid && w->o.maximum_uses && w->uses_left == 0) {
    if (kc_ring_outstanding(&w->ring))
      return kc_error_set(err, EAGAIN,
                          "send: maximum_uses reached with calls in flight: recv first");
    siginfo_t si;
    kill_and_reap(w, &si);
    drop_process(w);
  }
  /* A worker idle for more than 1 ms is checked before it gets a call: one that died
   * between calls (killed from outside, say) is replaced silently, nothing was lost.
   * A hot loop pays no system call for this; a death within 1 ms of the last call
   * comes back as that next call's CHILD_ERROR, as in TVM. */
  if (w->pid && !kc_ring_outstanding(&w->ring) && kc_now_ns() - w->last_done_ns > 1000000 &&
      pidfd_dead(w->pidfd)) {
    siginfo_t si;
    kill_and_reap(w, &si);
    drop_process(w);
  }
  /* Killed workers still count against the slot's pids.max until they are reaped:
   * with a process limit the replacement waits for its predecessor to be gone. */
  if (w->ngraves)
    reap_graves(w, w->o.limits.pids != 0);
  if (!w->pid && !w->spawning && respawn_start(w, err) < 0)
    return -1;
  if (w->handoff >= 0 && respawn_finish(w, err) < 0)
    return -1;
  if (kc_ring_outstanding(&w->ring) >= KC_DEFAULT_DEPTH)
    return kc_error_set(err, EAGAIN, "send: %d calls already outstanding", KC_DEFAULT_DEPTH);
  if (kc_cgroup_rlimit_memory(w->cg) && !kc_ring_outstanding(&w->ring))
    w->hwm_at_send_kb = worker_hwm_kb(w->pid);
  uint64_t now = kc_now_ns();
  if (!kc_ring_outstanding(&w->ring))
    w->head_start_ns = now;
  w->q[w->ring.sent % KC_DEFAULT_DEPTH] = (pending){now, timeout_s};
  if (kc_ring_submit(&w->ring, fn, fl, arg, len, err) < 0)
    return -1;
  kc_ring_wake_worker(&w->ring);
  if (w->uses_left)
    w->uses_left--;
  return 0;
}

void kc_worker_kill(kc_worker *w) {
  if (!w || (!w->pid && !w->spawning))
    return;
  orphan_rest(w, 0, "worker killed");
  siginfo_t si;
  kill_and_reap(w, &si);
  drop_process(w);
}

int kc_worker_join(kc_worker *w, double timeout_s) {
  if (!w->pid)
    return 0;
  struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
  int ms = timeout_s < 0 ? -1 : (int)(timeout_s * 1000);
  int n;
  do
    n = poll(&p, 1, ms);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return -1;
  return 0;
}

bool kc_worker_is_alive(kc_worker *w) {
  return w->pid && !pidfd_dead(w->pidfd);
}

pid_t kc_worker_pid(const kc_worker *w) {
  return w->pid;
}

void kc_worker_free(kc_worker *w) {
  if (!w)
    return;
  if (w->pid || w->spawning) {
    siginfo_t si;
    kill_and_reap(w, &si);
    drop_process(w);
  }
  reap_graves(w, true);
  kc_zygote_stop(w->slot);
  if (w->own_zyg)
    kc_zygote_stop(w->zyg);
  if (w->cg)
    kc_cgroup_destroy(w->cg);
  for (size_t i = 0; w->mounts && i < w->o.n_mounts; i++) {
    free((char *)w->mounts[i].src);
    free((char *)w->mounts[i].dst);
  }
  free(w->mounts);
  free(w->initializer);
  free(w->policy);
  free(w->worker_path);
  free(w->python_lib);
  free(w->python_boot);
  free(w->initargs);
  free(w->q);
  free(w);
}
