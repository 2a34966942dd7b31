/* Hostile: writes through a wild pointer. */
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
  (void)args;
  (void)num_args;
  *(volatile float *)(uintptr_t)16 = 1.0f;
  return 0;
}
