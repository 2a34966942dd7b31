/* The parent's wait loop and the verdict.
 *
 * One poll over: our init's pidfd, the setup-report pipe, the socket that brings the
 * seccomp listener, the listener itself, and the program's stdout/stderr pipes.  The
 * wall deadline is the poll timeout; CPU time of the whole tree is polled from the
 * cgroup (RLIMIT_CPU is only a backstop); output is counted as it is forwarded.
 *
 * Verdict priority (exact, DESIGN.md §3.1): memory (OOM-kill counter delta), pids
 * (pids.max hits delta: a fork or thread of the tree was refused, even if the program
 * coped and exited 0, as an OOM-killed child is memory), syscall (a seccomp notification),
 * timeout cpu, timeout wall, output, signaled, exited/ok.  The tree is killed and the
 * cgroup read before it is removed. */
#include "kcage/sandbox_parts.h"
#include "sandbox_internal.h"
#include "kcage/seccomp.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
static inline double dmin(double a, double b) { return a < b ? a : b; }

static void copy_str(char *dst, size_t size, const char *src) {
  size_t l = strnlen(src, size - 1);
  memcpy(dst, src, l);
  dst[l] = '\0';
}

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
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
      close_fd(fd);
      return false;
    }
    size_t take = (size_t)n;
    uint64_t cap = sb->lim.output_bytes;
    if (cap && ws->out_total + take > cap) {
      take = (size_t)(cap - ws->out_total);
      write_all(fwd, buf, take);
      ws->out_total += take;
      do_kill(sb, ws, KILL_OUTPUT);
      close_fd(fd);
      return false;
    }
    ws->out_total += take;
    if (!write_all(fwd, buf, take)) {
      /* Whoever reads our output left (`kcage run ... | head`): the program sees the
       * same as without kcage, a pipe without reader. */
      close_fd(fd);
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
      close_fd(&sb->in_wr);
      return;
    }
    ws->in_len = (size_t)r;
    ws->in_off = 0;
  }
  ssize_t w = write(sb->in_wr, ws->in_buf + ws->in_off, ws->in_len - ws->in_off);
  if (w > 0)
    ws->in_off += (size_t)w;
  else if (w < 0 && errno != EAGAIN && errno != EINTR)
    close_fd(&sb->in_wr);
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
  close_fd(&sb->report_rd);
}

static void on_notification(kc_sandbox *sb, wait_state *ws) {
  kc_seccomp_event ev;
  kc_error e;
  if (kc_seccomp_notify_receive(sb->listener, &ev, &e) < 0) {
    if (e.code != ENOENT && e.code != EINTR && e.code != EAGAIN)
      close_fd(&sb->listener); /* broken listener: the tree dies at its end anyway */
    return;
  }
  if (sb->policy && kc_policy_notify_kind(sb->policy, &ev) == KC_NOTIFY_ASK && !ws->exec_allowed) {
    ws->exec_allowed = true;
    if (kc_seccomp_notify_continue(sb->listener, &ev, &e) == 0)
      return;
  }
  if (ws->reason == KILL_NONE)
    snprintf(ws->syscall, sizeof ws->syscall, "%s", ev.name);
  do_kill(sb, ws, KILL_SYSCALL);
}

static void human_size(uint64_t b, char *buf, size_t len) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0)
    snprintf(buf, len, "%llu GiB", (unsigned long long)(b >> 30));
  else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
    snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
  else
    snprintf(buf, len, "%llu bytes", (unsigned long long)b);
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

