/* Honest but slow: each call copies its input after spinning for 0.25 s of wall time,
 * so a measurement of several calls lasts seconds while no single call comes near 1 s. */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <time.h>

int kernel(DLTensor *args, int32_t n) {
  if (n != 2)
    return -1;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do
    clock_gettime(CLOCK_MONOTONIC, &t);
  while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < 0.25);
  ((float *)args[1].data)[0] = ((const float *)args[0].data)[0];
  return 0;
}
