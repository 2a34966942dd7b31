/* Waiting for a worker: completions taken from the ring (spin, nap on the futex, then
 * poll() on the eventfd, pidfd and listener), deadlines, and a failure turned into the
 * head call's result (timeout, death, violation, a corrupted ring). */
#include "worker_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kcage/seccomp.h"

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
    kc__worker_kill_async(w);
  else
    kc__worker_kill_and_reap(w, &si);
  if (st == KC_CALL_TIMEOUT) {
    kc_result_init(&res->verdict);
    res->verdict.status = KC_STATUS_TIMEOUT;
    res->verdict.limit = "wall";
    kc__scopy(res->message, sizeof res->message, why);
    kc__scopy(res->verdict.message, sizeof res->verdict.message, why);
  } else if (why) {
    kc_result_init(&res->verdict);
    res->verdict.status = KC_STATUS_SETUP_ERROR;
    kc__scopy(res->message, sizeof res->message, why);
    kc__scopy(res->verdict.message, sizeof res->verdict.message, why);
  } else {
    kc__worker_verdict(w, &si, &res->verdict, res->message, sizeof res->message);
  }
  kc__worker_orphan_rest(w, 1, "worker replaced after an earlier call failed");
  kc__worker_drop_process(w);
  /* The replacement starts at the next send, as in TVM.  Starting it here overlapped
   * little (callers send again at once) and delayed this result by the zygote's fork
   * (~0.3 ms: the woken zygote takes the CPU), against the 1 ms death budget. */
}

static int read_violation(kc_worker *w) {
  kc_seccomp_event ev;
  kc_error e = {0};
  if (w->relayed ? kc__sysinfo_relay_read(w->listener, &ev) == 0
                 : kc_seccomp_notify_receive(w->listener, &ev, &e) < 0)
    return 0; /* ENOENT: the task died meanwhile; its death is reported instead */
  /* A pool worker was exec'd before its filter: every notification, the policy's
   * "notify" rules (execve) included, is a violation. */
  kc__scopy(w->violation, sizeof w->violation, ev.name[0] ? ev.name : "unknown");
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

uint64_t kc_worker_outstanding(kc_worker *w) {
  return w->orphans + (w->pid ? kc_ring_outstanding(&w->ring) : 0);
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

/* kc_call_result_init without touching the 1.3 KB of message buffers: this is on the path of
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
    kc__scopy(res->message, sizeof res->message, c->payload ? (char *)c->payload : "");
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
    kc__scopy(res->message, sizeof res->message, w->orphan_msg);
    kc__scopy(res->verdict.message, sizeof res->verdict.message, w->orphan_msg);
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
  bool dead = violated || (look_at_fds && kc__pidfd_dead(w->pidfd));
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
