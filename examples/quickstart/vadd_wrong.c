/* A wrong candidate: forgets b in the last element. */
#include <dlpack/dlpack.h>
#include <stdint.h>

int kernel(DLTensor *args, int32_t num_args) {
  if (num_args != 3)
    return -1;
  const float *a = args[0].data, *b = args[1].data;
  float *c = args[2].data;
  int64_t n = args[0].shape[0];
  for (int64_t i = 0; i + 1 < n; i++)
    c[i] = a[i] + b[i];
  c[n - 1] = a[n - 1];
  return 0;
}
