/* Real workers in real sandboxes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kcage/pool.h"
#include "kcage/worker.h"

#define H(sym) KC_TEST_HANDLERS ":" sym

/* Deadlines, not speeds: a call's timeout must end it on the parent's deadline (never
 * before, and long before anything but the parent's clock could have ended it), and a
 * death must be noticed long before the call's own deadline.  How close to the deadline
 * is `make bench`'s business (bench_worker); a loaded 2-vCPU machine can stall either
 * side for a good part of a second. */
#define KC_DEADLINE_SLACK_S 2.0

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KC_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KC_TEST_ASAN)
#define KC_TEST_ASAN 1
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* the handlers' directory, visible inside the sandbox's read-only root */
static kc_mount g_handlers_dir;

static void opts_init(kc_worker_opts *o) {
  kc_worker_opts_init(o);
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s", KC_TEST_HANDLERS);
  *strrchr(dir, '/') = 0;
  g_handlers_dir = (kc_mount){.kind = KC_MOUNT_RO_BIND, .src = dir, .dst = dir};
  o->mounts = &g_handlers_dir;
  o->n_mounts = 1;
}

static kc_worker *new_worker(kc_isolation iso, uint32_t max_uses) {
  kc_worker_opts o;
  opts_init(&o);
  o.isolation = iso;
  o.maximum_uses = max_uses;
  o.limits.memory_bytes = 64u << 20;
  kc_worker *w = NULL;
  kc_error err = {0};
  int rc = kc_worker_new(&o, &w, &err);
  if (rc < 0)
    fail_msg("kc_worker_new: %s", err.msg);
  return w;
}

static void call(kc_worker *w, const char *fn, const void *arg, size_t len, double timeout,
                 kc_call_result *res) {
  kc_error err = {0};
  if (kc_worker_send(w, fn, arg, len, timeout, &err) < 0)
    fail_msg("send %s: %s", fn, err.msg);
  if (kc_worker_recv(w, res, &err) < 0)
    fail_msg("recv %s: %s", fn, err.msg);
}

static void test_echo_roundtrip(void **state) {
  (void)state;
  kc_isolation modes[] = {KC_ISOLATION_SANDBOX, KC_ISOLATION_NONE};
  for (int m = 0; m < 2; m++) {
    kc_worker *w = new_worker(modes[m], 0);
    for (int i = 0; i < 100; i++) {
      char buf[64];
      int n = snprintf(buf, sizeof buf, "hello %d", i);
      kc_call_result r;
      call(w, "echo", buf, (size_t)n, 5, &r);
      assert_int_equal(r.status, KC_CALL_COMPLETE);
      assert_int_equal(r.value_len, n);
      assert_memory_equal(r.value, buf, (size_t)n);
      kc_call_result_clear(&r);
    }
    /* an empty argument and a large one */
    kc_call_result r;
    call(w, "echo", NULL, 0, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(r.value_len, 0);
    kc_call_result_clear(&r);
    size_t big = 512 * 1024;
    char *b = malloc(big);
    for (size_t i = 0; i < big; i++)
      b[i] = (char)(i * 7);
    call(w, "echo", b, big, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(r.value_len, big);
    assert_memory_equal(r.value, b, big);
    kc_call_result_clear(&r);
    free(b);
    assert_true(kc_worker_is_alive(w));
    kc_worker_free(w);
  }
}

/* What the kernel says about a live worker: a host uid of its own, no capabilities,
 * no_new_privs, seccomp filter mode, own user and pid namespaces. */
static void proc_field(pid_t pid, const char *key, char *out, size_t cap) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  out[0] = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':') {
      snprintf(out, cap, "%s", line + strlen(key) + 1);
      out[strcspn(out, "\n")] = 0;
      break;
    }
  fclose(f);
}

static bool same_ns(pid_t pid, const char *ns) {
  char a[64], b[64], la[128] = "", lb[128] = "";
  snprintf(a, sizeof a, "/proc/%d/ns/%s", (int)pid, ns);
  snprintf(b, sizeof b, "/proc/self/ns/%s", ns);
  assert_true(readlink(a, la, sizeof la - 1) > 0);
  assert_true(readlink(b, lb, sizeof lb - 1) > 0);
  return !strcmp(la, lb);
}

