/* Finding a policy by name: $KCAGE_POLICY_DIR, then kcage's own policies (the source
 * tree when running from a build directory, else the installed copy next to the
 * binary: install_dirs.c).  $KCAGE_POLICY_DIR and the policy found there are used only
 * when nobody but root and the caller can change them (env_path.h): a policy is the
 * sandbox.  A value with a '/' or ending in ".policy" is a path and is read as given. */
#include "env_path.h"
#include "install_dirs.h"
#include "policy_internal.h"
#include "safe_fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kcage/cleanup.h"

bool kc_policy_is_path(const char *s) {
  size_t len = strlen(s);
  return strchr(s, '/') || (len >= 7 && !strcmp(s + len - 7, ".policy"));
}

/* The directory searched before kcage's own: the tenant's, else $KCAGE_POLICY_DIR;
 * either only when nobody but root and the caller can change it. */
static int first_dir(const kc_settings *s, const char **out, const char **label, kc_error *err) {
  if (s && s->policy_dir) {
    kc_cleanup_close int fd = kc_safe_dir_open(s->policy_dir, KC_DIR_TRUSTED, false, NULL, 0, err);
    if (fd < 0)
      return kc_error_prefix(err, "policy directory");
    *out = s->policy_dir;
    *label = "policy directory";
    return 0;
  }
  *label = "$KCAGE_POLICY_DIR";
  return kc_env_path("KCAGE_POLICY_DIR", KC_ENV_DIR, out, err);
}

static int trusted_file(const kc_settings *s, const char *path, kc_error *err) {
  if (s && s->policy_dir)
    return kc_trusted_file_check(path, err) < 0 ? kc_error_prefix(err, "policy directory") : 0;
  return kc_env_path_file("KCAGE_POLICY_DIR", path, err);
}

int kc_policy_resolve(const char *name, char *path, size_t len, kc_error *err) {
  return kc_policy_resolve_in(NULL, name, path, len, err);
}

int kc_policy_resolve_in(const kc_settings *s, const char *name, char *path, size_t len,
                         kc_error *err) {
  if (!name || !*name)
    return kc_error_set(err, EINVAL, "policy: empty name");
  if (kc_policy_is_path(name)) {
    if ((size_t)snprintf(path, len, "%s", name) >= len)
      return kc_error_set(err, ENAMETOOLONG, "policy %s", name);
    return 0;
  }
  for (const char *c = name; *c; c++)
    if (!(*c == '-' || *c == '_' || *c == '.' || (*c >= '0' && *c <= '9') ||
          (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
      return kc_error_set(err, EINVAL, "policy %s: bad name", name);
  char own[4096] = "";
  if (kc_install_dir_get(KC_DIR_POLICIES, own, sizeof own) < 0)
    own[0] = '\0';
  const char *env = NULL, *label;
  if (first_dir(s, &env, &label, err) < 0)
    return kc_error_prefix(err, "policy %s", name);
  const char *dirs[] = {env, own};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    if (!dirs[i] || !*dirs[i])
      continue;
    if ((size_t)snprintf(path, len, "%s/%s.policy", dirs[i], name) >= len)
      continue;
    if (access(path, R_OK) != 0)
      continue;
    if (dirs[i] == env && trusted_file(s, path, err) < 0)
      return kc_error_prefix(err, "policy %s", name);
    return 0;
  }
  return kc_error_set(err, ENOENT, "policy %s: not found in %s or %s", name, env ? env : label,
                      own[0] ? own : "(kcage's own policy directory: unknown)");
}
