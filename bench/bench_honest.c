/* bench_honest: no false alarms on a loaded machine.  Honest kernels from about 1 us to
 * about 100 ms per call go through the real `kcage bench` (every integrity defence on,
 * default settings: 5 timed rounds of at least 20 ms, 2 checks drawn per round), each
 * against itself as the reference, while this program keeps every CPU busy: one
 * process per CPU at normal priority for the whole run, each a busy loop but one, a
 * memory streamer (so every CPU has a competitor, and the last-level cache and memory
 * bus are shared with a copy loop).
 *
 * "20 runs of 20": every kernel `ok` in 20 runs out of 20.  A run measures the whole set
 * once, each kernel in its own `kcage bench`: a fresh worker, fresh secret inputs and
 * fresh draws of the checked calls, so each run is an independent trial of every
 * integrity check (the untimed round, the warm-up rounds and the timed rounds are all
 * verified against the reference: the table's "rounds" column).  Every status but `ok`
 * is a false alarm of the integrity checks; a record marked "unstable" is a false alarm
 * of the stability rule (--max-cv) unless the machine really made the rounds that
 * uneven (its rounds are printed): both are counted per kernel.
 *
 * KC_BENCH_HONEST_RUNS=N: N runs instead of 20.  KC_BENCH_HONEST_LOAD=0: no load (the
 * ctest smoke, which shares the machine with the rest of the suite).  Exit 1 when any
 * record's status is not `ok`. */
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "kcage/escape.h"

#define KCAGE_BIN KC_BUILD_DIR "/kcage"
#define MAX_RUNS 1000
#define MAX_LOAD 256
#define MAX_OTHER 12

typedef struct {
  const char *name; /* for the table and results.json */
  const char *kernel;
  const char *args;
  double secs[MAX_RUNS]; /* median_s of each ok run */
  unsigned n_secs, ok, unstable, rounds_min, rounds_max;
  double wall; /* seconds spent in its `kcage bench`, all runs */
  struct {
    char status[32];
    unsigned count;
  } other[MAX_OTHER]; /* the other statuses seen */
  unsigned n_other;
} hcase;

/* The known-work chain (256 dependent multiply-adds per element) at six speeds, the
 * 64x64 matmul that memoising attacks imitate, and a vector add of 1M floats (12 MiB
 * a call, bound by memory bandwidth: the largest tensors here, the heaviest fresh data
 * per call for the parent to write). */
