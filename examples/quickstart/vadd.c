/* A candidate: the same loop, which the compiler vectorises. */
#include <dlpack/dlpack.h>
#include <stdint.h>

int kernel(DLTensor *args, int32_t num_args) {
  if (num_args != 3)
    return -1;
  const float *restrict a = args[0].data, *restrict b = args[1].data;
  float *restrict c = args[2].data;
  int64_t n = args[0].shape[0];
  for (int64_t i = 0; i < n; i++)
    c[i] = a[i] + b[i];
  return 0;
}
