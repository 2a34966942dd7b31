/* bench_handoff: what handing a piece of a timed round to another process costs on one
 * CPU, and so how long a piece must be for kcage's clock to read at most 1.02 of the
 * same round run in-process (bench_accuracy's `sandbox` column).
 *
 * A timed piece starts with the parent's SIGCONT to its stopped worker and ends when the
 * parent, asleep on the worker's CPU, sees the completion.  Both ends are inside the
 * clock; the in-process floor has neither.  So the column is 1 + h / (n t) for a handoff
 * h and a piece of n calls of t each, whatever the worker's code does.  Three handoffs,
 * interleaved in blocks, both processes on the last CPU this program may use:
 *
 *   futex switch       two processes, a futex each way, no stop: any design that runs
 *                      the kernel outside the parent's process, on its CPU, pays this;
 *   stop and continue  the same with the child stopped before each piece and continued
 *                      by SIGCONT, as kcage keeps its worker from running untimed;
 *   kcage worker       a sandboxed kc_worker under the default policy: stopped as the
 *                      measure path stops it (kc_observe_stop), sent an empty request,
 *                      continued, and waited for asleep (kc_worker_recv_asleep), the
 *                      way a timed piece is; only the measure handler's own request
 *                      handling and the kernel's calls are missing.
 *
 * For the first two the child stamps its first and last instruction (same clock), which
 * splits the pair into its start and its end.  The last line turns the pairs into the
 * piece length that 1.02 needs (50 h) and into the calls of a 32x32 f32 matmul (8 KiB of
 * fresh inputs a call) that half of this machine's L2 holds, which is where kcage cuts
 * such a round (kc_round_piece_calls): the call time at which that piece meets 1.02.
 *
 * KC_BENCH_HANDOFF_N=N: N handoffs of each kind (default 20000). */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../measure/measure_internal.h"
#include "bench_common.h"
#include "cache_size.h"
#include "kcage/worker.h"

#define BLOCK 500

typedef struct {
  _Atomic uint32_t sq, cq;
  _Atomic double first, last; /* the child's stamps, kc_measure_now */
} shared;

typedef struct {
  const char *name;
  double *start, *end, *pair;
  size_t n;
  bool split; /* the child stamped its side: start and end are known */
} series;

