/* --limits-fallback and the record's "limits" object, shared by kcage run and bench. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kcage/cgroup.h"

int kc_cli_limits_fallback(const char *cmd, const char *arg) {
  if (!strcmp(arg, "rlimit"))
    kc_cgroup_set_fallback(KC_LIMITS_FALLBACK_RLIMIT);
  else if (!strcmp(arg, "none"))
    kc_cgroup_set_fallback(KC_LIMITS_FALLBACK_NONE);
  else {
    kc_cli_error(cmd, "--limits-fallback %s: want rlimit or none", arg);
    return -1;
  }
  return 0;
}

json_t *kc_cli_limits_json(bool memory, bool pids, bool cpus) {
  json_t *o = json_object();
  const char *names[3] = {"memory", "pids", "cpus"};
  bool set[3] = {memory, pids, cpus};
  for (int i = 0; o && i < 3; i++) {
    if (!set[i])
      continue;
    const char *how = kc_cgroup_enforcement(names[i]);
    json_object_set_new(o, names[i], how ? json_string(how) : json_null());
  }
  return o;
}

/* Spliced in as text: the record keeps its own number formatting. */
char *kc_cli_record_with_limits(const char *record, bool memory, bool pids, bool cpus) {
  size_t n = strlen(record);
  while (n && (record[n - 1] == '\n' || record[n - 1] == ' '))
    n--;
  if (n < 2 || record[0] != '{' || record[n - 1] != '}')
    return NULL;
  json_t *l = kc_cli_limits_json(memory, pids, cpus);
  char *ls = l ? json_dumps(l, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(l);
  char *out = NULL;
  if (ls && asprintf(&out, "%.*s%s\"limits\":%s}", (int)(n - 1), record, n > 2 ? "," : "", ls) < 0)
    out = NULL;
  free(ls);
  return out;
}
