/* bench_speedup: does `kcage bench` give a tuner the speed-ups and rankings it would read
 * from an unsandboxed hot-loop harness?
 *
 * A tuner acts on ratios: how much faster a schedule is than a reference, and which of
 * several schedules is fastest.  Absolute times differ by layout (kcage's calls each read
 * inputs of their own and write outputs of their own; a hot loop calls the kernel on one
 * set of tensors, caches warm), so what must carry over is the ratio.
 *
 * Pairs: a reference and a variant of one kernel (matmul of 32x32 to 1024x1024, vector
 * adds of 1M and 16M, a reduction).  kcage's speed-up is the `speedup` field of the
 * variant's record in a batch run with --reference; the harness's is the ratio of its two
 * medians.  Each trial runs harness(reference), harness(variant), kcage, harness(variant),
 * harness(reference) on one CPU, so a drift linear over the trial cancels.
 *
 * The hot loop is one of the two layouts TVM's tuners time in.  The other, its
 * cache-flushed evaluator (enable_cpu_cache_flush), evicts the tensors before each call;
 * a second table reads each pair that way, against kcage with --flush-cache, and says
 * how far the harness's two readings of one pair part.  Where they part by more than
 * 5 %, agreement within 5 % with one of them is a choice of cache state, not a property
 * of the timer.
 *
 * Ranking: seven schedules of one matmul, in one kcage batch (as a tuner sends them) and
 * in the harness before and after it; Kendall's tau between the two orders, per run. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../measure/measure_internal.h"
#include "bench_common.h"
#include "bench_floor.h"
#include "kcage/measure.h"

#define HEAD                                                                                       \
  "#include <dlpack/dlpack.h>\n#include <stdint.h>\n#include <string.h>\n"                         \
  "typedef float v8 __attribute__((vector_size(32), aligned(4)));\n"
#define MM_OPEN                                                                                    \
  HEAD "int kernel(DLTensor *a, int32_t n) {\n"                                                    \
       "  if (n != 3) return -1;\n"                                                                \
       "  int64_t N = a[0].shape[0];\n"                                                            \
       "  const float *restrict A = a[0].data, *restrict B = a[1].data;\n"                         \
       "  float *restrict C = a[2].data;\n"
/* One dot product per output, B read down a column. */
#define MM_NAIVE                                                                                   \
  MM_OPEN "  for (int64_t i = 0; i < N; i++)\n"                                                    \
          "    for (int64_t j = 0; j < N; j++) {\n"                                                \
          "      float s = 0;\n"                                                                   \
          "      for (int64_t k = 0; k < N; k++) s += A[i * N + k] * B[k * N + j];\n"              \
          "      C[i * N + j] = s;\n"                                                              \
          "    }\n"                                                                                \
          "  return 0;\n}\n"
/* Column by column: every access strided. */
#define MM_JKI                                                                                     \
  MM_OPEN "  for (int64_t i = 0; i < N * N; i++) C[i] = 0;\n"                                      \
          "  for (int64_t j = 0; j < N; j++)\n"                                                    \
          "    for (int64_t k = 0; k < N; k++) {\n"                                                \
          "      float b = B[k * N + j];\n"                                                        \
          "      for (int64_t i = 0; i < N; i++) C[i * N + j] += A[i * N + k] * b;\n"              \
          "    }\n"                                                                                \
          "  return 0;\n}\n"
/* Row-wise updates, one row of C at a time (the compiler vectorizes the j loop). */
#define MM_IKJ                                                                                     \
  MM_OPEN "  for (int64_t i = 0; i < N; i++) {\n"                                                  \
          "    for (int64_t j = 0; j < N; j++) C[i * N + j] = 0;\n"                                \
          "    for (int64_t k = 0; k < N; k++) {\n"                                                \
          "      float x = A[i * N + k];\n"                                                        \
          "      for (int64_t j = 0; j < N; j++) C[i * N + j] += x * B[k * N + j];\n"              \
          "    }\n"                                                                                \
          "  }\n"                                                                                  \
          "  return 0;\n}\n"
