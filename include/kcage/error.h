/* Errors as values (after crun's libcrun_error_t): a fallible function returns a
 * negative int and fills a kc_error; callers prepend context as it travels up. */
#ifndef KCAGE_ERROR_H
#define KCAGE_ERROR_H

#include <stddef.h>

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

#define KC_ERROR_MSG_MAX 1024

typedef struct kc_error {
  int code;                   /* errno value behind the failure, 0 when none */
  char msg[KC_ERROR_MSG_MAX]; /* "context: context: what: strerror(code)" */
} kc_error;

/* Fill err (may be NULL) with a formatted message; when code != 0 the text of
 * strerror(code) is appended.  Always returns -1 so callers can
 * `return kc_error_set(err, errno, "open %s", path);`. */
int kc_error_set(kc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "context: " to an existing message.  Returns -1. */
int kc_error_prefix(kc_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to "no error". */
void kc_error_clear(kc_error *err);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
