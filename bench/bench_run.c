/* `kcage run -- /bin/true` beside the peers that do comparable work, measured in one
 * run: bubblewrap with a typical read-only-root, all-namespaces configuration
 * (reference/sandboxes.md §3), `unshare -Upmnfiu --mount-proc -r` (namespaces and a
 * /proc, no file-system isolation), a plain fork+exec, and kcage with a cgroup.  Every
 * round launches each once in a freshly shuffled order, so machine noise and cache
 * warmth hit all alike.  Per launch: wall time from fork of the launcher until it is
 * reaped, and CPU time of the whole tree (an inherited task-clock counter, as `perf
 * stat` counts it).  Two floors (launch_floor.c) show what kcage's namespaces, and
 * its file system on top, cost by themselves here: no launcher doing that work can
 * be faster than they are. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
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
static const char *const unshare_argv[] = {"unshare", "-Upmnfiu",  "--mount-proc",
                                           "-r",      "/bin/true", NULL};
static const char *const plain_argv[] = {"/bin/true", NULL};
/* Other sandboxes packaged in Debian, in a configuration close to bwrap's above (every
 * namespace, the host's root read-only or a private home, a /proc); skipped with the
 * reason when not installed. */
static const char *const nsjail_argv[] = {"nsjail", "-Mo", "--quiet",   "--chroot",
                                          "/",      "--",  "/bin/true", NULL};
static const char *const firejail_argv[] = {"firejail",   "--quiet",   "--noprofile", "--private",
                                            "--net=none", "/bin/true", NULL};
static const char *const minijail_argv[] = {"minijail0", "-p",    "-v",        "-l", "-e",
                                            "-N",        "--uts", "/bin/true", NULL};
/* Floors: this program launching /bin/true with no more than one part of kcage's
 * isolation, to show what that part costs by itself on this machine (floor.c). */
static const char *const floor_ns_argv[] = {KC_BUILD_DIR "/bench/bench_run", "--floor", "ns", NULL};
static const char *const floor_fs_argv[] = {KC_BUILD_DIR "/bench/bench_run", "--floor", "fs", NULL};

/* $KC_BENCH_BASELINE: another kcage binary (a build from before a change) as one more
 * launcher, so a change is measured against its base in the same run. */
static const char *baseline_argv[] = {NULL, "run", "--", "/bin/true", NULL};

typedef struct launch_cost {
  double wall, cpu; /* seconds */
} launch_cost;

/* A task-clock counter on pid and, inherited, on every descendant it makes (what
 * `perf stat` counts): a launcher's rusage misses the descendants it does not wait for
 * itself (bwrap's sandbox init is reaped by no one in its tree).  Enabled at exec.
 * -1 when perf events are not permitted here; rusage is used then. */
