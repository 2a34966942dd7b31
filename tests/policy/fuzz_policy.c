/* libFuzzer: the policy parser (and, for what parses, the dump and the filter
 * compiler) on arbitrary bytes.  Includes resolve against the real policies/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kcage/policy.h"

static char *g_path;
static void cleanup(void) {
  if (g_path)
    unlink(g_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A real file: the parser resolves real paths (include cycles), which a memfd's
   * /proc/self/fd link is not.  Removed at exit. */
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    snprintf(path, sizeof path, "/tmp/kcage-policy-fuzz-XXXXXX");
    fd = mkstemp(path);
    if (fd < 0)
      return 0;
    g_path = path;
    atexit(cleanup);
  }
  if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
    return 0;
  kc_policy *p = NULL;
  kc_error err;
  if (kc_policy_parse_file(path, &p, &err) == 0) {
    FILE *null = fopen("/dev/null", "w");
    if (null) {
      kc_policy_dump(p, null, &err);
      fclose(null);
    }
    kc_policy_check_seccomp(p, NULL, &err);
    kc_policy_free(p);
  }
  return 0;
}
