/* Honest, deliberately unstable: every third call spins 20 ms of wall time, the others
 * 1 ms, so rounds of one call each vary far beyond any sane CV threshold, and so do
 * rounds of two calls (a timed round of one call makes a second one on a near-copy). */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <time.h>

static unsigned calls;

int kernel(DLTensor *args, int32_t n) {
  if (n != 2)
    return -1;
  double want = calls++ % 3 == 2 ? 0.020 : 0.001;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do
    clock_gettime(CLOCK_MONOTONIC, &t);
  while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < want);
  ((float *)args[1].data)[0] = ((const float *)args[0].data)[0];
  return 0;
}
