/* The measuring process as the parent sees it: a kc_worker under the `measure` policy,
 * or, when the caller asks for no isolation (opts.plain, only ever from an explicit command-line
 * flag), a plain forked process that runs the same handler behind a socketpair, locked
 * with its own seccomp filter.  Either way the parent bounds every
 * call by a deadline and treats every reply as hostile input. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kcage/sandbox_parts.h"
#include "kcage/worker.h"
#include "measure_internal.h"
#include "sysname.h"

static volatile sig_atomic_t interrupted;

void kc_measure_interrupt(int sig) {
  interrupted = sig > 0 ? sig : SIGINT;
}

int kc_measure_interrupted(void) {
  return interrupted;
}

struct kc_mrunner {
  kc_mrunner_opts o;
  /* plain */
  pid_t pid;
  int sock;
  kc_worker *w;
};

const char *kc_mrunner_kind(const kc_mrunner *r) {
  return r->o.plain ? "plain" : "sandbox";
}

void kc_mcall_clear(kc_mcall *c) {
  free(c->value);
  c->value = NULL;
  c->value_len = 0;
}

int kc_mrunner_new(const kc_mrunner_opts *o, kc_mrunner **out, kc_error *err) {
  kc_mrunner *r = calloc(1, sizeof *r);
  if (!r)
    return kc_error_set(err, ENOMEM, "runner");
  r->o = *o;
  r->sock = -1;
  if (!r->o.plain) {
    kc_worker_opts wo;
    kc_worker_opts_init(&wo);
    wo.policy = "measure";
    wo.settings = o->settings;
    wo.limits.memory_bytes = o->memory_bytes;
    wo.limits.pids = 1;
    kc_mount m[2] = {{.kind = KC_MOUNT_RO_BIND, .src = o->bind_dir, .dst = o->bind_dir},
                     {.kind = KC_MOUNT_RO_BIND, .src = o->inputs_dir, .dst = o->inputs_at}};
    wo.mounts = m;
    wo.n_mounts = o->inputs_dir ? 2 : 1;
    wo.max_arg_bytes = o->max_arg_bytes;
    wo.max_result_bytes = o->max_result_bytes;
    wo.stdout_.mode = KC_STDIO_DISCARD;
    wo.stderr_.mode = KC_STDIO_DISCARD;
    if (kc_worker_new(&wo, &r->w, err) < 0) {
      free(r);
      return kc_error_prefix(err, "measure worker");
    }
  }
  *out = r;
  return 0;
}

static void plain_kill(kc_mrunner *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
  }
  if (r->sock >= 0)
    close(r->sock);
  r->sock = -1;
}

void kc_mrunner_reset(kc_mrunner *r) {
  if (r->w) {
    kc_worker_kill(r->w);
    return;
  }
  plain_kill(r);
}

void kc_mrunner_free(kc_mrunner *r) {
  if (!r)
    return;
  kc_worker_free(r->w);
  plain_kill(r);
  free(r);
}

/* ---- plain process ---------------------------------------------------------------- */

static void plain_child(int sock, const kc_mrunner_opts *o) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (dup2(sock, 3) < 0)
    _exit(125);
  close_range(4, ~0u, 0);
  int nul = open("/dev/null", O_RDWR);
  if (nul >= 0) {
    dup2(nul, 0);
    dup2(nul, 1);
    dup2(nul, 2);
    if (nul > 3)
      close(nul);
  }
  uint64_t as_limit = 0;
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#endif
#if !defined(__SANITIZE_ADDRESS__)
  if (o->memory_bytes) {
    /* No cgroup here: bound the address space (inputs, outputs and libraries count).
     * Not under ASan, whose shadow reservation alone exceeds any sensible limit. */
    struct rlimit rl = {o->memory_bytes, o->memory_bytes};
    if (setrlimit(RLIMIT_AS, &rl) == 0)
      as_limit = o->memory_bytes;
  }
