/* The result record of docs/contracts.md and the `kcage run` exit status derived from it. */
#include "kcage/sandbox.h"
#include "signame.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
    [KC_STATUS_OK] = "ok",
    [KC_STATUS_EXITED] = "exited",
    [KC_STATUS_SIGNALED] = "signaled",
    [KC_STATUS_TIMEOUT] = "timeout",
    [KC_STATUS_MEMORY] = "memory",
    [KC_STATUS_SYSCALL] = "syscall",
    [KC_STATUS_PIDS] = "pids",
    [KC_STATUS_OUTPUT] = "output",
    [KC_STATUS_SETUP_ERROR] = "setup_error",
};

const char *kc_status_name(kc_status status) {
  if ((unsigned)status < sizeof status_names / sizeof status_names[0] && status_names[status])
    return status_names[status];
  return "unknown";
}

void kc_result_init(kc_result *r) {
  memset(r, 0, sizeof *r);
  r->status = KC_STATUS_SETUP_ERROR;
  r->exit_code = -1;
  r->cpu_s = -1;
  r->wall_s = -1;
  r->peak_memory_bytes = -1;
}

static json_t *num_or_null(double v) {
  return v < 0 ? json_null() : json_real(v);
}

int kc_result_to_json(const kc_result *r, char **out, kc_error *err) {
  json_t *o = json_object();
  if (!o)
    return kc_error_set(err, ENOMEM, "result json");
  json_object_set_new(o, "status", json_string(kc_status_name(r->status)));
  json_object_set_new(o, "exit_code", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null());
  json_object_set_new(o, "signal", r->signal > 0 ? json_integer(r->signal) : json_null());
  json_object_set_new(o, "signal_name",
                      r->signal > 0 ? json_string(kc_signal_name(r->signal)) : json_null());
  json_object_set_new(o, "syscall", r->syscall[0] ? json_string(r->syscall) : json_null());
  json_object_set_new(o, "limit", r->limit ? json_string(r->limit) : json_null());
  json_object_set_new(o, "cpu_s", num_or_null(r->cpu_s));
  json_object_set_new(o, "wall_s", num_or_null(r->wall_s));
  json_object_set_new(o, "peak_memory_bytes",
                      r->peak_memory_bytes >= 0 ? json_integer(r->peak_memory_bytes) : json_null());
  json_object_set_new(o, "message", r->message[0] ? json_string(r->message) : json_null());
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII |
                              JSON_REAL_PRECISION(9));
  json_decref(o);
  if (!s)
    return kc_error_set(err, ENOMEM, "result json");
  *out = s;
  return 0;
}

int kc_result_exit_status(const kc_result *r) {
  switch (r->status) {
  case KC_STATUS_OK:
    return 0;
  case KC_STATUS_TIMEOUT:
    return 124;
  case KC_STATUS_SETUP_ERROR:
    /* The program never ran: 126/127 when exec said why, else kcage's own failure. */
    return (r->exit_code == 126 || r->exit_code == 127) ? r->exit_code : 125;
  default:
    break;
  }
  if (r->signal > 0)
    return 128 + r->signal;
  /* A limit verdict is a failure even when the program itself ended well (a child of
   * a shell was the one OOM-killed, or the program exited before kcage's kill for its
   * output landed): a script checking $? must see it.  128+SIGKILL, since the limit
   * killed (part of) the tree. */
  bool limit = r->status == KC_STATUS_MEMORY || r->status == KC_STATUS_PIDS ||
               r->status == KC_STATUS_OUTPUT || r->status == KC_STATUS_SYSCALL;
  if (r->exit_code > 0 || (r->exit_code == 0 && !limit))
    return r->exit_code;
  return limit ? 128 + SIGKILL : 125;
}
