/* Real filters: a forked child installs a compiled policy, hands the listener to
 * this (parent) process and makes calls; the parent checks, from the kernel's own
 * notification, which syscall it was.  Children leave with _exit() (no sanitizer
 * exit hooks under a filter). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <seccomp.h>

#include "kcage/policy.h"
#include "kcage/seccomp.h"

static kc_policy *from_text(const char *text) {
  char path[] = "/tmp/kcage-policy-sc-XXXXXX.policy";
  int fd = mkstemps(path, 7);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  kc_policy *p = NULL;
  kc_error err = {0};
  int rc = kc_policy_parse_file(path, &p, &err);
  unlink(path);
  if (rc < 0)
    fail_msg("%s", err.msg);
  return p;
}

typedef struct outcome {
  int status;         /* wait status */
  char violation[48]; /* "" when none */
  uint64_t args[6];
  int asks;              /* notify-rule events seen */
  bool syscall_returned; /* the child reported that the forbidden call came back */
} outcome;

/* Child body after the filter is in place; returns the exit code. */
typedef int (*child_fn)(int report_fd, void *arg);

/* Fork; the child installs p, hands over the listener and runs fn (or execs argv).
 * The parent supervises: the first exec "ask" is answered CONTINUE, anything else is a
 * violation (recorded, then the child is killed). */
/* When set, the child loads this precompiled program (sent on fd HANDOFF_FD) instead
 * of compiling the policy itself. */
static const kc_seccomp_prog *g_prog;
/* When set, the child uses kc_policy_install_seccomp() and its own sendmsg (the way
 * a caller that does not use the hand-off helpers does it). */
static bool g_plain;

static int plain_send(int sock, int fd) {
  char byte = fd >= 0 ? 'L' : 'N';
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof u.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}
#define HANDOFF_FD 100

/* The child: the filter installed and its listener handed over on sock (plainly, from
 * a compiled program, or by the hand-off helper), then argv or fn. */
__attribute__((noreturn)) static void child_main(const kc_policy *p, child_fn fn, void *arg,
                                                 char *const *argv, int sock, int rep) {
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  kc_error err = {0};
  if (g_plain) {
    int l = -1;
    if (kc_policy_install_seccomp(p, &l, &err) < 0 || plain_send(sock, l) < 0)
      _exit(123);
    if (l >= 0)
      close(l);
  } else if (g_prog) {
    if (dup2(sock, HANDOFF_FD) < 0 || kc_seccomp_prog_load_and_send(g_prog, HANDOFF_FD) < 0) {
      dprintf(2, "child: load: %s\n", strerror(errno));
      _exit(122);
    }
    close(HANDOFF_FD);
  } else if (kc_seccomp_install_and_send(p, sock, &err) < 0) {
    dprintf(2, "child: %s\n", err.msg);
    _exit(120);
  }
  close(sock);
  if (argv) {
    execv(argv[0], argv);
    _exit(121);
  }
  _exit(fn(rep, arg));
}

/* The supervisor's side until the child ends or is killed for its first violation
 * (one exec is let through when exec_allowed). */
static void supervise(const kc_policy *p, pid_t pid, int pidfd, int listener, bool exec_allowed,
                      outcome *o) {
  kc_error err = {0};
  for (;;) {
    struct pollfd fds[2] = {{.fd = pidfd, .events = POLLIN}, {.fd = listener, .events = POLLIN}};
    int n = poll(fds, listener >= 0 ? 2 : 1, 10000);
    assert_true(n > 0); /* no test child runs for 10 s */
    if (fds[0].revents)
      break;
    if (!fds[1].revents)
      continue;
    if (fds[1].revents & (POLLHUP | POLLERR))
      break;
    kc_seccomp_event ev;
    if (kc_seccomp_notify_receive(listener, &ev, &err) < 0) {
      assert_int_equal(err.code, ENOENT);
      continue;
    }
    kc_notify_kind kind = kc_policy_notify_kind(p, &ev);
    if (kind == KC_NOTIFY_ASK && exec_allowed &&
        (!strcmp(ev.name, "execve") || !strcmp(ev.name, "execveat"))) {
      exec_allowed = false;
      o->asks++;
      assert_true(kc_seccomp_notify_id_valid(listener, ev.id));
      assert_int_equal(kc_seccomp_notify_continue(listener, &ev, &err), 0);
      continue;
    }
    if (kind == KC_NOTIFY_ASK)
      o->asks++;
    snprintf(o->violation, sizeof o->violation, "%s", ev.name);
    memcpy(o->args, ev.args, sizeof o->args);
    assert_int_equal(ev.pid, pid);
    assert_true(kc_seccomp_notify_id_valid(listener, ev.id));
    /* kill first: the syscall must never run */
    kill(pid, SIGKILL);
    break;
  }
}