static hcase cases[] = {
    {"chain 3 (~1 us)", "chain_f64.c", "f64[3] f64[3]:out"},
    {"chain 36 (~10 us)", "chain_f64.c", "f64[36] f64[36]:out"},
    {"chain 360 (~100 us)", "chain_f64.c", "f64[360] f64[360]:out"},
    {"chain 4000 (~1 ms)", "chain_f64.c", "f64[4000] f64[4000]:out"},
    {"chain 40000 (~10 ms)", "chain_f64.c", "f64[40000] f64[40000]:out"},
    {"chain 400000 (~100 ms)", "chain_f64.c", "f64[400000] f64[400000]:out"},
    {"matmul f32 64x64", "mm_f32.c", "f32[64,64] f32[64,64] f32[64,64]:out"},
    {"vadd f32 1M (memory)", "vadd_f32.c", "f32[1048576] f32[1048576] f32[1048576]:out"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static pid_t load_pids[MAX_LOAD];
static unsigned n_load;
static char tmpdir[256];
static volatile sig_atomic_t stop_sig; /* SIGINT or SIGTERM: end early, load stopped */

static void on_signal(int sig) {
  stop_sig = sig;
}

/* kcage's exit status; on SIGINT or SIGTERM it is asked to end (its finished records
 * stay), and waited for. */
static int wait_kcage(pid_t p) {
  int st;
  while (waitpid(p, &st, 0) < 0) {
    if (errno != EINTR)
      return -1;
    if (stop_sig)
      kill(p, SIGTERM);
  }
  return st;
}

static unsigned env_uint(const char *name, unsigned dflt, unsigned max) {
  const char *s = getenv(name);
  char *end;
  if (!s || !*s)
    return dflt;
  unsigned long v = strtoul(s, &end, 10);
  if (*end || v > max) {
    fprintf(stderr, "bench_honest: %s must be a number up to %u\n", name, max);
    exit(2);
  }
  return (unsigned)v;
}

/* The load, in children that die with this program. */
static void busy_loop(void) {
  volatile unsigned long x = 0;
  for (;;)
    x++;
}

/* Copies 64 MiB back and forth: more than a core's share of the last-level cache
 * bandwidth on most machines, and it evicts what the measured kernel keeps there. */
static void memory_streamer(void) {
  size_t n = 64u << 20;
  char *a = malloc(n), *b = malloc(n);
  if (!a || !b)
    _exit(1);
  memset(a, 1, n);
  for (;;) {
    memcpy(b, a, n);
    memcpy(a, b, n);
  }
}

/* n processes: n - 1 busy loops and a memory streamer. */
static void start_load(unsigned n) {
  for (unsigned i = 0; i < n && n_load < MAX_LOAD; i++) {
    pid_t p = fork();
    if (p < 0) {
      perror("bench_honest: fork");
      exit(1);
    }
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (i + 1 < n)
        busy_loop();
      memory_streamer();
    }
    load_pids[n_load++] = p;
  }
}

static void stop_load(void) {
  for (unsigned i = 0; i < n_load; i++)
    kill(load_pids[i], SIGKILL);
  for (unsigned i = 0; i < n_load; i++)
    waitpid(load_pids[i], NULL, 0);
  n_load = 0;
}

/* `kcage bench` on one case, its one record read back; NULL when kcage failed. */
static json_t *bench_once(const hcase *c, const char *json_path) {
  char kernel[1024], cache[512];
  snprintf(kernel, sizeof kernel, "%s/%s", KC_HONEST_DIR, c->kernel);
  snprintf(cache, sizeof cache, "%s/cache", tmpdir);
  unlink(json_path);
  pid_t p = fork();
  if (p == 0) {
    execl(KCAGE_BIN, "kcage", "bench", "--quiet", "--json", json_path, "--cache-dir", cache,
          "--args", c->args, "--reference", kernel, kernel, (char *)NULL);
    _exit(127);
  }
  int st = p < 0 ? -1 : wait_kcage(p);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    if (!stop_sig)
      fprintf(stderr, "bench_honest: %s: kcage bench failed\n", c->name);
    return NULL;
  }
  json_error_t je;
  json_t *r = json_load_file(json_path, JSON_DISABLE_EOF_CHECK, &je);
  if (!r)
    fprintf(stderr, "bench_honest: %s: %s\n", c->name, je.text);
  return r;
}

/* A status other than ok, counted into c->other. */
static void count_other(hcase *c, const char *status) {
  unsigned i = 0;
  while (i < c->n_other && strcmp(c->other[i].status, status))
    i++;
  if (i == c->n_other && i < MAX_OTHER)
    snprintf(c->other[c->n_other++].status, sizeof c->other[i].status, "%s", status);
  if (i < c->n_other)
    c->other[i].count++;
}

/* Rounds checked against the reference in one measurement. */
static unsigned rounds_of(json_t *r) {
  json_t *w = json_object_get(r, "warmup_secs");
  return 1 + (unsigned)json_array_size(w) +
         (unsigned)json_integer_value(json_object_get(r, "repeat"));
}

static void tally(hcase *c, unsigned run, json_t *r) {
  const char *status = json_string_value(json_object_get(r, "status"));
  const char *msg = json_string_value(json_object_get(r, "message"));
  status = status ? status : "(none)";
  if (strcmp(status, "ok")) {
    char esc[1024]; /* a record's message can quote the kernel */
    count_other(c, status);
    printf("  run %u: %s: %s: %s\n", run, c->name, kc_escape(status, esc, 64),
           kc_escape(msg ? msg : "", esc + 64, sizeof esc - 64));
    return;
  }
  c->ok++;
  c->secs[c->n_secs++] = json_number_value(json_object_get(r, "median_s"));
  unsigned rounds = rounds_of(r);
  c->rounds_min = !c->rounds_min || rounds < c->rounds_min ? rounds : c->rounds_min;
  c->rounds_max = rounds > c->rounds_max ? rounds : c->rounds_max;
  if (json_is_true(json_object_get(r, "unstable"))) {
    c->unstable++;
    printf("  run %u: %s: unstable, cv %.1f%%, rounds (us):", run, c->name,
           100 * json_number_value(json_object_get(r, "cv")));
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(r, "run_secs"), i, s)
        printf(" %.3g", 1e6 * json_number_value(s));
    printf("\n");
  }
}

static void fmt_secs(char *buf, size_t cap, double s) {
  if (!isfinite(s))
    snprintf(buf, cap, "-");
  else if (s < 1e-3)
    snprintf(buf, cap, "%.3g us", s * 1e6);
  else
    snprintf(buf, cap, "%.3g ms", s * 1e3);
}

