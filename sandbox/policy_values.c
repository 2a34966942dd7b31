/* Values in policy statements (numbers, constant names joined with '|', errnos) and
 * the error and growth helpers every statement uses. */
#include "policy_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) int kc__pol_err(parse_ctx *c, const loc *l, const char *fmt,
                                                      ...) {
  char msg[KC_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (l)
    return kc_error_set(c->err, 0, "%s:%d: %s", l->file, l->line, msg);
  return kc_error_set(c->err, 0, "%s", msg);
}

int kc__pol_grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return 0;
  size_t nc = *cap ? *cap * 2 : 8;
  void *na = realloc(*arr, nc * elem);
  if (!na)
    return -1;
  *arr = na;
  *cap = nc;
  return 0;
}

int kc__pol_u64(const char *s, uint64_t *out) {
  if (!isdigit((unsigned char)s[0]))
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end)
    return -1;
  *out = v;
  return 0;
}

/* NAME|NAME|0x10 */
int kc__pol_value(parse_ctx *c, const loc *l, const char *s, uint64_t *out) {
  uint64_t acc = 0;
  char buf[128];
  if (strlen(s) >= sizeof buf || !*s)
    return kc__pol_err(c, l, "bad value '%s'", s);
  strcpy(buf, s);
  char *save = NULL;
  int parts = 0;
  for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save), parts++) {
    uint64_t v;
    if (isdigit((unsigned char)t[0])) {
      if (kc__pol_u64(t, &v) < 0)
        return kc__pol_err(c, l, "bad number '%s'", t);
    } else if (t[0] == '-' && isdigit((unsigned char)t[1])) { /* -1: fd/pid sentinels */
      if (kc__pol_u64(t + 1, &v) < 0 || v > (uint64_t)INT64_MAX)
        return kc__pol_err(c, l, "bad number '%s'", t);
      v = (uint64_t)(-(int64_t)v);
    } else if (kc_policy_const_lookup(t, &v) < 0) {
      return kc__pol_err(c, l, "unknown constant '%s'", t);
    }
    acc |= v;
  }
  if (!parts || s[strlen(s) - 1] == '|' || s[0] == '|' || strstr(s, "||"))
    return kc__pol_err(c, l, "bad value '%s'", s);
  *out = acc;
  return 0;
}

int kc__pol_errno(parse_ctx *c, const loc *l, const char *s, int *out) {
  if (isdigit((unsigned char)s[0])) {
    uint64_t v;
    if (kc__pol_u64(s, &v) < 0 || v < 1 || v > 4095)
      return kc__pol_err(c, l, "bad errno '%s' (1..4095 or a name such as EPERM)", s);
    *out = (int)v;
    return 0;
  }
  int e = kc_policy_errno_lookup(s);
  if (e < 0)
    return kc__pol_err(c, l, "unknown errno name '%s'", s);
  *out = e;
  return 0;
}
