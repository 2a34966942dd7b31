/* The agent's sessions: each in a process of its own (a kcage session, or TVM's server
 * loop in a fresh sandbox, told apart by the client's first bytes), killed at its
 * deadline and cleaned after; and the standby, a TVM session's sandbox started ahead
 * with TVM imported, handed the next client's socket. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_internal.h"
#include "fdio.h"
#include "fnum.h"
#include "kcage/cleanup.h"
#include "kcage/escape.h"
#include "kcage/log.h"
#include "kcage/policy.h"
#include "kcage/tracker.h"
#include "metrics.h"
#include "netio.h"
#include "safe_fs.h"
#include "tvm_hub.h"
#include "tvm_session.h"
#include "tvm_wire.h"

/* ---- sessions -------------------------------------------------------------------- */

/* The agent is a child subreaper: whatever a session's pool leaves behind when the
 * session process dies is reparented here and reaped, never left as a zombie. */
static void standby_gone(kc_agent *a, bool failed);
static void hub_gone(kc_agent *a, int status);

/* A standby's exit when, started beside a running session, it could not run idle. */
#define STANDBY_EXIT_NOT_IDLE 3

void kc__agent_reap(kc_agent *a) {
  pid_t p;
  int st;
  while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
    if (p == a->child) {
      a->child_reaped = true;
      a->child_status = st;
    }
    if (p == a->hub)
      hub_gone(a, st);
    if (p != a->standby)
      continue;
    if (WIFEXITED(st) && WEXITSTATUS(st) == STANDBY_EXIT_NOT_IDLE) {
      kc_log(KC_LOG_INFO, "kcage agent",
             "TVM standby: the host cannot run it idle; started only between sessions");
      a->standby_ahead = false;
    }
    standby_gone(a, true);
  }
}

/* How a session process ended, for the operator: a client that never proved the key,
 * or a session whose records someone on the path changed. */
#define SESSION_EXIT_AUTH 4
#define SESSION_EXIT_TAMPERED 5