/* One row: the median of the runs' medians, their range, ok out of runs, the rest. */
static void print_row(hcase *c, unsigned runs) {
  char med[32], lo[32], hi[32], range[80], ok[16], rounds[16];
  double m = c->n_secs ? kc_measure_quantile(c->secs, c->n_secs, 0.5) : NAN;
  fmt_secs(med, sizeof med, m);
  fmt_secs(lo, sizeof lo, c->n_secs ? c->secs[0] : NAN); /* sorted by the quantile */
  fmt_secs(hi, sizeof hi, c->n_secs ? c->secs[c->n_secs - 1] : NAN);
  snprintf(range, sizeof range, "%s .. %s", lo, hi);
  snprintf(ok, sizeof ok, "%u/%u", c->ok, runs);
  snprintf(rounds, sizeof rounds, "%u-%u", c->rounds_min, c->rounds_max);
  printf("%-24s %10s  %-22s %6.1f %6s %7s %9u  ", c->name, med, range, c->wall / runs, ok, rounds,
         c->unstable);
  for (unsigned i = 0; i < c->n_other; i++)
    printf("%s%s %u", i ? ", " : "", c->other[i].status, c->other[i].count);
  printf("%s\n", c->n_other ? "" : "-");
  kc_measure_set("honest", c->name, (double)c->ok / runs);
  char key[128];
  snprintf(key, sizeof key, "%s: unstable", c->name);
  kc_measure_set("honest", key, c->unstable);
  snprintf(key, sizeof key, "%s: median_s", c->name);
  kc_measure_set("honest", key, m);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void cleanup_tmp(void) {
  if (nftw(tmpdir, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
    fprintf(stderr, "bench_honest: could not remove %s\n", tmpdir);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* the false alarms as they happen */
  unsigned runs = env_uint("KC_BENCH_HONEST_RUNS", 20, MAX_RUNS);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned load = env_uint("KC_BENCH_HONEST_LOAD", 1, 1) ? (unsigned)(cpus > 0 ? cpus : 1) : 0;
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/kcage-bench-honest.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("bench_honest: mkdtemp");
    return 1;
  }
  char json[300];
  snprintf(json, sizeof json, "%s/rec.jsonl", tmpdir);
  if (load) {
    start_load(load);
    printf("load: one process per CPU at normal priority, for the whole run: %u busy loop(s) "
           "and one memory streamer (64 MiB memcpy)\n",
           load - 1);
  } else {
    printf("load: none (KC_BENCH_HONEST_LOAD=0)\n");
  }
  printf("%u runs of %zu honest kernels, each its own reference, kcage bench defaults\n", runs,
         N_CASES);
  double t0 = kc_measure_now();
  int failed = 0;
  struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: waitpid returns */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  for (unsigned r = 1; r <= runs && !stop_sig; r++) {
    for (size_t i = 0; i < N_CASES && !stop_sig; i++) {
      double w0 = kc_measure_now();
      json_t *rec = bench_once(&cases[i], json);
      cases[i].wall += kc_measure_now() - w0;
      if (!rec) {
        failed = 1;
        count_other(&cases[i], "kcage_failed");
        continue;
      }
      tally(&cases[i], r, rec);
      json_decref(rec);
    }
    fprintf(stderr, "bench_honest: run %u of %u done (%.0f s)\n", r, runs, kc_measure_now() - t0);
  }
  stop_load();
  cleanup_tmp();
  if (stop_sig) {
    fprintf(stderr, "bench_honest: interrupted\n");
    return 128 + stop_sig;
  }
  printf("\n%-24s %10s  %-22s %6s %6s %7s %9s  %s\n", "kernel", "per call", "range of medians",
         "s/run", "ok", "rounds", "unstable", "other verdicts");
  for (size_t i = 0; i < N_CASES; i++) {
    print_row(&cases[i], runs);
    failed |= cases[i].ok != runs;
  }
  printf("(%.0f s; per call: median of the runs' medians; s/run: wall seconds of one `kcage "
         "bench`; rounds: rounds verified against the reference per measurement; unstable: ok "
         "records whose rounds varied more than "
         "--max-cv)\n",
         kc_measure_now() - t0);
  kc_measure_set("honest", "runs", runs);
  kc_measure_set("honest", "load_processes", load);
  if (kc_measure_write() < 0)
    return 1;
  return failed;
}
