/* Cheat (bypassing the seal): the entry point is an ifunc whose resolver, run by the
 * loader while it relocates the .so (before any constructor, and before the seal),
 * maps a file privately with read, write and execute.  Raw system calls: libc's own
 * entry points may not be relocated yet when a resolver runs. */
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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

static unsigned char *rwx;

static long raw6(long nr, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#else
  (void)nr, (void)a, (void)b, (void)c, (void)d, (void)e, (void)f;
  return -1;
#endif
}

static int mm_kernel(DLTensor *args, int32_t num_args) {
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
#if defined(__x86_64__)
  if (rwx) { /* new code after the seal: "mov eax, 0; ret" */
    static const unsigned char code[] = {0xb8, 0, 0, 0, 0, 0xc3};
    memcpy(rwx, code, sizeof code);
    if (((int (*)(void))(void *)rwx)() != 0)
      return -4;
  }
#endif
  mm(args[0].data, args[1].data, args[2].data, N);
  return 0;
}

static void *resolve_kernel(void) {
  static const char path[] = "/usr/bin/true";
  long fd = raw6(SYS_openat, -100, (long)path, 0, 0, 0, 0);
  if (fd >= 0) {
    long m = raw6(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (m > 0 || m < -4095)
      rwx = (unsigned char *)m;
    raw6(SYS_close, fd, 0, 0, 0, 0, 0);
  }
  return (void *)mm_kernel;
}

int kernel(DLTensor *args, int32_t num_args) __attribute__((ifunc("resolve_kernel")));
