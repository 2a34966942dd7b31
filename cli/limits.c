/* --limits-fallback, --cgroup, --sandbox-ids and the record's "limits" object, shared by
 * kcage run, bench and agent.  These are options of the caller that fill its settings
 * (kc_settings in the command's config), never environment variables or process-wide
 * state: either would reach every tenant a daemon serves. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kcage/cgroup.h"
#include "kcage/sandbox.h"

int kc_cli_limits_fallback(const char *cmd, const char *arg, kc_settings *s) {
  if (!strcmp(arg, "rlimit"))
    s->limits_fallback = KC_LIMITS_FALLBACK_RLIMIT;
  else if (!strcmp(arg, "none"))
    s->limits_fallback = KC_LIMITS_FALLBACK_NONE;
  else {
    kc_cli_error(cmd, "--limits-fallback %s: want rlimit or none", arg);
    return -1;
  }
  return 0;
}

int kc_cli_cgroup_mode(const char *cmd, const char *arg, kc_settings *s) {
  static const kc_cgroup_mode modes[] = {KC_CGROUP_AUTO, KC_CGROUP_NONE, KC_CGROUP_V1, KC_CGROUP_V2,
                                         KC_CGROUP_HYBRID};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    if (strcmp(arg, kc_cgroup_mode_name(modes[i])))
      continue;
    kc_settings t = *s;
    t.cgroup_mode = modes[i];
    if (kc_cgroup_mode_for(&t) == KC_CGROUP_AUTO) { /* refused now, not at the first run */
      kc_cli_error(cmd, "--cgroup %s: cgroup mode %s is not available on this host", arg, arg);
      return -1;
    }
    s->cgroup_mode = modes[i];
    return 0;
  }
  kc_cli_error(cmd, "--cgroup %s: want auto, v1, v2, hybrid or none", arg);
  return -1;
}

int kc_cli_sandbox_ids(const char *cmd, const char *arg, kc_settings *s) {
  uint64_t base, count;
  const char *colon = strchr(arg, ':');
  char b[32];
  if (!colon || (size_t)(colon - arg) >= sizeof b) {
    kc_cli_error(cmd, "--sandbox-ids %s: want BASE:COUNT", arg);
    return -1;
  }
  snprintf(b, sizeof b, "%.*s", (int)(colon - arg), arg);
  if (kc_cli_parse_uint(b, 1, UINT32_MAX, &base) < 0 ||
      kc_cli_parse_uint(colon + 1, 1, UINT32_MAX, &count) < 0) {
    kc_cli_error(cmd, "--sandbox-ids %s: want BASE:COUNT", arg);
    return -1;
  }
  kc_error err = {0};
  kc_settings t = *s;
  t.ids_base = (uint32_t)base;
  t.ids_count = (uint32_t)count;
  uint32_t b2, c2;
  if (kc_sandbox_ids_range(&t, &b2, &c2, &err) < 0) {
    kc_cli_error(cmd, "--sandbox-ids: %s", err.msg);
    return -1;
  }
  *s = t;
  return 0;
}

json_t *kc_cli_limits_json(const kc_settings *s, bool memory, bool pids, bool cpus) {
  json_t *o = json_object();
  const char *names[3] = {"memory", "pids", "cpus"};
  bool set[3] = {memory, pids, cpus};
  for (int i = 0; o && i < 3; i++) {
    if (!set[i])
      continue;
    const char *how = kc_cgroup_enforcement(s, names[i]);
    json_object_set_new(o, names[i], how ? json_string(how) : json_null());
  }
  return o;
}

/* Spliced in as text: the record keeps its own number formatting. */
char *kc_cli_record_with_limits(const kc_settings *s, const char *record, bool memory, bool pids,
                                bool cpus) {
  size_t n = strlen(record);
  while (n && (record[n - 1] == '\n' || record[n - 1] == ' '))
    n--;
  if (n < 2 || record[0] != '{' || record[n - 1] != '}')
    return NULL;
  json_t *l = kc_cli_limits_json(s, memory, pids, cpus);
  char *ls = l ? json_dumps(l, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(l);
  char *out = NULL;
  if (ls && asprintf(&out, "%.*s%s\"limits\":%s}", (int)(n - 1), record, n > 2 ? "," : "", ls) < 0)
    out = NULL;
  free(ls);
  return out;
}
