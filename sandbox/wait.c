/* The parent's wait loop and the verdict.
 *
 * One poll over: our init's pidfd, the setup-report pipe, the socket that brings the
 * seccomp listener, the listener itself, and the program's stdout/stderr pipes.  The
 * wall deadline is the poll timeout; CPU time of the whole tree is polled from the
 * cgroup (RLIMIT_CPU is only a backstop); output is counted as it is forwarded.
 *
 * Verdict priority (exact, docs/contracts.md; sandbox/verdict.c): memory (OOM-kill
 * counter delta), pids (pids.max hits delta: a fork or thread of the tree was refused,
 * even if the program coped and exited 0, as an OOM-killed child is memory), syscall
 * (a seccomp notification),
 * timeout cpu, timeout wall, output, signaled, exited/ok.  The tree is killed and the
 * cgroup read before it is removed. */
#include "clock.h"
#include "fdio.h"
#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "sandbox_internal.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef enum kill_reason {
  KILL_NONE,
  KILL_SYSCALL,
  KILL_CPU,
  KILL_WALL,
  KILL_OUTPUT,
  KILL_CANCEL,
} kill_reason;

typedef struct wait_state {
  kill_reason reason;
  char syscall[48];
  bool have_report;
  kc_setup_report report;
  bool exec_allowed; /* the one exec `kcage run` grants under a no-exec policy */
  uint64_t out_total;
  bool init_exited;
  char in_buf[4096]; /* terminal input on its way to the program's stdin pipe */
  size_t in_len, in_off;
} wait_state;

/* No libm in the sandbox library. */
static inline double dmin(double a, double b) {
  return a < b ? a : b;
}

static void copy_str(char *dst, size_t size, const char *src) {
  size_t l = strnlen(src, size - 1);
  memcpy(dst, src, l);
  dst[l] = '\0';
}

static void do_kill(kc_sandbox *sb, wait_state *ws, kill_reason why) {
  if (ws->reason == KILL_NONE)
    ws->reason = why;
  if (sb->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
  if (sb->cg) {
    kc_error e;
    kc_cgroup_kill(sb->cg, &e);
  }
}

/* false when the reader is gone (EPIPE). */
static bool write_all(int fd, const char *buf, size_t len) {
  while (fd >= 0 && len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EPIPE)
      return false;
    if (n <= 0)
      return true; /* another failure: keep draining, drop the data */
    buf += n;
    len -= (size_t)n;
  }
  return true;
}

/* Read what is there; returns false at EOF. */
static bool pump(kc_sandbox *sb, wait_state *ws, int *fd, int fwd) {
  char buf[65536];
  for (int rounds = 0; rounds < 16; rounds++) {
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno == EAGAIN;
    if (n == 0) {
      kc_close_fd(fd);
      return false;
    }
    size_t take = (size_t)n;
    uint64_t cap = sb->lim.output_bytes;
    if (cap && ws->out_total + take > cap) {
      take = (size_t)(cap - ws->out_total);
      write_all(fwd, buf, take);
      ws->out_total += take;
      do_kill(sb, ws, KILL_OUTPUT);
      kc_close_fd(fd);
      return false;
    }
    ws->out_total += take;
    if (!write_all(fwd, buf, take)) {
      /* Whoever reads our output left (`kcage run ... | head`): the program sees the
       * same as without kcage, a pipe without reader. */
      kc_close_fd(fd);
      return false;
    }
  }
  return true;
}

/* One step of feeding the caller's terminal to the program: read when the buffer is
 * empty, write what is buffered.  End of input (^D, hang-up) and a program that closed
 * its stdin both end the feeding. */
static void feed_stdin(kc_sandbox *sb, wait_state *ws) {
  if (ws->in_off == ws->in_len) {
    ssize_t r = read(sb->in_src, ws->in_buf, sizeof ws->in_buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
      return;
    if (r <= 0) {
      kc_close_fd(&sb->in_wr);
      return;
    }
    ws->in_len = (size_t)r;
    ws->in_off = 0;
  }
  ssize_t w = write(sb->in_wr, ws->in_buf + ws->in_off, ws->in_len - ws->in_off);
  if (w > 0)
    ws->in_off += (size_t)w;
  else if (w < 0 && errno != EAGAIN && errno != EINTR)
    kc_close_fd(&sb->in_wr);
  if (ws->in_off == ws->in_len)
    ws->in_off = ws->in_len = 0;
}

static void read_report(kc_sandbox *sb, wait_state *ws) {
  kc_setup_report r;
  ssize_t n;
  do
    n = read(sb->report_rd, &r, sizeof r);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN)
    return;
  if (n == (ssize_t)sizeof r && !ws->have_report) {
    r.msg[sizeof r.msg - 1] = '\0';
    ws->report = r;
    ws->have_report = true;
  }
  kc_close_fd(&sb->report_rd);
}

