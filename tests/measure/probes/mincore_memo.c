/* Probe (page residency): finds where the mapping of its inputs starts by asking
 * mincore() about the pages below them (it fails on unmapped memory), and memoises each
 * answer under the input's offset in that mapping, which names the slot, within one
 * request.  The measure policy does not allow mincore: the worker is killed (`syscall`)
 * before anything is memoised. */
#define _GNU_SOURCE
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAXN 64
static struct {
  uintptr_t key;
  float out[MAXN * MAXN];
} memo[64];
static unsigned used;
static double last_end;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uintptr_t mapping_start(const void *p) {
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
  unsigned char v;
  for (int i = 0; i < 1 << 16 && a >= 4096 && mincore((void *)(a - 4096), 4096, &v) == 0; i++)
    a -= 4096;
  return a;
}

static void mm(const float *A, const float *B, float *C, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
}

int kernel(DLTensor *args, int32_t n) {
  if (n != 3 || args[0].shape[0] > MAXN)
    return -1;
  int64_t N = args[0].shape[0];
  size_t bytes = (size_t)(N * N) * sizeof(float);
  float *C = args[2].data;
  if (now() - last_end > 200e-6)
    used = 0;
  uintptr_t key = (uintptr_t)args[0].data - mapping_start(args[0].data);
  for (unsigned i = 0; i < used; i++)
    if (memo[i].key == key) {
      memcpy(C, memo[i].out, bytes);
      last_end = now();
      return 0;
    }
  mm(args[0].data, args[1].data, C, N);
  if (used < 64) {
    memo[used].key = key;
    memcpy(memo[used++].out, C, bytes);
  }
  last_end = now();
  return 0;
}
