/* Probe (pointers and slots): the attack that once got a 125x fake speed-up.  It keys
 * each answer on the address of the `args` array it is handed, forgets them all when a
 * new request starts (a gap in the clock), and replays an answer whenever the array
 * comes back within one request: a harness that keeps one argument array per input set
 * names the set by that address. */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MAXN 64
static struct {
  const void *key;
  float out[MAXN * MAXN];
} memo[64];
static unsigned used;
static double last_end;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mm(const float *A, const float *B, float *C, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
}

int kernel(DLTensor *args, int32_t n) {
  if (n != 3 || args[0].shape[0] > MAXN)
    return -1;
  int64_t N = args[0].shape[0];
  size_t bytes = (size_t)(N * N) * sizeof(float);
  float *C = args[2].data;
  if (now() - last_end > 200e-6) /* a new request: its sets hold new data */
    used = 0;
  for (unsigned i = 0; i < used; i++)
    if (memo[i].key == (const void *)args) {
      memcpy(C, memo[i].out, bytes);
      last_end = now();
      return 0;
    }
  mm(args[0].data, args[1].data, C, N);
  if (used < 64) {
    memo[used].key = args;
    memcpy(memo[used++].out, C, bytes);
  }
  last_end = now();
  return 0;
}
