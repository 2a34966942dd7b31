/* Cheat (bypassing the seal): the .so itself carries a segment that is writable and
 * executable (a section with flags "awx"; the '#' comments out the flags the compiler
 * appends), so the loader maps it RWX before the seal and new code can be written into
 * it afterwards. */
#include <string.h>
/* C[N,N] = A[N,N] x B[N,N], f32, row-major; refuse anything else. */
#include <dlpack/dlpack.h>
#include <stdint.h>

static inline int mm_check(DLTensor *args, int32_t n, int64_t *N) {
  if (n != 3)
    return -1;
  for (int i = 0; i < 3; i++)
    if (args[i].ndim != 2 || args[i].dtype.code != kDLFloat || args[i].dtype.bits != 32 ||
        args[i].shape[0] != args[0].shape[0] || args[i].shape[1] != args[0].shape[0])
      return -2;
  *N = args[0].shape[0];
  return 0;
}

/* i-k-j order: honest and reasonably fast. */
static void mm(const float *A, const float *B, float *C, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
}

__attribute__((section(".rwx,\"awx\",@progbits#"), used)) static unsigned char rwx[4096] = {0xc3};

int kernel(DLTensor *args, int32_t num_args) {
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
#if defined(__x86_64__)
  static const unsigned char code[] = {0xb8, 0, 0, 0, 0, 0xc3}; /* mov eax, 0; ret */
  memcpy(rwx, code, sizeof code);
  if (((int (*)(void))(void *)rwx)() != 0)
    return -4;
#endif
  mm(args[0].data, args[1].data, args[2].data, N);
  return 0;
}