static int wait_loop(kc_sandbox *sb, kc_result *res, kc_error *err) {
  wait_state ws;
  memset(&ws, 0, sizeof ws);
  const double wall_deadline = sb->lim.wall_s > 0 ? sb->t0 + sb->lim.wall_s : INFINITY;
  const bool cpu_poll = sb->lim.cpu_s > 0 && sb->cg && sb->base.cpu_usec >= 0;
  double kill_deadline = INFINITY; /* bounded wait for the tree to die once killed */

  while (!ws.init_exited) {
    struct pollfd pf[8];
    int n = 0;
    pf[n++] = (struct pollfd){sb->pidfd, POLLIN, 0};
    int i_rep = -1, i_sock = -1, i_lis = -1, i_out = -1, i_err = -1, i_can = -1, i_in = -1;
    if (sb->in_wr >= 0 && ws.in_off < ws.in_len)
      i_in = n, pf[n++] = (struct pollfd){sb->in_wr, POLLOUT, 0};
    else if (sb->in_wr >= 0 && sb->in_src >= 0 && ws.reason == KILL_NONE)
      i_in = n, pf[n++] = (struct pollfd){sb->in_src, POLLIN, 0};
    if (sb->cancel_fd >= 0 && ws.reason == KILL_NONE)
      i_can = n, pf[n++] = (struct pollfd){sb->cancel_fd, POLLIN, 0};
    if (sb->report_rd >= 0)
      i_rep = n, pf[n++] = (struct pollfd){sb->report_rd, POLLIN, 0};
    if (sb->sock_rd >= 0)
      i_sock = n, pf[n++] = (struct pollfd){sb->sock_rd, POLLIN, 0};
    if (sb->listener >= 0)
      i_lis = n, pf[n++] = (struct pollfd){sb->listener, POLLIN, 0};
    if (sb->out_rd >= 0)
      i_out = n, pf[n++] = (struct pollfd){sb->out_rd, POLLIN, 0};
    if (sb->err_rd >= 0)
      i_err = n, pf[n++] = (struct pollfd){sb->err_rd, POLLIN, 0};

    double now = kc__now();
    double next = dmin(wall_deadline, kill_deadline);
    if (cpu_poll && ws.reason == KILL_NONE)
      next = dmin(next, now + 0.01);
    int timeout = -1;
    if (isfinite(next))
      timeout = next <= now ? 0 : (int)((next - now) * 1000.0) + 1;
    int pr = poll(pf, (nfds_t)n, timeout);
    if (pr < 0 && errno != EINTR)
      return kc_error_set(err, errno, "poll");
    now = kc__now();

    if (pr > 0) {
      if (i_rep >= 0 && pf[i_rep].revents)
        read_report(sb, &ws);
      if (i_sock >= 0 && pf[i_sock].revents) {
        int fd = -1;
        kc_error e;
        if (kc_seccomp_recv_listener(sb->sock_rd, 0, &fd, &e) == 0)
          sb->listener = fd;
        close_fd(&sb->sock_rd);
      }
      if (i_lis >= 0 && pf[i_lis].revents) {
        if (pf[i_lis].revents & POLLIN)
          on_notification(sb, &ws);
        else if (pf[i_lis].revents & (POLLHUP | POLLERR | POLLNVAL))
          close_fd(&sb->listener); /* no task left behind the filter */
      }
      if (i_out >= 0 && pf[i_out].revents)
        pump(sb, &ws, &sb->out_rd, sb->fwd_out);
      if (i_err >= 0 && pf[i_err].revents && sb->err_rd >= 0)
        pump(sb, &ws, &sb->err_rd, sb->fwd_err);
      if (i_in >= 0 && pf[i_in].revents)
        feed_stdin(sb, &ws);
      if (i_can >= 0 && pf[i_can].revents)
        do_kill(sb, &ws, KILL_CANCEL);
      if (pf[0].revents)
        ws.init_exited = true;
    }
    if (ws.init_exited)
      break;
    if (ws.reason == KILL_NONE && now >= wall_deadline)
      do_kill(sb, &ws, KILL_WALL);
    if (cpu_poll && ws.reason == KILL_NONE) {
      kc_cgroup_counters c;
      kc_error e;
      if (kc_cgroup_read(sb->cg, &c, &e) == 0 && c.cpu_usec >= 0 &&
          (double)(c.cpu_usec - sb->base.cpu_usec) >= sb->lim.cpu_s * 1e6)
        do_kill(sb, &ws, KILL_CPU);
    }
    if (ws.reason != KILL_NONE && !isfinite(kill_deadline))
      kill_deadline = now + 5.0;
    if (now >= kill_deadline)
      return kc_error_set(err, ETIMEDOUT, "sandbox did not die after SIGKILL");
  }
  double wall = kc__now() - sb->t0;

  /* Reap init (its rusage covers everything it reaped: the CPU fallback). */
  siginfo_t si;
  struct rusage ru;
  memset(&si, 0, sizeof si);
  memset(&ru, 0, sizeof ru);
  if (syscall(SYS_waitid, P_PIDFD, sb->pidfd, &si, WEXITED, &ru) < 0)
    return kc_error_set(err, errno, "waitid");
  sb->reaped = true;
  int prog_status = 0;
  bool have_status = read(sb->status_rd, &prog_status, sizeof prog_status) ==
                     (ssize_t)sizeof prog_status;
  /* Make sure nothing is left, then drain what the dead tree wrote.  With a pid
   * namespace the kernel already killed and reaped every member before our init could
   * be reaped; kc_cgroup_destroy still kills anything it finds. */
  if (sb->cg && !sb->pid_ns) {
    kc_error e;
    kc_cgroup_kill(sb->cg, &e);
  }
  double drain_until = kc__now() + 1.0;
  while ((sb->out_rd >= 0 || sb->err_rd >= 0) && kc__now() < drain_until) {
    struct pollfd pf[2];
    int n = 0;
    if (sb->out_rd >= 0)
      pf[n++] = (struct pollfd){sb->out_rd, POLLIN, 0};
    if (sb->err_rd >= 0)
      pf[n++] = (struct pollfd){sb->err_rd, POLLIN, 0};
    if (poll(pf, (nfds_t)n, 100) <= 0)
      break;
    if (sb->out_rd >= 0)
      pump(sb, &ws, &sb->out_rd, sb->fwd_out);
    if (sb->err_rd >= 0)
      pump(sb, &ws, &sb->err_rd, sb->fwd_err);
  }
  if (sb->report_rd >= 0)
    read_report(sb, &ws);
  /* A notification that raced with the end still names the syscall. */
  if (sb->listener >= 0 && ws.reason == KILL_NONE) {
    struct pollfd lp = {sb->listener, POLLIN, 0};
    if (poll(&lp, 1, 0) == 1 && (lp.revents & POLLIN))
      on_notification(sb, &ws);
  }

  kc_cgroup_counters c = {-1, -1, -1, -1};
  if (sb->cg) {
    kc_error e;
    if (kc_cgroup_read(sb->cg, &c, &e) < 0)
      c = (kc_cgroup_counters){-1, -1, -1, -1};
    kc_cgroup_destroy(sb->cg); /* counters read: nothing of the run stays */
    sb->cg = NULL;
  }
  res->wall_s = wall;
  if (c.cpu_usec >= 0)
    res->cpu_s = (double)(c.cpu_usec - (sb->base.cpu_usec > 0 ? sb->base.cpu_usec : 0)) / 1e6;
  else
    res->cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
  res->peak_memory_bytes = c.peak_memory >= 0 ? c.peak_memory : ru.ru_maxrss * 1024;
  bool oom = c.oom_kills >= 0 && c.oom_kills > (sb->base.oom_kills > 0 ? sb->base.oom_kills : 0);
  bool pids_hit =
      c.pids_max_hits >= 0 && c.pids_max_hits > (sb->base.pids_max_hits > 0 ? sb->base.pids_max_hits : 0);

  if (ws.have_report) {
    res->status = KC_STATUS_SETUP_ERROR;
    if (ws.report.kind == KC_REPORT_EXEC)
      res->exit_code = (ws.report.err == ENOENT || ws.report.err == ENOTDIR) ? 127 : 126;
    copy_str(res->message, sizeof res->message, ws.report.msg);
    return 0;
  }
  int sig = 0, code = -1;
  if (have_status) {
    if (WIFEXITED(prog_status))
      code = WEXITSTATUS(prog_status);
    else if (WIFSIGNALED(prog_status))
      sig = WTERMSIG(prog_status);
  } else if (ws.reason != KILL_NONE || oom || si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED) {
    sig = SIGKILL; /* killed together with our init */
  } else {
    res->status = KC_STATUS_SETUP_ERROR;
    snprintf(res->message, sizeof res->message,
             "the sandbox's init ended (code %d, status %d) before the program started",
             si.si_code, si.si_status);
    return 0;
  }
  res->exit_code = code;
  res->signal = sig;
  char sz[48];
  if (oom) {
    res->status = KC_STATUS_MEMORY;
    human_size(sb->lim.memory_bytes, sz, sizeof sz);
    snprintf(res->message, sizeof res->message, "memory limit of %s exceeded (OOM kill)", sz);
  } else if (pids_hit) {
    res->status = KC_STATUS_PIDS;
    snprintf(res->message, sizeof res->message, "process limit of %u reached", sb->lim.pids);
  } else if (ws.reason == KILL_SYSCALL) {
    res->status = KC_STATUS_SYSCALL;
    snprintf(res->syscall, sizeof res->syscall, "%s", ws.syscall);
    snprintf(res->message, sizeof res->message, "forbidden system call %s", ws.syscall);
  } else if (ws.reason == KILL_CPU ||
             (sb->lim.cpu_s > 0 && (sig == SIGXCPU || (sig == SIGKILL && res->cpu_s >= sb->lim.cpu_s)))) {
    res->status = KC_STATUS_TIMEOUT;
    res->limit = "cpu";
    snprintf(res->message, sizeof res->message, "CPU time limit of %g s exceeded", sb->lim.cpu_s);
  } else if (ws.reason == KILL_WALL) {
    res->status = KC_STATUS_TIMEOUT;
    res->limit = "wall";
    snprintf(res->message, sizeof res->message, "wall-clock limit of %g s exceeded", sb->lim.wall_s);
  } else if (ws.reason == KILL_CANCEL) {
    res->status = KC_STATUS_SIGNALED;
    res->exit_code = -1;
    res->signal = SIGKILL;
    snprintf(res->message, sizeof res->message, "killed by kcage: the run was cancelled");
  } else if (ws.reason == KILL_OUTPUT) {
    res->status = KC_STATUS_OUTPUT;
    human_size(sb->lim.output_bytes, sz, sizeof sz);
    snprintf(res->message, sizeof res->message, "output limit of %s exceeded", sz);
  } else if (sig) {
    res->status = KC_STATUS_SIGNALED;
    const char *abbr = sigabbrev_np(sig);
    snprintf(res->message, sizeof res->message, "killed by signal %d (SIG%s)", sig,
             abbr ? abbr : "?");
  } else if (code == 0) {
    res->status = KC_STATUS_OK;
    snprintf(res->message, sizeof res->message, "exited normally");
  } else {
    res->status = KC_STATUS_EXITED;
    snprintf(res->message, sizeof res->message, "exited with status %d", code);
  }
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