static void run(const kc_policy *p, child_fn fn, void *arg, char *const *argv, outcome *o) {
  memset(o, 0, sizeof *o);
  int sv[2], rep[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  assert_int_equal(pipe2(rep, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    close(rep[0]);
    child_main(p, fn, arg, argv, sv[1], rep[1]);
  }
  close(sv[1]);
  close(rep[1]);
  int listener = -1;
  kc_error err = {0};
  if (kc_seccomp_recv_listener(sv[0], 5000, &listener, &err) < 0)
    fail_msg("%s", err.msg);
  close(sv[0]);
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  assert_true(pidfd >= 0);
  supervise(p, pid, pidfd, listener, argv != NULL, o);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  o->status = st;
  char c;
  o->syscall_returned = read(rep[0], &c, 1) == 1;
  close(rep[0]);
  close(pidfd);
  if (listener >= 0)
    close(listener);
}

/* ---- in-process children (simple default-allow policies) -------------------- */

static int child_errno(int rep, void *arg) {
  (void)rep, (void)arg;
  errno = 0;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s >= 0 || errno != EAFNOSUPPORT)
    return 1;
  s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s < 0)
    return 2;
  /* the mask rule: CLONE_NEWUSER in unshare's flags, also with high garbage bits */
  if (syscall(SYS_unshare, (long)CLONE_NEWUSER) != -1 || errno != EPERM)
    return 3;
  if (syscall(SYS_unshare, 0x100000000L | CLONE_NEWUSER) != -1 || errno != EPERM)
    return 4;
  return 0;
}

static void test_errno_rules_and_conditions(void **state) {
  (void)state;
  kc_policy *p = from_text("default allow\n"
                           "errno EAFNOSUPPORT socket arg0 != AF_UNIX\n"
                           "errno EPERM unshare arg0 & CLONE_NEWUSER\n");
  outcome o;
  run(p, child_errno, NULL, NULL, &o);
  assert_true(WIFEXITED(o.status));
  assert_int_equal(WEXITSTATUS(o.status), 0);
  assert_string_equal(o.violation, "");
  kc_policy_free(p);
}

static int child_kill(int rep, void *arg) {
  (void)arg;
  if (socket(AF_UNIX, SOCK_STREAM, 0) < 0) /* allowed: the condition does not match */
    return 10;
  socket(AF_INET6, SOCK_DGRAM, 0); /* blocks until the supervisor kills us */
  (void)!write(rep, "x", 1);
  return 11;
}

static void test_kill_names_syscall(void **state) {
  (void)state;
  kc_policy *p = from_text("default allow\nkill socket arg0 & AF_INET6|AF_INET\n");
  outcome o;
  run(p, child_kill, NULL, NULL, &o);
  assert_string_equal(o.violation, "socket");
  assert_int_equal(o.args[0], AF_INET6);
  assert_int_equal(o.args[1], SOCK_DGRAM);
  assert_true(WIFSIGNALED(o.status));
  assert_int_equal(WTERMSIG(o.status), SIGKILL);
  assert_false(o.syscall_returned);
  kc_policy_free(p);
}

static int child_kill_default(int rep, void *arg) {
  (void)rep, (void)arg;
  syscall(SYS_getppid);         /* allowed */
  syscall(SYS_getcwd, NULL, 0); /* not listed: the default kills */
  return 12;
}

static void test_default_kill(void **state) {
  (void)state;
  kc_policy *p = from_text("default kill\nallow getppid exit exit_group write\n");
  outcome o;
  run(p, child_kill_default, NULL, NULL, &o);
  assert_string_equal(o.violation, "getcwd");
  assert_true(WIFSIGNALED(o.status));
  kc_policy_free(p);
}

