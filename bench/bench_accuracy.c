/* bench_accuracy: does `kcage bench` read what a kernel costs, at every size?
 * The same .so is timed by a minimal unsandboxed harness (dlopen, four rotating input/
 * output sets, the output poisoned before each call and the clock read around the call
 * alone, each set's tensors laid out as kcage lays them out, allocated afresh each trial)
 * and by `kcage bench` (sandboxed worker, every integrity defence on), with the same
 * `number` and `repeat`, in trials of harness, floor, kcage, harness, harness, harness.
 * Printed: the median ratio kcage/harness per case (target within 2 %), split into what
 * kcage's round layout costs by itself (a floor: that round run in this process,
 * floor_round) and what the sandbox adds to it, and beside it the same ratio for a harness
 * trial in kcage's place (A/A): what this method reads for a candidate with no cost of its
 * own, the resolution of the table.  One more case keeps malloc's layout in the harness,
 * to show what a layout costs (harness_alloc). */
#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../measure/measure_internal.h"
#include "../measure/measure_kernel.h"
#include "bench_common.h"
#include "bench_floor.h"
#include "kcage/measure.h"

#define MATMUL_SRC                                                                                 \
  "#include <dlpack/dlpack.h>\n#include <stdint.h>\n#include <string.h>\n"                         \
  "typedef float v8 __attribute__((vector_size(32), aligned(4)));\n"                               \
  "int kernel(DLTensor *a, int32_t n) {\n"                                                         \
  "  if (n != 3) return -1;\n"                                                                     \
  "  int64_t N = a[0].shape[0];\n"                                                                 \
  "  const float *restrict A = a[0].data, *restrict B = a[1].data;\n"                              \
  "  float *restrict C = a[2].data;\n"                                                             \
  "  for (int64_t j = 0; j < N; j += 16)\n"                                                        \
  "    for (int64_t i = 0; i < N; i++) {\n"                                                        \
  "      v8 c0 = {0}, c1 = {0};\n"                                                                 \
  "      for (int64_t k = 0; k < N; k++) {\n"                                                      \
  "        v8 b0, b1; float x = A[i * N + k];\n"                                                   \
  "        memcpy(&b0, &B[k * N + j], 32); memcpy(&b1, &B[k * N + j + 8], 32);\n"                  \
  "        c0 += x * b0; c1 += x * b1;\n"                                                          \
  "      }\n"                                                                                      \
  "      memcpy(&C[i * N + j], &c0, 32); memcpy(&C[i * N + j + 8], &c1, 32);\n"                    \
  "    }\n"                                                                                        \
  "  return 0;\n"                                                                                  \
  "}\n"
#define VADD_SRC                                                                                   \
  "#include <dlpack/dlpack.h>\n#include <stdint.h>\n"                                              \
  "int kernel(DLTensor *a, int32_t n) {\n"                                                         \
  "  if (n != 3) return -1;\n"                                                                     \
  "  const float *restrict x = a[0].data, *restrict y = a[1].data; float *restrict o = "           \
  "a[2].data;\n"                                                                                   \
  "  for (int64_t i = 0; i < a[0].shape[0]; i++) o[i] = x[i] + y[i];\n"                            \
  "  return 0;\n"                                                                                  \
  "}\n"
#define MEMSET_SRC                                                                                 \
  "#include <dlpack/dlpack.h>\n#include <stdint.h>\n"                                              \
  "int kernel(DLTensor *a, int32_t n) {\n"                                                         \
  "  if (n != 2) return -1;\n"                                                                     \
  "  float v = ((const float *)a[0].data)[0], *restrict o = a[1].data;\n"                          \
  "  for (int64_t i = 0; i < a[1].shape[0]; i++) o[i] = v;\n"                                      \
  "  return 0;\n"                                                                                  \
  "}\n"
