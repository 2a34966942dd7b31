/* The clone3 child.  It becomes PID 1 of the sandbox's pid namespace ("init"): it
 * finishes the setup that must happen inside the namespaces, then forks the program
 * (PID 2), reaps everything, forwards signals and, when the program ends, writes the
 * program's wait status to the parent over a pipe only init holds and exits, which
 * makes the kernel kill whatever is left in the namespace.
 *
 * Why not exec the program as PID 1: PID 1 ignores signals it has no handler for, so
 * SIGXCPU (RLIMIT_CPU), SIGTERM and friends would not behave (reference/sandboxes.md
 * §4, crun's row), and orphans would never be reaped.
 *
 * Every setup failure goes back to the parent as a kc_setup_report on a CLOEXEC pipe;
 * a successful execve closes it, so the program can never write a fake report. */
#include "kcage/sandbox_parts.h"
#include "sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static int report_fd = -1;

__attribute__((noreturn)) static void fail(int kind, int code, const char *msg) {
  kc_setup_report r;
  memset(&r, 0, sizeof r);
  r.kind = kind;
  r.err = code;
  snprintf(r.msg, sizeof r.msg, "%s", msg);
  if (report_fd >= 0) {
    ssize_t n = write(report_fd, &r, sizeof r);
    (void)n;
  }
  _exit(125);
}

__attribute__((noreturn)) static void fail_err(const kc_error *e) {
  fail(KC_REPORT_SETUP, e->code, e->msg);
}

#define KC_MAX_TREES 64

/* Move the fds the child needs to 3, 4, ... (the fixed ones first, then the bind
 * trees the parent opened) and close every other inherited fd. */
static void compact_fds(kc_plan *p) {
  int *slots[7 + KC_MAX_TREES] = {&p->sync_rd,  &p->report_wr, &p->status_wr, &p->sock_wr,
                                  &p->stdin_fd, &p->out_wr,    &p->err_wr};
  int n = 7;
  for (size_t i = 0; i < p->n_mnts; i++)
    if (p->mnts[i].tree >= 0) {
      if (n == 7 + KC_MAX_TREES)
        p->mnts[i].tree = -1; /* past the limit: bound by path */
      else
        slots[n++] = &p->mnts[i].tree;
    }
  int tmp[7 + KC_MAX_TREES];
  for (int i = 0; i < n; i++) {
    tmp[i] = fcntl(*slots[i], F_DUPFD_CLOEXEC, 3 + n);
    if (tmp[i] < 0)
      _exit(125);
  }
  for (int i = 0; i < n; i++) {
    if (dup3(tmp[i], 3 + i, O_CLOEXEC) < 0)
      _exit(125);
    *slots[i] = 3 + i;
  }
  if (syscall(SYS_close_range, 3 + n, ~0U, 0) < 0) {
    for (int fd = 3 + n; fd < 4096; fd++)
      close(fd);
  }
}

/* argv[0] through PATH, resolved before seccomp so exactly one execve follows. */
static int resolve(const char *name, const char *path_env, char *out, size_t len) {
  if (strchr(name, '/')) {
    if (access(name, X_OK) < 0)
      return errno;
    snprintf(out, len, "%s", name);
    return 0;
  }
  int seen = ENOENT;
  const char *p = path_env && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  while (*p) {
    const char *colon = strchr(p, ':');
    size_t dl = colon ? (size_t)(colon - p) : strlen(p);
    int w =
        dl == 0 ? snprintf(out, len, "%s", name) : snprintf(out, len, "%.*s/%s", (int)dl, p, name);
    if (w < 0 || (size_t)w >= len) {
      p += dl + (p[dl] == ':');
      continue;
    }
    struct stat st;
    if (stat(out, &st) == 0) {
      if (S_ISREG(st.st_mode) && access(out, X_OK) == 0)
        return 0;
      seen = EACCES;
    }
    p += dl;
    if (*p == ':')
      p++;
  }
  return seen;
}

__attribute__((noreturn)) static void program_main(kc_plan *p) {
  kc_error err = {0};
  sigset_t none;
  sigemptyset(&none);
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* No controlling terminal: no TIOCSTI into the caller's tty. */
  setsid();
  if (dup2(p->stdin_fd, 0) < 0 || dup2(p->out_wr, 1) < 0 || dup2(p->err_wr, 2) < 0)
    fail(KC_REPORT_SETUP, errno, "stdio");
  /* Everything else is closed at exec; the report pipe must live until then. */
  close(p->stdin_fd);
  close(p->out_wr);
  close(p->err_wr);
  close(p->status_wr);
  char path[PATH_MAX];
  int e = resolve(p->exe, p->path_env, path, sizeof path);
  if (e) {
    char msg[PATH_MAX + 64];
    snprintf(msg, sizeof msg, "%s: %s", p->exe, e == ENOENT ? "command not found" : strerror(e));
    fail(KC_REPORT_EXEC, e, msg);
  }
  if (p->sock_wr != KC_CHILD_SOCK_FD)
    fail(KC_REPORT_SETUP, EBADF, "hand-off socket not where the filter expects it");
  if (kc__lockdown_prog_after_init(p->policy,
                                   p->cgroup_cpu && p->cpu_s > 0 ? p->cpu_s + 1 : p->cpu_s, p->prog,
                                   p->sock_wr, &err) < 0)
    fail_err(&err);
  close(p->sock_wr);
  execve(path, p->argv, p->envp);
  e = errno;
  char msg[PATH_MAX + 64];
  snprintf(msg, sizeof msg, "execve %s: %s", path, strerror(e));
  fail(KC_REPORT_EXEC, e, msg);
}