static int child_after_close(int rep, void *arg) {
  (void)rep, (void)arg;
  char c;
  if (read(*(int *)arg, &c, 1) != 1) /* wait until the parent closed the listener */
    return 20;
  errno = 0;
  long r = syscall(SYS_getcwd, NULL, 0);
  return r == -1 && errno == ENOSYS ? 0 : 21;
}

/* Why the supervisor must hold the listener while the child lives: with every copy
 * closed, the kernel fails a "kill" syscall with ENOSYS instead of stopping it. */
static void test_closed_listener_degrades_to_enosys(void **state) {
  (void)state;
  kc_policy *p = from_text("default allow\nkill getcwd\n");
  int go[2];
  assert_int_equal(pipe(go), 0);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    close(go[1]);
    kc_error err;
    if (kc_seccomp_install_and_send(p, sv[1], &err) < 0)
      _exit(120);
    _exit(child_after_close(-1, &go[0]));
  }
  close(sv[1]);
  close(go[0]);
  int l = -1;
  kc_error err = {0};
  assert_int_equal(kc_seccomp_recv_listener(sv[0], 5000, &l, &err), 0);
  assert_true(l >= 0);
  close(l);
  close(sv[0]);
  assert_int_equal(write(go[1], "g", 1), 1);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  close(go[1]);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  kc_policy_free(p);
}

static void test_no_listener_without_kill(void **state) {
  (void)state;
  kc_policy *p = from_text("default allow\nerrno EPERM ptrace\n");
  kc_error err = {0};
  assert_false(kc_policy_needs_listener(p));
  outcome o;
  run(p, child_errno, NULL, NULL, &o); /* socket(AF_INET) works here: exit 1 */
  assert_true(WIFEXITED(o.status));
  assert_int_equal(WEXITSTATUS(o.status), 1);
  (void)err;
  kc_policy_free(p);
}

/* A sandbox's supervisor answers sysinfo only where the policy would let it run
 * unconditionally; a policy's own decision about it (errno, kill, a condition) stays. */
static void test_sysinfo_view(void **state) {
  (void)state;
  static const struct {
    const char *text;
    bool viewed;
  } cases[] = {
      {"default allow\n", true},
      {"default kill\nallow sysinfo\n", true},
      {"default allow\nallow sysinfo read\n", true},
      {"default kill\n", false},
      {"default allow\nerrno EPERM sysinfo\n", false},
      {"default allow\nkill sysinfo\n", false},
      {"default allow\nallow sysinfo arg0 != 0\n", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kc_policy *p = from_text(cases[i].text);
    if (kc_policy_views_sysinfo(p) != cases[i].viewed)
      fail_msg("%s: viewed %d", cases[i].text, !cases[i].viewed);
    kc_seccomp_event ev = {.arch = seccomp_arch_native(), .nr = SCMP_SYS(sysinfo)};
    assert_int_equal(kc_seccomp_is_sysinfo_view(p, &ev), cases[i].viewed);
    ev.nr = SCMP_SYS(uname);
    assert_false(kc_seccomp_is_sysinfo_view(p, &ev));
    /* A sandbox's program needs a listener for it, a worker's does not. */
    kc_seccomp_prog *sb = NULL, *plain = NULL;
    kc_error err = {0};
    assert_int_equal(kc_seccomp_prog_compile_sandbox(p, KC_HANDOFF_NONE, &sb, &err), 0);
    assert_int_equal(kc_seccomp_prog_compile(p, KC_HANDOFF_NONE, &plain, &err), 0);
    if (cases[i].viewed && !kc_policy_needs_listener(p))
      assert_true(kc_seccomp_prog_len(sb) > kc_seccomp_prog_len(plain));
    kc_seccomp_prog_free(sb);
    kc_seccomp_prog_free(plain);
    kc_policy_free(p);
  }
}

/* ---- the shipped measure profile, around a real exec'd program ------------- */

static void under(const char *policy, const char *mode, outcome *o) {
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load(policy, &p, &err), 0);
  char *argv[] = {(char *)KC_POLICY_PROBE, (char *)mode, NULL};
  run(p, NULL, NULL, argv, o);
  kc_policy_free(p);
}

