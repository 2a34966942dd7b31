/* The one clock of kcage's own deadlines and timings: CLOCK_MONOTONIC (never stepped;
 * slewed by at most a few hundred ppm, far below what any deadline or ratio here can
 * see). */
#ifndef KCAGE_CLOCK_H
#define KCAGE_CLOCK_H

#include <stdint.h>

double kc_now_s(void);
uint64_t kc_now_ns(void);

#endif