/* Panels of 8*P columns held in registers over the whole k loop (P from the prefix). */
#define MM_PANEL                                                                                   \
  MM_OPEN "  for (int64_t j = 0; j < N; j += 8 * P)\n"                                             \
          "    for (int64_t i = 0; i < N; i++) {\n"                                                \
          "      v8 c[P] = {0};\n"                                                                 \
          "      for (int64_t k = 0; k < N; k++) {\n"                                              \
          "        float x = A[i * N + k];\n"                                                      \
          "        for (int p = 0; p < P; p++) {\n"                                                \
          "          v8 b; memcpy(&b, &B[k * N + j + 8 * p], 32); c[p] += x * b;\n"                \
          "        }\n"                                                                            \
          "      }\n"                                                                              \
          "      memcpy(&C[i * N + j], c, sizeof c);\n"                                            \
          "    }\n"                                                                                \
          "  return 0;\n}\n"
/* Row-wise updates, four rows of B per sweep of a row of C. */
#define MM_IKJ4                                                                                    \
  MM_OPEN "  for (int64_t i = 0; i < N; i++) {\n"                                                  \
          "    for (int64_t j = 0; j < N; j++) C[i * N + j] = 0;\n"                                \
          "    for (int64_t k = 0; k < N; k += 4) {\n"                                             \
          "      float x0 = A[i * N + k], x1 = A[i * N + k + 1], x2 = A[i * N + k + 2],\n"         \
          "            x3 = A[i * N + k + 3];\n"                                                   \
          "      for (int64_t j = 0; j < N; j++)\n"                                                \
          "        C[i * N + j] += x0 * B[k * N + j] + x1 * B[(k + 1) * N + j] +\n"                \
          "                        x2 * B[(k + 2) * N + j] + x3 * B[(k + 3) * N + j];\n"           \
          "    }\n"                                                                                \
          "  }\n"                                                                                  \
          "  return 0;\n}\n"
/* Blocks of two rows by 8*P columns held in registers over the whole k loop. */
#define MM_BLOCK2                                                                                  \
  MM_OPEN "  for (int64_t j = 0; j < N; j += 8 * P)\n"                                             \
          "    for (int64_t i = 0; i < N; i += 2) {\n"                                             \
          "      v8 c[2][P] = {0};\n"                                                              \
          "      for (int64_t k = 0; k < N; k++) {\n"                                              \
          "        float x0 = A[i * N + k], x1 = A[(i + 1) * N + k];\n"                            \
          "        for (int p = 0; p < P; p++) {\n"                                                \
          "          v8 b; memcpy(&b, &B[k * N + j + 8 * p], 32);\n"                               \
          "          c[0][p] += x0 * b; c[1][p] += x1 * b;\n"                                      \
          "        }\n"                                                                            \
          "      }\n"                                                                              \
          "      memcpy(&C[i * N + j], c[0], sizeof c[0]);\n"                                      \
          "      memcpy(&C[(i + 1) * N + j], c[1], sizeof c[1]);\n"                                \
          "    }\n"                                                                                \
          "  return 0;\n}\n"
#define VADD_OPEN                                                                                  \
  HEAD "int kernel(DLTensor *a, int32_t n) {\n"                                                    \
       "  if (n != 3) return -1;\n"                                                                \
       "  const float *restrict x = a[0].data, *restrict y = a[1].data;\n"                         \
       "  float *restrict o = a[2].data; int64_t m = a[0].shape[0];\n"
#define VADD_TWO_PASS                                                                              \
  VADD_OPEN "  for (int64_t i = 0; i < m; i++) o[i] = x[i];\n"                                     \
            "  for (int64_t i = 0; i < m; i++) o[i] += y[i];\n"                                    \
            "  return 0;\n}\n"
#define VADD_ONE_PASS                                                                              \
  VADD_OPEN "  for (int64_t i = 0; i < m; i++) o[i] = x[i] + y[i];\n"                              \
            "  return 0;\n}\n"
#define SUM_OPEN                                                                                   \
  HEAD "int kernel(DLTensor *a, int32_t n) {\n"                                                    \
       "  if (n != 2) return -1;\n"                                                                \
       "  const float *restrict x = a[0].data; int64_t m = a[0].shape[0], i = 0;\n"
/* One accumulator: bound by the latency of one add after another. */
#define SUM_SERIAL                                                                                 \
  SUM_OPEN "  double s = 0;\n"                                                                     \
           "  for (; i < m; i++) s += x[i];\n"                                                     \
           "  ((float *)a[1].data)[0] = (float)s;\n"                                               \
           "  return 0;\n}\n"
