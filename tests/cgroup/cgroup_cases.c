/* Real processes under real limits; see cgroup_cases.h. */
#include "cgroup_cases.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_internal.h"
#include "kcage/cgroup.h"

#define MiB (1024ull * 1024ull)

static int fail(char *msg, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, n, fmt, ap);
  va_end(ap);
  return -1;
}

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fail(msg, n, __VA_ARGS__);                                                                   \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

void kc_cgt_init(void) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Does leaf `name` exist in any hierarchy kcage uses? */
static bool dir_exists(const char *name) {
  const kc_cgroup_host *h = kc_cgroup_host_get();
  char p[PATH_MAX * 2];
  struct stat st;
  if (h->have_v2) {
    snprintf(p, sizeof p, "%s/%s", h->v2.base, name);
    if (stat(p, &st) == 0)
      return true;
  }
  for (int i = 0; i < h->nv1; i++) {
    snprintf(p, sizeof p, "%s/%s", h->v1[i].base, name);
    if (stat(p, &st) == 0)
      return true;
  }
  return false;
}

static bool pid_dead(pid_t pid) {
  return kc_cgroup_starttime(pid) == 0;
}

/* A killed task leaves its cgroup (cgroup_exit) a little before it becomes a zombie
 * (exit_notify), so "the cgroup is empty" can be seen while /proc still shows the task
 * running its exit path: under TCG emulation that window is long enough to observe.
 * Wait (bounded) for the task to finish dying. */
static bool pid_dies_within(pid_t pid, int ms) {
  for (int i = 0; i < ms; i++) {
    if (pid_dead(pid))
      return true;
    usleep(1000);
  }
  return pid_dead(pid);
}

/* Reap every child we have (we are a subreaper: orphans come to us). */
static void reap_all(void) {
  for (int i = 0; i < 200; i++) {
    pid_t p = waitpid(-1, NULL, WNOHANG);
    if (p > 0)
      continue;
    if (p < 0)
      return;
    usleep(1000);
  }
}

/* fork a child that blocks until the parent has attached it, then runs fn. */
static pid_t spawn_in(kc_cgroup *cg, void (*fn)(void *, int), void *arg, int *report_fd,
                      kc_error *err) {
  int go[2], rep[2];
  if (pipe2(go, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(rep[0]);
    char c;
    if (read(go[0], &c, 1) != 1)
      _exit(99);
    fn(arg, rep[1]);
    _exit(0);
  }
  close(go[0]);
  close(rep[1]);
  if (pid < 0 || kc_cgroup_attach(cg, pid, err) < 0) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    close(go[1]);
    close(rep[0]);
    return -1;
  }
  (void)!write(go[1], "g", 1);
  close(go[1]);
  if (report_fd)
    *report_fd = rep[0];
  else
    close(rep[0]);
  return pid;
}

static void touch_memory(void *arg, int fd) {
  (void)fd;
  size_t bytes = *(size_t *)arg;
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    _exit(3);
  for (size_t i = 0; i < bytes; i += 4096)
    p[i] = 1;
  _exit(0);
}

