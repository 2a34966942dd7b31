/* Private: session_constructor_args in a kcage session's hello (session_ctor.c). */
#ifndef KCAGE_TRACKER_SESSION_CTOR_H
#define KCAGE_TRACKER_SESSION_CTOR_H

#include <jansson.h>

#include "kcage/error.h"

/* [name, arg...] as JSON strings (checked before: kc_session_ctor_check). */
json_t *kc_session_ctor_json(const char *const *args, size_t n);
/* 0 when the agent's hello acknowledges `asked`, else -1 saying why. */
int kc_session_ctor_acked(const json_t *hello, const json_t *asked, kc_error *err);

#endif