static void die(const char *what, const kc_error *e) {
  fprintf(stderr, "bench_handoff: %s: %s\n", what, e && e->msg[0] ? e->msg : strerror(errno));
  exit(1);
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v) {
  syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w) {
  syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* The child: waits for sq to move, stamps, answers on cq. */
static void child_loop(shared *s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  uint32_t seen = 0;
  for (;;) {
    uint32_t v;
    while ((v = atomic_load(&s->sq)) == seen)
      futex_wait(&s->sq, seen);
    seen = v;
    atomic_store(&s->first, kc_measure_now());
    atomic_store(&s->last, kc_measure_now());
    atomic_fetch_add(&s->cq, 1);
    futex_wake(&s->cq);
  }
}

/* One handoff to the child, stopped first when `stop`: its start, end and pair. */
static void child_handoff(shared *s, pid_t child, bool stop, series *out) {
  if (stop) {
    int st;
    if (kill(child, SIGSTOP) < 0 || waitpid(child, &st, WUNTRACED) != child || !WIFSTOPPED(st))
      die("stop the child", NULL);
  }
  uint32_t c = atomic_load(&s->cq);
  /* the clock starts with the request, or with SIGCONT to a stopped child (as kcage's) */
  double t0 = kc_measure_now();
  atomic_fetch_add(&s->sq, 1);
  futex_wake(&s->sq);
  if (stop) {
    t0 = kc_measure_now();
    kill(child, SIGCONT);
  }
  while (atomic_load(&s->cq) == c)
    futex_wait(&s->cq, c);
  double t1 = kc_measure_now();
  out->start[out->n] = atomic_load(&s->first) - t0;
  out->end[out->n] = t1 - atomic_load(&s->last);
  if (out->start[out->n] < 0 || out->end[out->n] < 0) { /* one clock: the child ran between */
    fprintf(stderr, "bench_handoff: the child's stamps fall outside the parent's\n");
    exit(1);
  }
  out->pair[out->n] = t1 - t0;
  out->n++;
  out->split = true;
}

/* One empty piece through a stopped kcage worker, as a timed piece goes. */
static void worker_handoff(kc_worker *w, series *out) {
  kc_error e = {0};
  pid_t pid = kc_worker_pid(w);
  if (kc_observe_stop(pid) < 0)
    die("stop the worker", NULL);
  if (kc_worker_send(w, "echo", NULL, 0, 10, &e) < 0)
    die("send", &e);
  double t0 = kc_measure_now();
  kc_observe_cont(pid);
  kc_call_result r;
  kc_call_result_init(&r);
  int got;
  while ((got = kc_worker_recv_asleep(w, &r, 0.1, &e)) == 0)
    ;
  double t1 = kc_measure_now();
  if (got < 0 || r.status != KC_CALL_COMPLETE)
    die("echo", &e);
  kc_call_result_clear(&r);
  out->pair[out->n++] = t1 - t0;
}

static void alloc_series(series *s, const char *name, size_t n) {
  s->name = name;
  s->n = 0;
  s->split = false;
  s->start = calloc(n, sizeof(double));
  s->end = calloc(n, sizeof(double));
  s->pair = calloc(n, sizeof(double));
  if (!s->start || !s->end || !s->pair)
    die("memory", NULL);
}

static void free_series(series *s) {
  free(s->start);
  free(s->end);
  free(s->pair);
}

static size_t env_n(void) {
  const char *v = getenv("KC_BENCH_HANDOFF_N");
  char *end;
  unsigned long n = v && *v ? strtoul(v, &end, 10) : 20000;
  if (v && *v && (*end || n < BLOCK || n > 10000000)) {
    fprintf(stderr, "bench_handoff: KC_BENCH_HANDOFF_N must be %d to 10000000\n", BLOCK);
    exit(2);
  }
  return n / BLOCK * BLOCK;
}

static void row(const series *s, const char *key, double *pair_med) {
  double us = 1e6, p50 = kc_measure_quantile(s->pair, s->n, 0.5);
  double p90 = kc_measure_quantile(s->pair, s->n, 0.9);
  char start[16] = "-", end[16] = "-";
  if (s->split) {
    snprintf(start, sizeof start, "%.2f", kc_measure_quantile(s->start, s->n, 0.5) * us);
    snprintf(end, sizeof end, "%.2f", kc_measure_quantile(s->end, s->n, 0.5) * us);
  }
  printf("| %-18s | %8s | %8s | %8.2f | %8.2f | %12.0f |\n", s->name, start, end, p50 * us,
         p90 * us, 50 * p50 * us);
  char k[64];
  snprintf(k, sizeof k, "%s_pair_us", key);
  kc_measure_set("handoff", k, p50 * us);
  *pair_med = p50;
}

int main(void) {
  int cpus[CPU_SETSIZE];
  int n_cpus = bench_cpus(cpus);
  int cpu = cpus[n_cpus > 0 ? n_cpus - 1 : 0];
  bench_pin(cpu);
  size_t n = env_n();
  shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED)
    die("mmap", NULL);
  pid_t child = fork();
  if (child < 0)
    die("fork", NULL);
  if (child == 0)
    child_loop(s);
  kc_worker_opts o;
  kc_worker_opts_init(&o);
  kc_worker *w;
  kc_error e = {0};
  if (kc_worker_new(&o, &w, &e) < 0)
    die("worker", &e);
  kc_call_result r; /* the worker starts with its first request */
  if (kc_worker_send(w, "echo", NULL, 0, 10, &e) < 0 || kc_worker_recv(w, &r, &e) < 0)
    die("first request", &e);
  kc_call_result_clear(&r);
  series sw, ss, sk;
  alloc_series(&sw, "futex switch", n);
  alloc_series(&ss, "stop and continue", n);
  alloc_series(&sk, "kcage worker", n);
  for (int i = 0; i < 100; i++) { /* the worker started and pinned, every path warm */
    if (kc_observe_pin(kc_worker_pid(w), cpu) < 0)
      die("pin the worker", NULL);
    worker_handoff(w, &sk);
    child_handoff(s, child, i & 1, i & 1 ? &ss : &sw);
  }
  sw.n = ss.n = sk.n = 0;
  for (size_t b = 0; b < n / BLOCK; b++)
    for (size_t i = 0; i < BLOCK; i++) {
      child_handoff(s, child, false, &sw);
      child_handoff(s, child, true, &ss);
      worker_handoff(w, &sk);
    }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  kc_observe_cont(kc_worker_pid(w));
  kc_worker_free(w);

  printf("handoffs on CPU %d, %zu of each, interleaved; medians in us\n\n", cpu, n);
  printf("| %-18s | %8s | %8s | %8s | %8s | %12s |\n", "handoff", "start", "end", "pair",
         "pair p90", "1.02 needs");
  printf("|--------------------|----------|----------|----------|----------|--------------|\n");
  double hw, hs, hk;
  row(&sw, "futex_switch", &hw);
  row(&ss, "stop_continue", &hs);
  row(&sk, "kcage_worker", &hk);
  uint64_t half = kc_cache_bytes(2) / 2;
  if (half) {
    double calls = (double)(half / 8192);
    printf("\n\"1.02 needs\": us of calls a piece must hold (50 pairs).  Half of L2 here is %llu "
           "KiB,\n%.0f calls of a 32x32 f32 matmul (8 KiB of inputs each): such a piece meets "
           "1.02 only\nfor calls of at least %.2f us with kcage's handoff, %.2f us with a bare "
           "futex switch.\n",
           (unsigned long long)(half >> 10), calls, 50 * hk * 1e6 / calls, 50 * hw * 1e6 / calls);
    kc_measure_set("handoff", "mm32_piece_calls", calls);
    kc_measure_set("handoff", "mm32_call_us_for_1.02", 50 * hk * 1e6 / calls);
  }
  free_series(&sw);
  free_series(&ss);
  free_series(&sk);
  munmap(s, sizeof *s);
  return kc_measure_write() < 0;
}