void kc__agent_end_session(kc_agent *a) {
  if (a->child <= 0)
    return;
  kill(-a->child, SIGKILL); /* anything the session left behind in its group */
  if (!a->child_reaped) {
    kill(a->child, SIGKILL);
    waitpid(a->child, &a->child_status, 0);
  }
  if (WIFEXITED(a->child_status) && WEXITSTATUS(a->child_status) == SESSION_EXIT_AUTH)
    kc_metrics_conn_closed("auth");
  if (WIFEXITED(a->child_status) && WEXITSTATUS(a->child_status) == SESSION_EXIT_TAMPERED)
    kc_metrics_conn_closed("tampered");
  a->child_reaped = false;
  a->child_status = 0;
  kc__agent_reap(a);
  if (a->child_pidfd >= 0)
    close(a->child_pidfd);
  a->child_pidfd = -1;
  a->child = 0;
  if (a->child_dir[0])
    nftw(a->child_dir, kc__agent_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  a->child_dir[0] = '\0';
  kc_metrics_session(0);
  kc_log(KC_LOG_INFO, "kcage agent", "session ended");
  kc__agent_back_in_pool(a);
}

/* The operator's --max-session: a session without a timeout, or with a longer one,
 * gets the cap (and its records say so). */
static double session_timeout(const kc_agent *a, double asked) {
  double cap = a->o.caps.max_session_s;
  return cap > 0 && (asked <= 0 || asked > cap) ? cap : asked;
}

/* What the client sent first after the handshake: a TVM RPC packet (1) or a kcage frame
 * (0, whose decoder then refuses anything else); -1 when nothing came by `by`. */
static int first_request(int fd, double by) {
  unsigned char head[8];
  if (kc_tvm_peek(fd, head, sizeof head, by, NULL) < 0)
    return -1;
  return kc_tvm_is_rpc(head, sizeof head);
}

static int serve_tvm(kc_agent *a, int fd, double timeout_s, double asked_s, double deadline,
                     kc_tvm_standby *standby) {
  if (a->o.auth && a->o.auth->len) {
    /* TVM's clients cannot prove the key: serving them would drop the agent's guard */
    kc_tvm_standby_drop(standby);
    kc_tvm_refuse(fd, "kcage agent: this device agent requires authentication (--auth-key), "
                      "which TVM's RPC clients cannot give: use kcage's client");
    return 1;
  }
  kc_tvm_serve_opts to = {.python = a->python,
                          .unavailable = a->python_why,
                          .dir = a->child_dir,
                          .timeout_s = timeout_s,
                          .asked_timeout_s = asked_s,
                          .deadline = kc_now_s() + 10,
                          .session_deadline = deadline,
                          .caps = a->o.caps,
                          .policies = a->o.tvm_policies,
                          .npolicies = a->o.n_tvm_policies,
                          .first = a->tvm_first,
                          .settings = a->o.settings,
                          .verbose = a->o.verbose};
  kc_error err = {0};
  int rc = 1;
  if (a->hub_ctl >= 0 && !standby)
    rc = kc_tvm_hub_serve(a->hub_ctl, fd, &to, &err);
  if (rc == 1) /* not the zygote's to serve (another policy), or it is gone */
    rc = standby ? kc_tvm_standby_serve(standby, fd, &to, &err)
                 : kc_tvm_session_serve(fd, &to, &err);
  if (rc < 0) {
    char shown[KC_ERROR_MSG_MAX * 4];
    kc__agent_log(a, "TVM RPC session failed: %s", kc_escape(err.msg, shown, sizeof shown));
    return 1;
  }
  return 0;
}

/* In a forked child: nothing of the agent's that a session must not hold. */
static void child_setup(kc_agent *a) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* an agent that dies takes its session along */
  signal(SIGTERM, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  kc__agent_chld_fd = -1;
  close(a->stop_pipe[0]);
  close(a->stop_pipe[1]);
  signal(SIGINT, SIG_DFL);
  if (a->lfd >= 0)
    close(a->lfd);
  if (a->trk)
    close(kc_tracker_fd(a->trk));
  for (size_t i = 0; i < a->nhs; i++)
    close(a->hs[i].fd);
  if (a->standby_ctl >= 0)
    close(a->standby_ctl);
  if (a->child_pidfd >= 0)
    close(a->child_pidfd); /* a standby started beside a running session */
}

/* One session in its own process: TVM's or kcage's, by what the client sends first. */
static int serve_child(kc_agent *a, int fd, double timeout_s, double asked_s, double deadline,
                       kc_tvm_standby *standby) {
  /* Everything the session's batch writes (bench's inputs and staged kernels, build
   * scratch) lands under the session dir, which the agent removes however the
   * session ends - also when it is killed at its timeout. */
  setenv("TMPDIR", a->child_dir, 1);
  /* Under a key, a peer that sends nothing is a peer that proves nothing: it gets the
   * proof's deadline, not the 10 s a first request otherwise may take. */
  bool keyed = a->o.auth && a->o.auth->len;
  double by = kc_now_s() +
              (keyed ? (a->o.auth_timeout_s > 0 ? a->o.auth_timeout_s : KC_AUTH_TIMEOUT_S) : 10);
  if (deadline >= 0 && deadline < by)
    by = deadline;
  int first = first_request(fd, by);
  if (first == 1)
    return serve_tvm(a, fd, timeout_s, asked_s, deadline, standby);
  if (first < 0 && keyed) {
    kc_tvm_standby_drop(standby);
    kc_log(KC_LOG_WARN, "kcage agent",
           "session failed: authentication: the client sent nothing within the auth timeout");
    return SESSION_EXIT_AUTH;
  }
  kc_tvm_standby_drop(standby);
  kc_session_serve_opts so = {.device = a->device,
                              .dir = a->child_dir,
                              .workers = a->o.workers,
                              .deadline = deadline,
                              .timeout_s = timeout_s,
                              .asked_timeout_s = asked_s,
                              .caps = a->o.caps,
                              .auth = a->o.auth && a->o.auth->len ? a->o.auth : NULL,
                              .auth_timeout_s = a->o.auth_timeout_s,
                              .settings = a->o.settings};
  kc_error err = {0};
  int rc = kc_session_serve(fd, &so, &err);
  if (rc < 0) { /* the operator sees why a session ended early: a refused key, a record
                 * that failed authentication (someone on the path), a timeout */
    char shown[KC_ERROR_MSG_MAX * 4];
    kc_log(KC_LOG_WARN, "kcage agent", "session failed: %s",
           kc_escape(err.msg, shown, sizeof shown));
  }
  return rc == 0               ? 0
         : err.code == EACCES  ? SESSION_EXIT_AUTH
         : err.code == EBADMSG ? SESSION_EXIT_TAMPERED
                               : 1;
}

/* The session's start in the agent: the matchkey is spent, the deadline watched. */
static void begin_session(kc_agent *a, pid_t pid, double deadline, double timeout_s) {
  a->child = pid;
  a->child_deadline = deadline;
  a->child_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  /* The matchkey just used is spent: a second client with it gets MISMATCH. */
  kc__agent_new_matchkey(a);
  kc_metrics_session(1);
  kc_log(KC_LOG_INFO, "kcage agent", "session started (pid %d, timeout %g s)", pid, timeout_s);
}

/* What the agent tells its standby with the client's socket. */
struct handoff {
  double timeout_s, asked_s, deadline;
};

static void standby_gone(kc_agent *a, bool failed) {
  if (a->standby_ctl >= 0)
    close(a->standby_ctl);
  a->standby_ctl = -1;
  a->standby = 0;
  if (!failed)
    return;
  if (a->standby_dir[0])
    nftw(a->standby_dir, kc__agent_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  a->standby_dir[0] = '\0';
  /* A Python that cannot start its server loop is not restarted in a tight loop. */
  a->standby_next = kc_now_s() + a->standby_backoff;
  a->standby_backoff = kc_fmin(a->standby_backoff * 2, 60);
}

void kc__agent_kill_standby(kc_agent *a) {
  if (a->standby <= 0)
    return;
  kill(a->standby, SIGKILL);
  waitpid(a->standby, NULL, 0);
  standby_gone(a, true);
}

/* The client's socket to the standby, which becomes the session: its pid, or 0 (none,
 * or it died: the caller starts a session of its own). */
static pid_t hand_to_standby(kc_agent *a, int fd, double timeout_s, double asked_s,
                             double deadline) {
  if (a->standby <= 0)
    return 0;
  struct handoff h = {timeout_s, asked_s, deadline};
  if (kc_send_fds(a->standby_ctl, &h, sizeof h, &fd, 1) < 0) {
    kc__agent_kill_standby(a);
    return 0;
  }
  pid_t pid = a->standby;
  snprintf(a->child_dir, sizeof a->child_dir, "%s", a->standby_dir);
  a->standby_dir[0] = '\0';
  a->standby_backoff = 1;
  standby_gone(a, false);
  return pid;
}

/* The standby's process: its sandbox started, then the session it is handed. */
static void standby_main(kc_agent *a, int ctl) {
  snprintf(a->child_dir, sizeof a->child_dir, "%s", a->standby_dir);
  kc_tvm_serve_opts to = {.python = a->python,
                          .dir = a->child_dir,
                          .deadline = kc_now_s() + 10,
                          .session_deadline = -1,
                          .caps = a->o.caps,
                          .policies = a->o.tvm_policies,
                          .npolicies = a->o.n_tvm_policies,
                          .ahead = a->child > 0,
                          .settings = a->o.settings};
  kc_tvm_standby *sb = NULL;
  kc_error err = {0};
  if (kc_tvm_standby_start(&to, &sb, &err) < 0) {
    char shown[KC_ERROR_MSG_MAX * 4];
    kc_log(KC_LOG_WARN, "kcage agent", "TVM standby: %s", kc_escape(err.msg, shown, sizeof shown));
    _exit(to.ahead && err.code == ENOTSUP ? STANDBY_EXIT_NOT_IDLE : 2);
  }
  /* until its session comes, answering its sysinfo calls; a forbidden call ends it */
  int idle = kc_tvm_standby_idle(sb, ctl);
  struct pollfd end = {.fd = (int)syscall(SYS_pidfd_open, kc_tvm_standby_pid(sb), 0),
                       .events = POLLIN};
  struct handoff h;
  int fd = -1, nfd = 1;
  if (idle != 0 || poll(&end, 1, 0) != 0 ||
      kc_recv_fds(ctl, &h, sizeof h, &fd, &nfd) != (ssize_t)sizeof h || nfd != 1) {
    kc_tvm_standby_drop(sb); /* its sandbox died, or the agent */
    _exit(2);
  }
  close(ctl);
  _exit(serve_child(a, fd, h.timeout_s, h.asked_s, h.deadline, sb));
}

/* May the next session's standby start now?  Not while the TVM zygote serves. */
bool kc__agent_standby_due(const kc_agent *a) {
  return a->python && !(a->o.auth && a->o.auth->len) && a->standby <= 0 &&
         (a->hub_off || !a->python->libpython[0]) && (a->child <= 0 || a->standby_ahead);
}

/* ---- the TVM zygote ---------------------------------------------------------------- */

static void hub_gone(kc_agent *a, int status) {
  if (a->hub_ctl >= 0)
    close(a->hub_ctl);
  a->hub_ctl = -1;
  a->hub = 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == KC_TVM_HUB_EXIT_UNAVAILABLE) {
    a->hub_off = true; /* its reason is in the log: sessions start their interpreter */
    return;
  }
  a->hub_next = kc_now_s() + a->hub_backoff;
  a->hub_backoff = kc_fmin(a->hub_backoff * 2, 60);
}

/* Its socket closed, the hub ends its spare worker and its zygote and removes their
 * cgroups; one that does not within a few seconds is killed (the zygote and workers
 * follow by PDEATHSIG, their cgroups are reaped by the next kcage). */
void kc__agent_kill_hub(kc_agent *a) {
  if (a->hub <= 0)
    return;
  int pidfd = (int)syscall(SYS_pidfd_open, a->hub, 0);
  close(a->hub_ctl);
  a->hub_ctl = -1;
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  if (pidfd < 0 || poll(&p, 1, 3000) <= 0)
    kill(a->hub, SIGKILL);
  if (pidfd >= 0)
    close(pidfd);
  waitpid(a->hub, NULL, 0);
  hub_gone(a, 0);
}

/* The zygote's process, started once TVM sessions can be served (a shared libpython, no
 * key: TVM's clients cannot prove one); restarted with a backoff when it dies. */
void kc__agent_start_hub(kc_agent *a) {
  if (!a->python || !a->python->libpython[0] || a->hub_off || a->hub > 0 ||
      (a->o.auth && a->o.auth->len) || kc_now_s() < a->hub_next)
    return;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    a->hub_next = kc_now_s() + 5;
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    child_setup(a);
    kc_tvm_serve_opts to = {.python = a->python,
                            .caps = a->o.caps,
                            .policies = a->o.tvm_policies,
                            .npolicies = a->o.n_tvm_policies,
                            .settings = a->o.settings,
                            .verbose = a->o.verbose};
    kc_tvm_hub_main(&to, sv[1]);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    a->hub_next = kc_now_s() + 5;
    return;
  }
  a->hub = pid;
  a->hub_ctl = sv[0];
}

