/* Environment variables that put a path in place of one of kcage's own files. */
#ifndef KCAGE_ENV_PATH_H
#define KCAGE_ENV_PATH_H

#include "kcage/error.h"

typedef enum kc_env_path_kind {
  KC_ENV_DIR,  /* a directory kcage loads files from ($KCAGE_POLICY_DIR) */
  KC_ENV_FILE, /* a file kcage runs ($KCAGE_WORKER) */
} kc_env_path_kind;

/* VAR's value (secure_getenv: never in a set-id process) in *out, or NULL when unset
 * or empty.  A value is used only when nobody but root and the caller can change what
 * it names (safe_fs.h: KC_DIR_TRUSTED, kc_trusted_file_check); otherwise -1 with one
 * line saying why, never a silent fall back to the default.  The first use of a value
 * is logged: the caller's isolation rests on it. */
int kc_env_path(const char *var, kc_env_path_kind kind, const char **out, kc_error *err);

/* A file found in a directory kc_env_path gave: held to the same rules. */
int kc_env_path_file(const char *var, const char *path, kc_error *err);

/* For kcage-worker only, which the kcage library starts after checking these variables
 * itself: from here on a value is taken as checked (and not logged again). */
void kc_env_path_checked_by_parent(void);

#endif