static void test_lockdown(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, "echo", "x", 1, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  pid_t pid = kc_worker_pid(w);
  char v[128];
  /* The pool's own host ids: one id in all four places, never root, never nobody
   * (shared with host daemons), from the reserved range when we are root. */
  static const char *const idf[] = {"Uid", "Gid"};
  for (int k = 0; k < 2; k++) {
    proc_field(pid, idf[k], v, sizeof v);
    unsigned long a, b, c, d;
    assert_int_equal(sscanf(v, "%lu %lu %lu %lu", &a, &b, &c, &d), 4);
    assert_true(a == b && b == c && c == d);
    assert_true(a != 0 && a != 65534);
    if (geteuid() == 0)
      assert_true(a >= KC_SANDBOX_IDS_BASE && a < KC_SANDBOX_IDS_BASE + KC_SANDBOX_IDS_COUNT);
  }
  proc_field(pid, "Groups", v, sizeof v);
  assert_true(v[strspn(v, " \t")] == 0); /* no supplementary groups */
  proc_field(pid, "CapEff", v, sizeof v);
  assert_string_equal(v, "\t0000000000000000");
  proc_field(pid, "CapBnd", v, sizeof v);
  assert_string_equal(v, "\t0000000000000000");
  proc_field(pid, "NoNewPrivs", v, sizeof v);
  assert_string_equal(v, "\t1");
  proc_field(pid, "Seccomp", v, sizeof v);
  assert_string_equal(v, "\t2");
  proc_field(pid, "NSpid", v, sizeof v); /* host pid, then 1 in its own namespace */
  assert_non_null(strstr(v, "\t1"));
  /* its root: the sandbox's read-only file system, not ours */
  char path[4200];
  snprintf(path, sizeof path, "/proc/%d/root/etc/passwd", (int)pid);
  assert_true(access(path, F_OK) < 0);
  snprintf(path, sizeof path, "/proc/%d/root/usr/bin", (int)pid);
  assert_int_equal(access(path, F_OK), 0);
  struct statvfs sv;
  assert_int_equal(statvfs(path, &sv), 0);
  assert_true(sv.f_flag & ST_RDONLY);
  snprintf(path, sizeof path, "/proc/%d/root%s", (int)pid, g_handlers_dir.src);
  assert_int_equal(access(path, F_OK), 0); /* the one extra bind */
  snprintf(path, sizeof path, "/proc/%d/root%s/CMakeCache.txt", (int)pid, KC_BUILD_DIR);
  assert_true(access(path, F_OK) < 0);
  const char *own[] = {"user", "pid", "mnt", "net", "ipc", "uts"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (same_ns(pid, own[i]))
      fail_msg("worker shares our %s namespace", own[i]);
  /* its network: loopback up, nothing else; one namespace for all our pools */
  snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
  pid_t c = fork();
  if (c == 0) {
    int nfd = open(path, O_RDONLY);
    if (nfd < 0 || setns(nfd, CLONE_NEWNET) < 0)
      _exit(2);
    int sk = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, "lo");
    if (sk < 0 || ioctl(sk, SIOCGIFFLAGS, &ifr) < 0 || !(ifr.ifr_flags & IFF_UP))
      _exit(3);
    _exit(if_nametoindex("eth0") ? 4 : 0);
  }
  int st;
  waitpid(c, &st, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  kc_worker *w2 = new_worker(KC_ISOLATION_SANDBOX, 0);
  call(w2, "echo", "x", 1, 5, &r);
  kc_call_result_clear(&r);
  char l1[128] = "", l2[128] = "", p2[64];
  snprintf(p2, sizeof p2, "/proc/%d/ns/net", (int)kc_worker_pid(w2));
  assert_true(readlink(path, l1, sizeof l1 - 1) > 0);
  assert_true(readlink(p2, l2, sizeof l2 - 1) > 0);
  assert_string_equal(l1, l2);
  kc_worker_free(w2);
  kc_worker_free(w);
}

static void test_exec_handler(void **state) {
  (void)state;
  kc_worker_opts o;
  opts_init(&o);
  o.policy = "exec"; /* measure forbids fork and exec */
  kc_worker *w;
  kc_error err = {0};
  assert_int_equal(kc_worker_new(&o, &w, &err), 0);
  const struct {
    const char *argv;
    size_t len;
    int status;
  } cases[] = {{"/bin/true", sizeof "/bin/true", 0},
               {"sh\0-c\0exit 3", sizeof "sh\0-c\0exit 3", 3 << 8},
               {"/nonexistent", sizeof "/nonexistent", 127 << 8}};
  for (size_t i = 0; i < 3; i++) {
    kc_call_result r;
    call(w, "exec", cases[i].argv, cases[i].len, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(r.value_len, 4);
    int32_t st;
    memcpy(&st, r.value, 4);
    assert_int_equal(st, cases[i].status);
    kc_call_result_clear(&r);
  }
  kc_worker_free(w);
  /* stdout into a pipe of ours (KC_STDIO_FD); stderr discarded */
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  o.stdout_ = (kc_stdio){KC_STDIO_FD, pfd[1]};
  o.stderr_ = (kc_stdio){KC_STDIO_DISCARD, -1};
  assert_int_equal(kc_worker_new(&o, &w, &err), 0);
  kc_call_result r0;
  static const char shout[] = "sh\0-c\0echo out; echo err >&2";
  call(w, "exec", shout, sizeof shout, 5, &r0);
  assert_int_equal(r0.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r0);
  kc_worker_free(w);
  close(pfd[1]);
  char buf[64] = "";
  assert_int_equal(read(pfd[0], buf, sizeof buf - 1), 4);
  assert_string_equal(buf, "out\n");
  close(pfd[0]);
  /* under measure the same call is a violation, named */
  kc_worker *m = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(m, "exec", "/bin/true", 10, 5, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  assert_int_equal(r.verdict.status, KC_STATUS_SYSCALL);
  print_message("exec under measure: %s\n", r.message);
  kc_worker_free(m);
}

static void test_pipelined_fifo(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_error err = {0};
  for (int i = 0; i < 10; i++)
    assert_int_equal(kc_worker_send(w, "echo", &i, sizeof i, 5, &err), 0);
  for (int i = 0; i < 10; i++) {
    kc_call_result r;
    assert_int_equal(kc_worker_recv(w, &r, &err), 0);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(*(int *)r.value, i);
    kc_call_result_clear(&r);
  }
  kc_call_result r;
  assert_int_equal(kc_worker_recv(w, &r, &err), -1); /* nothing outstanding */
  kc_worker_free(w);
}

static void test_exception_message(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("raise_value_error"), "42", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_EXCEPTION);
  assert_string_equal(r.message, "ValueError: bad input 42");
  pid_t pid = r.pid;
  /* the worker survives an exception */
  call(w, "echo", "x", 1, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  assert_int_equal(r.pid, pid);
  kc_call_result_clear(&r);
  call(w, "no_such_builtin", "x", 1, 5, &r);
  assert_int_equal(r.status, KC_CALL_EXCEPTION);
  assert_non_null(strstr(r.message, "unknown handler"));
  call(w, "/nonexistent/lib.so:sym", "x", 1, 5, &r);
  assert_int_equal(r.status, KC_CALL_EXCEPTION);
  assert_non_null(strstr(r.message, "dlopen"));
  kc_worker_free(w);
}

/* The three ways a call hangs: all must end on the parent's deadline. */
/* SIGSTOP is asynchronous: until the kernel says the worker is stopped, it may still
 * take the next request and answer it.  Waits for state T (5 s at most). */
static void stop_and_wait(pid_t pid) {
  assert_int_equal(kill(pid, SIGSTOP), 0);
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  for (double until = now_s() + 5; now_s() < until; sched_yield()) {
    FILE *f = fopen(path, "re");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (p && (p[2] == 'T' || p[2] == 't'))
      return;
  }
  fail_msg("worker %d did not stop within 5 s", (int)pid);
}

static double timeout_late(kc_worker *w, const char *fn, bool stop_first) {
  double timeout = 0.1, best = 1e9;
  for (int attempt = 0; attempt < 3; attempt++) {
    kc_call_result r;
    /* a live worker first: the deadline counts from the send, a spawn would be in it */
    call(w, "echo", "", 0, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    if (stop_first)
      stop_and_wait(kc_worker_pid(w));
    pid_t old = kc_worker_pid(w);
    double t0 = now_s();
    call(w, fn, "", 0, timeout, &r);
    double late = now_s() - t0 - timeout;
    assert_int_equal(r.status, KC_CALL_TIMEOUT);
    assert_int_equal(r.verdict.status, KC_STATUS_TIMEOUT);
    assert_int_equal(r.pid, old);
    assert_true(late >= -0.0005);
    /* killed (a replacement may already be starting) */
    assert_int_not_equal(kc_worker_pid(w), old);
    assert_true(kill(old, 0) < 0 || waitpid(old, NULL, WNOHANG) >= 0);
    assert_true(late < KC_DEADLINE_SLACK_S);
    if (late < best)
      best = late;
  }
  /* the next call gets a fresh worker */
  kc_call_result r;
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  return best;
}

static void test_timeouts(void **state) {
  (void)state;
  kc_worker_opts o;
  opts_init(&o);
  o.limits.pids = 1; /* as kcage bench runs them: the replacement must still start */
  kc_worker *w;
  kc_error err = {0};
  assert_int_equal(kc_worker_new(&o, &w, &err), 0);
  double a = timeout_late(w, H("busy_loop"), false);
  double b = timeout_late(w, H("sleeper"), false);
  double c = timeout_late(w, "echo", true);
  print_message("timeout overshoot: busy %.2f ms, sleeper %.2f ms, SIGSTOP %.2f ms\n", a * 1e3,
                b * 1e3, c * 1e3);
  kc_worker_free(w);
}

/* kc_worker_recv_asleep: the measure parent's wait on the worker's own CPU.  It keeps
 * recv_timed's contract (-1 with nothing outstanding, 0 while the call runs, 1 with its
 * answer or its timeout) and never spins: both pinned to one CPU, the parent uses almost
 * none of it while a busy call runs there, and an answer still wakes it at once. */
static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_recv_asleep(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  kc_error err = {0};
  assert_int_equal(kc_worker_recv_asleep(w, &r, 0.01, &err), -1); /* nothing outstanding */
  call(w, "echo", "", 0, 5, &r);                                  /* a live worker */
  cpu_set_t home, one;
  assert_int_equal(sched_getaffinity(0, sizeof home, &home), 0);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  assert_int_equal(sched_setaffinity(kc_worker_pid(w), sizeof one, &one), 0);
  assert_int_equal(kc_worker_send(w, "echo", "hi", 2, 5, &err), 0);
  assert_int_equal(kc_worker_recv_asleep(w, &r, 5, &err), 1);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  assert_int_equal(r.value_len, 2);
  assert_memory_equal(r.value, "hi", 2);
  kc_call_result_clear(&r);
  assert_int_equal(kc_worker_send(w, H("busy_loop"), "", 0, 0.5, &err), 0);
  double cpu0 = thread_cpu_s(), t0 = now_s();
  assert_int_equal(kc_worker_recv_asleep(w, &r, 0.2, &err), 0); /* still running */
  double used = thread_cpu_s() - cpu0, waited = now_s() - t0;
  int got;
  while ((got = kc_worker_recv_asleep(w, &r, 0.1, &err)) == 0)
    ;
  sched_setaffinity(0, sizeof home, &home);
  assert_int_equal(got, 1);
  assert_int_equal(r.status, KC_CALL_TIMEOUT);
  kc_call_result_clear(&r);
  print_message("asleep on the worker's CPU: %.2f ms of CPU in a %.0f ms wait\n", used * 1e3,
                waited * 1e3);
  assert_true(waited >= 0.19);
  assert_true(used < 0.05 * waited); /* asleep, not spinning or yielding */
  kc_worker_free(w);
}

/* Death is noticed through the pidfd at once, not at the call's deadline.  Measured
 * from the moment the worker is dead (its pidfd readable, seen by a thread of ours)
 * to the moment recv returns: the kernel's own exit work is not ours to count. */
struct death_watch {
  int pidfd;
  double dead_at;
};

static void *watch_death(void *arg) {
  struct death_watch *d = arg;
  struct pollfd p = {.fd = d->pidfd, .events = POLLIN};
  while (poll(&p, 1, -1) < 0 && errno == EINTR)
    ;
  d->dead_at = now_s();
  return NULL;
}

static void test_death_noticed(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  double best = 1e9;
  for (int attempt = 0; attempt < 3; attempt++) {
    kc_call_result r;
    call(w, "echo", "", 0, 5, &r); /* a live worker */
    kc_error err = {0};
    assert_int_equal(kc_worker_send(w, H("sleeper"), "", 0, 10, &err), 0);
    usleep(2000); /* let it reach the handler, with the parent asleep in ppoll */
    struct death_watch d = {.pidfd = (int)syscall(SYS_pidfd_open, kc_worker_pid(w), 0)};
    assert_true(d.pidfd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, watch_death, &d), 0);
    kill(kc_worker_pid(w), SIGKILL);
    assert_int_equal(kc_worker_recv(w, &r, &err), 0);
    double t_recv = now_s();
    pthread_join(t, NULL);
    close(d.pidfd);
    assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
    assert_int_equal(r.verdict.status, KC_STATUS_SIGNALED);
    assert_int_equal(r.verdict.signal, SIGKILL);
    double dt = t_recv - d.dead_at;
    if (dt < best)
      best = dt;
  }
  print_message("death noticed %.3f ms after it happened\n", best * 1e3);
  /* the call's own deadline is 10 s: noticing the death means returning long before */
  assert_true(best < KC_DEADLINE_SLACK_S);
  kc_worker_free(w);
}

/* Killed between calls: the next call gets a new worker and completes. */
static void test_death_between_calls(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, "echo", "x", 1, 5, &r);
  kc_call_result_clear(&r);
  pid_t old = kc_worker_pid(w);
  int pfd = (int)syscall(SYS_pidfd_open, old, 0);
  assert_true(pfd >= 0);
  kill(old, SIGKILL);
  /* "Between calls" means the death is complete before the next send; a loaded machine
   * (the ASan run) can take milliseconds to tear the process down, so wait for it rather
   * than guess a sleep.  Then be idle past the worker's 1 ms check threshold. */
  struct pollfd p = {.fd = pfd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 5000), 1);
  close(pfd);
  usleep(2000);
  call(w, "echo", "y", 1, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  assert_int_not_equal(r.pid, old);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

static void test_segfault(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("segfault"), "", 0, 5, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  assert_int_equal(r.verdict.status, KC_STATUS_SIGNALED);
  assert_int_equal(r.verdict.signal, SIGSEGV);
  assert_non_null(strstr(r.message, "signal 11"));
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  /* pipelined: the call before the crash keeps its result, the one after is replaced */
  kc_error err = {0};
  for (int i = 0; i < 20; i++) {
    assert_int_equal(kc_worker_send(w, "echo", "a", 1, 5, &err), 0);
    assert_int_equal(kc_worker_send(w, H("segfault"), "", 0, 5, &err), 0);
    assert_int_equal(kc_worker_send(w, "echo", "c", 1, 5, &err), 0);
    assert_int_equal(kc_worker_recv(w, &r, &err), 0);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_memory_equal(r.value, "a", 1);
    kc_call_result_clear(&r);
    assert_int_equal(kc_worker_recv(w, &r, &err), 0);
    assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
    assert_int_equal(r.verdict.signal, SIGSEGV);
    assert_int_equal(kc_worker_recv(w, &r, &err), 0);
    assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
    assert_non_null(strstr(r.message, "replaced"));
  }
  kc_worker_free(w);
}

#include "kcage/cgroup.h"
/* OOM verdicts need a memory controller (v1 here; v2 in the qemu guest). */
static bool have_memory_cgroup(void) {
  kc_cgroup_mode m = kc_cgroup_detect();
  return m != KC_CGROUP_NONE && (access("/sys/fs/cgroup/memory", F_OK) == 0 ||
                                 access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0);
}

static void test_oom(void **state) {
  (void)state;
  if (!have_memory_cgroup())
    skip();
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("hog_memory"), "", 0, 20, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  print_message("oom verdict: %s\n", r.message);
  assert_int_equal(r.verdict.status, KC_STATUS_MEMORY);
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

static void test_seccomp_seal(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("seal_then_exec_map"), "", 0, 5, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  print_message("seal verdict: %s\n", r.message);
  assert_int_equal(r.verdict.status, KC_STATUS_SYSCALL);
  assert_non_null(strstr(r.verdict.syscall, "mmap"));
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

/* Thread creation after the seal is a violation of the base policy, named by the
 * parent from the seccomp listener (clone3, or clone where glibc falls back). */
static void test_seccomp_seal_thread_named(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("seal_then_thread"), "", 0, 5, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  print_message("seal+thread verdict: %s\n", r.message);
  assert_int_equal(r.verdict.status, KC_STATUS_SYSCALL);
  assert_non_null(strstr(r.verdict.syscall, "clone"));
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

/* A file-backed PROT_EXEC mapping is allowed by `measure` before the seal and is the
 * seal filter's own rule after it. */
static void test_seccomp_seal_file_exec_map(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("seal_then_file_exec_map"), "", 0, 5, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  print_message("seal+file exec map verdict: %s\n", r.message);
  assert_int_equal(r.verdict.status, KC_STATUS_SYSCALL);
  assert_non_null(strstr(r.verdict.syscall, "mmap"));
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

static void test_maximum_uses(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 2);
  pid_t p[6];
  for (int i = 0; i < 6; i++) {
    kc_call_result r;
    call(w, "echo", "x", 1, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    kc_call_result_clear(&r);
    p[i] = r.pid;
  }
  assert_int_equal(p[0], p[1]);
  assert_int_equal(p[2], p[3]);
  assert_int_equal(p[4], p[5]);
  assert_int_not_equal(p[0], p[2]);
  assert_int_not_equal(p[2], p[4]);
  kc_worker_free(w);
}

/* maximum_uses in a pool with calls in flight: still N calls per process */
static void test_pool_maximum_uses(void **state) {
  (void)state;
  kc_pool_opts o;
  kc_pool_opts_init(&o);
  opts_init(&o.worker);
  o.max_workers = 2;
  o.timeout_s = 5;
  o.worker.maximum_uses = 3;
  kc_pool *p;
  kc_error err = {0};
  assert_int_equal(kc_pool_new(&o, &p, &err), 0);
  enum { N = 30 };
  kc_blob args[N];
  for (int i = 0; i < N; i++)
    args[i] = (kc_blob){"e", 1};
  kc_call_result res[N];
  assert_int_equal(kc_pool_map_with_error_catching(p, "echo", args, N, res, &err), 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(res[i].status, KC_CALL_COMPLETE);
    int same = 0;
    for (int k = 0; k < N; k++)
      same += res[k].pid == res[i].pid;
    assert_true(same <= 3);
    kc_call_result_clear(&res[i]);
  }
  kc_pool_shutdown(p, true);
}

/* A pool of two workers with a 30 s call limit, as the map tests use. */
static kc_pool *pool_of_two(void) {
  kc_pool_opts o;
  kc_pool_opts_init(&o);
  opts_init(&o.worker);
  o.max_workers = 2;
  o.timeout_s = 30;
  kc_pool *p;
  kc_error err = {0};
  assert_int_equal(kc_pool_new(&o, &p, &err), 0);
  return p;
}

/* A map far longer than the pool's in-flight window: every call runs once, and each
 * result lands at its own index (the window streams; it never reorders or drops). */
static void test_pool_map_streams(void **state) {
  (void)state;
  kc_pool *p = pool_of_two();
  kc_error err = {0};
  enum { N = 20000 };
  kc_blob *args = calloc(N, sizeof *args);
  uint32_t *vals = calloc(N, sizeof *vals);
  kc_call_result *res = calloc(N, sizeof *res);
  assert_true(args && vals && res);
  for (uint32_t i = 0; i < N; i++) {
    vals[i] = i * 2654435761u;
    args[i] = (kc_blob){&vals[i], sizeof vals[i]};
  }
  assert_int_equal(kc_pool_map_with_error_catching(p, "echo", args, N, res, &err), 0);
  for (uint32_t i = 0; i < N; i++) {
    if (res[i].status != KC_CALL_COMPLETE || res[i].value_len != sizeof vals[i] ||
        memcmp(res[i].value, &vals[i], sizeof vals[i]))
      fail_msg("result %u: status %d, %zu bytes", i, res[i].status, res[i].value_len);
    kc_call_result_clear(&res[i]);
  }
  kc_pool_shutdown(p, true);
  free(args);
  free(vals);
  free(res);
}

static long minor_faults_self(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* minflt of one process (field 10 of /proc/PID/stat), -1 when it is gone */
static long minor_faults_of(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *q = strrchr(buf, ')'); /* the command name may hold spaces */
  long flt = -1;
  if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %ld", &flt) != 1)
    return -1;
  return flt;
}

/* A map streams through a bounded window: once the caller's result array is in
 * memory, a map touches no new memory per call on either side, however long it is
 * (the parent reuses its window of futures, the workers their rings).  What may grow
 * is the results' own values, held until the caller clears them: a 32-byte chunk per
 * 4-byte echo, under a hundredth of a page per call the first time a map is longer
 * than any before it.  A future kept per call would fault in a third of a page per
 * call there, and again whenever the allocator gave the memory back.  Page faults are
 * counted by the kernel, so the bound holds however loaded the machine is. */
static void test_pool_map_no_fault_per_call(void **state) {
  (void)state;
  kc_pool *p = pool_of_two();
  kc_error err = {0};
  enum { N = 8000, MAPS = 3 };
  kc_blob *args = calloc(N, sizeof *args);
  kc_call_result *res = calloc(N, sizeof *res);
  assert_true(args && res);
  uint32_t v = 7;
  for (size_t i = 0; i < N; i++) {
    args[i] = (kc_blob){&v, sizeof v};
    kc_call_result_init(&res[i]); /* the caller's array: faulted in here, not by map */
  }
  /* warm: workers started, and a map a quarter as long as the ones measured */
  assert_int_equal(kc_pool_map_with_error_catching(p, "echo", args, N / 4, res, &err), 0);
  for (size_t i = 0; i < N / 4; i++)
    kc_call_result_clear(&res[i]);
  pid_t pids[2] = {kc_pool_worker_pid(p, 0), kc_pool_worker_pid(p, 1)};
  long self0 = minor_faults_self(), w0 = minor_faults_of(pids[0]) + minor_faults_of(pids[1]);
  for (int m = 0; m < MAPS; m++) {
    assert_int_equal(kc_pool_map_with_error_catching(p, "echo", args, N, res, &err), 0);
    for (size_t i = 0; i < N; i++) {
      if (res[i].status != KC_CALL_COMPLETE || res[i].value_len != sizeof v ||
          memcmp(res[i].value, &v, sizeof v))
        fail_msg("map %d, result %zu: status %d", m, i, res[i].status);
      kc_call_result_clear(&res[i]);
    }
  }
  long self = minor_faults_self() - self0;
  long w = minor_faults_of(pids[0]) + minor_faults_of(pids[1]) - w0;
  print_message("%d mapped calls: %ld minor faults in the parent, %ld in the workers\n", MAPS * N,
                self, w);
#if defined(KC_TEST_ASAN)
  /* ASan's quarantine hands out fresh memory for every future on purpose: the
   * parent's count says nothing there */
#else
  assert_true(self < MAPS * N / 100);
#endif
  assert_int_equal(kc_pool_worker_pid(p, 0), pids[0]); /* no worker was replaced */
  assert_int_equal(kc_pool_worker_pid(p, 1), pids[1]);
  assert_true(w >= 0 && w < MAPS * N / 100);
  kc_pool_shutdown(p, true);
  free(args);
  free(res);
}

static void test_corrupt_ring(void **state) {
  (void)state;
  const char *bad[] = {H("corrupt_tail"), H("forge_completion")};
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  for (int i = 0; i < 2; i++) {
    kc_call_result r;
    call(w, bad[i], "", 0, 5, &r);
    assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
    print_message("corrupt verdict: %s\n", r.message);
    assert_non_null(strstr(r.message, "corrupted its ring"));
    call(w, "echo", "ok", 2, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_memory_equal(r.value, "ok", 2);
    kc_call_result_clear(&r);
  }
  kc_worker_free(w);
}

/* The parent's nap is woken by the worker, which may wake it for nothing, as often as it
 * likes, and forge the flag that says how the parent sleeps: the call still ends with
 * its own answer, and so does the next. */
static void test_spurious_wakes(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  for (int i = 0; i < 2; i++) {
    kc_call_result r;
    call(w, H("spurious_wakes"), "", 0, 30, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(r.value_len, 2);
    assert_memory_equal(r.value, "ok", 2);
    kc_call_result_clear(&r);
    call(w, "echo", "next", 4, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_memory_equal(r.value, "next", 4);
    kc_call_result_clear(&r);
  }
  kc_worker_free(w);
}

/* The death notice (ring.h) is the worker's to forge or withdraw: a false one costs the
 * call nothing, and a withdrawn one still lets the death be seen. */
static void test_death_notice_hostile(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, H("forge_death"), "", 0, 30, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  assert_memory_equal(r.value, "ok", 2);
  kc_call_result_clear(&r);
  kc_error err = {0};
  assert_int_equal(kc_worker_send(w, H("hide_death"), "", 0, 30, &err), 0);
  usleep(20000); /* it has withdrawn the notice and waits */
  kill(kc_worker_pid(w), SIGKILL);
  assert_int_equal(kc_worker_recv(w, &r, &err), 0);
  print_message("killed with its death notice withdrawn: %s\n", r.message);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  assert_int_equal(r.verdict.status, KC_STATUS_SIGNALED);
  assert_int_equal(r.verdict.signal, SIGKILL);
  call(w, "echo", "next", 4, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

static void test_initializer(void **state) {
  (void)state;
  kc_worker_opts o;
  opts_init(&o);
  o.initializer = H("init_counter");
  int start = 41;
  o.initargs = &start;
  o.initargs_len = sizeof start;
  o.maximum_uses = 2;
  kc_worker *w;
  kc_error err = {0};
  assert_int_equal(kc_worker_new(&o, &w, &err), 0);
  int expect[] = {42, 43, 42, 43};
  for (int i = 0; i < 4; i++) {
    kc_call_result r;
    call(w, H("count_calls"), "", 0, 5, &r);
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(*(int *)r.value, expect[i]);
    kc_call_result_clear(&r);
  }
  kc_worker_free(w);
  o.initargs = "fail";
  o.initargs_len = 4;
  assert_int_equal(kc_worker_new(&o, &w, &err), 0);
  assert_int_equal(kc_worker_send(w, "echo", "", 0, 5, &err), -1);
  assert_non_null(strstr(err.msg, "RuntimeError: init refused"));
  kc_worker_free(w);
}

static int count_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  while (d && readdir(d))
    n++;
  if (d)
    closedir(d);
  return n;
}

static long rss_kb(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
    rss = 0;
  if (f)
    fclose(f);
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_many_calls_flat(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0);
  kc_call_result r;
  call(w, "echo", "warm", 4, 5, &r);
  kc_call_result_clear(&r);
  for (int i = 0; i < 1000; i++) {
    call(w, "echo", &i, sizeof i, 5, &r);
    kc_call_result_clear(&r);
  }
  int fd0 = count_fds();
  long rss0 = rss_kb();
  for (int i = 0; i < 100000; i++) {
    call(w, "echo", &i, sizeof i, 5, &r);
    if (r.status != KC_CALL_COMPLETE || *(int *)r.value != i)
      fail_msg("call %d: %s", i, r.message);
    kc_call_result_clear(&r);
    /* every 10 000 calls, recycle too: restarts must not leak either */
    if (i % 10000 == 5000)
      kc_worker_kill(w);
  }
  int fd1 = count_fds();
  long rss1 = rss_kb();
  print_message("fds %d -> %d, rss %ld -> %ld KiB\n", fd0, fd1, rss0, rss1);
  assert_int_equal(fd0, fd1);
#if defined(KC_TEST_ASAN)
  /* ASan's quarantine holds freed memory back on purpose: RSS says nothing there (the
   * leak checker covers that build instead) */
#else
  assert_true(rss1 - rss0 < 2048);
#endif
  kc_worker_free(w);
}

/* SIGKILL a parent that holds a pool: every kcage process must die with it. */
static bool pid_dead(pid_t p) {
  char path[64], st = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
  FILE *f = fopen(path, "r");
  if (!f)
    return true;
  int rc = fscanf(f, "%*d %*s %c", &st);
  fclose(f);
  return rc == 1 && (st == 'Z' || st == 'X');
}

/* kcage cgroup leaves are named <pidns>.<owner pid>.<starttime>.<seq>.<name> (cgroup.h). */
static int cgroups_owned_by(pid_t owner) {
  glob_t g;
  int n = 0;
  if (glob("/sys/fs/cgroup/{kcage,*/kcage}/*", GLOB_BRACE | GLOB_ONLYDIR, NULL, &g) != 0)
    return 0;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    const char *leaf = strrchr(g.gl_pathv[i], '/') + 1;
    unsigned long ns;
    int pid;
    if (sscanf(leaf, "%lu.%d.", &ns, &pid) == 2 && pid == owner)
      n++;
  }
  globfree(&g);
  return n;
}

static void test_parent_sigkill(void **state) {
  (void)state;
  /* orphans come to us, so they can be reaped and counted */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  pid_t parent = fork();
  assert_true(parent >= 0);
  if (parent == 0) {
    close(pfd[0]);
    kc_pool_opts o;
    kc_pool_opts_init(&o);
    o.max_workers = 2;
    kc_pool *p;
    kc_error err = {0};
    if (kc_pool_new(&o, &p, &err) < 0)
      _exit(1);
    kc_blob args[2] = {{"a", 1}, {"b", 1}};
    kc_call_result res[2];
    if (kc_pool_map_with_error_catching(p, "echo", args, 2, res, &err) < 0)
      _exit(1);
    pid_t pids[3] = {kc_pool_worker_pid(p, 0), kc_pool_worker_pid(p, 1), 0};
    if (write(pfd[1], pids, sizeof pids) != sizeof pids)
      _exit(1);
    for (;;)
      pause();
  }
  close(pfd[1]);
  pid_t pids[3];
  assert_int_equal(read(pfd[0], pids, sizeof pids), sizeof pids);
  close(pfd[0]);
  assert_true(pids[0] > 0 && pids[1] > 0);
  /* the zygote is the parent's other child: find it */
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)parent, (int)parent);
  FILE *f = fopen(path, "r");
  pid_t kids[16];
  int nk = 0;
  while (f && nk < 16 && fscanf(f, "%d", &kids[nk]) == 1)
    nk++;
  if (f)
    fclose(f);
  assert_true(nk >= 3); /* zygote + 2 workers (CLONE_PARENT) */
  kill(parent, SIGKILL);
  waitpid(parent, NULL, 0);
  double t0 = now_s();
  bool all = false;
  while (!all && now_s() - t0 < 10) {
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
    all = true;
    for (int i = 0; i < nk; i++)
      all = all && pid_dead(kids[i]);
    usleep(1000);
  }
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
  assert_true(all);
  /* The next start reaps what the SIGKILLed parent left behind: its slot cgroups. */
  kc_error err = {0};
  assert_true(kc_cgroup_reap_stale(&err) >= 0); /* the number reaped */
  assert_int_equal(cgroups_owned_by(parent), 0);
}

static void test_policy_violation(void **state) {
  (void)state;
  kc_worker *w = new_worker(KC_ISOLATION_SANDBOX, 0); /* policy "measure" */
  kc_call_result r;
  call(w, H("mixed"), "n", 1, 5, &r);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  print_message("policy verdict: %s\n", r.message);
  assert_int_equal(r.verdict.status, KC_STATUS_SYSCALL);
  assert_string_equal(r.verdict.syscall, "socket");
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

/* the zygote's argv is "kcage-worker zygote ..." (workers are its forks: same argv,
 * but they are in their own pid namespace) */
static bool n_is_zygote(pid_t pid) {
  char a[64], b[64], la[128] = "", lb[128] = "";
  snprintf(a, sizeof a, "/proc/%d/ns/pid", (int)pid);
  snprintf(b, sizeof b, "/proc/self/ns/pid");
  if (readlink(a, la, sizeof la - 1) <= 0 || readlink(b, lb, sizeof lb - 1) <= 0)
    return false;
  return !strcmp(la, lb);
}

/* One result of the "mixed" handler, by the first letter of its argument. */
static void check_mixed(const char *in, kc_call_result *res) {
  switch (in[0]) {
  case 'e':
    assert_int_equal(res->status, KC_CALL_COMPLETE);
    assert_int_equal(res->value_len, strlen(in));
    assert_memory_equal(res->value, in, strlen(in));
    break;
  case 'x':
    assert_int_equal(res->status, KC_CALL_EXCEPTION);
    assert_string_equal(res->message, "KeyError: x1");
    break;
  case 'h':
    assert_int_equal(res->status, KC_CALL_TIMEOUT);
    break;
  case 's':
    assert_int_equal(res->status, KC_CALL_CHILD_ERROR);
    assert_int_equal(res->verdict.signal, SIGSEGV);
    break;
  case 'n':
    assert_int_equal(res->status, KC_CALL_CHILD_ERROR);
    assert_string_equal(res->verdict.syscall, "socket");
    break;
  }
  kc_call_result_clear(res);
}

/* futures: submit, then wait out of order */
static void futures_out_of_order(kc_pool *p) {
  kc_error err = {0};
  kc_future *f[8];
  for (int i = 0; i < 8; i++)
    assert_non_null(f[i] = kc_pool_submit(p, "echo", &i, sizeof i, &err));
  for (int i = 7; i >= 0; i--) {
    kc_call_result r;
    assert_int_equal(kc_future_wait(f[i], -1, &r), 1);
    assert_true(kc_future_done(f[i]));
    assert_int_equal(r.status, KC_CALL_COMPLETE);
    assert_int_equal(*(int *)r.value, i);
    kc_call_result_clear(&r);
    kc_future_free(f[i]);
  }
}

/* The pool's zygote: this process's kcage-worker child that is no worker. */
static pid_t find_zygote(kc_pool *p) {
  pid_t w0 = kc_pool_worker_pid(p, 0), w1 = kc_pool_worker_pid(p, 1), zyg = 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
  FILE *cf = fopen(path, "r");
  int c;
  while (cf && fscanf(cf, "%d", &c) == 1) {
    char comm[64] = "", cp[64];
    snprintf(cp, sizeof cp, "/proc/%d/cmdline", c);
    FILE *cm = fopen(cp, "r");
    if (cm) {
      size_t n = fread(comm, 1, sizeof comm - 1, cm);
      comm[n] = 0;
      fclose(cm);
    }
    if (c != w0 && c != w1 && strstr(comm, "kcage-worker") && n_is_zygote(c))
      zyg = c;
  }
  if (cf)
    fclose(cf);
  return zyg;
}

/* the zygote killed from outside: the next spawn starts a new one */
static void zygote_killed(kc_pool *p) {
  pid_t zyg = find_zygote(p);
  assert_true(zyg > 0);
  kill(zyg, SIGKILL);
  waitpid(zyg, NULL, 0);
  kc_error err = {0};
  kc_blob crash = {"s", 1}, ok = {"e-after", 7};
  kc_call_result rr;
  assert_int_equal(kc_pool_map_with_error_catching(p, H("mixed"), &crash, 1, &rr, &err), 0);
  assert_int_equal(rr.status, KC_CALL_CHILD_ERROR);
  assert_int_equal(kc_pool_map_with_error_catching(p, H("mixed"), &ok, 1, &rr, &err), 0);
  assert_int_equal(rr.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&rr);
}

static void test_pool_map(void **state) {
  (void)state;
  kc_pool_opts o;
  kc_pool_opts_init(&o);
  opts_init(&o.worker);
  o.max_workers = 2;
  o.timeout_s = 0.3;
  kc_pool *p;
  kc_error err = {0};
  assert_int_equal(kc_pool_new(&o, &p, &err), 0);
  /* every outcome, with plain calls queued behind the hang and the crash */
  const char *in[] = {"e0", "x1", "e2", "h3", "e4", "s5", "e6", "e7", "n8", "e9", "e10", "e11"};
  enum { N = sizeof in / sizeof in[0] };
  kc_blob args[N];
  for (int i = 0; i < N; i++)
    args[i] = (kc_blob){in[i], strlen(in[i])};
  kc_call_result res[N];
  assert_int_equal(kc_pool_map_with_error_catching(p, H("mixed"), args, N, res, &err), 0);
  for (int i = 0; i < N; i++)
    check_mixed(in[i], &res[i]);
  futures_out_of_order(p);
  zygote_killed(p);
  /* a future freed before it is done, and one still pending at shutdown */
  kc_future *g = kc_pool_submit(p, H("mixed"), "h", 1, &err);
  kc_future *h = kc_pool_submit(p, "echo", "x", 1, &err);
  assert_non_null(g);
  assert_non_null(h);
  kc_future_free(g);
  assert_int_equal(kc_pool_size(p), 2);
  kc_pool_shutdown(p, false);
  kc_call_result r;
  assert_int_equal(kc_future_wait(h, 0, &r), 1);
  assert_true(r.status == KC_CALL_COMPLETE || r.status == KC_CALL_CHILD_ERROR);
  kc_call_result_clear(&r);
  kc_future_free(h);
}

/* A zygote that cannot build its sandbox says why in its hello, then ends with our
 * spawn and slot requests unread (they were queued while it started): the reason must
 * reach the caller, not "not a kcage worker". */
static void test_zygote_reason_said(void **state) {
  (void)state;
  kc_worker_opts o;
  opts_init(&o);
  kc_mount m[2] = {g_handlers_dir,
                   {.kind = KC_MOUNT_RO_BIND, .src = "/nonexistent-kcage-bind", .dst = "/m"}};
  o.mounts = m;
  o.n_mounts = 2;
  for (int i = 0; i < 5; i++) {
    kc_worker *w = NULL;
    kc_error err = {0};
    if (kc_worker_new(&o, &w, &err) == 0) {
      assert_int_equal(kc_worker_send(w, "echo", "x", 1, 10, &err), -1);
      kc_worker_free(w);
    }
    print_message("zygote failure: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "/nonexistent-kcage-bind"));
    assert_null(strstr(err.msg, "not a kcage worker"));
  }
}

/* A kernel in a worker cannot read the host's command line: not through /proc/1 (the
 * worker is PID 1 of its namespace, a fork of the zygote whose argv names the host path
 * of every bind), and not in its own memory. */
static void test_proc_view(void **state) {
  (void)state;
  char dir[] = "/tmp/kcmark-procview-XXXXXX";
  assert_non_null(mkdtemp(dir));
  kc_worker_opts o;
  opts_init(&o);
  kc_mount m[2] = {g_handlers_dir, {.kind = KC_MOUNT_RO_BIND, .src = dir, .dst = "/m"}};
  o.mounts = m;
  o.n_mounts = 2;
  o.limits.memory_bytes = 64u << 20;
  kc_worker *w = NULL;
  kc_error err = {0};
  if (kc_worker_new(&o, &w, &err) < 0)
    fail_msg("kc_worker_new: %s", err.msg);
  const char *mark = dir + 5; /* "kcmark-procview-...": in no other string of the pool */
  char rev[64];
  size_t ml = strlen(mark);
  for (size_t i = 0; i < ml; i++)
    rev[i] = mark[ml - 1 - i];
  kc_call_result r;
  call(w, H("proc_view"), rev, ml, 10, &r);
  if (r.status != KC_CALL_EXCEPTION)
    fail_msg("proc_view: status %d: %s", r.status, r.message);
  print_message("proc_view: %s\n", r.message);
  assert_null(strstr(r.message, mark));
  assert_null(strstr(r.message, "--ro-bind"));
  /* no environment; the marker nowhere in memory; the scan saw the environment's
   * PATH=, so it covered the stack's strings, argv's among them */
  size_t len = strlen(r.message);
  assert_true(len >= 4 && !strcmp(r.message + len - 4, "|0|1"));
  assert_non_null(strstr(r.message, "||0|1"));
  kc_call_result_clear(&r);
  kc_worker_free(w);
  rmdir(dir);
}

/* A sandboxed worker under this policy (64 MiB). */
static kc_worker *policy_worker(const char *policy) {
  kc_worker_opts o;
  opts_init(&o);
  o.policy = policy;
  o.limits.memory_bytes = 64u << 20;
  kc_worker *w = NULL;
  kc_error err = {0};
  if (kc_worker_new(&o, &w, &err) < 0)
    fail_msg("kc_worker_new (%s): %s", policy, err.msg);
  return w;
}

/* sysinfo(2) and the boot clock in a worker are the pool's, not the host's: its clock
 * starts with the pool (a time namespace), and sysinfo answers no load, one process,
 * nothing used by others, and fails on a buffer the kernel's would refuse.  It goes to
 * the listener and the parent's relay thread answers, under `measure` (sealed, no
 * exec) as under `exec`, while the parent is not waiting for anything (the call's reply
 * is collected only afterwards).
 * The host's own procs and free memory tell the old answer apart on any machine; the
 * boot clock, on any host up longer than this test. */
static void host_clocks_under(const char *policy) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_BOOTTIME, &t0);
  kc_worker *w = policy_worker(policy);
  kc_error err = {0};
  kc_call_result r;
  if (kc_worker_send(w, H("host_clocks"), "", 0, 10, &err) < 0)
    fail_msg("send: %s", err.msg);
  usleep(200 * 1000); /* the worker's sysinfo calls come now, with nobody waiting */
  if (kc_worker_recv(w, &r, &err) < 0)
    fail_msg("recv: %s", err.msg);
  clock_gettime(CLOCK_BOOTTIME, &t1);
  if (r.status != KC_CALL_EXCEPTION)
    fail_msg("host_clocks (%s): status %d: %s", policy, r.status, r.message);
  print_message("host_clocks (%s): %s (host: %lld s up)\n", policy, r.message,
                (long long)t1.tv_sec);
  long long boot, up;
  unsigned long l0, l1, l2;
  unsigned procs;
  int free_is_total, efaults, unchanged;
  assert_int_equal(sscanf(r.message, "%lld %lld %lu %lu %lu %u %d %d %d", &boot, &up, &l0, &l1, &l2,
                          &procs, &free_is_total, &efaults, &unchanged),
                   9);
  long long since = t1.tv_sec - t0.tv_sec + 1;
  assert_true(boot >= 0 && boot <= since);
  assert_true(up >= 0 && up <= since);
  assert_true(l0 == 0 && l1 == 0 && l2 == 0);
  assert_int_equal(procs, 1);
  assert_int_equal(free_is_total, 1);
  assert_int_equal(efaults, 3);
  assert_int_equal(unchanged, 1);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

static void test_host_clocks(void **state) {
  (void)state;
  host_clocks_under("measure");
  host_clocks_under("exec");
}

/* A thread that blocks SIGSYS and calls sysinfo gets the sandbox's answer, under the
 * sealed `measure` policy as under `exec`: nothing is delivered to it, the relay
 * answers from outside. */
static void test_sysinfo_sigsys_blocked(void **state) {
  (void)state;
  const char *policies[] = {"measure", "exec"};
  for (int i = 0; i < 2; i++) {
    kc_worker *w = policy_worker(policies[i]);
    kc_call_result r;
    call(w, H("sysinfo_sigsys_blocked"), "", 0, 10, &r);
    print_message("sysinfo, SIGSYS blocked (%s): %d %s\n", policies[i], r.status, r.message);
    assert_int_equal(r.status, KC_CALL_EXCEPTION);
    assert_string_equal(r.message, "0 1 1");
    kc_call_result_clear(&r);
    kc_worker_free(w);
  }
}

/* A program the worker execs calls sysinfo too (ld does): under `exec` it gets the
 * sandbox's answer from the relay, not the host's and not a trap it has no handler for.
 * python3 checks it and says so in its exit status (0: no load, all memory free, one
 * process); without python3 in the sandbox there is nothing to run. */
static void test_host_clocks_exec(void **state) {
  (void)state;
  kc_worker *w = policy_worker("exec");
  static const char argv[] =
      "/usr/bin/python3\0-c\0"
      "import ctypes,sys\n"
      "b=(ctypes.c_ulong*64)()\n"
      "if ctypes.CDLL(None).sysinfo(b)!=0: sys.exit(2)\n"
      "sys.exit(0 if b[1]==b[2]==b[3]==0 and b[4]==b[5]>0 and b[10]&0xffff==1 else 1)";
  kc_call_result r;
  call(w, "exec", argv, sizeof argv, 30, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  int32_t st;
  memcpy(&st, r.value, 4);
  kc_call_result_clear(&r);
  kc_worker_free(w);
  if (st == 127 << 8) {
    print_message("no python3 in the sandbox: the exec'd case is not run\n");
    skip();
  }
  assert_int_equal(st, 0);
}

/* Under `exec` every notification but sysinfo's passes through the parent's relay to
 * the worker's owner: a forbidden call of a program the worker exec'd still ends the
 * worker and is named in its verdict, and the worker after it answers again. */
static void test_relayed_violation_named(void **state) {
  (void)state;
  kc_worker *w = policy_worker("exec");
  static const char argv[] = "/bin/umount\0/tmp";
  kc_call_result r;
  call(w, "exec", argv, sizeof argv, 30, &r);
  print_message("relayed verdict: %d %s\n", r.status, r.message);
  assert_int_equal(r.status, KC_CALL_CHILD_ERROR);
  assert_int_equal(r.verdict.status, KC_STATUS_SYSCALL);
  assert_string_equal(r.verdict.syscall, "umount2");
  kc_call_result_clear(&r);
  call(w, "echo", "ok", 2, 5, &r);
  assert_int_equal(r.status, KC_CALL_COMPLETE);
  kc_call_result_clear(&r);
  kc_worker_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_echo_roundtrip),
      cmocka_unit_test(test_zygote_reason_said),
      cmocka_unit_test(test_lockdown),
      cmocka_unit_test(test_exec_handler),
      cmocka_unit_test(test_pipelined_fifo),
      cmocka_unit_test(test_exception_message),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_recv_asleep),
      cmocka_unit_test(test_death_noticed),
      cmocka_unit_test(test_death_between_calls),
      cmocka_unit_test(test_segfault),
      cmocka_unit_test(test_oom),
      cmocka_unit_test(test_seccomp_seal),
      cmocka_unit_test(test_seccomp_seal_thread_named),
      cmocka_unit_test(test_seccomp_seal_file_exec_map),
      cmocka_unit_test(test_maximum_uses),
      cmocka_unit_test(test_pool_maximum_uses),
      cmocka_unit_test(test_pool_map_streams),
      cmocka_unit_test(test_pool_map_no_fault_per_call),
      cmocka_unit_test(test_corrupt_ring),
      cmocka_unit_test(test_spurious_wakes),
      cmocka_unit_test(test_death_notice_hostile),
      cmocka_unit_test(test_initializer),
      cmocka_unit_test(test_many_calls_flat),
      cmocka_unit_test(test_parent_sigkill),
      cmocka_unit_test(test_policy_violation),
      cmocka_unit_test(test_pool_map),
      cmocka_unit_test(test_proc_view),
      cmocka_unit_test(test_host_clocks),
      cmocka_unit_test(test_host_clocks_exec),
      cmocka_unit_test(test_sysinfo_sigsys_blocked),
      cmocka_unit_test(test_relayed_violation_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
