/* Hostile: writes machine code into fresh memory and runs it (a JIT, or shellcode).
 * Under `measure` no executable memory can appear once the kernel is loaded. */
#include <string.h>
#include <sys/mman.h>

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

int kernel(DLTensor *args, int32_t num_args) {
  (void)args;
  (void)num_args;
  static const unsigned char ret[] = {0xc3}; /* x86-64 `ret` */
  void *p =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  memcpy(p, ret, sizeof ret);
  ((void (*)(void))p)();
  return 0;
}
