/* Honest: -1 for every element (its answer is all ones, like the poison of some calls). */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>
int kernel(DLTensor *args, int32_t n) {
  if (n != 2)
    return -1;
  const int8_t *a = args[0].data;
  int8_t *o = args[1].data;
  for (int64_t i = 0; i < args[0].shape[0]; i++)
    o[i] = (int8_t)(a[i] < 100 ? -1 : 1);
  return 0;
}