/* sysinfo, where the filter hands it to us: answered with the sandbox's figures. */
static bool answered_sysinfo(kc_sandbox *sb, const kc_seccomp_event *ev) {
  if (!sb->policy || !sb->view_sysinfo || !kc_seccomp_is_sysinfo_view(sb->policy, ev))
    return false;
  struct sysinfo si;
  kc_error e;
  kc_sandbox_sysinfo(&si, kc_now_s() - sb->t0);
  kc_seccomp_notify_sysinfo(sb->listener, ev, &si, &e); /* failing: the task is gone */
  return true;
}

static void on_event(kc_sandbox *sb, wait_state *ws, const kc_seccomp_event *ev) {
  kc_error e;
  if (answered_sysinfo(sb, ev))
    return;
  if (sb->policy && kc_policy_notify_kind(sb->policy, ev) == KC_NOTIFY_ASK && !ws->exec_allowed) {
    ws->exec_allowed = true;
    if (kc_seccomp_notify_continue(sb->listener, ev, &e) == 0)
      return;
  }
  if (ws->reason == KILL_NONE)
    snprintf(ws->syscall, sizeof ws->syscall, "%s", ev->name);
  do_kill(sb, ws, KILL_SYSCALL);
}

/* The next notification; false when there is none to act on. */
static bool receive(kc_sandbox *sb, kc_seccomp_event *ev) {
  kc_error e;
  if (kc_seccomp_notify_receive(sb->listener, ev, &e) == 0)
    return true;
  if (e.code != ENOENT && e.code != EINTR && e.code != EAGAIN)
    kc_close_fd(&sb->listener); /* broken listener: the tree dies at its end anyway */
  return false;
}

static void on_notification(kc_sandbox *sb, wait_state *ws) {
  kc_seccomp_event ev;
  if (receive(sb, &ev))
    on_event(sb, ws, &ev);
}

/* The listener, handed over by the program's child once its filter is loaded. */
static void take_listener(kc_sandbox *sb) {
  int fd = -1;
  kc_error e;
  if (kc_seccomp_recv_listener(sb->sock_rd, 0, &fd, &e) == 0)
    sb->listener = fd;
  kc_close_fd(&sb->sock_rd);
}

int kc_sandbox_idle(kc_sandbox *sb, int fd, kc_error *err) {
  if (!sb || sb->reaped)
    return kc_error_set(err, EINVAL, "sandbox already waited for");
  while (!sb->has_stash) {
    struct pollfd pf[4] = {{fd, POLLIN, 0},
                           {sb->pidfd, POLLIN, 0},
                           {sb->sock_rd, POLLIN, 0},
                           {sb->listener, POLLIN, 0}};
    int pr = poll(pf, 4, -1);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return kc_error_set(err, errno, "poll");
    if (pf[2].revents)
      take_listener(sb);
    if ((pf[3].revents & POLLIN) && receive(sb, &sb->stash))
      sb->has_stash = !answered_sysinfo(sb, &sb->stash);
    else if (pf[3].revents & (POLLHUP | POLLERR | POLLNVAL))
      kc_close_fd(&sb->listener); /* no task left behind the filter */
    if (!sb->has_stash && (pf[0].revents || pf[1].revents))
      return 0;
  }
  return 1;
}

static int wait_loop(kc_sandbox *sb, kc_result *res, kc_error *err);

int kc_sandbox_wait(kc_sandbox *sb, kc_result *res, kc_error *err) {
  kc_result_init(res);
  if (!sb || sb->reaped)
    return kc_error_set(err, EINVAL, "sandbox already waited for");
  /* Forwarding output to a reader that went away must not kill the caller: SIGPIPE is
   * blocked for this thread during the wait and a pending one we caused is dropped. */
  sigset_t pipe_set, old_mask, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  sigpending(&pending);
  bool pipe_was_pending = sigismember(&pending, SIGPIPE);
  int rc = wait_loop(sb, res, err);
  if (!pipe_was_pending) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) == SIGPIPE)
      ;
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  return rc;
}

