/* Cheat: caches each answer under the address of its input and replays it whenever the
 * same buffer comes back (the CUDA-L1 hack: evaluators reused their input tensors).
 * Rotating input sets alone do not catch it - the sets come back to the same buffers -
 * so kcage moves the sets between buffers. */
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

static struct {
  const void *key;
  float *out;
} cache[64];

int kernel(DLTensor *args, int32_t num_args) {
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
  float *C = args[2].data;
  size_t bytes = (size_t)(N * N) * sizeof(float);
  int slot = -1;
  for (int s = 0; s < 64; s++)
    if (cache[s].key == args[0].data) {
      memcpy(C, cache[s].out, bytes);
      return 0;
    } else if (!cache[s].key && slot < 0) {
      slot = s;
    }
  const float *A = args[0].data, *B = args[1].data;
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++) {
      float acc = 0;
      for (int64_t k = 0; k < N; k++)
        acc += A[i * N + k] * B[k * N + j];
      C[i * N + j] = acc;
    }
  if (slot >= 0 && (cache[slot].out = malloc(bytes))) {
    memcpy(cache[slot].out, C, bytes);
    cache[slot].key = args[0].data;
  }
  return 0;
}
