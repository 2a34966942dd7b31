/* session_constructor_args in a kcage session's hello, on the agent's side: the
 * constructors a kcage session can honour, applied to the session's caps, and the
 * acknowledgement the client holds them to (include/kcage/tracker.h).  A TVM RPC
 * session's constructors are tvm_session.c's. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kcage/escape.h"
#include "kcage/units.h"
#include "session_ctor_agent.h"

#define MAX_ARGS 32

static int refuse(kc_error *err, const char *fmt, const char *what) {
  char shown[256];
  kc_error_set(err, 0, fmt, kc_escape(what, shown, sizeof shown));
  if (err)
    err->code = EINVAL;
  return -1;
}

/* kcage.sandbox in a kcage session: memory=SIZE lowers the memory of every worker and
 * build; the rest concern a TVM session's sandbox and are refused here, never dropped. */
static int sandbox_setting(const char *a, kc_run_caps *caps, json_t *clamped, kc_error *err) {
  uint64_t v;
  if (strncmp(a, "memory=", 7))
    return refuse(err,
                  "kcage.sandbox: a kcage session takes only memory=SIZE (its workers' limits "
                  "come with each batch), not \"%s\"",
                  a);
  if (kc_parse_size(a + 7, &v) < 0 || v < (16u << 20))
    return refuse(err, "kcage.sandbox: \"%s\": want a size of 16M or more", a);
  uint64_t cap = caps->max_memory_bytes;
  if (cap && v > cap)
    json_object_set_new(clamped, "memory_bytes",
                        json_pack("{s:f, s:f}", "asked", (double)v, "cap", (double)cap));
  else
    caps->max_memory_bytes = v;
  return 0;
}

int kc_session_ctor_accept(const json_t *args, kc_run_caps *caps, json_t **ack, kc_error *err) {
  size_t n = json_array_size(args);
  const char *name = json_string_value(json_array_get(args, 0));
  if (!json_is_array(args) || n == 0 || n > MAX_ARGS || !name)
    return refuse(err, "session_constructor_args: want [name, arg...] (strings)%s", "");
  bool sandbox = !strcmp(name, "kcage.sandbox");
  if (!sandbox && (strcmp(name, "rpc.LocalSession") || n > 1))
    return refuse(err,
                  "session constructor %s: a kcage session takes rpc.LocalSession (no "
                  "arguments) or kcage.sandbox",
                  name);
  json_t *clamped = json_object(), *rest = json_array();
  for (size_t i = 1; i < n; i++) {
    const char *a = json_string_value(json_array_get(args, i));
    if (!a || sandbox_setting(a, caps, clamped, err) < 0) {
      if (!a)
        refuse(err, "session_constructor_args: argument %s is not a string", "");
      json_decref(clamped);
      json_decref(rest);
      return -1;
    }
    json_array_append_new(rest, json_string(a));
  }
  *ack = json_pack("{s:s, s:o, s:o}", "name", name, "args", rest, "clamped", clamped);
  return 0;
}
