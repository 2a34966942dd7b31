#include "kcage/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kc_error_set(kc_error *err, int code, const char *fmt, ...) {
  if (!err)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  if (n < 0)
    err->msg[0] = '\0';
  err->code = code;
  if (code != 0) {
    size_t len = strlen(err->msg);
    if (len < sizeof err->msg - 3)
      snprintf(err->msg + len, sizeof err->msg - len, ": %s", strerror(code));
  }
  return -1;
}

int kc_error_prefix(kc_error *err, const char *fmt, ...) {
  if (!err)
    return -1;
  char ctx[KC_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  if (n < 0)
    return -1;
  char old[KC_ERROR_MSG_MAX];
  memcpy(old, err->msg, sizeof old);
  size_t c = strnlen(ctx, sizeof err->msg - 3);
  memcpy(err->msg, ctx, c);
  memcpy(err->msg + c, ": ", 2);
  size_t room = sizeof err->msg - c - 3;
  size_t o = strnlen(old, room);
  memcpy(err->msg + c + 2, old, o);
  err->msg[c + 2 + o] = '\0';
  return -1;
}

void kc_error_clear(kc_error *err) {
  if (!err)
    return;
  err->code = 0;
  err->msg[0] = '\0';
}
