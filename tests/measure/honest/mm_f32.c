/* Honest: C = A x B, f32, i-k-j (64^2: ~0.1 ms; 320^2: tens of ms). */
#include <dlpack/dlpack.h>
#include <stdint.h>
int kernel(DLTensor *args, int32_t n) {
  if (n != 3)
    return -1;
  int64_t N = args[0].shape[0];
  const float *A = args[0].data, *B = args[1].data;
  float *C = args[2].data;
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
  return 0;
}