/* What one poll() watches while the program runs; -1 = not watched this round. */
typedef struct poll_set {
  struct pollfd pf[8];
  int n, rep, sock, lis, out, err, can, in;
} poll_set;

static int watch_fd(poll_set *ps, int fd, short events) {
  ps->pf[ps->n] = (struct pollfd){fd, events, 0};
  return ps->n++;
}

static void build_poll_set(const kc_sandbox *sb, const wait_state *ws, poll_set *ps) {
  ps->n = 0;
  ps->rep = ps->sock = ps->lis = ps->out = ps->err = ps->can = ps->in = -1;
  watch_fd(ps, sb->pidfd, POLLIN); /* index 0: init's end */
  if (sb->in_wr >= 0 && ws->in_off < ws->in_len)
    ps->in = watch_fd(ps, sb->in_wr, POLLOUT);
  else if (sb->in_wr >= 0 && sb->in_src >= 0 && ws->reason == KILL_NONE)
    ps->in = watch_fd(ps, sb->in_src, POLLIN);
  if (sb->cancel_fd >= 0 && ws->reason == KILL_NONE)
    ps->can = watch_fd(ps, sb->cancel_fd, POLLIN);
  if (sb->report_rd >= 0)
    ps->rep = watch_fd(ps, sb->report_rd, POLLIN);
  if (sb->sock_rd >= 0)
    ps->sock = watch_fd(ps, sb->sock_rd, POLLIN);
  if (sb->listener >= 0)
    ps->lis = watch_fd(ps, sb->listener, POLLIN);
  if (sb->out_rd >= 0)
    ps->out = watch_fd(ps, sb->out_rd, POLLIN);
  if (sb->err_rd >= 0)
    ps->err = watch_fd(ps, sb->err_rd, POLLIN);
}

static bool ready(const poll_set *ps, int i) {
  return i >= 0 && ps->pf[i].revents;
}

static void handle_events(kc_sandbox *sb, wait_state *ws, const poll_set *ps) {
  if (ready(ps, ps->rep))
    read_report(sb, ws);
  if (ready(ps, ps->sock))
    take_listener(sb);
  if (ready(ps, ps->lis)) {
    if (ps->pf[ps->lis].revents & POLLIN)
      on_notification(sb, ws);
    else if (ps->pf[ps->lis].revents & (POLLHUP | POLLERR | POLLNVAL))
      kc_close_fd(&sb->listener); /* no task left behind the filter */
  }
  if (ready(ps, ps->out))
    pump(sb, ws, &sb->out_rd, sb->fwd_out);
  if (ready(ps, ps->err) && sb->err_rd >= 0)
    pump(sb, ws, &sb->err_rd, sb->fwd_err);
  if (ready(ps, ps->in))
    feed_stdin(sb, ws);
  if (ready(ps, ps->can))
    do_kill(sb, ws, KILL_CANCEL);
  if (ps->pf[0].revents)
    ws->init_exited = true;
}

/* The parent's limits: the wall clock, and CPU time polled from the cgroup. */
static void check_limits(kc_sandbox *sb, wait_state *ws, double now, double wall_deadline,
                         bool cpu_poll) {
  if (ws->reason == KILL_NONE && now >= wall_deadline)
    do_kill(sb, ws, KILL_WALL);
  if (cpu_poll && ws->reason == KILL_NONE) {
    kc_cgroup_counters c;
    kc_error e;
    if (kc_cgroup_read(sb->cg, &c, &e) == 0 && c.cpu_usec >= 0 &&
        (double)(c.cpu_usec - sb->base.cpu_usec) >= sb->lim.cpu_s * 1e6)
      do_kill(sb, ws, KILL_CPU);
  }
}

