/* Cheat (snooping): a constructor lists the directory its .so was loaded from, and
 * borrows the entry point of any other kernel it finds there (a faster candidate, or
 * the reference).  It computes the answer itself only when it finds nothing: that is
 * what kcage shows it, its own .so and its inputs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
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

typedef int (*kfn)(DLTensor *, int32_t);
static kfn borrowed;

__attribute__((constructor)) static void look_around(void) {
  Dl_info info;
  if (!dladdr((void *)look_around, &info) || !info.dli_fname)
    return;
  char self[4096], dir[4096];
  snprintf(self, sizeof self, "%s", info.dli_fname);
  snprintf(dir, sizeof dir, "%s", info.dli_fname);
  const char *d = dirname(dir);
  for (int up = 0; up < 2 && !borrowed; up++) {
    DIR *dp = opendir(d);
    if (!dp)
      break;
    struct dirent *e;
    while ((e = readdir(dp)) && !borrowed) {
      size_t l = strlen(e->d_name);
      char path[8192];
      snprintf(path, sizeof path, "%s/%s", d, e->d_name);
      if (l < 3 || strcmp(e->d_name + l - 3, ".so") || !strcmp(path, self))
        continue;
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h)
        borrowed = (kfn)(uintptr_t)dlsym(h, "kernel");
    }
    closedir(dp);
    d = dirname((char *)d); /* then the directory above */
  }
}

int kernel(DLTensor *args, int32_t num_args) {
  if (borrowed)
    return borrowed(args, num_args);
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
  mm(args[0].data, args[1].data, args[2].data, N);
  return 0;
}
