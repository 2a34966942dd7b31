/* Honest: c = a + b, f32, any length (about a microsecond at 256 elements). */
#include <dlpack/dlpack.h>
#include <stdint.h>
int kernel(DLTensor *args, int32_t n) {
  if (n != 3)
    return -1;
  const float *a = args[0].data, *b = args[1].data;
  float *c = args[2].data;
  for (int64_t i = 0; i < args[0].shape[0]; i++)
    c[i] = a[i] + b[i];
  return 0;
}