#define SUM_FOUR                                                                                   \
  SUM_OPEN "  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;\n"                                            \
           "  for (; i + 4 <= m; i += 4) {\n"                                                      \
           "    s0 += x[i]; s1 += x[i + 1]; s2 += x[i + 2]; s3 += x[i + 3];\n"                     \
           "  }\n"                                                                                 \
           "  for (; i < m; i++) s0 += x[i];\n"                                                    \
           "  ((float *)a[1].data)[0] = (float)(s0 + s1 + s2 + s3);\n"                             \
           "  return 0;\n}\n"

typedef struct pair {
  const char *name, *key, *args, *ref, *var;
  uint32_t repeat;
} pair;

#define MM_ARGS(n) "f32[" #n "," #n "] f32[" #n "," #n "] f32[" #n "," #n "]:out"
static const pair pairs[] = {
    {"matmul 32, panel/ikj", "mm_32", MM_ARGS(32), MM_IKJ, "#define P 2\n" MM_PANEL, 10},
    {"matmul 128, panel/ikj", "mm_128", MM_ARGS(128), MM_IKJ, "#define P 2\n" MM_PANEL, 10},
    {"matmul 256, panel/ikj", "mm_256", MM_ARGS(256), MM_IKJ, "#define P 2\n" MM_PANEL, 10},
    {"matmul 1024, panel/ikj", "mm_1024", MM_ARGS(1024), MM_IKJ, "#define P 2\n" MM_PANEL, 3},
    {"vadd 1M, 1 pass/2", "vadd_1m", "f32[1048576] f32[1048576] f32[1048576]:out", VADD_TWO_PASS,
     VADD_ONE_PASS, 10},
    {"vadd 16M, 1 pass/2", "vadd_16m", "f32[16777216] f32[16777216] f32[16777216]:out",
     VADD_TWO_PASS, VADD_ONE_PASS, 10},
    {"sum 1M, 4 acc/1", "sum_1m", "f32[1048576] f32[1]:out", SUM_SERIAL, SUM_FOUR, 10},
};

#define N_PAIRS (sizeof pairs / sizeof pairs[0])

typedef struct variant {
  const char *name, *src;
} variant;

#define RANK_ARGS MM_ARGS(128)
/* Seven schedules, each at least 1.25x from its neighbours in speed here (a ranking
 * of schedules a few percent apart says more about the minute than about kcage). */
static const variant ranked[] = {
    {"jki", MM_JKI},
    {"naive ijk", MM_NAIVE},
    {"ikj", MM_IKJ},
    {"ikj, k by 4", MM_IKJ4},
    {"panel 16", "#define P 2\n" MM_PANEL},
    {"panel 64", "#define P 8\n" MM_PANEL},
    {"block 2x16", "#define P 2\n" MM_BLOCK2},
};
#define N_RANKED (sizeof ranked / sizeof ranked[0])

#define TRIALS 3
#define RANK_RUNS 5
#define RANK_REPEAT 5
#define ROUND_S 0.02

static char tmpdir[256];
static int trial_cpus[CPU_SETSIZE], n_trial_cpus;

/* src built into tmpdir/<tag>.so (path in so). */
static void build(const char *src_text, const char *tag, char *so, size_t so_len) {
  char src[512], cache[512];
  snprintf(src, sizeof src, "%s/%s.c", tmpdir, tag);
  snprintf(so, so_len, "%s/%s.so", tmpdir, tag);
  snprintf(cache, sizeof cache, "%s/cache", tmpdir);
  kc_error err = {0};
  kc_build_opts bo = {.cache_dir = cache};
  kc_build_result br = {0};
  char *data = NULL;
  size_t len;
  if (kc_write_file(src, src_text, strlen(src_text), 0644, &err) < 0 ||
      kc_build_kernel(&bo, src, &br, &err) < 0 ||
      (br.status != KC_BUILD_OK && br.status != KC_BUILD_CACHED) ||
      kc_read_file(br.artifact, &data, &len, 1u << 30, &err) < 0 ||
      kc_write_file(so, data, len, 0644, &err) < 0) {
    fprintf(stderr, "bench_speedup: build %s: %s %s\n", tag, err.msg, br.message);
    exit(1);
  }
  free(data);
}

typedef int (*kernel_fn)(DLTensor *, int32_t);

/* The hot-loop harness, as a tuner's in-process timer runs a kernel: one set of tensors,
 * allocated once, called `number` times back to back between two clock reads. */
typedef struct hot {
  kc_args_spec spec;
  kernel_fn fn;
  void *buf[KC_ARGS_MAX_TENSORS];
  DLTensor t[KC_ARGS_MAX_TENSORS];
  uint64_t number;
} hot;

