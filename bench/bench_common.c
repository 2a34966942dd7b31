#include "bench_common.h"

#include <errno.h>
#include <jansson.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static json_t *pending;

double kc_measure_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double kc_measure_quantile(double *v, size_t n, double q) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof *v, cmp_double);
  size_t i = (size_t)(q * (double)(n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

static json_t *section(const char *name) {
  if (!pending)
    pending = json_object();
  json_t *s = json_object_get(pending, name);
  if (!s) {
    s = json_object();
    json_object_set_new(pending, name, s);
  }
  return s;
}

void kc_measure_set(const char *sec, const char *key, double value) {
  json_object_set_new(section(sec), key, json_real(value));
}

void kc_measure_set_str(const char *sec, const char *key, const char *value) {
  json_object_set_new(section(sec), key, json_string(value));
}

/* Where results.json goes: KC_BENCH_DIR, else beside the bench program itself
 * (build/bench), whatever directory it was started from. */
static const char *results_dir(char *buf, size_t cap) {
  const char *dir = getenv("KC_BENCH_DIR");
  if (dir)
    return dir;
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  char *slash = n > 0 ? memrchr(buf, '/', (size_t)n) : NULL;
  if (!slash)
    return "build/bench";
  *slash = 0;
  return buf;
}

int kc_measure_write(void) {
  char exe[4096];
  const char *dir = results_dir(exe, sizeof exe);
  if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "bench: mkdir %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char path[4096];
  if (snprintf(path, sizeof path, "%s/results.json", dir) >= (int)sizeof path) {
    fprintf(stderr, "bench: %s: path too long\n", dir);
    return -1;
  }
  json_t *all = json_load_file(path, 0, NULL);
  if (!json_is_object(all)) {
    json_decref(all);
    all = json_object();
  }
  if (pending)
    json_object_update(all, pending);
  int rc = json_dump_file(all, path, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(all);
  if (rc < 0)
    fprintf(stderr, "bench: cannot write %s\n", path);
  else
    printf("(figures merged into %s)\n", path);
  return rc;
}

static cpu_set_t g_all_cpus;
static int g_all_set;

int bench_cpus(int *cpus) {
  if (!g_all_set && sched_getaffinity(0, sizeof g_all_cpus, &g_all_cpus) == 0)
    g_all_set = 1;
  int n = 0;
  for (int c = 0; g_all_set && c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &g_all_cpus))
      cpus[n++] = c;
  return n;
}

void bench_pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  if (cpu >= 0)
    CPU_SET(cpu, &one);
  if (cpu >= 0 || g_all_set)
    sched_setaffinity(0, sizeof one, cpu >= 0 ? &one : &g_all_cpus);
}