#endif
  struct rlimit core = {0, 0};
  setrlimit(RLIMIT_CORE, &core);
  kc_mhandler_become_plain(3, as_limit);
  size_t cap = o->max_result_bytes;
  void *outbuf = malloc(cap);
  void *argbuf = malloc(o->max_arg_bytes);
  char errbuf[1024];
  if (!outbuf || !argbuf)
    _exit(125);
  for (;;) {
    uint32_t len;
    if (kc_io_all(3, &len, 4, false) < 0 || len > o->max_arg_bytes ||
        kc_io_all(3, argbuf, len, false) < 0)
      _exit(0);
    kc_call call = {.arg = argbuf,
                    .arg_len = len,
                    .out = outbuf,
                    .out_cap = cap,
                    .error = errbuf,
                    .error_cap = sizeof errbuf};
    errbuf[0] = 0;
    int rc = kc_handler_measure(&call);
    uint32_t hdr[2];
    if (rc == 0) {
      hdr[0] = (uint32_t)call.out_len + 4;
      hdr[1] = 0;
      if (kc_io_all(3, hdr, 8, true) < 0 || kc_io_all(3, outbuf, call.out_len, true) < 0)
        _exit(0);
    } else {
      size_t el = strnlen(errbuf, sizeof errbuf - 1);
      hdr[0] = (uint32_t)el + 4;
      hdr[1] = 1;
      if (kc_io_all(3, hdr, 8, true) < 0 || kc_io_all(3, errbuf, el, true) < 0)
        _exit(0);
    }
  }
}

static int plain_start(kc_mrunner *r, kc_error *err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return kc_error_set(err, errno, "socketpair");
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return kc_error_set(err, errno, "fork");
  }
  if (pid == 0) {
    close(sv[0]);
    plain_child(sv[1], &r->o);
    _exit(0);
  }
  close(sv[1]);
  r->pid = pid;
  r->sock = sv[0];
  return 0;
}

