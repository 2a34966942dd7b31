/* A kernel's status and its name in records (docs/contracts.md): the one table, used
 * by the batch, the record writer and the tracker's decoder alike. */
#include <string.h>

#include "kcage/measure.h"

static const char *const names[] = {"ok",    "build_error", "wrong_result", "timeout",   "memory",
                                    "crash", "syscall",     "error",        "suspicious"};

const char *kc_measure_status_name(kc_measure_status s) {
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "error";
}

int kc_measure_status_parse(const char *name, kc_measure_status *out) {
  for (unsigned s = 0; s < sizeof names / sizeof names[0]; s++)
    if (!strcmp(name, names[s])) {
      *out = (kc_measure_status)s;
      return 0;
    }
  return -1;
}
