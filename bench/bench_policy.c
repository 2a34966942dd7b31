/* Policies and seccomp: what a filter costs at spawn and per syscall, and what the
 * supervisor's notification round trip costs.  Figures in the same run:
 *   parse/compile per profile, BPF length;
 *   install in a forked child: libseccomp compile+load vs the precompiled program;
 *   getppid (action-cache hit) and mprotect (argument-checked: the BPF runs) with no
 *   filter, `exec` and `measure`;
 *   a notify round trip (child's syscall answered with an errno by the parent). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "kcage/policy.h"
#include "kcage/seccomp.h"

#define HANDOFF 100

static double median_of(double *v, size_t n) {
  return kc_measure_quantile(v, n, 0.5);
}

/* The number a forked child wrote on the pipe (-1 when it wrote none), the child reaped. */
static double child_answer(int pf[2], pid_t pid) {
  close(pf[1]);
  double v = -1;
  if (read(pf[0], &v, sizeof v) != sizeof v)
    v = -1;
  close(pf[0]);
  waitpid(pid, NULL, 0);
  return v;
}

/* ns per call of `nr` inside a child under prog (NULL = no filter). */
static double syscall_ns(const kc_seccomp_prog *prog, long nr, int iters) {
  int pf[2];
  if (pipe(pf) < 0)
    return -1;
  void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pf[0]);
    int l = -1;
    if (prog && kc_seccomp_prog_load(prog, &l) < 0)
      _exit(1);
    if (l >= 0)
      close(l); /* nothing here notifies */
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      double t0 = kc_measure_now();
      for (int i = 0; i < iters; i++) {
        if (nr == SYS_mprotect)
          syscall(SYS_mprotect, page, 4096, PROT_READ | PROT_WRITE);
        else
          syscall(nr);
      }
      double ns = (kc_measure_now() - t0) * 1e9 / iters;
      best = ns < best ? ns : best;
    }
    (void)!write(pf[1], &best, sizeof best);
    _exit(0);
  }
  double v = child_answer(pf, pid);
  munmap(page, 4096);
  return v;
}

/* Microseconds a forked child spends installing: compile+load or load only. */
static double install_us(const kc_policy *p, const kc_seccomp_prog *prog) {
  int pf[2];
  if (pipe(pf) < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(pf[0]);
    int l = -1;
    kc_error err;
    double t0 = kc_measure_now();
    int rc = prog ? kc_seccomp_prog_load(prog, &l) : kc_policy_install_seccomp(p, &l, &err);
    double us = (kc_measure_now() - t0) * 1e6;
    if (rc < 0)
      us = -1;
    (void)!write(pf[1], &us, sizeof us);
    _exit(0);
  }
  return child_answer(pf, pid);
}

static int notify_round_trip(const kc_policy *p, int n, double *med, double *p99) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    kc_error err;
    if (kc_seccomp_install_and_send(p, sv[1], &err) < 0)
      _exit(1);
    for (int i = 0; i < n; i++)
      syscall(SYS_getppid);
    _exit(0);
  }
  close(sv[1]);
  int l = -1;
  kc_error err;
  if (kc_seccomp_recv_listener(sv[0], 5000, &l, &err) < 0 || l < 0) {
    fprintf(stderr, "bench_policy: %s\n", err.msg);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  close(sv[0]);
  double *lat = calloc((size_t)n, sizeof *lat);
  int got = 0;
  double last = kc_measure_now();
  while (got < n) {
    struct pollfd pfd = {.fd = l, .events = POLLIN};
    if (poll(&pfd, 1, 2000) <= 0)
      break;
    kc_seccomp_event ev;
    if (kc_seccomp_notify_receive(l, &ev, &err) < 0)
      continue;
    kc_seccomp_notify_errno(l, &ev, EPERM, &err);
    double now = kc_measure_now();
    lat[got++] = (now - last) * 1e6; /* answer to answer: one full round trip */
    last = now;
  }
  waitpid(pid, NULL, 0);
  close(l);
  *med = got > 10 ? median_of(lat + 1, (size_t)got - 1) : -1;
  *p99 = got > 10 ? kc_measure_quantile(lat + 1, (size_t)got - 1, 0.99) : -1;
  free(lat);
  return got;
}

/* Parse, compile and install times of each profile (and a one-rule filter for scale),
 * median of 21; progs and pols keep the first of each. */