#define SUM_SRC                                                                                    \
  "#include <dlpack/dlpack.h>\n#include <stdint.h>\n"                                              \
  "int kernel(DLTensor *a, int32_t n) {\n"                                                         \
  "  if (n != 2) return -1;\n"                                                                     \
  "  const float *restrict x = a[0].data; double s0 = 0, s1 = 0, s2 = 0, s3 = 0;\n"                \
  "  int64_t m = a[0].shape[0], i = 0;\n"                                                          \
  "  for (; i + 4 <= m; i += 4) { s0 += x[i]; s1 += x[i + 1]; s2 += x[i + 2]; s3 += x[i + 3]; }\n" \
  "  for (; i < m; i++) s0 += x[i];\n"                                                             \
  "  ((float *)a[1].data)[0] = (float)(s0 + s1 + s2 + s3);\n"                                      \
  "  return 0;\n"                                                                                  \
  "}\n"

typedef struct bcase {
  const char *name, *key, *args, *src;
  uint32_t repeat;
  bool malloced; /* the harness mallocs each tensor (else it lays them out as kcage does) */
} bcase;

static const bcase cases[] = {
    {"f32 matmul 32x32", "matmul_32", "f32[32,32] f32[32,32] f32[32,32]:out", MATMUL_SRC, 30},
    {"f32 matmul 256x256", "matmul_256", "f32[256,256] f32[256,256] f32[256,256]:out", MATMUL_SRC,
     30},
    {"f32 matmul 1024x1024", "matmul_1024", "f32[1024,1024] f32[1024,1024] f32[1024,1024]:out",
     MATMUL_SRC, 5},
    {"vector add 1M", "vadd_1m", "f32[1048576] f32[1048576] f32[1048576]:out", VADD_SRC, 30},
    {"vector add 16M", "vadd_16m", "f32[16777216] f32[16777216] f32[16777216]:out", VADD_SRC, 30},
    {"vector add 16M, malloc", "vadd_16m_malloc", "f32[16777216] f32[16777216] f32[16777216]:out",
     VADD_SRC, 30, true},
    {"memset 4 MiB", "memset_4mib", "f32[1] f32[1048576]:out", MEMSET_SRC, 30},
    {"sum of 1M to a scalar", "sum_1m", "f32[1048576] f32[1]:out", SUM_SRC, 30},
};

#define SETS 4
#define TRIALS 5
#define ROUND_S 0.02

static char tmpdir[256];

static int trial_cpus[CPU_SETSIZE], n_trial_cpus;

typedef int (*kernel_fn)(DLTensor *, int32_t);

/* The harness: everything but the call outside the clock. */
typedef struct harness {
  const char *so, *args; /* the kernel and its --args */
  kc_args_spec spec;
  kernel_fn fn;
  bool malloced;
  unsigned char *set[SETS]; /* laid out: one mapping a set, inputs' region then outputs' */
  unsigned char *buf[SETS][KC_ARGS_MAX_TENSORS];
  DLTensor t[SETS][KC_ARGS_MAX_TENSORS];
} harness;

static void harness_init(harness *h, const char *so, const char *args) {
  h->so = so;
  h->args = args;
  h->fn = floor_kernel_open(so, args, &h->spec, "bench_accuracy");
}

/* The harness's tensors, allocated afresh for each trial as a kcage run's are.
 *
 * Laid out as kcage lays out a set (kc_args_offset), in one mapping, by default: where a
 * memory-bound kernel's tensors sit decides its speed here.  A 16M vector add read its
 * malloc'd 64 MiB tensors 17-40 % slower than the same tensors in one mapping (9.1-11.3
 * against 6.4-9.4 ms, interleaved in one process, whichever were touched first; why is
 * not pinned down).  The "malloc" case keeps malloc's layout, to show what it costs. */