__attribute__((noreturn)) static void init_loop(pid_t prog, int status_wr) {
  sigset_t all;
  sigfillset(&all);
  for (;;) {
    siginfo_t si;
    int sig = sigwaitinfo(&all, &si);
    if (sig < 0)
      continue;
    if (sig != SIGCHLD) {
      kill(prog, sig);
      continue;
    }
    int st;
    pid_t w;
    while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
      if (w == prog) {
        ssize_t n = write(status_wr, &st, sizeof st);
        (void)n;
        _exit(0); /* the kernel kills the rest of the namespace */
      }
    }
  }
}

void kc__child_main(kc_plan *p) {
  kc_error err = {0};
  compact_fds(p);
  report_fd = p->report_wr;
  /* The parent writes our id maps ("m"), then puts us in the cgroups ("g") while we
   * build the file system; EOF = it died. */
  char go;
  if (read(p->sync_rd, &go, 1) != 1 || go != 'm')
    _exit(125);
  /* Raw syscalls, not libc's: we are a raw clone of a process that may have other
   * threads, and libc's wrappers would signal each of them to change its credentials
   * too (all threads of a process share them), then wait forever for threads that do
   * not exist here.  The kernel changes the calling thread's, the only one we have. */
  if (syscall(SYS_setgroups, 0, NULL) < 0 && errno != EPERM)
    fail(KC_REPORT_SETUP, errno, "setgroups");
  if (syscall(SYS_setresgid, 0, 0, 0) < 0)
    fail(KC_REPORT_SETUP, errno, "setresgid");
  if (syscall(SYS_setresuid, 0, 0, 0) < 0)
    fail(KC_REPORT_SETUP, errno, "setresuid");
  /* After the credential change, which clears it.  The parent keeps its end of the
   * sync pipe open for as long as it supervises us: a hang-up means it died before
   * the death signal was armed. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    fail(KC_REPORT_SETUP, errno, "pdeathsig");
  struct pollfd alive = {p->sync_rd, POLLIN, 0};
  if (poll(&alive, 1, 0) > 0 && (alive.revents & (POLLHUP | POLLERR)))
    _exit(125);
  if (p->ns.uts && sethostname("kcage", 5) < 0)
    fail(KC_REPORT_SETUP, errno, "sethostname");
  if (p->ns.mount && kc__fs_enter(p->mnts, p->n_mnts, p->cwd, &err) < 0)
    fail_err(&err);
  if (!p->ns.mount && p->cwd[0] && chdir(p->cwd) < 0)
    fail(KC_REPORT_SETUP, errno, "chdir");
  /* Nothing of the program may run before it is in every cgroup. */
  /* "g": lo is up (the parent did it from outside while we built the file system);
   * "G": bring it up ourselves. */
  if (read(p->sync_rd, &go, 1) != 1 || (go != 'g' && go != 'G'))
    _exit(125);
  if (go == 'G' && p->new_net && kc_sandbox_lo_up(&err) < 0)
    fail_err(&err);
  close(p->sync_rd);
  if (kc_sandbox_time_view(-1, NULL, &err) < 0)
    fail_err(&err);
  /* We are a fork of kcage: /proc/1/cmdline would read its host command line (every
   * bind's host path, every --env value).  Our memory is out of the program's reach
   * (not dumpable), so the view alone changes. */
  if (kc_sandbox_hide_args("kcage-init", NULL, NULL, &err) < 0)
    fail_err(&err);
  /* init itself keeps no privilege either, and cannot be ptraced by the program. */
  if (kc_sandbox_drop_caps(&err) < 0)
    fail_err(&err);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    fail(KC_REPORT_SETUP, errno, "prctl");
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  /* vfork: no page-table copy and no copy-on-write faults (costly under nested
   * paging); init only waits until the program has exec'd or failed.  Some kernels (6.1
   * does, 6.18 does not) refuse a vfork whose child would enter another time namespace
   * (kc_sandbox_time_view) while sharing our memory (EINVAL); there the program is forked. */
  pid_t prog = vfork();
  if (prog < 0 && errno == EINVAL)
    prog = fork();
  if (prog < 0)
    fail(KC_REPORT_SETUP, errno, "fork the program");
  if (prog == 0)
    program_main(p);
  close(p->report_wr);
  close(p->sock_wr);
  close(p->stdin_fd);
  close(p->out_wr);
  close(p->err_wr);
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; fd++) {
    if (devnull >= 0)
      dup2(devnull, fd);
    else
      close(fd);
  }
  if (devnull > 2)
    close(devnull);
  init_loop(prog, p->status_wr);
}