static int bench_profiles(const char *const *names, const char *const *labels,
                          kc_seccomp_prog **progs, kc_policy **pols) {
  printf("%-8s %10s %12s %6s %16s %14s\n", "policy", "parse us", "compile us", "BPF",
         "child compile+load", "child load");
  for (int i = 0; i < 4; i++) {
    kc_error err;
    double parse[21], comp[21], inst_full[21], inst_pre[21];
    for (int r = 0; r < 21; r++) {
      kc_policy *p;
      double t0 = kc_measure_now();
      if (kc_policy_load(names[i], &p, &err) < 0) {
        fprintf(stderr, "bench_policy: %s\n", err.msg);
        return -1;
      }
      double t1 = kc_measure_now();
      kc_seccomp_prog *prog;
      if (kc_seccomp_prog_compile(p, HANDOFF, &prog, &err) < 0) {
        fprintf(stderr, "bench_policy: %s\n", err.msg);
        return -1;
      }
      double t2 = kc_measure_now();
      parse[r] = (t1 - t0) * 1e6;
      comp[r] = (t2 - t1) * 1e6;
      if (r == 0) {
        pols[i] = p;
        progs[i] = prog;
      } else {
        kc_seccomp_prog_free(prog);
        kc_policy_free(p);
      }
      inst_full[r] = install_us(pols[i], NULL);
      inst_pre[r] = install_us(pols[i], progs[i]);
    }
    double a = median_of(parse, 21), b = median_of(comp, 21), c = median_of(inst_full, 21),
           d = median_of(inst_pre, 21);
    printf("%-8s %10.1f %12.1f %6zu %16.1f %14.1f   (x%.0f)\n", labels[i], a, b,
           kc_seccomp_prog_len(progs[i]), c, d, d > 0 ? c / d : 0);
    const struct {
      const char *what;
      double v;
    } figs[] = {{"parse_us", a},
                {"compile_us", b},
                {"bpf_insns", (double)kc_seccomp_prog_len(progs[i])},
                {"child_compile_load_us", c},
                {"child_load_us", d}};
    for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++) {
      char key[64];
      snprintf(key, sizeof key, "%s_%s", labels[i], figs[f].what);
      kc_measure_set("policy", key, figs[f].v);
    }
  }
  return 0;
}

/* Per-call cost of getppid and mprotect under no filter, exec's and measure's. */
static void bench_filtered_calls(const char *const *names, kc_seccomp_prog **progs) {
  const int iters = 200000;
  double none_g = syscall_ns(NULL, SYS_getppid, iters);
  double none_m = syscall_ns(NULL, SYS_mprotect, iters);
  printf("\n%-8s %14s %14s   (per call, best of 5 x %d)\n", "filter", "getppid ns", "mprotect ns",
         iters);
  printf("%-8s %14.1f %14.1f\n", "none", none_g, none_m);
  kc_measure_set("policy", "none_getppid_ns", none_g);
  kc_measure_set("policy", "none_mprotect_ns", none_m);
  for (int i = 0; i < 3; i += 2) {
    double g = syscall_ns(progs[i], SYS_getppid, iters);
    double m = syscall_ns(progs[i], SYS_mprotect, iters);
    printf("%-8s %14.1f %14.1f   (+%.1f, +%.1f ns)\n", names[i], g, m, g - none_g, m - none_m);
    char key[64];
    snprintf(key, sizeof key, "%s_getppid_ns", names[i]);
    kc_measure_set("policy", key, g);
    snprintf(key, sizeof key, "%s_mprotect_ns", names[i]);
    kc_measure_set("policy", key, m);
  }
}

/* Notify round trip: getppid is "notify", answered EPERM by this process. */
static int bench_notify(void) {
  char path[] = "/tmp/kcage-bench-policy-XXXXXX.policy";
  int fd = mkstemps(path, 7);
  const char *text = "default allow\nnotify getppid\n";
  if (fd < 0 || write(fd, text, strlen(text)) < 0)
    return -1;
  close(fd);
  kc_policy *np;
  kc_error err;
  int rc = kc_policy_parse_file(path, &np, &err);
  unlink(path);
  if (rc < 0)
    return -1;
  double med = -1, p99 = -1;
  int got = notify_round_trip(np, 5000, &med, &p99);
  printf("\nnotify round trip (supervisor answers errno), n=%d: median %.1f us, p99 %.1f us\n", got,
         med, p99);
  kc_measure_set("policy", "notify_round_trip_median_us", med);
  kc_measure_set("policy", "notify_round_trip_p99_us", p99);
  kc_policy_free(np);
  return 0;
}

int main(void) {
  /* the three profiles, and a one-rule filter for scale */
  char tiny[] = "/tmp/kcage-bench-tiny-XXXXXX.policy";
  int tfd = mkstemps(tiny, 7);
  if (tfd < 0 || write(tfd, "default allow\nkill ptrace\n", 26) != 26)
    return 1;
  close(tfd);
  const char *names[] = {"exec", "build", "measure", tiny};
  const char *labels[] = {"exec", "build", "measure", "1-rule"};
  kc_seccomp_prog *progs[4] = {0};
  kc_policy *pols[4] = {0};
  int rc = bench_profiles(names, labels, progs, pols);
  unlink(tiny);
  if (rc < 0)
    return 1;
  bench_filtered_calls(names, progs);
  if (bench_notify() < 0)
    return 1;
  for (int i = 0; i < 4; i++) {
    kc_seccomp_prog_free(progs[i]);
    kc_policy_free(pols[i]);
  }
  return kc_measure_write() < 0 ? 1 : 0;
}