static void measure(const char *mode, outcome *o) {
  under("measure", mode, o);
}

static void expect_violation(const char *mode, const char *name, int asks) {
  outcome o;
  measure(mode, &o);
  if (strcmp(o.violation, name))
    fail_msg("mode %s: violation '%s', expected '%s' (status 0x%x)", mode, o.violation, name,
             o.status);
  assert_true(WIFSIGNALED(o.status));
  assert_int_equal(o.asks, asks); /* the exec of the probe itself (+ a second exec) */
}

static void test_measure_runs_a_dynamic_program(void **state) {
  (void)state;
  outcome o;
  measure("ok", &o);
  assert_string_equal(o.violation, "");
  assert_int_equal(o.asks, 1);
  assert_true(WIFEXITED(o.status));
  assert_int_equal(WEXITSTATUS(o.status), 0);
  measure("open-write", &o); /* opening for writing fails with EROFS, no kill */
  assert_string_equal(o.violation, "");
  assert_true(WIFEXITED(o.status));
  assert_int_equal(WEXITSTATUS(o.status), 0);
}

static void test_measure_violations(void **state) {
  (void)state;
  expect_violation("socket", "socket", 1);
  expect_violation("high-bits-socket", "socket", 1);
  expect_violation("mmap-exec", "mmap", 1);
  expect_violation("mprotect-exec", "mprotect", 1);
  expect_violation("fork", "clone", 1);
  expect_violation("ptrace", "ptrace", 1);
  expect_violation("exec-again", "execve", 2); /* only the first exec is let through */
}