/* memory limit: touching 8x the limit is an OOM kill, seen as oom_kills delta 1. */
static int run_oom(kc_cgroup *cg, uint64_t limit, char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup_counters a, b;
  int rc = -1;
  CHECK(kc_cgroup_read(cg, &a, &err) == 0, "read: %s", err.msg);
  size_t bytes = limit * 8;
  pid_t pid = spawn_in(cg, touch_memory, &bytes, NULL, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child not SIGKILLed (status 0x%x)", st);
  CHECK(kc_cgroup_read(cg, &b, &err) == 0, "read: %s", err.msg);
  CHECK(a.oom_kills >= 0 && b.oom_kills - a.oom_kills == 1, "oom_kills %lld -> %lld",
        (long long)a.oom_kills, (long long)b.oom_kills);
  CHECK(b.peak_memory == -1 ||
            (b.peak_memory > (int64_t)(limit / 2) && b.peak_memory <= (int64_t)(limit + limit / 8)),
        "peak %lld vs limit %llu", (long long)b.peak_memory, (unsigned long long)limit);
  rc = 0;
out:
  return rc;
}

static int case_memory_oom(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  kc_cgroup_limits lim = {.memory_bytes = 32 * MiB};
  int rc = -1;
  char name[NAME_MAX + 1] = "";
  CHECK(kc_cgroup_create("t-oom", &lim, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  snprintf(name, sizeof name, "%s", kc_cgroup_dir_name(cg));
  CHECK(dir_exists(name), "cgroup directory %s missing after create", name);
  if (run_oom(cg, lim.memory_bytes, msg, n) < 0)
    goto out;
  kc_cgroup_destroy(cg);
  cg = NULL;
  CHECK(!dir_exists(name), "cgroup directory %s left after destroy", name);
  rc = 0;
out:
  kc_cgroup_destroy(cg);
  return rc;
}

/* A long-lived slot: limits rewritten between runs, counters read as deltas. */
static int case_slot_rewrite(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  int rc = -1;
  CHECK(kc_cgroup_create("t-slot", NULL, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  kc_cgroup_limits lim = {.memory_bytes = 48 * MiB, .pids = 16, .cpus = 1};
  CHECK(kc_cgroup_set_limits(cg, &lim, &err) == 0, "set 48M: %s", err.msg);
  if (run_oom(cg, lim.memory_bytes, msg, n) < 0)
    goto out;
  /* lower, then raise: v1 memsw ordering both ways */
  lim.memory_bytes = 24 * MiB;
  CHECK(kc_cgroup_set_limits(cg, &lim, &err) == 0, "set 24M: %s", err.msg);
  CHECK(kc_cgroup_reset_peak(cg, &err) == 0, "reset peak: %s", err.msg);
  if (run_oom(cg, lim.memory_bytes, msg, n) < 0)
    goto out;
  lim.memory_bytes = 256 * MiB;
  CHECK(kc_cgroup_set_limits(cg, &lim, &err) == 0, "set 256M: %s", err.msg);
  kc_cgroup_counters a, b;
  CHECK(kc_cgroup_read(cg, &a, &err) == 0, "read: %s", err.msg);
  size_t bytes = 64 * MiB;
  pid_t pid = spawn_in(cg, touch_memory, &bytes, NULL, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "64M under 256M: status 0x%x", st);
  CHECK(kc_cgroup_read(cg, &b, &err) == 0, "read: %s", err.msg);
  CHECK(b.oom_kills == a.oom_kills, "oom_kills moved without an OOM: %lld -> %lld",
        (long long)a.oom_kills, (long long)b.oom_kills);
  lim = (kc_cgroup_limits){0};
  CHECK(kc_cgroup_set_limits(cg, &lim, &err) == 0, "unlimit: %s", err.msg);
  rc = 0;
out:
  kc_cgroup_destroy(cg);
  return rc;
}

static void fork_many(void *arg, int fd) {
  int tries = *(int *)arg, failed = 0;
  for (int i = 0; i < tries; i++) {
    pid_t p = fork();
    if (p == 0) {
      pause();
      _exit(0);
    }
    if (p < 0)
      failed++;
  }
  (void)!write(fd, &failed, sizeof failed);
  pause();
}

/* pids limit: forks fail (EAGAIN) past the limit and pids.events max counts them. */
static int case_pids(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  kc_cgroup_limits lim = {.pids = 8};
  int rc = -1, fd = -1;
  kc_cgroup_counters a, b;
  CHECK(kc_cgroup_create("t-pids", &lim, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  CHECK(kc_cgroup_read(cg, &a, &err) == 0, "read: %s", err.msg);
  int tries = 40;
  pid_t pid = spawn_in(cg, fork_many, &tries, &fd, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  int failed = -1;
  CHECK(read(fd, &failed, sizeof failed) == sizeof failed, "no report from the forker");
  CHECK(failed == tries - 7, "%d of %d forks failed, expected %d", failed, tries, tries - 7);
  CHECK(kc_cgroup_read(cg, &b, &err) == 0, "read: %s", err.msg);
  CHECK(a.pids_max_hits >= 0 && b.pids_max_hits - a.pids_max_hits >= 1 &&
            b.pids_max_hits - a.pids_max_hits <= failed,
        "pids.events max %lld -> %lld for %d failures", (long long)a.pids_max_hits,
        (long long)b.pids_max_hits, failed);
  CHECK(kc_cgroup_kill(cg, &err) == 0, "kill: %s", err.msg);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "forker status 0x%x", st);
  rc = 0;
out:
  if (fd >= 0)
    close(fd);
  kc_cgroup_destroy(cg);
  reap_all();
  return rc;
}

static void spin(void *arg, int fd) {
  (void)fd;
  double until = now_s() + *(double *)arg;
  volatile unsigned long x = 0;
  while (now_s() < until)
    x++;
  _exit(0);
}

/* Reap the spinner pid (a busy loop of `wall` s in cg, counters a taken before it) and
 * check that a 0.2 CPU limit held it to about 0.12 s of CPU.  0 held, -1 msg says. */
static int spinner_throttled(kc_cgroup *cg, pid_t pid, const kc_cgroup_counters *a, double wall,
                             char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup_counters b;
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "spinner status 0x%x", st);
  CHECK(kc_cgroup_read(cg, &b, &err) == 0, "read: %s", err.msg);
  int64_t used = b.cpu_usec - a->cpu_usec;
  CHECK(a->cpu_usec >= 0 && used > 10000 && used < 360000,
        "%lld us of CPU in a %.1f s busy loop limited to 0.2 CPU", (long long)used, wall);
  snprintf(msg, n, "%lld us of CPU in %.1f s wall", (long long)used, wall);
  return 0;
out:
  return -1;
}

/* CPU bandwidth 0.2 CPU: a 0.6 s busy loop gets about 0.12 s of CPU. */
static int case_cpu_throttle(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  kc_cgroup_limits lim = {.cpus = 0.2};
  int rc = -1;
  kc_cgroup_counters a;
  CHECK(kc_cgroup_create("t-cpu", &lim, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  CHECK(kc_cgroup_read(cg, &a, &err) == 0, "read: %s", err.msg);
  double wall = 0.6;
  pid_t pid = spawn_in(cg, spin, &wall, NULL, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  rc = spinner_throttled(cg, pid, &a, wall, msg, n);
out:
  kc_cgroup_destroy(cg);
  return rc;
}

/* pid's cgroup path in the v1 hierarchy that has the cpu controller ("" in pure v2). */
static void v1_cpu_path(pid_t pid, char *out, size_t size) {
  char p[64], line[PATH_MAX + 64];
  snprintf(p, sizeof p, "/proc/%d/cgroup", (int)pid);
  out[0] = '\0';
  FILE *f = fopen(p, "re");
  if (!f)
    return;
  while (fgets(line, sizeof line, f)) {
    char *ctrl = strchr(line, ':'), *path = ctrl ? strchr(ctrl + 1, ':') : NULL;
    if (!path)
      continue;
    *path++ = '\0';
    for (char *tok = strtok(ctrl + 1, ","); tok; tok = strtok(NULL, ","))
      if (!strcmp(tok, "cpu"))
        snprintf(out, size, "%.*s", (int)strcspn(path, "\n"), path);
  }
  fclose(f);
}

/* Without a CPU limit a sandbox stays in its parent's v1 cpu cgroup (one cpu cgroup for
 * every sandbox would weigh like one process); a limit given later moves the running
 * process into a cpu cgroup of its own and throttles it: 0.2 CPU over a 0.6 s busy
 * loop. */
static int case_cpu_limit_later(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  int rc = -1;
  pid_t pid = -1;
  char mine[PATH_MAX], its[PATH_MAX];
  kc_cgroup_counters a;
  CHECK(kc_cgroup_create("t-cpul", NULL, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  CHECK(kc_cgroup_read(cg, &a, &err) == 0, "read: %s", err.msg);
  double wall = 0.6;
  pid = spawn_in(cg, spin, &wall, NULL, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  v1_cpu_path(getpid(), mine, sizeof mine);
  v1_cpu_path(pid, its, sizeof its);
  bool v1_cpu = kc_cgroup_host_get()->v1_ctrl & KC_CG_CPU;
  CHECK(!v1_cpu || !strcmp(mine, its), "no CPU limit, yet in cpu cgroup %s (we are in %s)", its,
        mine);
  kc_cgroup_limits lim = {.cpus = 0.2};
  CHECK(kc_cgroup_set_limits(cg, &lim, &err) == 0, "set 0.2 CPU: %s", err.msg);
  v1_cpu_path(pid, its, sizeof its);
  const char *leaf = kc_cgroup_dir_name(cg);
  size_t ll = strlen(leaf), il = strlen(its);
  CHECK(!v1_cpu || (il > ll && !strcmp(its + il - ll, leaf)), "limited, yet in cpu cgroup %s", its);
  rc = spinner_throttled(cg, pid, &a, wall, msg, n);
  pid = -1;
out:
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  kc_cgroup_destroy(cg);
  return rc;
}

static void tree(void *arg, int fd) {
  (void)arg;
  pid_t pids[6];
  int k = 0;
  pids[k++] = getpid();
  for (int i = 0; i < 3; i++) {
    pid_t p = fork();
    if (p == 0) {
      if (i == 0)
        raise(SIGSTOP); /* a stopped member */
      if (i == 1)
        for (volatile unsigned long x = 0;; x++) /* a busy one */
          ;
      pause();
      _exit(0);
    }
    pids[k++] = p;
  }
  /* a daemonized grandchild: double fork + setsid, its parent exits */
  int dp[2];
  if (pipe(dp) == 0) {
    pid_t p = fork();
    if (p == 0) {
      pid_t q = fork();
      if (q == 0) {
        setsid();
        pid_t me = getpid();
        (void)!write(dp[1], &me, sizeof me);
        pause();
        _exit(0);
      }
      _exit(0);
    }
    waitpid(p, NULL, 0);
    pid_t d = -1;
    (void)!read(dp[0], &d, sizeof d);
    pids[k++] = d;
  }
  (void)!write(fd, pids, sizeof(pid_t) * (size_t)k);
  pause();
}

/* Kill empties a tree: stopped, busy, sleeping and daemonized members all die. */
static int case_kill_tree(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  int rc = -1, fd = -1;
  CHECK(kc_cgroup_create("t-kill", NULL, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  pid_t pid = spawn_in(cg, tree, NULL, &fd, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  pid_t pids[6];
  ssize_t got = read(fd, pids, sizeof pids);
  CHECK(got == (ssize_t)(5 * sizeof(pid_t)), "tree did not report its 5 pids (%zd bytes)", got);
  for (int i = 0; i < 5; i++)
    CHECK(!pid_dead(pids[i]), "member %d (pid %d) dead before the kill", i, (int)pids[i]);
  CHECK(kc_cgroup_kill(cg, &err) == 0, "kill: %s", err.msg);
  for (int i = 0; i < 5; i++)
    CHECK(pid_dies_within(pids[i], 1000), "member %d (pid %d) alive 1 s after the kill", i,
          (int)pids[i]);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "root status 0x%x", st);
  rc = 0;
out:
  if (fd >= 0)
    close(fd);
  kc_cgroup_destroy(cg);
  reap_all();
  return rc;
}

/* destroy with a live process inside: killed, no directory left. */
static int case_destroy_live(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  kc_cgroup_limits lim = {.memory_bytes = 64 * MiB, .pids = 4};
  int rc = -1;
  CHECK(kc_cgroup_create("t-destroy", &lim, &kc_cgt_settings, &cg, &err) == 0, "create: %s",
        err.msg);
  char name[NAME_MAX + 1];
  snprintf(name, sizeof name, "%s", kc_cgroup_dir_name(cg));
  double forever = 1e9;
  pid_t pid = spawn_in(cg, spin, &forever, NULL, &err);
  CHECK(pid > 0, "spawn: %s", err.msg);
  kc_cgroup_destroy(cg);
  cg = NULL;
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "member status 0x%x", st);
  CHECK(!dir_exists(name), "cgroup directory %s left after destroy", name);
  rc = 0;
out:
  kc_cgroup_destroy(cg);
  return rc;
}

/* An owner SIGKILLed with its cgroup populated: the next reap removes it all. */
static int case_reap_stale(char *msg, size_t n) {
  kc_error err = {0};
  int rc = -1;
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  pid_t owner = fork();
  if (owner == 0) {
    close(p[0]);
    kc_cgroup *cg = NULL;
    kc_cgroup_limits lim = {.pids = 8};
    if (kc_cgroup_create("t-stale", &lim, &kc_cgt_settings, &cg, &err) < 0)
      _exit(1);
    double forever = 1e9;
    pid_t g = spawn_in(cg, spin, &forever, NULL, &err);
    if (g < 0)
      _exit(2);
    struct {
      pid_t g;
      char name[NAME_MAX + 1];
    } rep = {g, ""};
    snprintf(rep.name, sizeof rep.name, "%s", kc_cgroup_dir_name(cg));
    (void)!write(p[1], &rep, sizeof rep);
    pause();
    _exit(0);
  }
  close(p[1]);
  struct {
    pid_t g;
    char name[NAME_MAX + 1];
  } rep = {-1, ""};
  ssize_t got = read(p[0], &rep, sizeof rep);
  close(p[0]);
  kill(owner, SIGKILL);
  waitpid(owner, NULL, 0);
  CHECK(got == (ssize_t)sizeof rep, "owner did not report (%zd)", got);
  CHECK(dir_exists(rep.name), "stale cgroup %s missing before the reap", rep.name);
  CHECK(!pid_dead(rep.g), "grandchild dead before the reap");
  int r = kc_cgroup_reap_stale(&err);
  CHECK(r >= 0, "reap: %s", err.msg);
  /* another kcage on this host may have reaped it first: check the effect */
  CHECK(!dir_exists(rep.name), "stale cgroup %s still there (reaped %d)", rep.name, r);
  int st = 0;
  CHECK(waitpid(rep.g, &st, 0) == rep.g, "grandchild not reparented to us");
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "grandchild status 0x%x", st);
  rc = 0;
out:
  reap_all();
  return rc;
}

/* Placement by clone3(CLONE_INTO_CGROUP) with the v2 fd (on a hybrid host: the unified
 * cgroup), as the sandbox spawns: the child starts inside, seen in /proc/self/cgroup. */
static int case_clone_into(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  int rc = -1;
  CHECK(kc_cgroup_create("t-clone", NULL, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  int fd = kc_cgroup_v2_fd(cg);
  if (fd < 0) {
    snprintf(msg, n, "no v2 cgroup in mode %s: nothing to place",
             kc_cgroup_mode_name(kc_cgroup_mode_of(cg)));
    rc = 0;
    goto out;
  }
  struct clone_args ca = {
      .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)fd};
  const char *want = kc_cgroup_dir_name(cg);
  pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
  if (pid == 0) {
    char buf[4096];
    int f = open("/proc/self/cgroup", O_RDONLY);
    ssize_t r = f >= 0 ? read(f, buf, sizeof buf - 1) : -1;
    if (r <= 0)
      _exit(2);
    buf[r] = '\0';
    char *line = strstr(buf, "0::");
    _exit(line && strstr(line, want) ? 0 : 1);
  }
  CHECK(pid > 0, "clone3(CLONE_INTO_CGROUP): %s", strerror(errno));
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child not in %s (status 0x%x)", want, st);
  rc = 0;
out:
  kc_cgroup_destroy(cg);
  return rc;
}

/* Nothing of ours is left under kcage/ (only meaningful where nobody else runs kcage:
 * the qemu guest). */
int kc_cgt_no_leftovers(char *msg, size_t n) {
  const kc_cgroup_host *h = kc_cgroup_host_get();
  const char *bases[KC_CG_V1_MAX + 1];
  int nb = 0;
  if (h->have_v2)
    bases[nb++] = h->v2.base;
  for (int i = 0; i < h->nv1; i++)
    bases[nb++] = h->v1[i].base;
  for (int i = 0; i < nb; i++) {
    DIR *d = opendir(bases[i]);
    if (!d)
      continue;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_type == DT_DIR && e->d_name[0] != '.') {
        fail(msg, n, "left behind: %s/%s", bases[i], e->d_name);
        closedir(d);
        return -1;
      }
    }
    closedir(d);
  }
  return 0;
}

static void exit7(void *arg, int fd) {
  (void)arg;
  (void)fd;
  usleep(20000);
  _exit(7);
}

/* A slot reused after a kill: the next process (placed by clone3 when the layer still
 * offers the fd, else attached by pid) runs normally. */
static int case_reuse_after_kill(char *msg, size_t n) {
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  int rc = -1;
  CHECK(kc_cgroup_create("t-reuse", NULL, &kc_cgt_settings, &cg, &err) == 0, "create: %s", err.msg);
  for (int round = 0; round < 3; round++) {
    int st = 0;
    pid_t pid;
    int fd = kc_cgroup_v2_fd(cg);
    if (fd >= 0) {
      struct clone_args ca = {
          .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)fd};
      pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
      if (pid == 0)
        exit7(NULL, -1);
      CHECK(pid > 0, "clone3: %s", strerror(errno));
      CHECK(kc_cgroup_attach(cg, pid, &err) == 0, "attach: %s", err.msg);
    } else {
      pid = spawn_in(cg, exit7, NULL, NULL, &err);
      CHECK(pid > 0, "spawn: %s", err.msg);
    }
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7, "round %d (%s): status 0x%x", round,
          fd >= 0 ? "clone3" : "attach", st);
    /* kill an (idle) tree between rounds, as a pool does after a timeout */
    double forever = 1e9;
    pid = spawn_in(cg, spin, &forever, NULL, &err);
    CHECK(pid > 0, "spawn: %s", err.msg);
    CHECK(kc_cgroup_kill(cg, &err) == 0, "kill: %s", err.msg);
    waitpid(pid, &st, 0);
  }
  rc = 0;
out:
  kc_cgroup_destroy(cg);
  return rc;
}

kc_settings kc_cgt_settings;

const kc_cgt_case kc_cgt_cases[] = {
    {"memory_oom", case_memory_oom},
    {"slot_rewrite", case_slot_rewrite},
    {"pids", case_pids},
    {"cpu_throttle", case_cpu_throttle},
    {"cpu_limit_later", case_cpu_limit_later},
    {"kill_tree", case_kill_tree},
    {"destroy_live", case_destroy_live},
    {"reap_stale", case_reap_stale},
    {"clone_into", case_clone_into},
    {"reuse_after_kill", case_reuse_after_kill},
    {NULL, NULL},
};
