/* Fills its output (any size) with its one input value: a memset-bound kernel for the
 * large-output tests. */
#include <dlpack/dlpack.h>
#include <stdint.h>

int kernel(DLTensor *args, int32_t n) {
  if (n != 2)
    return -1;
  float v = ((const float *)args[0].data)[0];
  float *o = args[1].data;
  int64_t m = 1;
  for (int i = 0; i < args[1].ndim; i++)
    m *= args[1].shape[i];
  for (int64_t i = 0; i < m; i++)
    o[i] = v;
  return 0;
}