static void hot_open(hot *h, const char *so, const char *args) {
  h->fn = floor_kernel_open(so, args, &h->spec, "bench_speedup");
  for (uint32_t i = 0; i < h->spec.n; i++) {
    const kc_tensor_spec *ts = &h->spec.t[i];
    h->buf[i] = aligned_alloc(64, (ts->nbytes + 63) / 64 * 64);
    if (!h->buf[i]) {
      fprintf(stderr, "bench_speedup: out of memory\n");
      exit(1);
    }
    if (ts->out)
      memset(h->buf[i], 0, ts->nbytes);
    else
      kc_data_fill(ts, h->buf[i], 7, 0, i);
    h->t[i] = (DLTensor){.data = h->buf[i],
                         .device = {kDLCPU, 0},
                         .ndim = ts->ndim,
                         .dtype = ts->dtype,
                         .shape = (int64_t *)ts->shape};
  }
  h->number = 0;
}

static double hot_round(hot *h, uint64_t number) {
  double t0 = kc_measure_now();
  for (uint64_t c = 0; c < number; c++)
    h->fn(h->t, (int32_t)h->spec.n);
  return (kc_measure_now() - t0) / (double)number;
}

/* Median seconds per call over `repeat` rounds of at least ROUND_S, after warm rounds. */
static double hot_trial(hot *h, uint32_t repeat) {
  if (!h->number) {
    double per = hot_round(h, 1);
    h->number = per > 0 ? (uint64_t)ceil(ROUND_S / per) : 1;
  }
  for (int w = 0; w < 2; w++)
    hot_round(h, h->number);
  double v[64];
  for (uint32_t r = 0; r < repeat && r < 64; r++)
    v[r] = hot_round(h, h->number);
  return kc_measure_quantile(v, repeat < 64 ? repeat : 64, 0.5);
}

/* TVM's cache-flushed evaluator (enable_cpu_cache_flush: number 1, the tensors evicted
 * with clflush before each call, outside the clock), the other layout TVM's tuners time
 * in.  It evicts every tensor, the output too, as kcage's --flush-cache does; TVM's
 * cache_flush_cpu_non_first_arg spares the first argument.  One call per clock pair,
 * the pair's own cost (pair_s) taken off. */
static void flush_tensors(const hot *h) {
#if defined(__x86_64__)
  for (uint32_t i = 0; i < h->spec.n; i++)
    for (uint64_t o = 0; o < h->spec.t[i].nbytes; o += 64)
      __builtin_ia32_clflush((const char *)h->buf[i] + o);
  __builtin_ia32_mfence();
#else
  (void)h;
#endif
}

static double clock_pair_s(void) {
  double v[1001];
  for (int i = 0; i < 1001; i++) {
    double t0 = kc_measure_now();
    v[i] = kc_measure_now() - t0;
  }
  return kc_measure_quantile(v, 1001, 0.5);
}

static double cold_round(hot *h, uint64_t number, double pair_s) {
  double sum = 0;
  for (uint64_t c = 0; c < number; c++) {
    flush_tensors(h);
    double t0 = kc_measure_now();
    h->fn(h->t, (int32_t)h->spec.n);
    sum += kc_measure_now() - t0 - pair_s;
  }
  return sum / (double)number;
}

/* Median seconds per flushed call over `repeat` rounds of at least ROUND_S of calls. */
static double cold_trial(hot *h, uint32_t repeat, double pair_s) {
  double per = cold_round(h, 1, pair_s);
  uint64_t number = per > 0 ? (uint64_t)ceil(ROUND_S / per) : 1;
  double v[64];
  for (uint32_t r = 0; r < repeat && r < 64; r++)
    v[r] = cold_round(h, number, pair_s);
  return kc_measure_quantile(v, repeat < 64 ? repeat : 64, 0.5);
}

/* kcage's round layout run in this process (bench_floor.h), as many calls a round as the
 * harness makes: median seconds per call. */
static double floor_trial(hot *h, uint32_t repeat, double per_call) {
  floor_round f;
  floor_alloc(&f, &h->spec, h->fn, h->number, 0, per_call, 4);
  for (int w = 0; w < 2; w++)
    floor_round_once(&f, (uint64_t)w);
  double v[64];
  for (uint32_t r = 0; r < repeat && r < 64; r++)
    v[r] = floor_round_once(&f, 100 + r);
  floor_free(&f);
  return kc_measure_quantile(v, repeat < 64 ? repeat : 64, 0.5);
}

