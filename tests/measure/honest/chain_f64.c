/* Honest: known work, no memory traffic to speak of: each output is a dependent chain of
 * 256 multiply-adds started from its input, so the time grows with the length alone
 * (about a microsecond at 64 elements here). */
#include <dlpack/dlpack.h>
#include <stdint.h>
int kernel(DLTensor *args, int32_t n) {
  if (n != 2)
    return -1;
  const double *a = args[0].data;
  double *y = args[1].data;
  for (int64_t i = 0; i < args[0].shape[0]; i++) {
    double x = a[i];
    for (int k = 0; k < 256; k++)
      x = x * 0.999 + 0.001;
    y[i] = x;
  }
  return 0;
}
