/* What the cgroup layer costs per sandbox, measured in one run, in the detected mode
 * and (on a hybrid host) again in forced pure v1:
 *   fresh - create with limits + attach a waiting child + read counters + kill + destroy
 *   slot  - the worker pool's way on a long-lived cgroup: rewrite limits + attach +
 *           read counters + kill
 *   kill  - kill a tree of 4 processes (one stopped) and wait until the cgroup is empty
 * Forks happen outside the timed regions. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "kcage/cgroup.h"

#define N 300

/* A child that, once released, forks `extra` children and reports ready. */
static pid_t child(int extra, int *go_w, int *ready_r) {
  int go[2], rd[2];
  if (pipe(go) < 0 || pipe(rd) < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(rd[0]);
    char c;
    (void)!read(go[0], &c, 1);
    for (int i = 0; i < extra; i++)
      if (fork() == 0) {
        if (i == 0)
          raise(SIGSTOP);
        for (;;)
          pause();
      }
    (void)!write(rd[1], "r", 1);
    for (;;)
      pause();
  }
  close(go[0]);
  close(rd[1]);
  *go_w = go[1];
  *ready_r = rd[0];
  return pid;
}

static void release(int go, int ready) {
  char c;
  (void)!write(go, "g", 1);
  (void)!read(ready, &c, 1);
  close(go);
  close(ready);
}

static void reap(void) {
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
}

typedef struct {
  double fresh[2], slot[2], kill[2]; /* median, p99 in µs */
} result;

#define FAIL(what)                                                                                 \
  do {                                                                                             \
    fprintf(stderr, "bench_cgroup: %s: %s\n", what, err.msg);                                      \
    return -1;                                                                                     \
  } while (0)

/* The mode being measured (the host's best, then forced pure v1 on a hybrid host). */
static kc_settings settings;

static int measure(result *r) {
  static double fresh[N], slot[N], killt[N];
  kc_error err = {0};
  kc_cgroup_limits lim = {.memory_bytes = 256 << 20, .pids = 64, .cpus = 1};
  kc_cgroup_counters c;
  int go, ready;
  for (int i = 0; i < N; i++) {
    pid_t pid = child(0, &go, &ready);
    double t0 = kc_measure_now();
    kc_cgroup *cg = NULL;
    if (kc_cgroup_create("bench", &lim, &settings, &cg, &err) < 0)
      FAIL("create");
    if (kc_cgroup_attach(cg, pid, &err) < 0 || kc_cgroup_read(cg, &c, &err) < 0 ||
        kc_cgroup_kill(cg, &err) < 0) {
      kc_cgroup_destroy(cg);
      FAIL("fresh");
    }
    kc_cgroup_destroy(cg);
    fresh[i] = kc_measure_now() - t0;
    close(go);
    close(ready);
    waitpid(pid, NULL, 0);
  }
  kc_cgroup *s = NULL;
  if (kc_cgroup_create("bench-slot", NULL, &settings, &s, &err) < 0)
    FAIL("create slot");
  for (int i = 0; i < N; i++) {
    pid_t pid = child(0, &go, &ready);
    lim.memory_bytes = (i & 1) ? 256 << 20 : 128 << 20; /* a real rewrite each time */
    double t0 = kc_measure_now();
    if (kc_cgroup_set_limits(s, &lim, &err) < 0 || kc_cgroup_attach(s, pid, &err) < 0 ||
        kc_cgroup_read(s, &c, &err) < 0 || kc_cgroup_kill(s, &err) < 0) {
      kc_cgroup_destroy(s);
      FAIL("slot");
    }
    slot[i] = kc_measure_now() - t0;
    close(go);
    close(ready);
    waitpid(pid, NULL, 0);
  }
  for (int i = 0; i < N; i++) {
    pid_t pid = child(3, &go, &ready);
    if (kc_cgroup_attach(s, pid, &err) < 0) {
      kc_cgroup_destroy(s);
      FAIL("attach");
    }
    release(go, ready); /* the 3 grandchildren are forked inside */
    double t0 = kc_measure_now();
    if (kc_cgroup_kill(s, &err) < 0) {
      kc_cgroup_destroy(s);
      FAIL("kill");
    }
    killt[i] = kc_measure_now() - t0;
    waitpid(pid, NULL, 0);
    reap();
  }
  kc_cgroup_destroy(s);
  r->fresh[0] = kc_measure_quantile(fresh, N, 0.5) * 1e6;
  r->fresh[1] = kc_measure_quantile(fresh, N, 0.99) * 1e6;
  r->slot[0] = kc_measure_quantile(slot, N, 0.5) * 1e6;
  r->slot[1] = kc_measure_quantile(slot, N, 0.99) * 1e6;
  r->kill[0] = kc_measure_quantile(killt, N, 0.5) * 1e6;
  r->kill[1] = kc_measure_quantile(killt, N, 0.99) * 1e6;
  return 0;
}

static void put(const char *mode, const char *what, const double v[2]) {
  char k[64];
  snprintf(k, sizeof k, "%s_%s_median_us", mode, what);
  kc_measure_set("cgroup", k, v[0]);
  snprintf(k, sizeof k, "%s_%s_p99_us", mode, what);
  kc_measure_set("cgroup", k, v[1]);
}

int main(void) {
  /* orphans of the killed trees come back to us to be reaped */
  if (getuid() != 0 || kc_cgroup_detect() == KC_CGROUP_NONE) {
    printf("bench_cgroup: no usable cgroups here (mode %s, uid %d); skipped\n",
           kc_cgroup_mode_name(kc_cgroup_detect()), (int)getuid());
    return 0;
  }
  kc_cgroup_mode modes[2] = {kc_cgroup_detect(), KC_CGROUP_V1};
  int nm = modes[0] == KC_CGROUP_HYBRID ? 2 : 1;
  result res[2];
  for (int m = 0; m < nm; m++) {
    kc_error err = {0};
    settings.cgroup_mode = m > 0 ? modes[m] : KC_CGROUP_AUTO;
    if (kc_settings_check(&settings, &err) < 0) {
      fprintf(stderr, "bench_cgroup: %s\n", err.msg);
      nm = m;
      break;
    }
    if (measure(&res[m]) < 0)
      return 1;
  }
  printf("cgroup layer, %d iterations each (µs)          median      p99\n", N);
  for (int m = 0; m < nm; m++) {
    const char *mn = kc_cgroup_mode_name(modes[m]);
    printf("%-7s fresh: create+limits+attach+read+kill+rmdir %8.1f %8.1f\n", mn, res[m].fresh[0],
           res[m].fresh[1]);
    printf("%-7s slot:  rewrite limits+attach+read+kill      %8.1f %8.1f   (%.2fx of fresh)\n", mn,
           res[m].slot[0], res[m].slot[1], res[m].slot[0] / res[m].fresh[0]);
    printf("%-7s kill a 4-process tree (1 stopped), wait empty %6.1f %8.1f\n", mn, res[m].kill[0],
           res[m].kill[1]);
    put(mn, "fresh", res[m].fresh);
    put(mn, "slot", res[m].slot);
    put(mn, "kill_tree", res[m].kill);
  }
  if (nm == 2)
    printf("tree kill: %s cgroup.kill is %.2fx the v1 freezer freeze-kill-thaw (median)\n",
           kc_cgroup_mode_name(modes[0]), res[0].kill[0] / res[1].kill[0]);
  return kc_measure_write() < 0 ? 1 : 0;
}
