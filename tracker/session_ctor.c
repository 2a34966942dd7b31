/* TVM's session_constructor_args on the client's side: checked before anything is
 * asked of a tracker, carried in a kcage session's hello, and the agent's answer held
 * to them (include/kcage/tracker.h, the session protocol). */
#include <errno.h>
#include <string.h>

#include "kcage/escape.h"
#include "kcage/tracker.h"
#include "session_ctor.h"

static bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

int kc_session_ctor_check(const char *const *args, size_t n, kc_error *err) {
  if (n == 0)
    return 0;
  if (!args || !args[0] || !args[0][0])
    return kc_error_set(err, EINVAL,
                        "session_constructor_args: the first element names the "
                        "constructor and must not be empty");
  if (n > KC_SESSION_CTOR_MAX_ARGS)
    return kc_error_set(err, E2BIG, "session_constructor_args: %zu elements (at most %d)", n,
                        KC_SESSION_CTOR_MAX_ARGS);
  size_t nl = strnlen(args[0], KC_SESSION_CTOR_MAX_NAME + 1);
  if (nl > KC_SESSION_CTOR_MAX_NAME)
    return kc_error_set(err, EINVAL, "session_constructor_args: constructor name over %d bytes",
                        KC_SESSION_CTOR_MAX_NAME);
  for (size_t i = 0; i < nl; i++)
    if (!name_char(args[0][i])) {
      char shown[4 * KC_SESSION_CTOR_MAX_NAME + 1];
      return kc_error_set(err, EINVAL,
                          "session_constructor_args: bad constructor name '%s' (letters, "
                          "digits, '.', '_', '-')",
                          kc_escape(args[0], shown, sizeof shown));
    }
  for (size_t i = 1; i < n; i++) {
    if (!args[i])
      return kc_error_set(err, EINVAL, "session_constructor_args: element %zu is missing", i);
    size_t l = strnlen(args[i], KC_SESSION_CTOR_MAX_ARG + 1);
    if (l > KC_SESSION_CTOR_MAX_ARG)
      return kc_error_set(err, EINVAL, "session_constructor_args: element %zu over %d bytes", i,
                          KC_SESSION_CTOR_MAX_ARG);
    for (size_t j = 0; j < l; j++)
      if ((unsigned char)args[i][j] < 0x20 || args[i][j] == 0x7f)
        return kc_error_set(err, EINVAL,
                            "session_constructor_args: element %zu has a control character", i);
  }
  return 0;
}

json_t *kc_session_ctor_json(const char *const *args, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_string(args[i])) < 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

/* The agent's hello answers what the client asked: its "session_constructor" names the
 * same constructor with the same arguments.  Anything else, absence included, and the
 * tenant's limits would not be the session's. */
int kc_session_ctor_acked(const json_t *hello, const json_t *asked, kc_error *err) {
  const json_t *ack = json_object_get(hello, "session_constructor");
  const json_t *name = json_object_get(ack, "name"), *args = json_object_get(ack, "args");
  const char *want = json_string_value(json_array_get(asked, 0));
  if (!json_is_object(ack))
    return kc_error_set(err, ENOTSUP,
                        "the device agent did not acknowledge session_constructor_args "
                        "(constructor %s): an agent without them would drop what the session "
                        "asked for, so the session is refused",
                        want);
  json_t *rest = json_array();
  for (size_t i = 1; rest && i < json_array_size(asked); i++)
    json_array_append(rest, json_array_get(asked, i));
  bool same = json_is_string(name) && !strcmp(json_string_value(name), want) &&
              (args == NULL || json_equal(args, rest));
  json_decref(rest);
  if (!same)
    return kc_error_set(err, EPROTO,
                        "the device agent acknowledged another session constructor than %s", want);
  return 0;
}
