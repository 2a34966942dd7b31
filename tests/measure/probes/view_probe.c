/* Test probe: a matmul that fails (returns -1 or -2) when its worker can see anything
 * but its own kernel and the inputs file: other candidates, the reference, the session
 * directory around them. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int seen = 1; /* 0: clean, else what it saw */

static int count_foreign(const char *dir, const char *const *allowed, int n_allowed) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int foreign = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int ok = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    for (int i = 0; i < n_allowed; i++)
      ok |= !strcmp(e->d_name, allowed[i]);
    foreign += !ok;
  }
  closedir(d);
  return foreign;
}

__attribute__((constructor)) static void look(void) {
  Dl_info info;
  if (!dladdr((void *)look, &info) || !info.dli_fname)
    return;
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s", info.dli_fname);
  snprintf(b, sizeof b, "%s", info.dli_fname);
  char *own = dirname(a);
  const char *mine[] = {"kernel.so", "inputs.bin"};
  /* the inputs file lives in view/ or, in memory, in a directory bound at in/ */
  const char *up[] = {"view", "in"};
  char in[4200];
  const char *session = dirname(dirname(b));
  snprintf(in, sizeof in, "%s/in", session);
  if (count_foreign(own, mine, 2) || count_foreign(in, mine + 1, 1))
    seen = -1;
  else if (count_foreign(session, up, 2))
    seen = -2;
  else
    seen = 0;
}

int kernel(DLTensor *args, int32_t n) {
  if (seen)
    return seen;
  if (n != 3)
    return -3;
  int64_t N = args[0].shape[0];
  const float *A = args[0].data, *B = args[1].data;
  float *C = args[2].data;
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < N; j++) {
      float acc = 0;
      for (int64_t k = 0; k < N; k++)
        acc += A[i * N + k] * B[k * N + j];
      C[i * N + j] = acc;
    }
  return 0;
}
