/* Probe (content samples): hashes a few input values to find a candidate among the
 * answers it kept, confirms it by comparing the whole inputs (a few microseconds, against
 * a matmul's hundred), and replays it.  A near-copy cannot fool it: only a round whose
 * calls never meet the same inputs twice leaves it nothing to replay. */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>

#define MAXN 64
#define KEEP 128
static struct {
  uint64_t key;
  float a[MAXN * MAXN], b[MAXN * MAXN], out[MAXN * MAXN];
} memo[KEEP];
static unsigned used, next;

static uint64_t sample(const float *A, const float *B, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int s = 0; s < 4; s++) {
    uint32_t x, y;
    memcpy(&x, &A[(s * 997) % n], 4);
    memcpy(&y, &B[(s * 1999) % n], 4);
    h = (h ^ x) * 1099511628211ull;
    h = (h ^ y) * 1099511628211ull;
  }
  return h;
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
  const float *A = args[0].data, *B = args[1].data;
  float *C = args[2].data;
  uint64_t k = sample(A, B, N * N);
  for (unsigned i = 0; i < used; i++)
    if (memo[i].key == k && !memcmp(memo[i].a, A, bytes) && !memcmp(memo[i].b, B, bytes)) {
      memcpy(C, memo[i].out, bytes);
      return 0;
    }
  mm(A, B, C, N);
  memo[next].key = k;
  memcpy(memo[next].a, A, bytes);
  memcpy(memo[next].b, B, bytes);
  memcpy(memo[next].out, C, bytes);
  next = (next + 1) % KEEP;
  used = used < KEEP ? used + 1 : KEEP;
  return 0;
}