static void hot_close(hot *h) {
  for (uint32_t i = 0; i < h->spec.n; i++)
    free(h->buf[i]);
}

/* One kcage batch: kernels (n of them) with an optional reference; the records. */
static json_t *kcage_batch(const char *args, const char *ref, const char *const *k, size_t n,
                           uint32_t repeat, int cpu, bool flush) {
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.args = args;
  cfg.reference = ref;
  cfg.rtol = 1e-3; /* schedules sum in different orders */
  cfg.atol = 1e-3;
  cfg.repeat = repeat;
  cfg.memory_bytes = 2ull << 30;
  cfg.timeout_s = 60;
  cfg.pin_cpu = cpu >= 0;
  cfg.cpu = cpu >= 0 ? (uint32_t)cpu : 0;
  cfg.flush_cache = flush;
  json_t *recs;
  kc_error err = {0};
  if (kc_measure_run_batch(&cfg, k, n, &recs, &err) < 0) {
    fprintf(stderr, "bench_speedup: %s: %s\n", args, err.msg);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    json_t *r = json_array_get(recs, i);
    if (strcmp(json_string_value(json_object_get(r, "status")), "ok")) {
      fprintf(stderr, "bench_speedup: %s: %s\n", k[i],
              json_string_value(json_object_get(r, "message")));
      exit(1);
    }
  }
  return recs;
}

static void set_result(const char *key, const char *what, double v) {
  char k[96];
  snprintf(k, sizeof k, "%s_%s", key, what);
  kc_measure_set("speedup", k, v);
}

/* The harness's speed-up from its reference's and variant's trials on either side of
 * kcage (geometric means: a drift linear over the trial cancels); *hr, *hv: those means. */
static double harness_speedup(double r1, double r2, double v1, double v2, double *hr, double *hv) {
  *hr = sqrt(r1 * r2);
  *hv = sqrt(v1 * v2);
  return *hr / *hv;
}

/* kcage's speed-up of the pair's variant over its reference, from one batch on cpu
 * (--flush-cache with flush); *kr, *kv: the two medians. */
static double kcage_speedup(const pair *p, const char *ref_so, const char *var_so, int cpu,
                            bool flush, double *kr, double *kv) {
  const char *k[1] = {var_so};
  json_t *recs = kcage_batch(p->args, ref_so, k, 1, p->repeat, cpu, flush);
  json_t *rec = json_array_get(recs, 0);
  double sp = json_number_value(json_object_get(rec, "speedup"));
  *kr = json_number_value(json_object_get(rec, "reference_median_s"));
  *kv = json_number_value(json_object_get(rec, "median_s"));
  json_decref(recs);
  return sp;
}

/* The pair's two kernels built into tmpdir/<prefix><idx>_{ref,var}.so (paths in ref_so and
 * var_so, 512 bytes each) and opened for the harness. */
static void open_pair(const pair *p, char prefix, size_t idx, char *ref_so, char *var_so, hot *hr,
                      hot *hv) {
  char tag[64];
  snprintf(tag, sizeof tag, "%c%zu_ref", prefix, idx);
  build(p->ref, tag, ref_so, 512);
  snprintf(tag, sizeof tag, "%c%zu_var", prefix, idx);
  build(p->var, tag, var_so, 512);
  hot_open(hr, ref_so, p->args);
  hot_open(hv, var_so, p->args);
}

/* One pair: TRIALS trials; returns true when kcage's speed-up is within 5 % of the
 * harness's (median over trials); *floor_ok: within 5 % of the floor's; *hot_h, *kc:
 * the harness's speed-up and kcage's. */
