/* Cheat (precomputing): guesses the seed (0) and the generator (splitmix64 of the seed,
 * set and tensor), regenerates the inputs at load time, computes their answers once, and
 * then answers every call by lookup.  kcage's seed is secret per run and its inputs come
 * from a keyed function of it (ChaCha20), so there is nothing to regenerate. */
#include <stdlib.h>
#include <string.h>
/* C[N,N] = A[N,N] x B[N,N], f32, row-major; refuse anything else. */
#include <dlpack/dlpack.h>
#include <stdint.h>

static inline int mm_check(DLTensor *args, int32_t n, int64_t *N) {
  if (n != 3)
    return -1;
  for (int i = 0; i < 3; i++)
    if (args[i].ndim != 2 || args[i].dtype.code != kDLFloat || args[i].dtype.bits != 32 ||
        args[i].shape[0] != args[0].shape[0] || args[i].shape[1] != args[0].shape[0])
      return -2;
  *N = args[0].shape[0];
  return 0;
}

/* i-k-j order: honest and reasonably fast. */
static void mm(const float *A, const float *B, float *C, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* the guessed data for (seed, set, tensor index), f32 */
static void gen(float *x, int64_t n, uint64_t seed, uint32_t set, uint32_t idx) {
  uint64_t st = seed * 0x2545f4914f6cdd1dull ^ ((uint64_t)set << 32 | idx) ^ 0x6b63616765ull;
  splitmix(&st);
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)((double)(splitmix(&st) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static float *answers[4], *firsts[4];

int kernel(DLTensor *args, int32_t num_args) {
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
  size_t n = (size_t)(N * N);
  if (!answers[0])
    for (uint32_t s = 0; s < 4; s++) {
      float *A = malloc(n * 4), *B = malloc(n * 4);
      answers[s] = malloc(n * 4);
      if (!A || !B || !answers[s])
        return -3;
      gen(A, N * N, 0, s, 0);
      gen(B, N * N, 0, s, 1);
      mm(A, B, answers[s], N);
      firsts[s] = A;
      free(B);
    }
  const float *A = args[0].data;
  int s = 0;
  for (int k = 0; k < 4; k++)
    if (!memcmp(A, firsts[k], 16))
      s = k;
  memcpy(args[2].data, answers[s], n * 4);
  return 0;
}