static void test_exec_and_build_profiles(void **state) {
  (void)state;
  outcome o;
  under("exec", "exec-denials", &o);
  assert_string_equal(o.violation, "");
  if (!WIFEXITED(o.status) || WEXITSTATUS(o.status) != 0)
    fail_msg("exec-denials: status 0x%x", o.status);
  under("exec", "mount", &o);
  assert_string_equal(o.violation, "mount");
  assert_true(WIFSIGNALED(o.status));
  under("build", "build-net", &o);
  assert_string_equal(o.violation, "");
  assert_true(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
  under("build", "exec-denials", &o); /* build forks and execs like exec */
  assert_true(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
  /* measure: no threads (glibc's pthread_create tries clone3 first) */
  measure("thread", &o);
  assert_string_equal(o.violation, "clone3");
}

/* Syscalls of another ABI would dodge every rule written for x86_64 numbers. */
/* Whether this kernel runs i386 system calls at all: with IA32 emulation off
 * (CONFIG_IA32_EMULATION=n or ia32_emulation=0) `int $0x80` faults before any filter
 * sees it, so there is nothing for the filter to name.  Probed outside any filter. */
static bool host_has_ia32(void) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    long ret = 20; /* i386 getpid */
    __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
    _exit(ret > 0 ? 0 : 1);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void test_foreign_abi(void **state) {
  (void)state;
#ifndef __x86_64__
  skip();
#endif
  outcome o;
  if (host_has_ia32()) {
    under("exec", "int80", &o);
    assert_string_equal(o.violation, "i386:getpid");
    assert_true(WIFSIGNALED(o.status));
    measure("int80", &o);
    assert_string_equal(o.violation, "i386:getpid");
  } else {
    print_message("skipping the i386 half: this kernel has no IA32 emulation\n");
  }
  /* x32 numbers reach the filter whatever the kernel supports (the filter runs first) */
  under("exec", "x32", &o);
  assert_string_equal(o.violation, "x32:getpid");
  assert_true(WIFSIGNALED(o.status));
}

/* The calls the issue names, each one by one: the verdict must name exactly it.  All
 * arguments are zero (harmless even if a filter were wrong: EFAULT/EINVAL). */
static void expect_raw(const char *policy, const char *name) {
  int nr = seccomp_syscall_resolve_name(name);
  assert_true(nr >= 0);
  char nrs[16];
  snprintf(nrs, sizeof nrs, "%d", nr);
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load(policy, &p, &err), 0);
  char *argv[] = {(char *)KC_POLICY_PROBE, "raw", nrs, NULL};
  outcome o;
  run(p, NULL, NULL, argv, &o);
  kc_policy_free(p);
  if (strcmp(o.violation, name))
    fail_msg("%s under %s: violation '%s' (status 0x%x)", name, policy, o.violation, o.status);
  assert_true(WIFSIGNALED(o.status));
}

static void test_forbidden_lists(void **state) {
  (void)state;
  const char *measure_kills[] = {"mount",
                                 "umount2",
                                 "pivot_root",
                                 "ptrace",
                                 "init_module",
                                 "finit_module",
                                 "delete_module",
                                 "kexec_load",
                                 "bpf",
                                 "perf_event_open",
                                 "io_uring_setup",
                                 "io_uring_enter",
                                 "io_uring_register",
                                 "userfaultfd",
                                 "keyctl",
                                 "add_key",
                                 "request_key",
                                 "socket",
                                 "socketpair",
                                 "connect",
                                 "clone",
                                 "clone3",
                                 "fork",
                                 "vfork",
                                 "memfd_create",
                                 "personality",
                                 "unshare",
                                 "setns",
                                 "process_vm_writev",
                                 "kill",
                                 "open_by_handle_at",
                                 "reboot",
                                 "swapon"};
  for (size_t i = 0; i < sizeof measure_kills / sizeof measure_kills[0]; i++)
    expect_raw("measure", measure_kills[i]);
  const char *exec_kills[] = {"mount",        "umount2",       "pivot_root", "init_module",
                              "finit_module", "delete_module", "kexec_load", "kexec_file_load",
                              "reboot",       "swapon",        "swapoff",    "open_by_handle_at",
                              "fsopen",       "move_mount",    "open_tree"};
  for (size_t i = 0; i < sizeof exec_kills / sizeof exec_kills[0]; i++)
    expect_raw("exec", exec_kills[i]);
}

static void test_precompiled(void **state) {
  (void)state;
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("measure", &p, &err), 0);
  kc_seccomp_prog *prog = NULL;
  if (kc_seccomp_prog_compile(p, HANDOFF_FD, &prog, &err) < 0)
    fail_msg("%s", err.msg);
  assert_true(kc_seccomp_prog_len(prog) > 20);
  g_prog = prog;
  outcome o;
  measure("ok", &o);
  assert_string_equal(o.violation, "");
  assert_true(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
  expect_violation("socket", "socket", 1);
  expect_violation("mmap-exec", "mmap", 1);
  g_prog = NULL;
  kc_seccomp_prog_free(prog);

  /* a policy that filters nothing loads as a no-op and sends "no listener" */
  kc_policy *none = from_text("namespaces none\n");
  assert_int_equal(kc_seccomp_prog_compile(none, HANDOFF_FD, &prog, &err), 0);
  assert_int_equal(kc_seccomp_prog_len(prog), 0);
  g_prog = prog;
  run(none, child_errno, NULL, NULL, &o); /* socket(AF_INET) works: exit 1 */
  assert_true(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 1);
  g_prog = NULL;
  kc_seccomp_prog_free(prog);
  kc_policy_free(none);
  kc_policy_free(p);
}

/* Names in the compiled-program cache directory (root's).  It keeps a program for
 * every build of kcage that ran on this boot: a machine that builds kcage often holds
 * hundreds, all of which must be listed for the new one to be told apart. */
#define BPF_CACHE "/run/kcage/bpf"
#define BPF_CACHE_NAMES 16384

static size_t cache_names(char names[][64], size_t cap) {
  size_t n = 0;
  DIR *d = opendir(BPF_CACHE);
  if (!d)
    return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap)
    if (e->d_name[0] != '.' && strlen(e->d_name) < 64)
      memcpy(names[n++], e->d_name, strlen(e->d_name) + 1);
  closedir(d);
  return n;
}

/* The file new since `before` whose key holds `mark` (this run's own rule value). */
static bool find_new_entry(char before[][64], size_t nb, uint64_t mark, char *out, size_t cap) {
  static char after[BPF_CACHE_NAMES][64];
  size_t na = cache_names(after, BPF_CACHE_NAMES);
  for (size_t i = 0; i < na; i++) {
    bool old = false;
    for (size_t j = 0; j < nb && !old; j++)
      old = !strcmp(after[i], before[j]);
    char path[128];
    snprintf(path, sizeof path, BPF_CACHE "/%s", after[i]);
    FILE *f = old ? NULL : fopen(path, "re");
    if (!f)
      continue;
    unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t k = 0; k + sizeof mark <= n; k++)
      if (!memcmp(buf + k, &mark, sizeof mark)) {
        snprintf(out, cap, "%s", path);
        return true;
      }
  }
  return false;
}