static bool run_pair(const pair *p, size_t idx, bool *floor_ok, double *hot_h, double *kc) {
  char ref_so[512], var_so[512];
  hot hr, hv;
  open_pair(p, 'p', idx, ref_so, var_so, &hr, &hv);
  double ks[TRIALS], hs[TRIALS], fs[TRIALS], q[TRIALS], kr[TRIALS], kv[TRIALS], hr_s[TRIALS],
      hv_s[TRIALS];
  for (int t = 0; t < TRIALS; t++) {
    int cpu = n_trial_cpus >= 2 ? trial_cpus[t % n_trial_cpus] : -1;
    bench_pin(cpu);
    double r1 = hot_trial(&hr, p->repeat), v1 = hot_trial(&hv, p->repeat);
    bench_pin(-1);
    ks[t] = kcage_speedup(p, ref_so, var_so, cpu, false, &kr[t], &kv[t]);
    bench_pin(cpu);
    double fv = floor_trial(&hv, p->repeat, v1), fr = floor_trial(&hr, p->repeat, r1);
    double v2 = hot_trial(&hv, p->repeat), r2 = hot_trial(&hr, p->repeat);
    bench_pin(-1);
    fs[t] = fr / fv;
    hs[t] = harness_speedup(r1, r2, v1, v2, &hr_s[t], &hv_s[t]);
    q[t] = ks[t] / hs[t];
  }
  hot_close(&hr);
  hot_close(&hv);
  double k = kc_measure_quantile(ks, TRIALS, 0.5), h = kc_measure_quantile(hs, TRIALS, 0.5);
  double r = kc_measure_quantile(q, TRIALS, 0.5), fl = kc_measure_quantile(fs, TRIALS, 0.5);
  bool ok = fabs(r - 1) <= 0.05;
  *floor_ok = fabs(k / fl - 1) <= 0.05;
  *hot_h = h;
  *kc = k;
  /* each side's medians over trials: which of the two times moves the ratio */
  double mkr = kc_measure_quantile(kr, TRIALS, 0.5), mkv = kc_measure_quantile(kv, TRIALS, 0.5);
  double mhr = kc_measure_quantile(hr_s, TRIALS, 0.5), mhv = kc_measure_quantile(hv_s, TRIALS, 0.5);
  printf("  %-24s %8.3fx %8.3fx %8.4f  [%.3f..%.3f]  %-9s  %8.3fx %8.4f  %10.1f %10.1f %10.1f "
         "%10.1f\n",
         p->name, k, h, r, q[0], q[TRIALS - 1], ok ? "yes" : "NO", fl, k / fl, mkr * 1e6, mhr * 1e6,
         mkv * 1e6, mhv * 1e6);
  fflush(stdout);
  set_result(p->key, "kcage", k);
  set_result(p->key, "harness", h);
  set_result(p->key, "ratio", r);
  set_result(p->key, "floor", fl);
  return ok;
}

/* One pair in the cache-flushed layout: TRIALS trials of cold harness(reference),
 * cold harness(variant), kcage --flush-cache, cold harness(variant), cold
 * harness(reference) on one CPU.  hot_h: the hot loop's speed-up for the pair (run_pair),
 * to show how far TVM's two layouts of one harness part.  Returns true when kcage's
 * speed-up is within 5 % of the cold harness's; *cold_h: the cold harness's. */
static bool run_cold_pair(const pair *p, size_t idx, double hot_h, double *cold_h) {
  char ref_so[512], var_so[512];
  hot hr, hv;
  open_pair(p, 'c', idx, ref_so, var_so, &hr, &hv); /* not run_pair's files: those stay mapped */
  double ks[TRIALS], hs[TRIALS], q[TRIALS], hr_s[TRIALS], hv_s[TRIALS], kr[TRIALS], kv[TRIALS];
  for (int t = 0; t < TRIALS; t++) {
    int cpu = n_trial_cpus >= 2 ? trial_cpus[t % n_trial_cpus] : -1;
    bench_pin(cpu);
    double pair_s = clock_pair_s();
    double r1 = cold_trial(&hr, p->repeat, pair_s), v1 = cold_trial(&hv, p->repeat, pair_s);
    bench_pin(-1);
    ks[t] = kcage_speedup(p, ref_so, var_so, cpu, true, &kr[t], &kv[t]);
    bench_pin(cpu);
    double v2 = cold_trial(&hv, p->repeat, pair_s), r2 = cold_trial(&hr, p->repeat, pair_s);
    bench_pin(-1);
    hs[t] = harness_speedup(r1, r2, v1, v2, &hr_s[t], &hv_s[t]);
    q[t] = ks[t] / hs[t];
  }
  hot_close(&hr);
  hot_close(&hv);
  double k = kc_measure_quantile(ks, TRIALS, 0.5), h = kc_measure_quantile(hs, TRIALS, 0.5);
  double r = kc_measure_quantile(q, TRIALS, 0.5);
  bool ok = fabs(r - 1) <= 0.05;
  *cold_h = h;
  printf("  %-24s %8.3fx %8.3fx %8.4f  [%.3f..%.3f]  %-9s  %8.3fx %8.3f  %10.1f %10.1f %10.1f "
         "%10.1f\n",
         p->name, k, h, r, q[0], q[TRIALS - 1], ok ? "yes" : "NO", hot_h, hot_h / h,
         kc_measure_quantile(kr, TRIALS, 0.5) * 1e6, kc_measure_quantile(hr_s, TRIALS, 0.5) * 1e6,
         kc_measure_quantile(kv, TRIALS, 0.5) * 1e6, kc_measure_quantile(hv_s, TRIALS, 0.5) * 1e6);
  fflush(stdout);
  set_result(p->key, "cold_kcage", k);
  set_result(p->key, "cold_harness", h);
  set_result(p->key, "cold_ratio", r);
  set_result(p->key, "hot_over_cold_harness", hot_h / h);
  return ok;
}