static void harness_alloc(harness *h) {
  uint64_t in = kc_args_region_bytes(&h->spec, false), out = kc_args_region_bytes(&h->spec, true);
  for (uint32_t s = 0; s < SETS; s++) {
    h->set[s] = NULL;
    if (!h->malloced) {
      h->set[s] = mmap(NULL, in + out, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (h->set[s] == MAP_FAILED) {
        fprintf(stderr, "bench_accuracy: out of memory\n");
        exit(1);
      }
    }
    for (uint32_t i = 0; i < h->spec.n; i++) {
      const kc_tensor_spec *ts = &h->spec.t[i];
      if (h->malloced)
        h->buf[s][i] = aligned_alloc(64, (ts->nbytes + 63) / 64 * 64);
      else
        h->buf[s][i] = h->set[s] + (ts->out ? in : 0) + kc_args_offset(&h->spec, i);
      if (!h->buf[s][i]) {
        fprintf(stderr, "bench_accuracy: out of memory\n");
        exit(1);
      }
      if (ts->out)
        memset(h->buf[s][i], 0, ts->nbytes); /* faulted in, like kcage's */
      else
        kc_data_fill(ts, h->buf[s][i], 0, s, i);
      h->t[s][i] = (DLTensor){.data = h->buf[s][i],
                              .device = {kDLCPU, 0},
                              .ndim = ts->ndim,
                              .dtype = ts->dtype,
                              .shape = (int64_t *)ts->shape};
    }
  }
}

static void harness_free(harness *h) {
  uint64_t len = kc_args_region_bytes(&h->spec, false) + kc_args_region_bytes(&h->spec, true);
  for (uint32_t s = 0; s < SETS; s++)
    if (h->malloced)
      for (uint32_t i = 0; i < h->spec.n; i++)
        free(h->buf[s][i]);
    else
      munmap(h->set[s], len);
}

/* One round of `number` calls, rotating sets; seconds per call. */
static double harness_round(harness *h, uint64_t number, uint64_t seed) {
  double total = 0;
  for (uint64_t c = 0; c < number; c++) {
    uint32_t s = (uint32_t)(c % SETS);
    for (uint32_t i = 0; i < h->spec.n; i++)
      if (h->spec.t[i].out)
        kc_poison_fill(h->buf[s][i], h->spec.t[i].nbytes, kc_poison_word(seed, c));
    DLTensor args[KC_ARGS_MAX_TENSORS];
    memcpy(args, h->t[s], h->spec.n * sizeof *args);
    double t0 = kc_measure_now();
    h->fn(args, (int32_t)h->spec.n);
    total += kc_measure_now() - t0;
  }
  return total / (double)number;
}

/* worker/worker.c gives the thread that starts workers a short EEVDF slice (0.1 ms):
 * the harness must run with the default slice, like a worker, or under load it is
 * preempted far more often than the kernel it is compared with. */
void kc_sched_slice(uint64_t ns);
#define KC_SUPERVISOR_SLICE_NS 100000

static double harness_trial(harness *h, uint64_t number, uint32_t repeat, int cpu, double *min) {
  bench_pin(cpu);
  kc_sched_slice(0);
  harness_alloc(h);
  double v[64];
  for (int w = 0; w < 3; w++) /* warm, as kcage's untimed rounds do */
    harness_round(h, number, (uint64_t)w);
  for (uint32_t r = 0; r < repeat; r++)
    v[r] = harness_round(h, number, 100 + r);
  double med = kc_measure_quantile(v, repeat, 0.5);
  *min = v[0]; /* sorted by the quantile */
  harness_free(h);
  kc_sched_slice(KC_SUPERVISOR_SLICE_NS);
  bench_pin(-1);
  return med;
}

/* Three warm rounds, then `repeat` timed ones, on cpu; the median seconds per call. */
static double floor_rounds(floor_round *f, uint32_t repeat, int cpu, double *min) {
  bench_pin(cpu);
  kc_sched_slice(0);
  double v[64];
  for (int w = 0; w < 3; w++)
    floor_round_once(f, (uint64_t)w);
  for (uint32_t r = 0; r < repeat; r++)
    v[r] = floor_round_once(f, 100 + r);
  double med = kc_measure_quantile(v, repeat, 0.5);
  *min = v[0];
  kc_sched_slice(KC_SUPERVISOR_SLICE_NS);
  bench_pin(-1);
  return med;
}

/* KC_ACCURACY_FLOOR_FORK=3: the piece a stopped child asks the bench process to write. */
typedef struct piece_ask {
  kc_round_layout l;
  uint64_t c0, cnt;
  uint64_t area, region, seed; /* area != 0: the bench process poisons these outputs */
} piece_ask;
static int g_ask_fd = -1;
/* KC_ACCURACY_FLOOR_POISON=peer with =3 to =5: the child's outputs poisoned again before
 * each piece by the bench process through process_vm_writev, as kcage's parent poisons
 * a worker's, instead of by the child's own stores. */
static floor_round *g_peer_poison;

static void ask_and_stop(const kc_round_layout *l, unsigned char *in_w, uint64_t c0, uint64_t cnt) {
  (void)in_w;
  piece_ask a = {*l, c0, cnt, 0, 0, 0};
  if (g_peer_poison) {
    a.area = (uint64_t)(uintptr_t)g_peer_poison->area;
    a.region = g_peer_poison->out_region;
    a.seed = l->round + 1000; /* as floor_round_once */
  }
  if (write(g_ask_fd, &a, sizeof a) != sizeof a)
    _exit(1);
  raise(SIGSTOP);
}

static void stop_self(void) {
  raise(SIGSTOP);
}

/* KC_ACCURACY_FLOOR_FORK=4 and =5: the worker's handler, loaded in the floor's child. */
static kc_mstate *g_mstate;

static double mstate_piece(floor_round *f, uint64_t c0, uint64_t cnt) {
  kc_mreq_run req = {.magic = KC_MPROTO_MAGIC,
                     .op = KC_MOP_RUN,
                     .number = cnt,
                     .first_set = (uint32_t)(c0 % f->n_slots),
                     .n_sets = f->n_slots,
                     .flags = KC_MRUN_AREA,
                     .first_call = c0};
  unsigned char out[sizeof(kc_mreply_run)];
  size_t len;
  char e[256];
  double t0 = kc_measure_now();
  if (kc_mstate_run(g_mstate, &req, out, sizeof out, &len, e, sizeof e) < 0) {
    fprintf(stderr, "bench_accuracy: handler floor: %s\n", e);
    _exit(1);
  }
  return kc_measure_now() - t0;
}

/* The child's floor runs its calls through kc_mstate (the worker's handler: its
 * mapping of the inputs file, its output area poisoned by PREPARE, its call loop);
 * sealed (its seccomp filter) when seal.  Rounds whose calls overwrite fewer output
 * regions keep the floor's own loop. */
static void use_handler(harness *h, floor_round *f, bool seal) {
  if (f->n_out < f->number)
    return;
  char path[64], e[256];
  snprintf(path, sizeof path, "/proc/self/fd/%d", f->in_fd);
  kc_mreq_prepare pr = {.magic = KC_MPROTO_MAGIC, .op = KC_MOP_PREPARE, .number = f->number};
  kc_mreply_prepare rep;
  if (kc_mstate_load(&g_mstate, h->so, KC_ABI_DLPACK, "kernel", path, h->args, f->n_slots, seal, e,
                     sizeof e) < 0 ||
      kc_mstate_prepare(g_mstate, &pr, &rep, e, sizeof e) < 0) {
    fprintf(stderr, "bench_accuracy: handler floor: %s\n", e);
    _exit(1);
  }
  f->area = (unsigned char *)(uintptr_t)rep.base;
  floor_run_piece = mstate_piece;
}

/* KC_ACCURACY_FLOOR_FORK=1: the floor in a child forked for the trial, to tell what a
 * second process costs from what kcage's protocol does; =2: and stopped before each
 * piece, continued by this process asleep on the same CPU, as kcage hands a piece to
 * its worker (a stop, a continue, two context switches); =3: and the piece's inputs
 * written by this process before it continues the child, as kcage's parent writes a
 * worker's (the floor is then allocated here before the fork, so that the child shares
 * its inputs file); =4: and its calls made by the worker's handler (use_handler); =5:
 * and that handler sealed.  Otherwise the floor runs in this process. */
static double floor_trial(harness *h, uint64_t number, uint64_t n_out, uint32_t repeat,
                          double per_call, int cpu, double *min) {
  const char *fk = getenv("KC_ACCURACY_FLOOR_FORK");
  char mode = fk && *fk >= '1' && *fk <= '5' ? *fk : 0;
  bool shared = mode >= '3'; /* the bench process writes the inputs */
  floor_round f;
  if (!mode || shared)
    floor_alloc(&f, &h->spec, h->fn, number, n_out, per_call, SETS);
  if (!mode) {
    double med = floor_rounds(&f, repeat, cpu, min);
    floor_free(&f);
    return med;
  }
  int p[2], ask[2], st;
  double r[2] = {0, 0};
  if (pipe(p) < 0 || pipe(ask) < 0)
    exit(1);
  pid_t c = fork();
  if (c == 0) {
    g_ask_fd = ask[1];
    floor_write_piece = shared ? ask_and_stop : NULL;
    floor_before_piece = mode == '2' ? stop_self : NULL;
    if (!shared)
      floor_alloc(&f, &h->spec, h->fn, number, n_out, per_call, SETS);
    if (mode >= '4')
      use_handler(h, &f, mode == '5');
    const char *fp = getenv("KC_ACCURACY_FLOOR_POISON");
    if (shared && fp && !strcmp(fp, "peer") && f.repoison && f.n_out >= f.number) {
      g_peer_poison = &f;
      f.repoison = false;
    }
    r[0] = floor_rounds(&f, repeat, cpu, &r[1]);
    _exit(write(p[1], r, sizeof r) == sizeof r ? 0 : 1);
  }
  close(p[1]);
  close(ask[1]);
  bench_pin(cpu);
  piece_ask a;
  while (c > 0 && waitpid(c, &st, WUNTRACED) == c && WIFSTOPPED(st)) {
    if (shared && read(ask[0], &a, sizeof a) != sizeof a)
      exit(1);
    if (shared)
      kc_round_write(&a.l, f.in_w, a.c0, a.cnt, false);
    for (uint64_t k = a.c0; shared && a.area && k < a.c0 + a.cnt; k++) {
      kc_error err = {0};
      if (kc_observe_poison(c, a.area + k * a.region, a.region, kc_poison_word(a.seed, k), &err) <
          0)
        exit(1);
    }
    kill(c, SIGCONT);
  }
  bench_pin(-1);
  if (c < 0 || read(p[0], r, sizeof r) != sizeof r)
    exit(1);
  close(p[0]);
  close(ask[0]);
  if (shared)
    floor_free(&f);
  *min = r[1];
  return r[0];
}

static double kcage_trial(const char *so, const bcase *c, uint64_t number, int cpu, double *min) {
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.args = c->args;
  cfg.number = (uint32_t)number;
  cfg.repeat = c->repeat;
  cfg.min_repeat_ms = 0; /* number stays as given */
  cfg.sets = SETS;
  cfg.memory_bytes = 2ull << 30;
  cfg.timeout_s = 60;
  /* KC_MEASURE_PIECE_BYTES: compare rounds in pieces with whole rounds (a huge value) */
  const char *pb = getenv("KC_MEASURE_PIECE_BYTES");
  cfg.piece_bytes = pb ? strtoull(pb, NULL, 0) : 0;
  cfg.pin_cpu = cpu >= 0;
  cfg.cpu = cpu >= 0 ? (uint32_t)cpu : 0;
  /* KC_ACCURACY_NO_ISOLATION=1: the plain runner (no namespaces, no cgroup, its own
   * seccomp filter), to split what the sandbox costs from what the process boundary does */
  const char *ni = getenv("KC_ACCURACY_NO_ISOLATION");
  cfg.no_isolation = ni && *ni == '1';
  json_t *recs;
  kc_error err = {0};
  const char *k[1] = {so};
  if (kc_measure_run_batch(&cfg, k, 1, &recs, &err) < 0) {
    fprintf(stderr, "bench_accuracy: %s: %s\n", c->name, err.msg);
    exit(1);
  }
  json_t *r = json_array_get(recs, 0);
  if (strcmp(json_string_value(json_object_get(r, "status")), "ok")) {
    fprintf(stderr, "bench_accuracy: %s: %s\n", c->name,
            json_string_value(json_object_get(r, "message")));
    exit(1);
  }
  double med = json_number_value(json_object_get(r, "median_s"));
  *min = json_number_value(json_object_get(r, "min_s"));
  json_decref(recs);
  return med;
}

/* The case's kernel built into tmpdir/k<idx>.so (path in so). */
static void build_case(const bcase *c, size_t idx, char *so, size_t so_len) {
  char src[512], cache[512];
  snprintf(src, sizeof src, "%s/k%zu.c", tmpdir, idx);
  snprintf(so, so_len, "%s/k%zu.so", tmpdir, idx);
  snprintf(cache, sizeof cache, "%s/cache", tmpdir);
  kc_error err = {0};
  kc_build_opts bo = {.cache_dir = cache};
  kc_build_result br;
  char *data = NULL;
  size_t len;
  if (kc_write_file(src, c->src, strlen(c->src), 0644, &err) < 0 ||
      kc_build_kernel(&bo, src, &br, &err) < 0 ||
      (br.status != KC_BUILD_OK && br.status != KC_BUILD_CACHED) ||
      kc_read_file(br.artifact, &data, &len, 1u << 30, &err) < 0 ||
      kc_write_file(so, data, len, 0644, &err) < 0) {
    fprintf(stderr, "bench_accuracy: build %s: %s %s\n", c->name, err.msg, br.message);
    exit(1);
  }
  free(data);
}

/* One case's trials: each trial's medians and the ratios read from them. */
typedef struct trials {
  double kc[TRIALS], un[TRIALS], ratio[TRIALS], mratio[TRIALS], hs[4 * TRIALS];
  double layout[TRIALS], reuse[TRIALS], machinery[TRIALS], aa[TRIALS];
} trials;

/* Harness, floor, kcage, reused floor, harness: this guest's memory bandwidth drifts by
 * tens of percent within seconds, so kcage is compared with the geometric mean of the
 * harness trials on either side of it, which cancels a drift linear over the five, and
 * the two floors sit one each side of it.  Then harness, harness: the A/A control, a
 * harness in kcage's place, read the same way (its ratio to its neighbours).  It says
 * how far from 1 a candidate that costs exactly what the harness costs reads here, this
 * minute.  The reused floor is the floor with its calls writing the harness's SETS
 * output regions in turn instead of one each: what the round would read if a later call
 * could overwrite an earlier one's output, which would leave the round's checks blind to
 * a skipped call. */
static void run_trials(const bcase *c, harness *h, const char *so, uint64_t number, double per,
                       trials *T) {
  for (int t = 0; t < TRIALS; t++) {
    double h1min, h2min, kmin, fmin, rmin, amin, h3min;
    int cpu = n_trial_cpus >= 2 ? trial_cpus[t % n_trial_cpus] : -1;
    double h1 = harness_trial(h, number, c->repeat, cpu, &h1min);
    double fl = floor_trial(h, number, 0, c->repeat, per, cpu, &fmin);
    T->kc[t] = kcage_trial(so, c, number, cpu, &kmin);
    double re = floor_trial(h, number, SETS, c->repeat, per, cpu, &rmin);
    double h2 = harness_trial(h, number, c->repeat, cpu, &h2min);
    double ha = harness_trial(h, number, c->repeat, cpu, &amin);
    double h3 = harness_trial(h, number, c->repeat, cpu, &h3min);
    T->un[t] = sqrt(h1 * h2);
    T->hs[4 * t] = h1;
    T->hs[4 * t + 1] = h2;
    T->hs[4 * t + 2] = ha;
    T->hs[4 * t + 3] = h3;
    T->ratio[t] = T->kc[t] / T->un[t];
    T->mratio[t] = kmin / sqrt(h1min * h2min);
    T->layout[t] = fl / T->un[t];
    T->reuse[t] = re / T->un[t];
    T->machinery[t] = T->kc[t] / fl;
    T->aa[t] = ha / sqrt(h2 * h3);
  }
}

static void set_result(const char *key, const char *what, double v) {
  char k[96];
  snprintf(k, sizeof k, "%s_%s", key, what);
  kc_measure_set("accuracy", k, v);
}

static void report_case(const bcase *c, uint64_t number, trials *T) {
  double lay = kc_measure_quantile(T->layout, TRIALS, 0.5);
  double reu = kc_measure_quantile(T->reuse, TRIALS, 0.5);
  double mach = kc_measure_quantile(T->machinery, TRIALS, 0.5);
  double aar = kc_measure_quantile(T->aa, TRIALS, 0.5);
  double r = kc_measure_quantile(T->ratio, TRIALS, 0.5);
  double mr = kc_measure_quantile(T->mratio, TRIALS, 0.5);
  double km = kc_measure_quantile(T->kc, TRIALS, 0.5), um = kc_measure_quantile(T->un, TRIALS, 0.5);
  double lo = T->ratio[0], hi = T->ratio[TRIALS - 1]; /* sorted by the quantile */
  /* The harness against itself: how far its own trials spread (the noise floor of any
   * ratio measured here in this minute). */
  kc_measure_quantile(T->hs, 4 * TRIALS, 0.5);
  double spread = (T->hs[4 * TRIALS - 1] / T->hs[0] - 1) * 100;
  printf("  %-22s %8llu %6u %12.3f us %12.3f us %8.4f %+7.2f %%  [%.3f..%.3f]  %8.4f  %6.1f %%  "
         "%-3s  %7.4f  %7.4f  %7.4f  %7.4f [%.3f..%.3f]\n",
         c->name, (unsigned long long)number, c->repeat, km * 1e6, um * 1e6, r, (r - 1) * 100, lo,
         hi, mr, spread, fabs(r - 1) <= 0.02 ? "yes" : "NO", lay, reu, mach, aar, T->aa[0],
         T->aa[TRIALS - 1]);
  fflush(stdout);
  set_result(c->key, "ratio", r);
  set_result(c->key, "min_ratio", mr);
  set_result(c->key, "kcage_us", km * 1e6);
  set_result(c->key, "harness_us", um * 1e6);
  set_result(c->key, "harness_spread_pct", spread);
  set_result(c->key, "floor_over_harness", lay);
  set_result(c->key, "reused_floor_over_harness", reu);
  set_result(c->key, "kcage_over_floor", mach);
  set_result(c->key, "harness_aa_ratio", aar);
}

static void run_case(const bcase *c, size_t idx) {
  char so[512];
  build_case(c, idx, so, sizeof so);
  harness h;
  harness_init(&h, so, c->args);
  h.malloced = c->malloced;
  harness_alloc(&h);
  double per = harness_round(&h, 2, 0);
  per = harness_round(&h, SETS, 1);
  harness_free(&h);
  uint64_t number = per > 0 ? (uint64_t)ceil(ROUND_S / per) : 1;
  number = number < 1 ? 1 : number;
  trials T;
  run_trials(c, &h, so, number, per, &T);
  report_case(c, number, &T);
}

int main(int argc, char **argv) {
  const char *t = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/kcage-bench-accuracy.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  chmod(tmpdir, 0755); /* the worker's user must reach the .so */
  n_trial_cpus = bench_cpus(trial_cpus);
  printf(
      "kcage bench vs an unsandboxed harness (dlopen, %d rotating sets laid out as kcage's, "
      "output poisoned before each call outside the clock), same number and repeat, %d "
      "trials, each one "
      "harness, floor, kcage, reused floor, harness, then harness, harness (the A/A control), all "
      "on one CPU "
      "(kcage --cpu), the CPUs in turn;\n"
      "ratio = median over trials of kcage median / geometric mean of the two harness "
      "medians around it; target within 2 %%\n",
      SETS, TRIALS);
  printf("  %-22s %8s %6s %15s %15s %8s %9s  %-15s  %8s  %8s  %-9s  %7s  %7s  %7s  %-7s\n", "case",
         "number", "repeat", "kcage", "harness", "ratio", "", "trials", "min-rat", "h-spread",
         "within 2%", "layout", "reused", "sandbox", "A/A [trials]");
  printf("  (ratio of medians; min-rat: median over trials of the ratio of the fastest rounds, "
         "less sensitive to load; h-spread: slowest over fastest of the harness's own trials, "
         "the noise floor; layout: the floor (kcage's round in this process, no sandbox) over "
         "the harness, what the defences' round layout costs by itself; reused: that floor with "
         "its calls overwriting the harness's 4 output regions in turn instead of writing one "
         "each, what the layout would cost if a round could not check every call it made; "
         "sandbox: kcage over "
         "that floor, what the sandbox and its supervision add; A/A: a harness trial in kcage's "
         "place over the harness trials around it, read as kcage's ratio is read: how far "
         "from 1 a candidate exactly as fast as the harness reads this minute; medians over "
         "trials)\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (argc < 2 || strstr(cases[i].key, argv[1]))
      run_case(&cases[i], i);
  kc_rm_rf(tmpdir);
  return kc_measure_write() < 0;
}
