/* `kcage run -- /bin/true` beside bubblewrap with a typical read-only-root,
 * all-namespaces configuration (reference/sandboxes.md §3) and a plain fork+exec,
 * measured in one run, interleaved so that machine noise hits all three alike.
 * What each launch costs end to end: fork+exec of the launcher until it is reaped. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define KCAGE_BIN KC_BUILD_DIR "/kcage"

static const char *const kcage_argv[] = {KCAGE_BIN, "run", "--", "/bin/true", NULL};
/* The same with limits, i.e. with a cgroup (created, attached, killed, removed). */
static const char *const kcage_cg_argv[] = {KCAGE_BIN, "run", "--memory",  "256M", "--pids",
                                            "64",      "--",  "/bin/true", NULL};
static const char *const bwrap_argv[] = {"bwrap",
                                         "--ro-bind",
                                         "/",
                                         "/",
                                         "--dev",
                                         "/dev",
                                         "--proc",
                                         "/proc",
                                         "--tmpfs",
                                         "/tmp",
                                         "--unshare-all",
                                         "--die-with-parent",
                                         "--new-session",
                                         "--cap-drop",
                                         "ALL",
                                         "/bin/true",
                                         NULL};
static const char *const plain_argv[] = {"/bin/true", NULL};

/* Seconds for one launch, or -1 when it failed. */
static double launch(const char *const *argv) {
  double t0 = kc_bench_now();
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int dn = open("/dev/null", O_RDWR);
    if (dn >= 0) {
      dup2(dn, 0);
      dup2(dn, 1);
      dup2(dn, 2);
    }
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  double t = kc_bench_now() - t0;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

static int have_bwrap(void) {
  return launch(bwrap_argv) >= 0;
}

typedef struct row {
  const char *name;
  const char *const *argv;
  double *v;
  size_t n;
  int failed;
} row;

int main(int argc, char **argv) {
  size_t runs = argc > 1 ? (size_t)atoi(argv[1]) : 300;
  if (runs < 10)
    runs = 10;
  enum { NROWS = 4 };
  row rows[NROWS] = {{"kcage run -- /bin/true", kcage_argv, NULL, 0, 0},
                     {"bwrap (ro /, all ns, --dev --proc --tmpfs)", bwrap_argv, NULL, 0, 0},
                     {"fork+exec /bin/true", plain_argv, NULL, 0, 0},
                     {"kcage run --memory 256M --pids 64 (cgroup)", kcage_cg_argv, NULL, 0, 0}};
  int with_bwrap = have_bwrap();
  for (int r = 0; r < NROWS; r++) {
    rows[r].v = calloc(runs, sizeof(double));
    if (!rows[r].v)
      return 1;
  }
  /* Warm-up: page cache, dynamic loader, cgroup hierarchy. */
  for (int i = 0; i < 10; i++)
    for (int r = 0; r < NROWS; r++)
      if (r != 1 || with_bwrap)
        launch(rows[r].argv);
  for (size_t i = 0; i < runs; i++) {
    for (int r = 0; r < NROWS; r++) {
      if (r == 1 && !with_bwrap)
        continue;
      double t = launch(rows[r].argv);
      if (t < 0)
        rows[r].failed++;
      else
        rows[r].v[rows[r].n++] = t;
    }
  }
  if (rows[0].n == 0) {
    fprintf(stderr, "bench_run: kcage run failed every time (%d failures)\n", rows[0].failed);
    return 1;
  }
  double kc_med = 0;
  printf("launch to reap, %zu interleaved runs each (ms)\n", runs);
  printf("%-44s %8s %8s %8s %10s\n", "launcher", "min", "median", "p99", "vs kcage");
  for (int r = 0; r < NROWS; r++) {
    if (rows[r].n == 0) {
      printf("%-44s %8s %8s %8s %10s\n", rows[r].name, "-", "-", "-",
             r == 1 && !with_bwrap ? "(no bwrap)" : "(failed)");
      continue;
    }
    double mn = kc_bench_quantile(rows[r].v, rows[r].n, 0) * 1e3;
    double med = kc_bench_quantile(rows[r].v, rows[r].n, 0.5) * 1e3;
    double p99 = kc_bench_quantile(rows[r].v, rows[r].n, 0.99) * 1e3;
    if (r == 0)
      kc_med = med;
    char ratio[32];
    snprintf(ratio, sizeof ratio, "%.2fx", med / kc_med);
    printf("%-44s %8.3f %8.3f %8.3f %10s\n", rows[r].name, mn, med, p99, ratio);
    static const char *const keys[] = {"kcage", "bwrap", "fork_exec", "kcage_cgroup"};
    char key[64];
    snprintf(key, sizeof key, "%s_median_ms", keys[r]);
    kc_bench_set("run", key, med);
    snprintf(key, sizeof key, "%s_p99_ms", keys[r]);
    kc_bench_set("run", key, p99);
    if (rows[r].failed)
      printf("  (%d failed launches left out)\n", rows[r].failed);
  }
  if (with_bwrap && rows[1].n) {
    double bw = kc_bench_quantile(rows[1].v, rows[1].n, 0.5) * 1e3;
    kc_bench_set("run", "bwrap_over_kcage", bw / kc_med);
    printf("kcage median is %s than bwrap's (%.2fx)\n", kc_med <= bw ? "faster" : "SLOWER",
           bw / kc_med);
  }
  for (int r = 0; r < NROWS; r++)
    free(rows[r].v);
  return kc_bench_write() < 0;
}