/* Kendall's tau-a between two orderings of the same n items (by their values). */
static double kendall_tau(const double *a, const double *b, size_t n) {
  long s = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++) {
      double x = (a[i] - a[j]) * (b[i] - b[j]);
      s += x > 0 ? 1 : x < 0 ? -1 : 0;
    }
  return (double)s / (double)(n * (n - 1) / 2);
}

/* RANK_RUNS runs: each the harness over every variant, one kcage batch of them all,
 * the harness again in reverse order; tau between kcage's medians and the harness's
 * (geometric mean of its two passes). */
static double run_ranking(void) {
  char so[N_RANKED][512], tag[32];
  const char *k[N_RANKED];
  hot h[N_RANKED];
  for (size_t i = 0; i < N_RANKED; i++) {
    snprintf(tag, sizeof tag, "r%zu", i);
    build(ranked[i].src, tag, so[i], sizeof so[i]);
    k[i] = so[i];
    hot_open(&h[i], so[i], RANK_ARGS);
  }
  double kt[RANK_RUNS][N_RANKED], ht[RANK_RUNS][N_RANKED], tau[RANK_RUNS], worst = 1;
  for (int run = 0; run < RANK_RUNS; run++) {
    int cpu = n_trial_cpus >= 2 ? trial_cpus[run % n_trial_cpus] : -1;
    double h1[N_RANKED];
    bench_pin(cpu);
    for (size_t i = 0; i < N_RANKED; i++)
      h1[i] = hot_trial(&h[i], RANK_REPEAT);
    bench_pin(-1);
    json_t *recs = kcage_batch(RANK_ARGS, NULL, k, N_RANKED, RANK_REPEAT, cpu, false);
    for (size_t i = 0; i < N_RANKED; i++)
      kt[run][i] = json_number_value(json_object_get(json_array_get(recs, i), "median_s"));
    json_decref(recs);
    bench_pin(cpu);
    for (size_t i = N_RANKED; i-- > 0;)
      ht[run][i] = sqrt(h1[i] * hot_trial(&h[i], RANK_REPEAT));
    bench_pin(-1);
    tau[run] = kendall_tau(kt[run], ht[run], N_RANKED);
    worst = tau[run] < worst ? tau[run] : worst;
    printf("  run %d: tau %.3f  kcage/harness us:", run + 1, tau[run]);
    for (size_t i = 0; i < N_RANKED; i++)
      printf(" %s %.1f/%.1f", ranked[i].name, kt[run][i] * 1e6, ht[run][i] * 1e6);
    printf("\n");
    fflush(stdout);
    char key[32];
    snprintf(key, sizeof key, "rank_tau_run%d", run + 1);
    kc_measure_set("speedup", key, tau[run]);
  }
  for (size_t i = 0; i < N_RANKED; i++)
    hot_close(&h[i]);
  kc_measure_set("speedup", "rank_tau_min", worst);
  return worst;
}

/* A pair table's column names; a and b name its two columns of comparison. */
static void table_head(const char *a, const char *b) {
  printf("  %-24s %9s %9s %8s  %-15s  %-9s  %9s %8s  %10s %10s %10s %10s\n", "pair", "kcage",
         "harness", "ratio", "[trials]", "within 5%", a, b, "ref kc us", "ref h us", "var kc us",
         "var h us");
}

/* The same pairs in the layout TVM's cache-flushed evaluator times: kcage with
 * --flush-cache against that harness, how far the harness's own two layouts part, and
 * whether kcage's default speed-up (kc, the first table's) lies within 5 % of the span
 * between them: no further from one of TVM's readings than they are from each other. */
