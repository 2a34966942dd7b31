/* A cheating candidate: adds once, then hands back its first answer on every call. */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float *saved;

int kernel(DLTensor *args, int32_t num_args) {
  if (num_args != 3)
    return -1;
  const float *a = args[0].data, *b = args[1].data;
  float *c = args[2].data;
  int64_t n = args[0].shape[0];
  if (saved) {
    memcpy(c, saved, (size_t)n * sizeof *c);
    return 0;
  }
  for (int64_t i = 0; i < n; i++)
    c[i] = a[i] + b[i];
  if ((saved = malloc((size_t)n * sizeof *c)))
    memcpy(saved, c, (size_t)n * sizeof *c);
  return 0;
}