/* Until init exits: output, stdin, the listener, the cancel fd and the limits. */
static int watch(kc_sandbox *sb, wait_state *ws, kc_error *err) {
  const double wall_deadline = sb->lim.wall_s > 0 ? sb->t0 + sb->lim.wall_s : INFINITY;
  const bool cpu_poll = sb->lim.cpu_s > 0 && sb->cg && sb->base.cpu_usec >= 0;
  double kill_deadline = INFINITY; /* bounded wait for the tree to die once killed */
  if (sb->has_stash) {             /* taken while idle (kc_sandbox_idle) */
    sb->has_stash = false;
    on_event(sb, ws, &sb->stash);
  }
  while (!ws->init_exited) {
    poll_set ps;
    build_poll_set(sb, ws, &ps);
    double now = kc_now_s();
    double next = dmin(wall_deadline, kill_deadline);
    if (cpu_poll && ws->reason == KILL_NONE)
      next = dmin(next, now + 0.01);
    int timeout = -1;
    if (isfinite(next))
      timeout = next <= now ? 0 : (int)((next - now) * 1000.0) + 1;
    int pr = poll(ps.pf, (nfds_t)ps.n, timeout);
    if (pr < 0 && errno != EINTR)
      return kc_error_set(err, errno, "poll");
    now = kc_now_s();
    if (pr > 0)
      handle_events(sb, ws, &ps);
    if (ws->init_exited)
      break;
    check_limits(sb, ws, now, wall_deadline, cpu_poll);
    if (ws->reason != KILL_NONE && !isfinite(kill_deadline))
      kill_deadline = now + 5.0;
    if (now >= kill_deadline)
      return kc_error_set(err, ETIMEDOUT, "sandbox did not die after SIGKILL");
  }
  return 0;
}

/* After init is reaped: make sure nothing is left, then drain what the dead tree wrote,
 * its setup report, and a notification that raced with the end (it still names the
 * syscall).  With a pid namespace the kernel already killed and reaped every member
 * before our init could be reaped; kc_cgroup_destroy still kills anything it finds. */
static void after_end(kc_sandbox *sb, wait_state *ws) {
  if (sb->cg && !sb->pid_ns) {
    kc_error e;
    kc_cgroup_kill(sb->cg, &e);
  }
  double drain_until = kc_now_s() + 1.0;
  while ((sb->out_rd >= 0 || sb->err_rd >= 0) && kc_now_s() < drain_until) {
    struct pollfd pf[2];
    int n = 0;
    if (sb->out_rd >= 0)
      pf[n++] = (struct pollfd){sb->out_rd, POLLIN, 0};
    if (sb->err_rd >= 0)
      pf[n++] = (struct pollfd){sb->err_rd, POLLIN, 0};
    if (poll(pf, (nfds_t)n, 100) <= 0)
      break;
    if (sb->out_rd >= 0)
      pump(sb, ws, &sb->out_rd, sb->fwd_out);
    if (sb->err_rd >= 0)
      pump(sb, ws, &sb->err_rd, sb->fwd_err);
  }
  if (sb->report_rd >= 0)
    read_report(sb, ws);
  if (sb->listener >= 0 && ws->reason == KILL_NONE) {
    struct pollfd lp = {sb->listener, POLLIN, 0};
    if (poll(&lp, 1, 0) == 1 && (lp.revents & POLLIN))
      on_notification(sb, ws);
  }
}

/* CPU time, peak memory and the limit counters of this run (deltas), from the cgroup
 * when there is one, else from init's rusage (it covers everything it reaped). */
static void usage(kc_sandbox *sb, const struct rusage *ru, kc_result *res, bool *oom,
                  bool *pids_hit) {
  kc_cgroup_counters c = {-1, -1, -1, -1};
  if (sb->cg) {
    kc_error e;
    if (kc_cgroup_read(sb->cg, &c, &e) < 0)
      c = (kc_cgroup_counters){-1, -1, -1, -1};
    kc_cgroup_destroy(sb->cg); /* counters read: nothing of the run stays */
    sb->cg = NULL;
  }
  if (c.cpu_usec >= 0)
    res->cpu_s = (double)(c.cpu_usec - (sb->base.cpu_usec > 0 ? sb->base.cpu_usec : 0)) / 1e6;
  else
    res->cpu_s = (double)ru->ru_utime.tv_sec + (double)ru->ru_stime.tv_sec +
                 ((double)ru->ru_utime.tv_usec + (double)ru->ru_stime.tv_usec) / 1e6;
  res->peak_memory_bytes = c.peak_memory >= 0 ? c.peak_memory : ru->ru_maxrss * 1024;
  *oom = c.oom_kills >= 0 && c.oom_kills > (sb->base.oom_kills > 0 ? sb->base.oom_kills : 0);
  *pids_hit = c.pids_max_hits >= 0 &&
              c.pids_max_hits > (sb->base.pids_max_hits > 0 ? sb->base.pids_max_hits : 0);
}