/* Root keeps compiled programs: the first compile stores one, the next takes it (the
 * file is not rewritten) and it filters as the fresh one did; a file others could
 * have written is not used but replaced by a fresh compile. */
static void test_compiled_cache(void **state) {
  (void)state;
  if (geteuid() != 0)
    skip();
  static char before[BPF_CACHE_NAMES][64];
  size_t nb = cache_names(before, BPF_CACHE_NAMES);
  assert_true(nb < BPF_CACHE_NAMES);
  uint64_t mark = 0x6b63000000000000ull | (uint64_t)getpid(); /* a key no other run has */
  char text[256];
  snprintf(text, sizeof text,
           "default allow\nerrno EAFNOSUPPORT socket arg0 != AF_UNIX\n"
           "errno EPERM unshare arg0 & CLONE_NEWUSER\nerrno EPERM getpriority arg1 == %llu\n",
           (unsigned long long)mark);
  kc_policy *p = from_text(text);
  kc_error err = {0};
  kc_seccomp_prog *fresh = NULL, *cached = NULL, *again = NULL;
  if (kc_seccomp_prog_compile(p, HANDOFF_FD, &fresh, &err) < 0)
    fail_msg("%s", err.msg);
  char path[160];
  assert_true(find_new_entry(before, nb, mark, path, sizeof path));
  struct stat st1, st2, st3;
  assert_int_equal(stat(path, &st1), 0);
  assert_int_equal(st1.st_mode & 0777, 0600);
  assert_int_equal(st1.st_uid, 0);

  if (kc_seccomp_prog_compile(p, HANDOFF_FD, &cached, &err) < 0)
    fail_msg("%s", err.msg);
  assert_int_equal(stat(path, &st2), 0);
  assert_int_equal(st2.st_ino, st1.st_ino); /* taken, not compiled and stored again */
  assert_int_equal(kc_seccomp_prog_len(cached), kc_seccomp_prog_len(fresh));
  g_prog = cached;
  outcome o;
  run(p, child_errno, NULL, NULL, &o);
  g_prog = NULL;
  assert_true(WIFEXITED(o.status));
  assert_int_equal(WEXITSTATUS(o.status), 0);

  assert_int_equal(chmod(path, 0644), 0);
  if (kc_seccomp_prog_compile(p, HANDOFF_FD, &again, &err) < 0)
    fail_msg("%s", err.msg);
  assert_int_equal(stat(path, &st3), 0);
  assert_true(st3.st_ino != st1.st_ino);
  assert_int_equal(st3.st_mode & 0777, 0600);
  assert_int_equal(kc_seccomp_prog_len(again), kc_seccomp_prog_len(fresh));
  unlink(path);
  kc_seccomp_prog_free(fresh);
  kc_seccomp_prog_free(cached);
  kc_seccomp_prog_free(again);
  kc_policy_free(p);
}

static void test_plain_install_under_measure(void **state) {
  (void)state;
  g_plain = true;
  outcome o;
  measure("ok", &o);
  assert_string_equal(o.violation, "");
  assert_true(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
  expect_violation("socket", "socket", 1);
  g_plain = false;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errno_rules_and_conditions),
      cmocka_unit_test(test_kill_names_syscall),
      cmocka_unit_test(test_default_kill),
      cmocka_unit_test(test_no_listener_without_kill),
      cmocka_unit_test(test_sysinfo_view),
      cmocka_unit_test(test_closed_listener_degrades_to_enosys),
      cmocka_unit_test(test_measure_runs_a_dynamic_program),
      cmocka_unit_test(test_measure_violations),
      cmocka_unit_test(test_exec_and_build_profiles),
      cmocka_unit_test(test_foreign_abi),
      cmocka_unit_test(test_forbidden_lists),
      cmocka_unit_test(test_precompiled),
      cmocka_unit_test(test_compiled_cache),
      cmocka_unit_test(test_plain_install_under_measure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
