/* One kernel's measurement result (kc_kmeasure): its status with a message, and its
 * release.  Apart from the measuring (measure.c) and the checking of rounds
 * (measure_verify.c) so that both set a status without either depending on the other. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "measure_kernel.h"

void kc_kmeasure_status(kc_kmeasure *m, kc_measure_status s, const char *fmt, ...) {
  m->status = s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->message, sizeof m->message, fmt, ap);
  va_end(ap);
}

void kc_kmeasure_clear(kc_kmeasure *m) {
  free(m->run_secs);
  free(m->warmup_secs);
  m->run_secs = m->warmup_secs = NULL;
}
