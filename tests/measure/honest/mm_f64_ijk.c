/* Honest: C = A x B, f64, i-j-k (strided: slow). */
#include <dlpack/dlpack.h>
#include <stdint.h>
int kernel(DLTensor *args, int32_t n) {
  if (n != 3)
    return -1;
  int64_t N = args[0].shape[0];
  const double *A = args[0].data, *B = args[1].data;
  double *C = args[2].data;
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t k = 0; k < N; k++)
        acc += A[i * N + k] * B[k * N + j];
      C[i * N + j] = acc;
    }
  return 0;
}