static void cold_table(const char *only, const double *hot_h, const double *kc) {
  printf("cache-flushed: kcage --flush-cache's speed-ups against the same harness's with every "
         "tensor evicted (clflush) before each call, outside the clock (TVM's "
         "enable_cpu_cache_flush), %d trials each cold harness(ref), cold harness(variant), "
         "kcage, cold harness(variant), cold harness(ref) on one CPU, the CPUs in turn; target "
         "within 5 %%\n",
         TRIALS);
  table_head("hot h", "hot/cold");
  printf("  (hot h: the hot loop's speed-up from the table above; hot/cold: it over the cold "
         "harness's, how far TVM's two layouts of one harness part for the pair)\n");
  int within = 0, n = 0, apart = 0, spanned = 0;
  for (size_t i = 0; i < N_PAIRS; i++)
    if (!only || strstr(pairs[i].key, only)) {
      double h;
      within += run_cold_pair(&pairs[i], i, hot_h[i], &h);
      n++;
      apart += h > 0 && fabs(hot_h[i] / h - 1) > 0.05;
      double lo = h < hot_h[i] ? h : hot_h[i], hi = h < hot_h[i] ? hot_h[i] : h;
      spanned += kc[i] >= 0.95 * lo && kc[i] <= 1.05 * hi;
    }
  printf("  pairs within 5 %% of the cold harness: %d of %d; pairs whose hot and cold harness "
         "speed-ups part by more than 5 %%: %d of %d; pairs whose kcage speed-up (first table) "
         "lies within 5 %% of the span between them: %d of %d\n",
         within, n, apart, n, spanned, n);
  kc_measure_set("speedup", "cold_pairs_within_5pct", within);
  kc_measure_set("speedup", "harness_layouts_apart_5pct", apart);
  kc_measure_set("speedup", "pairs_within_harness_span", spanned);
}

int main(int argc, char **argv) {
  const char *t = getenv("TMPDIR"), *only = argc > 1 ? argv[1] : NULL;
  snprintf(tmpdir, sizeof tmpdir, "%s/kcage-bench-speedup.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  chmod(tmpdir, 0755); /* the worker's user must reach the .so */
  n_trial_cpus = bench_cpus(trial_cpus);
  printf("speed-ups: kcage's (record `speedup`, batch with --reference) against an unsandboxed "
         "hot-loop harness's (one set of tensors, calls back to back), %d trials each "
         "harness(ref), harness(variant), kcage, floor(variant), floor(ref), harness(variant), "
         "harness(ref) on one CPU, "
         "the CPUs in turn; ratio = median of kcage's speed-up over the harness's; target "
         "within 5 %%\n",
         TRIALS);
  table_head("floor", "kc/floor");
  printf("  (floor: the speed-up read from kcage's round layout run in this process, no "
         "sandbox; kc/floor: kcage's over it, what the sandbox does to the speed-up; "
         "kcage/floor/harness medians over trials)\n");
  int within = 0, within_floor = 0, n_pairs = 0;
  double hot_h[N_PAIRS], kc[N_PAIRS];
  for (size_t i = 0; i < N_PAIRS; i++)
    if (!only || strstr(pairs[i].key, only)) {
      bool fok;
      within += run_pair(&pairs[i], i, &fok, &hot_h[i], &kc[i]);
      within_floor += fok;
      n_pairs++;
    }
  if (n_pairs)
    printf("  pairs within 5 %% of the harness: %d of %d (target: at least 6); of the floor (the "
           "same layout, no sandbox): %d of %d\n",
           within, n_pairs, within_floor, n_pairs);
  kc_measure_set("speedup", "pairs_within_5pct", within);
  kc_measure_set("speedup", "pairs_within_5pct_of_floor", within_floor);
  if (n_pairs)
    cold_table(only, hot_h, kc);
  if (!only || strstr("rank", only)) {
    printf("ranking: %zu matmul 128x128 schedules, kcage's medians (one batch) against the "
           "harness's (before and after it), Kendall tau per run; target >= 0.9 in each of "
           "%d\n",
           N_RANKED, RANK_RUNS);
    double w = run_ranking();
    printf("  lowest tau: %.3f (%s)\n", w, w >= 0.9 ? "yes" : "NO");
  }
  kc_rm_rf(tmpdir);
  return kc_measure_write() < 0;
}