/* With TVM sessions served: the next session's process and sandbox, started as soon as
 * the last one was handed its session.  TVM's import takes seconds of CPU; a session
 * that starts later than that after the last one finds TVM's server loop waiting. */
void kc__agent_start_standby(kc_agent *a) {
  if (!kc__agent_standby_due(a) || kc_now_s() < a->standby_next)
    return;
  int sv[2];
  snprintf(a->standby_dir, sizeof a->standby_dir, "%s/session-XXXXXX", a->base_dir);
  if (!mkdtemp(a->standby_dir) || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    a->standby_dir[0] = '\0';
    a->standby_next = kc_now_s() + 5;
    return;
  }
  chmod(a->standby_dir, 0711);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    child_setup(a);
    standby_main(a, sv[1]);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    standby_gone(a, true);
    return;
  }
  a->standby = pid;
  a->standby_ctl = sv[0];
}

void kc__agent_start_session(kc_agent *a, int fd, double asked_s) {
  double timeout_s = session_timeout(a, asked_s);
  double deadline = timeout_s > 0 ? kc_now_s() + timeout_s : -1;
  pid_t handed = hand_to_standby(a, fd, timeout_s, asked_s, deadline);
  if (handed > 0) {
    close(fd);
    begin_session(a, handed, deadline, timeout_s);
    return;
  }
  snprintf(a->child_dir, sizeof a->child_dir, "%s/session-XXXXXX", a->base_dir);
  if (!mkdtemp(a->child_dir)) {
    a->child_dir[0] = '\0';
    close(fd);
    return;
  }
  chmod(a->child_dir, 0711);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return;
  }
  if (pid == 0) {
    child_setup(a);
    _exit(serve_child(a, fd, timeout_s, asked_s, deadline, NULL));
  }
  close(fd);
  begin_session(a, pid, deadline, timeout_s);
}
