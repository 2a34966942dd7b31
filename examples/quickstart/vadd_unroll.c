/* A candidate: unrolled by hand, four elements a step. */
#include <dlpack/dlpack.h>
#include <stdint.h>

int kernel(DLTensor *args, int32_t num_args) {
  if (num_args != 3)
    return -1;
  const float *restrict a = args[0].data, *restrict b = args[1].data;
  float *restrict c = args[2].data;
  int64_t n = args[0].shape[0], i = 0;
  for (; i + 4 <= n; i += 4) {
    c[i] = a[i] + b[i];
    c[i + 1] = a[i + 1] + b[i + 1];
    c[i + 2] = a[i + 2] + b[i + 2];
    c[i + 3] = a[i + 3] + b[i + 3];
  }
  for (; i < n; i++)
    c[i] = a[i] + b[i];
  return 0;
}
