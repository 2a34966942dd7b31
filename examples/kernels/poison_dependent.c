/* Broken: accumulates into C without clearing it first, so its answer depends on
 * whatever C held before the call. */
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

int kernel(DLTensor *args, int32_t num_args) {
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
  const float *A = args[0].data, *B = args[1].data;
  float *C = args[2].data;
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  return 0;
}
