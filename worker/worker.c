/* kc_worker: TVM's PopenWorker with the watchdog in the parent.  Every wait has a
 * deadline; death arrives through a pidfd, violations through the seccomp listener,
 * completions through the ring (spin, then poll() on an eventfd).  This file holds the
 * worker's life: options, creation, send (with recycling and the initializer), kill,
 * join and free; worker_impl.h says where the rest lives. */
#include "worker_impl.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"

void kc_worker_opts_init(kc_worker_opts *o) {
  memset(o, 0, sizeof *o);
  o->stdout_.fd = -1;
  o->stderr_.fd = -1;
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
  w->pidfd = w->evfd = w->listener = w->handoff = w->slot_sock = w->fdsock = -1;
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

/* A fresh worker: handed over, then its initializer (TVM's), before any call. */
static int respawn_finish(kc_worker *w, kc_error *err) {
  if (kc__worker_spawn_finish(w, err) < 0)
    return -1;
  int rc;
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
        kc__worker_kill_and_reap(w, &si);
        kc__worker_drop_process(w);
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
    kc__worker_kill_and_reap(w, &si);
    kc__worker_drop_process(w);
  }
  /* A worker idle for more than 1 ms is checked before it gets a call: one that died
   * between calls (killed from outside, say) is replaced silently, nothing was lost.
   * A hot loop pays no system call for this; a death within 1 ms of the last call
   * comes back as that next call's CHILD_ERROR, as in TVM. */
  if (w->pid && !kc_ring_outstanding(&w->ring) && kc_now_ns() - w->last_done_ns > 1000000 &&
      kc__pidfd_dead(w->pidfd)) {
    siginfo_t si;
    kc__worker_kill_and_reap(w, &si);
    kc__worker_drop_process(w);
  }
  /* Killed workers still count against the slot's pids.max until they are reaped:
   * with a process limit the replacement waits for its predecessor to be gone. */
  if (w->ngraves)
    kc__worker_reap_graves(w, w->o.limits.pids != 0);
  if (!w->pid && !w->spawning && kc__worker_spawn_start(w, err) < 0)
    return -1;
  if (w->handoff >= 0 && respawn_finish(w, err) < 0)
    return -1;
  if (kc_ring_outstanding(&w->ring) >= KC_DEFAULT_DEPTH)
    return kc_error_set(err, EAGAIN, "send: %d calls already outstanding", KC_DEFAULT_DEPTH);
  if (kc_cgroup_rlimit_memory(w->cg) && !kc_ring_outstanding(&w->ring))
    w->hwm_at_send_kb = kc__worker_hwm_kb(w->pid);
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

void kc_worker_set_extra(kc_worker *w, unsigned extra) {
  w->extra = extra;
}

int kc_worker_start_now(kc_worker *w, kc_error *err) {
  if (!w->pid && !w->spawning && kc__worker_spawn_start(w, err) < 0)
    return -1;
  if (w->handoff >= 0 && respawn_finish(w, err) < 0)
    return -1;
  return 0;
}

int kc_worker_pass_fds(kc_worker *w, const void *msg, size_t len, const int *fds, int nfds,
                       kc_error *err) {
  if (!(w->extra & KC_WORKER_PASS_FDS))
    return kc_error_set(err, EINVAL, "worker: not made to be passed descriptors");
  if (kc_worker_start_now(w, err) < 0)
    return -1;
  if (w->fdsock < 0)
    return kc_error_set(err, EALREADY, "worker: its descriptors were already passed");
  int rc = kc_send_fds(w->fdsock, msg, len, fds, nfds);
  int e = errno;
  /* one hand-over per process: after it the socket is the tenant's to talk on, and
   * nobody listens */
  kc_close_fd(&w->fdsock);
  return rc < 0 ? kc_error_set(err, e, "worker: pass descriptors") : 0;
}

void kc_worker_kill(kc_worker *w) {
  if (!w || (!w->pid && !w->spawning))
    return;
  kc__worker_orphan_rest(w, 0, "worker killed");
  siginfo_t si;
  kc__worker_kill_and_reap(w, &si);
  kc__worker_drop_process(w);
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
  return w->pid && !kc__pidfd_dead(w->pidfd);
}

pid_t kc_worker_pid(const kc_worker *w) {
  return w->pid;
}

void kc_worker_free(kc_worker *w) {
  if (!w)
    return;
  if (w->pid || w->spawning) {
    siginfo_t si;
    kc__worker_kill_and_reap(w, &si);
    kc__worker_drop_process(w);
  }
  kc__worker_reap_graves(w, true);
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
