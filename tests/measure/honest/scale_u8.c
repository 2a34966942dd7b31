/* Honest: byte outputs (o = 3a + 1), where a random poison word could sit in 8 bytes. */
#include <dlpack/dlpack.h>
#include <stdint.h>
int kernel(DLTensor *args, int32_t n) {
  if (n != 2)
    return -1;
  const uint8_t *a = args[0].data;
  uint8_t *o = args[1].data;
  for (int64_t i = 0; i < args[0].shape[0]; i++)
    o[i] = (uint8_t)(3 * a[i] + 1);
  return 0;
}