/* Read exactly len bytes before the deadline.  1 ok, 0 deadline, -1 EOF/error. */
static int read_deadline(int fd, void *buf, size_t len, double deadline) {
  char *p = buf;
  while (len) {
    double left = deadline - kc_now_s();
    if (left <= 0)
      return 0;
    if (interrupted)
      return -2;
    struct pollfd pfd = {fd, POLLIN, 0};
    int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1; /* sliced: see interrupted */
    int pr = poll(&pfd, 1, ms);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return -1;
    if (pr == 0)
      continue;
    ssize_t n = read(fd, p, len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 1;
}

static void plain_died(kc_mrunner *r, kc_mcall *res, int syscall_nr) {
  int st = 0;
  kill(r->pid, SIGKILL);
  waitpid(r->pid, &st, 0);
  r->pid = 0;
  close(r->sock);
  r->sock = -1;
  res->status = KC_MCALL_DIED;
  kc_result_init(&res->verdict);
  /* The child's own report of a trapped call (its SIGSYS handler) names it; the rest is
   * the one decider's, over the wait status. */
  char name[48] = "";
  if (syscall_nr >= 0)
    kc_syscall_label(0, syscall_nr, name, sizeof name);
  kc_verdict_facts f = {.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                        .signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0,
                        .killed = syscall_nr >= 0 ? KC_KILLED_SYSCALL : KC_KILLED_NONE,
                        .syscall = name};
  kc_verdict_decide(&f, &res->verdict);
  if (res->verdict.status == KC_STATUS_OK) /* it left in the middle of a call */
    res->verdict.status = KC_STATUS_EXITED;
}

/* read_deadline found no (whole) answer: interrupted (-2), the call's deadline (0), or
 * the child's end (-1). */
static int no_answer(kc_mrunner *r, int rr, kc_mcall *res, kc_error *err) {
  if (rr == -2) {
    plain_kill(r);
    return kc_error_set(err, EINTR, "interrupted by %s", kc_signal_name(interrupted));
  }
  if (rr == 0) {
    plain_kill(r);
    res->status = KC_MCALL_TIMEOUT;
    return 0;
  }
  plain_died(r, res, -1);
  return 0;
}

/* How the parent waits for a request: untimed; timed from another CPU (spinning near
 * the expected end, wait_expected); or timed asleep on the worker's own CPU (stay). */
typedef enum { KC_WAIT_UNTIMED, KC_WAIT_TIMED, KC_WAIT_STAY } kc_wait_mode;

/* SIGCONT for a timed request, *cont its time; returns how long the worker then waited
 * for a CPU (kc_observe_cont_arrived).  A parent that stays sleeps on the worker's CPU
 * right after this, and the worker runs the moment it does: there is nothing to poll,
 * and polling there would only keep the worker waiting. */
static double start_timed(const kc_arrival *arr, bool stay, double *cont) {
  if (!stay)
    return kc_observe_cont_arrived(arr, NULL, cont);
  *cont = kc_now_s();
  kc_observe_cont(arr->pid);
  return 0;
}

static int plain_call(kc_mrunner *r, const void *arg, size_t len, double timeout_s, bool timed,
                      bool stay, kc_mcall *res, kc_error *err) {
  if (r->pid <= 0 && plain_start(r, err) < 0)
    return -1;
  if (len > r->o.max_arg_bytes)
    return kc_error_set(err, E2BIG, "measure request");
  kc_arrival arr;
  if (timed)
    kc_observe_arrival_base(r->pid, &arr);
  double sent = kc_now_s(), deadline = sent + (timeout_s > 0 ? timeout_s : 1e9);
  uint32_t l32 = (uint32_t)len;
  if (kc_io_all(r->sock, &l32, 4, true) < 0 || kc_io_all(r->sock, (void *)arg, len, true) < 0) {
    plain_died(r, res, -1);
    return 0;
  }
  double wake = timed ? start_timed(&arr, stay, &sent) : 0;
  uint32_t hdr[2];
  int rr = read_deadline(r->sock, hdr, 8, deadline);
  double seen = kc_now_s(); /* the answer's header: the call is over */
  if (rr <= 0)
    return no_answer(r, rr, res, err);
  if (hdr[1] == 3 && hdr[0] == 8) { /* out of address space, from the fault handler */
    plain_died(r, res, -1);
    res->verdict.status = KC_STATUS_MEMORY;
    snprintf(res->verdict.message, sizeof res->verdict.message, "out of memory");
    return 0;
  }
  if (hdr[1] == 2 && hdr[0] == 8) { /* SIGSYS report from the child's handler */
    uint32_t nr;
    if (read_deadline(r->sock, &nr, 4, kc_now_s() + 1) == 1)
      plain_died(r, res, (int)nr);
    else
      plain_died(r, res, -1);
    return 0;
  }
  if (hdr[0] < 4 || hdr[0] - 4 > r->o.max_result_bytes || hdr[1] > 1) {
    plain_kill(r);
    res->status = KC_MCALL_DIED;
    kc_result_init(&res->verdict);
    res->verdict.status = KC_STATUS_SETUP_ERROR;
    snprintf(res->verdict.message, sizeof res->verdict.message, "the worker broke the protocol");
    return 0;
  }
  size_t body = hdr[0] - 4;
  char *buf = malloc(body + 1);
  if (!buf)
    return kc_error_set(err, ENOMEM, "reply");
  rr = read_deadline(r->sock, buf, body, deadline);
  if (rr <= 0) {
    free(buf);
    return no_answer(r, rr, res, err);
  }
  if (timed) /* only now: the body comes in a second write */
    kc_observe_stop(r->pid);
  if (hdr[1] == 0) {
    res->status = KC_MCALL_OK;
    res->value = buf;
    res->value_len = body;
    res->elapsed_s = seen - sent - wake;
    res->pid = r->pid;
  } else {
    res->status = KC_MCALL_EXCEPTION;
    buf[body] = 0;
    snprintf(res->message, sizeof res->message, "%s", buf);
    free(buf);
  }
  return 0;
}

/* Wait on the ring (an early end wakes us at once, as kc_worker_recv would) until
 * shortly before the expected end, then poll it, yielding, until the completion lands
 * (1, *cr filled) or a while after the expected end (0: the caller waits the ordinary
 * way).  The margin covers the timer's own wake-up and the spread of the rounds; the
 * busy part is 1 % of the round (at least 0.4 ms).  A wrong expectation costs only that: the
 * parent never sleeps past a completion. */
static int wait_expected(kc_worker *w, double sent, double expect_s, kc_call_result *cr,
                         kc_error *err) {
  double margin = expect_s * 0.01 > 400e-6 ? expect_s * 0.01 : 400e-6;
  double first = sent + expect_s - margin - kc_now_s();
  if (first > 0) {
    int r = kc_worker_recv_timed(w, cr, first, err);
    if (r != 0)
      return r == 1 ? 1 : 0; /* -1: kc_worker_recv reports it */
  }
  double give_up = sent + expect_s + 2 * margin;
  for (unsigned i = 0;; i++) {
    int r = kc_worker_poll(w, cr, err);
    if (r != 0)
      return r == 1; /* -1: nothing outstanding; kc_worker_recv says so */
    if (i % 16 == 15 && kc_now_s() > give_up)
      return 0;
    /* If the worker shares this CPU (2 vCPUs under load), let it finish first. */
    sched_yield();
  }
}

bool kc_mrunner_plain(const kc_mrunner *r) {
  return !r->w;
}

pid_t kc_mrunner_pid(kc_mrunner *r) {
  if (r->w)
    return kc_worker_pid(r->w);
  return r->pid;
}

/* The worker's answer: 1 in *cr, 0 interrupted, -1 error.  A parent that stays on the
 * worker's CPU must not spin (every pause of its would be one of the worker's, inside
 * the clock): it sleeps on the ring's futex, and the completion wakes it there, a
 * context switch away, whether or not the other CPU is awake. */
static int wait_worker(kc_worker *w, double sent, double expect_s, bool stay, kc_call_result *cr,
                       kc_error *err) {
  int got = expect_s > 0 && !stay ? wait_expected(w, sent, expect_s, cr, err) : 0;
  while (got == 0 && !interrupted) /* in slices: an interrupted batch kills it at once */
    got = stay ? kc_worker_recv_asleep(w, cr, 0.1, err) : kc_worker_recv_timed(w, cr, 0.1, err);
  return got;
}

static int call_any(kc_mrunner *r, const void *arg, size_t len, double timeout_s, double expect_s,
                    kc_wait_mode mode, kc_mcall *res, kc_error *err) {
  memset(res, 0, sizeof *res);
  kc_result_init(&res->verdict);
  bool timed = mode != KC_WAIT_UNTIMED, stay = mode == KC_WAIT_STAY;
  if (r->w) {
    /* A timed request goes to a stopped worker, which runs nothing before SIGCONT: the
     * clock is started by the send (inside the worker pool) and wound on to SIGCONT
     * (`early`), whatever the send and the scheduler counts cost before it. */
    kc_arrival arr;
    if (timed)
      kc_observe_arrival_base(kc_worker_pid(r->w), &arr);
    double sent = kc_now_s();
    if (kc_worker_send(r->w, "measure", arg, len, timeout_s, err) < 0)
      return -1;
    double sent_done = kc_now_s(), cont = sent_done, wake = 0;
    pid_t pid = kc_worker_pid(r->w);
    bool same = timed && arr.pid == pid; /* else a worker the send started: not stopped */
    if (timed) {
      arr.known = arr.known && same;
      arr.pid = pid;
      wake = start_timed(&arr, stay, &cont);
    }
    double early = same && cont > sent_done ? cont - sent_done : 0;
    kc_call_result cr;
    kc_call_result_init(&cr);
    int got = wait_worker(r->w, sent, expect_s, stay, &cr, err);
    if (got == 0) {
      kc_worker_kill(r->w);
      kc_call_result_clear(&cr);
      kc_call_result_init(&cr);
      if (kc_worker_recv(r->w, &cr, err) == 0)
        kc_call_result_clear(&cr);
      return kc_error_set(err, EINTR, "interrupted by %s", kc_signal_name(interrupted));
    }
    if (got < 0)
      return -1;
    if (timed && cr.status == KC_CALL_COMPLETE)
      kc_observe_stop(pid);
    switch (cr.status) {
    case KC_CALL_COMPLETE:
      res->status = KC_MCALL_OK;
      res->value = cr.value;
      res->value_len = cr.value_len;
      res->elapsed_s = cr.elapsed_s - wake - early;
      res->pid = cr.pid;
      cr.value = NULL;
      break;
    case KC_CALL_EXCEPTION:
      res->status = KC_MCALL_EXCEPTION;
      snprintf(res->message, sizeof res->message, "%s", cr.message);
      break;
    case KC_CALL_TIMEOUT:
      res->status = KC_MCALL_TIMEOUT;
      break;
    default:
      res->status = KC_MCALL_DIED;
      res->verdict = cr.verdict;
      break;
    }
    kc_call_result_clear(&cr);
    return 0;
  }
  (void)expect_s; /* the plain runner blocks in poll() on its socket */
  return plain_call(r, arg, len, timeout_s, timed, stay, res, err);
}

int kc_mrunner_call(kc_mrunner *r, const void *arg, size_t len, double timeout_s, kc_mcall *res,
                    kc_error *err) {
  return call_any(r, arg, len, timeout_s, 0, KC_WAIT_UNTIMED, res, err);
}

int kc_mrunner_call_expect(kc_mrunner *r, const void *arg, size_t len, double timeout_s,
                           double expect_s, kc_mcall *res, kc_error *err) {
  return call_any(r, arg, len, timeout_s, expect_s, KC_WAIT_UNTIMED, res, err);
}

int kc_mrunner_call_timed(kc_mrunner *r, const void *arg, size_t len, double timeout_s,
                          double expect_s, bool stay, kc_mcall *res, kc_error *err) {
  return call_any(r, arg, len, timeout_s, expect_s, stay ? KC_WAIT_STAY : KC_WAIT_TIMED, res, err);
}
