/* Sizes and durations as people write them, one parser for the command line and the
 * policy files alike. */
#ifndef KCAGE_UNITS_H
#define KCAGE_UNITS_H

#include <stdint.h>

/* "4096", "64K", "64M", "1G", "1T" (binary multiples; an optional "i", "iB" or "B" after
 * the suffix).  Returns -1 on anything else, including overflow. */
int kc_parse_size(const char *s, uint64_t *out);

/* A non-negative finite decimal: "2", "0.5", ".25", "1e3" (seconds, milliseconds,
 * tolerances).  No sign and no leading space; returns -1 on anything else. */
int kc_parse_decimal(const char *s, double *out);

#endif