static int tree_clock(pid_t pid) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.disabled = 1;
  a.enable_on_exec = 1;
  a.inherit = 1;
  return (int)syscall(SYS_perf_event_open, &a, pid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static bool use_perf = true; /* cleared at the first launch perf events refuse */

/* 0, or -1 when the launch failed. */
static int launch(const char *const *argv, launch_cost *c) {
  int go[2];
  if (pipe2(go, O_CLOEXEC) < 0)
    return -1;
  double t0 = kc_measure_now();
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    char b;
    close(go[1]);
    if (read(go[0], &b, 1) != 1)
      _exit(127);
    int dn = open("/dev/null", O_RDWR);
    if (dn >= 0) {
      dup2(dn, 0);
      dup2(dn, 1);
      dup2(dn, 2);
    }
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(go[0]);
  int clk = use_perf ? tree_clock(pid) : -1;
  if (clk < 0)
    use_perf = false;
  if (write(go[1], "g", 1) != 1)
    kill(pid, SIGKILL);
  close(go[1]);
  int st;
  struct rusage ru;
  while (wait4(pid, &st, 0, &ru) < 0)
    if (errno != EINTR)
      return -1;
  c->wall = kc_measure_now() - t0;
  uint64_t ns = 0;
  if (clk >= 0 && read(clk, &ns, sizeof ns) == (ssize_t)sizeof ns)
    c->cpu = (double)ns * 1e-9;
  else
    c->cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  if (clk >= 0)
    close(clk);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

typedef struct row {
  const char *name, *key;
  const char *const *argv;
  double *wall, *cpu, *ratio; /* ratio: this launch's wall over kcage's in the same round */
  size_t n;
  int failed;
  const char *skip; /* why the row is not measured, or NULL */
} row;

enum { KC = 0, NROWS = 11 };

/* Rows that are other sandboxes, for the ratio lines (not fork+exec, not kcage). */
static bool is_peer(const row *r) {
  return strcmp(r->key, "kcage") && strcmp(r->key, "kcage_cgroup") && strcmp(r->key, "fork_exec") &&
         strcmp(r->key, "kcage_baseline") && strncmp(r->key, "floor_", 6);
}

static void probe(row *r) {
  launch_cost c;
  if (launch(r->argv, &c) < 0)
    r->skip = "not installed or not permitted here";
}

static void shuffle(int *order, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = rand() % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

static void run_rounds(row *rows, size_t runs) {
  int order[NROWS];
  for (int r = 0; r < NROWS; r++)
    order[r] = r;
  for (size_t i = 0; i < runs; i++) {
    shuffle(order, NROWS);
    launch_cost c[NROWS];
    int ok[NROWS] = {0};
    for (int k = 0; k < NROWS; k++) {
      row *r = &rows[order[k]];
      if (r->skip)
        continue;
      ok[order[k]] = launch(r->argv, &c[order[k]]) == 0;
      if (!ok[order[k]])
        r->failed++;
    }
    for (int k = 0; k < NROWS; k++) {
      row *r = &rows[k];
      if (!ok[k])
        continue;
      r->wall[r->n] = c[k].wall;
      r->cpu[r->n] = c[k].cpu;
      r->ratio[r->n] = ok[KC] ? c[k].wall / c[KC].wall : 0;
      r->n++;
    }
  }
}

/* One line per peer that ran: how far kcage is ahead (or behind) in wall and CPU time. */
static void print_peer_ratios(row *rows) {
  double kc_cpu = kc_measure_quantile(rows[KC].cpu, rows[KC].n, 0.5);
  printf("kcage run -- /bin/true against each peer in this run (wall: median of per-round "
         "ratios; CPU: ratio of medians):\n");
  for (int k = 0; k < NROWS; k++) {
    row *r = &rows[k];
    if (!is_peer(r) || r->skip || r->n == 0) {
      if (is_peer(r))
        printf("  %-10s not measured: %s\n", r->key, r->skip ? r->skip : "every launch failed");
      continue;
    }
    double wall = kc_measure_quantile(r->ratio, r->n, 0.5);
    double cpu = kc_measure_quantile(r->cpu, r->n, 0.5) / kc_cpu;
    printf("  %-10s wall %5.2fx %-6s  CPU %5.2fx %s\n", r->key, wall,
           wall >= 1 ? "faster" : "slower", cpu, cpu >= 1 ? "less" : "more");
  }
}

/* The floors against unshare and kcage: what the same isolation costs at the least. */
static void print_floors(row *rows) {
  const row *un = NULL, *fs = NULL;
  for (int k = 0; k < NROWS; k++) {
    if (!strcmp(rows[k].key, "unshare"))
      un = &rows[k];
    if (!strcmp(rows[k].key, "floor_fs"))
      fs = &rows[k];
  }
  if (!un || !fs || un->skip || fs->skip || !un->n || !fs->n || !rows[KC].n)
    return;
  double fw = kc_measure_quantile(fs->wall, fs->n, 0.5),
         fc = kc_measure_quantile(fs->cpu, fs->n, 0.5);
  double uw = kc_measure_quantile(un->wall, un->n, 0.5),
         uc = kc_measure_quantile(un->cpu, un->n, 0.5);
  double kw = kc_measure_quantile(rows[KC].wall, rows[KC].n, 0.5);
  double kc = kc_measure_quantile(rows[KC].cpu, rows[KC].n, 0.5);
  printf("the floor with kcage's file system against unshare (no file-system isolation): wall "
         "%.2fx, CPU %.2fx; kcage over that floor: wall %.2fx, CPU %.2fx (medians)\n",
         fw / uw, fc / uc, kw / fw, kc / fc);
  kc_measure_set("run", "floor_fs_over_unshare_wall", fw / uw);
  kc_measure_set("run", "floor_fs_over_unshare_cpu", fc / uc);
  kc_measure_set("run", "kcage_over_floor_fs_wall", kw / fw);
  kc_measure_set("run", "kcage_over_floor_fs_cpu", kc / fc);
}

static void print_rows(row *rows, size_t runs) {
  double kc_cpu = kc_measure_quantile(rows[KC].cpu, rows[KC].n, 0.5);
  double kc_wall = kc_measure_quantile(rows[KC].wall, rows[KC].n, 0.5);
  printf("launch to reap, %zu rounds, each launcher once per round in a shuffled order (ms)\n",
         runs);
  printf("%-44s %7s %7s %7s %8s %9s %9s\n", "launcher", "min", "median", "p99", "CPU med",
         "wall/kc", "CPU/kc");
  for (int k = 0; k < NROWS; k++) {
    row *r = &rows[k];
    if (r->skip || r->n == 0) {
      printf("%-44s   skipped: %s\n", r->name, r->skip ? r->skip : "every launch failed");
      continue;
    }
    double mn = kc_measure_quantile(r->wall, r->n, 0) * 1e3;
    double med = kc_measure_quantile(r->wall, r->n, 0.5) * 1e3;
    double p99 = kc_measure_quantile(r->wall, r->n, 0.99) * 1e3;
    double cpu = kc_measure_quantile(r->cpu, r->n, 0.5) * 1e3;
    /* the median of the per-round ratios: robust to a slow stretch hitting one round */
    double ratio = kc_measure_quantile(r->ratio, r->n, 0.5);
    printf("%-44s %7.2f %7.2f %7.2f %8.2f %8.2fx %8.2fx\n", r->name, mn, med, p99, cpu, ratio,
           cpu / (kc_cpu * 1e3));
    char key[64];
    snprintf(key, sizeof key, "%s_median_ms", r->key);
    kc_measure_set("run", key, med);
    snprintf(key, sizeof key, "%s_p99_ms", r->key);
    kc_measure_set("run", key, p99);
    snprintf(key, sizeof key, "%s_cpu_median_ms", r->key);
    kc_measure_set("run", key, cpu);
    snprintf(key, sizeof key, "%s_over_kcage_wall", r->key);
    kc_measure_set("run", key, ratio);
    if (r->failed)
      printf("  (%d failed launches left out)\n", r->failed);
  }
  printf("(wall/kc: median over rounds of this launch's wall time over kcage's in the same "
         "round; CPU/kc: median CPU over kcage's; above 1 = kcage ahead.  CPU: %s)\n",
         use_perf ? "task-clock of the whole tree" : "rusage (no perf events here)");
  (void)kc_wall;
  print_peer_ratios(rows);
  print_floors(rows);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--floor"))
    return kc_measure_floor_launch(argv[2]);
  size_t runs = argc > 1 ? (size_t)atoi(argv[1]) : 300;
  if (runs < 10)
    runs = 10;
  srand((unsigned)time(NULL));
  row rows[NROWS] = {
      {"kcage run -- /bin/true", "kcage", kcage_argv, 0, 0, 0, 0, 0, 0},
      {"bwrap (ro /, all ns, --dev --proc --tmpfs)", "bwrap", bwrap_argv, 0, 0, 0, 0, 0, 0},
      {"unshare -Upmnfiu --mount-proc -r", "unshare", unshare_argv, 0, 0, 0, 0, 0, 0},
      {"fork+exec /bin/true", "fork_exec", plain_argv, 0, 0, 0, 0, 0, 0},
      {"kcage run --memory 256M --pids 64 (cgroup)", "kcage_cgroup", kcage_cg_argv, 0, 0, 0, 0, 0,
       0},
      {"nsjail -Mo --chroot /", "nsjail", nsjail_argv, 0, 0, 0, 0, 0, 0},
      {"firejail --noprofile --private --net=none", "firejail", firejail_argv, 0, 0, 0, 0, 0, 0},
      {"minijail0 -p -v -l -e -N --uts", "minijail", minijail_argv, 0, 0, 0, 0, 0, 0},
      {"kcage baseline ($KC_BENCH_BASELINE)", "kcage_baseline", baseline_argv, 0, 0, 0, 0, 0, 0},
      {"floor: kcage's namespaces + /proc, no more", "floor_ns", floor_ns_argv, 0, 0, 0, 0, 0, 0},
      {"floor: the same + kcage's file system", "floor_fs", floor_fs_argv, 0, 0, 0, 0, 0, 0}};
  baseline_argv[0] = getenv("KC_BENCH_BASELINE");
  for (int r = 0; r < NROWS; r++) {
    rows[r].wall = calloc(runs, sizeof(double));
    rows[r].cpu = calloc(runs, sizeof(double));
    rows[r].ratio = calloc(runs, sizeof(double));
    if (!rows[r].wall || !rows[r].cpu || !rows[r].ratio)
      return 1;
    if (rows[r].argv[0])
      probe(&rows[r]);
    else
      rows[r].skip = "$KC_BENCH_BASELINE not set";
  }
  if (rows[KC].skip) {
    fprintf(stderr, "bench_run: kcage run -- /bin/true fails here\n");
    return 1;
  }
  /* Warm-up: page cache, dynamic loader, cgroup hierarchy. */
  run_rounds(rows, 10);
  for (int r = 0; r < NROWS; r++)
    rows[r].n = 0, rows[r].failed = 0;
  run_rounds(rows, runs);
  print_rows(rows, runs);
  for (int r = 0; r < NROWS; r++) {
    free(rows[r].wall);
    free(rows[r].cpu);
    free(rows[r].ratio);
  }
  return kc_measure_write() < 0;
}
