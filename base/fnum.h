/* The few floating-point helpers kcage needs, inline: with them the kcage program
 * references nothing of libm, and the loader neither maps nor searches libm on every
 * `kcage run` (~0.1 ms and ~12 page faults per start; bench/bench_run). */
#ifndef KCAGE_FNUM_H
#define KCAGE_FNUM_H

#include <math.h>

/* fmin/fmax: a NaN operand yields the other one. */
static inline double kc_fmin(double a, double b) {
  if (isnan(a))
    return b;
  if (isnan(b))
    return a;
  return a < b ? a : b;
}

static inline double kc_fmax(double a, double b) {
  if (isnan(a))
    return b;
  if (isnan(b))
    return a;
  return a > b ? a : b;
}

/* ceil of a finite value within long long's range. */
static inline long long kc_ceil_ll(double x) {
  long long t = (long long)x; /* truncates toward zero */
  return t + ((double)t < x);
}

#endif
