#include "kcage/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

int kc_parse_size(const char *s, uint64_t *out) {
  if (!s || !isdigit((unsigned char)*s))
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno)
    return -1;
  unsigned shift = 0;
  switch (*end) {
  case '\0':
    break;
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  case 't':
  case 'T':
    shift = 40;
    end++;
    break;
  default:
    return -1;
  }
  if (shift && (*end == 'i' || *end == 'B'))
    end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
  if (*end != '\0')
    return -1;
  if (shift && v > (UINT64_MAX >> shift))
    return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

int kc_parse_decimal(const char *s, double *out) {
  if (!s || (!isdigit((unsigned char)s[0]) && s[0] != '.'))
    return -1;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v < 0)
    return -1;
  *out = v;
  return 0;
}
