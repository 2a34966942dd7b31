/* $KCAGE_POLICY_DIR and $KCAGE_WORKER replace the policies and the worker binary that
 * every sandbox rests on.  Whoever can write where they point can weaken or replace
 * the isolation of every kernel, so the place must be as trusted as kcage's own
 * install: root's or the caller's, writable by nobody else, along the whole path. */
#include "env_path.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcage/cleanup.h"
#include "kcage/log.h"
#include "safe_fs.h"

/* Each variable's value is logged once per process (a bench batch resolves it often). */
static pthread_mutex_t logged_mu = PTHREAD_MUTEX_INITIALIZER;
static char logged[2][4096];
static _Atomic bool g_by_parent;

void kc_env_path_checked_by_parent(void) {
  atomic_store(&g_by_parent, true);
}

static void log_once(const char *var, kc_env_path_kind kind, const char *value) {
  char *slot = logged[kind == KC_ENV_FILE];
  pthread_mutex_lock(&logged_mu);
  bool first = strncmp(slot, value, sizeof logged[0] - 1) != 0;
  if (first)
    snprintf(slot, sizeof logged[0], "%s", value);
  pthread_mutex_unlock(&logged_mu);
  if (first)
    kc_log(KC_LOG_INFO, "kcage", "$%s=%s in use instead of kcage's own %s", var, value,
           kind == KC_ENV_DIR ? "policies" : "kcage-worker");
}

int kc_env_path_file(const char *var, const char *path, kc_error *err) {
  if (atomic_load(&g_by_parent) || kc_trusted_file_check(path, err) == 0)
    return 0;
  return kc_error_prefix(err, "$%s", var);
}

int kc_env_path(const char *var, kc_env_path_kind kind, const char **out, kc_error *err) {
  *out = NULL;
  const char *v = secure_getenv(var);
  if (!v || !*v)
    return 0;
  if (atomic_load(&g_by_parent)) {
    *out = v;
    return 0;
  }
  if (kind == KC_ENV_DIR) {
    kc_cleanup_close int fd = kc_safe_dir_open(v, KC_DIR_TRUSTED, false, NULL, 0, err);
    if (fd < 0)
      return kc_error_prefix(err, "$%s", var);
  } else if (kc_trusted_file_check(v, err) < 0) {
    return kc_error_prefix(err, "$%s", var);
  }
  log_once(var, kind, v);
  *out = v;
  return 0;
}
