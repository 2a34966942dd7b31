/* A call's result: initialised, cleared, its status named. */
#include "worker_impl.h"

#include <stdlib.h>
#include <string.h>

void kc_call_result_init(kc_call_result *r) {
  memset(r, 0, sizeof *r);
  kc_result_init(&r->verdict);
}

void kc_call_result_clear(kc_call_result *r) {
  free(r->value);
  r->value = NULL;
  r->value_len = 0;
}

const char *kc_call_status_name(kc_call_status s) {
  switch (s) {
  case KC_CALL_COMPLETE:
    return "complete";
  case KC_CALL_EXCEPTION:
    return "exception";
  case KC_CALL_TIMEOUT:
    return "timeout";
  case KC_CALL_CHILD_ERROR:
    return "child_error";
  }
  return "unknown";
}
