/* The floors of bench_run: /bin/true launched with one part of kcage's isolation and
 * nothing else, as a launcher that knew its whole job in advance would do it.  They
 * answer "what does that part cost by itself on this machine?", so that kcage's
 * figure can be read against the least any launcher doing the same work pays.
 *
 *   ns  kcage's namespaces (user, pid, mount, ipc, uts, cgroup, net) in one clone3,
 *       a /proc for the new pid namespace, /bin/true exec'd as its PID 1: unshare's
 *       work, plus the cgroup namespace.
 *   fs  the same, plus kcage's file system built by kcage's own code (kc__fs_plan and
 *       kc__fs_open_trees before the clone, kc__fs_enter in the child: the built-in
 *       layout, i.e. the exec policy's less its two optional file binds) and lo up.
 *
 * Left out of both, and paid by kcage: the policy files, the id range, init (PID 1
 * that forwards signals and reaps, the program as PID 2), the seccomp filter and its
 * listener, the capability drop, the pipes for stdio, report and status, the
 * supervision loop.  Errors: exit 125 with a line on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kcage/sandbox_parts.h"
#include "sandbox_internal.h"

#include "bench_common.h"

__attribute__((noreturn)) static void die(const char *what) {
  fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
  _exit(125);
}

__attribute__((noreturn)) static void child(int go, bool fs, const kc_mnt *mnts, size_t n) {
  char b;
  if (read(go, &b, 1) != 1)
    _exit(125);
  if (fs) {
    kc_error err = {0};
    if (kc_sandbox_lo_up(&err) < 0 || kc__fs_enter(mnts, n, "/", &err) < 0) {
      fprintf(stderr, "floor: %s\n", err.msg);
      _exit(125);
    }
  } else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
             mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
    die("mount /proc");
  }
  char *const argv[] = {"/bin/true", NULL};
  execv(argv[0], argv);
  die("execv /bin/true");
}

static void write_map(pid_t pid, const char *file) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "0 0 1\n", 6) != 6) /* root as root, as unshare -r maps it */
    die(path);
  close(fd);
}

int kc_measure_floor_launch(const char *what) {
  bool fs = !strcmp(what, "fs");
  if (!fs && strcmp(what, "ns")) {
    fprintf(stderr, "floor: ns or fs, not %s\n", what);
    return 2;
  }
  kc_mnt *mnts = NULL;
  size_t n = 0;
  kc_error err = {0};
  if (fs) {
    if (kc__fs_plan(NULL, NULL, 0, &mnts, &n, &err) < 0) {
      fprintf(stderr, "floor: %s\n", err.msg);
      return 125;
    }
    kc__fs_open_trees(mnts, n);
  }
  int go[2];
  if (pipe2(go, O_CLOEXEC) < 0)
    die("pipe");
  struct clone_args ca = {.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC |
                                   CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWNET,
                          .exit_signal = SIGCHLD};
  long pid = syscall(SYS_clone3, &ca, sizeof ca);
  if (pid < 0)
    die("clone3");
  if (pid == 0)
    child(go[0], fs, mnts, n);
  write_map((pid_t)pid, "uid_map");
  write_map((pid_t)pid, "gid_map");
  if (write(go[1], "g", 1) != 1)
    die("start the child");
  int st;
  while (waitpid((pid_t)pid, &st, 0) < 0)
    if (errno != EINTR)
      die("waitpid");
  kc__fs_free(mnts, n);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