/* The verdict: a setup failure as the child reported it, else the one decider over the
 * program's wait status (handed over by our init) and what the parent saw. */
static void decide_end(const kc_sandbox *sb, const wait_state *ws, const siginfo_t *si,
                       const int *prog_status, bool oom, bool pids_hit, kc_result *res) {
  if (ws->have_report) {
    res->status = KC_STATUS_SETUP_ERROR;
    if (ws->report.kind == KC_REPORT_EXEC)
      res->exit_code = (ws->report.err == ENOENT || ws->report.err == ENOTDIR) ? 127 : 126;
    /* the report's own bound: the child's text need not end in a NUL */
    _Static_assert(sizeof ws->report.msg <= sizeof res->message, "report fits the result");
    copy_str(res->message, sizeof ws->report.msg, ws->report.msg);
    return;
  }
  int sig = 0, code = -1;
  if (prog_status) {
    if (WIFEXITED(*prog_status))
      code = WEXITSTATUS(*prog_status);
    else if (WIFSIGNALED(*prog_status))
      sig = WTERMSIG(*prog_status);
  } else if (ws->reason != KILL_NONE || oom || si->si_code == CLD_KILLED ||
             si->si_code == CLD_DUMPED) {
    sig = SIGKILL; /* killed together with our init */
  } else {
    res->status = KC_STATUS_SETUP_ERROR;
    snprintf(res->message, sizeof res->message,
             "the sandbox's init ended (code %d, status %d) before the program started",
             si->si_code, si->si_status);
    return;
  }
  static const kc_kill_cause cause[] = {
      [KILL_NONE] = KC_KILLED_NONE,     [KILL_SYSCALL] = KC_KILLED_SYSCALL,
      [KILL_CPU] = KC_KILLED_CPU,       [KILL_WALL] = KC_KILLED_WALL,
      [KILL_OUTPUT] = KC_KILLED_OUTPUT, [KILL_CANCEL] = KC_KILLED_CANCEL,
  };
  kc_verdict_facts f = {.exit_code = code,
                        .signal = sig,
                        .killed = cause[ws->reason],
                        .syscall = ws->syscall,
                        .oom = oom,
                        .pids_hit = pids_hit,
                        .lim = &sb->lim};
  kc_verdict_decide(&f, res);
}

static int wait_loop(kc_sandbox *sb, kc_result *res, kc_error *err) {
  wait_state ws;
  memset(&ws, 0, sizeof ws);
  if (watch(sb, &ws, err) < 0)
    return -1;
  res->wall_s = kc_now_s() - sb->t0;
  siginfo_t si;
  struct rusage ru;
  memset(&si, 0, sizeof si);
  memset(&ru, 0, sizeof ru);
  if (syscall(SYS_waitid, P_PIDFD, sb->pidfd, &si, WEXITED, &ru) < 0)
    return kc_error_set(err, errno, "waitid");
  sb->reaped = true;
  int prog_status = 0;
  bool have_status =
      read(sb->status_rd, &prog_status, sizeof prog_status) == (ssize_t)sizeof prog_status;
  after_end(sb, &ws);
  bool oom, pids_hit;
  usage(sb, &ru, res, &oom, &pids_hit);
  decide_end(sb, &ws, &si, have_status ? &prog_status : NULL, oom, pids_hit, res);
  return 0;
}

int kc_sandbox_run(const kc_sandbox_config *c, kc_result *res, kc_error *err) {
  kc_sandbox *sb;
  if (kc_sandbox_spawn(c, &sb, err) < 0) {
    kc_result_init(res);
    res->status = KC_STATUS_SETUP_ERROR;
    copy_str(res->message, sizeof res->message, err ? err->msg : "spawn failed");
    return -1;
  }
  int rc = kc_sandbox_wait(sb, res, err);
  kc_sandbox_free(sb);
  return rc;
}
