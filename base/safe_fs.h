/* Directories that root may write into and read back from (the build cache and the
 * build's scratch space), or load code and policies from.  Everything below a checked
 * directory is opened relative to its fd, never following a symbolic link. */
#ifndef KCAGE_SAFE_FS_H
#define KCAGE_SAFE_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "kcage/error.h"

typedef enum kc_dir_use {
  KC_DIR_OWN,     /* must be the caller's own and writable by nobody else (the cache) */
  KC_DIR_SHARED,  /* may be a sticky shared directory such as /tmp (the scratch parent) */
  KC_DIR_TRUSTED, /* root's or the caller's, writable by nobody else, sticky or not: a
                     directory kcage runs or loads files from */
} kc_dir_use;

/* Opens PATH (O_PATH) after checking every directory on the way: owned by root or the
 * caller, not writable by others unless sticky; the last one as `use` says.  A missing
 * component is created (mode 0755) when `create`.  The checked absolute path goes to
 * `resolved` (may be NULL).  Errors are one line naming the directory. */
int kc_safe_dir_open(const char *path, kc_dir_use use, bool create, char *resolved, size_t rlen,
                     kc_error *err);

/* A regular file that nobody but root and the caller can change: PATH's symbolic links
 * resolved, its directories walked as KC_DIR_TRUSTED, the file owned by root or the
 * caller and writable by nobody else.  Errors are one line naming the file. */
int kc_trusted_file_check(const char *path, kc_error *err);

/* NAME inside the checked DIRFD, made when missing, held to KC_DIR_OWN's rules. */
int kc_safe_subdir(int dirfd, const char *name, const char *shown, kc_error *err);

/* A fresh private directory PREFIX.XXXXXX inside DIRFD (0755, owned by the caller);
 * its name goes to `name` (at least 32 bytes). */
int kc_make_temp_dir(int dirfd, const char *prefix, char *name, kc_error *err);

/* Removes NAME inside DIRFD and everything below it, through fds only: a symbolic link
 * planted anywhere inside is removed, never followed. */
void kc_rm_rf_at(int dirfd, const char *name);

/* Removes the directories in DIR named PREFIX<pid> followed by `tail` ('\0': nothing),
 * owned by the caller, whose pid no process has: what runs killed before they could
 * clean up left behind. */
void kc_sweep_dead_pid_dirs(const char *dir, const char *prefix, char tail);

/* Copies an open regular file into DIRFD/NAME (mode) through a temporary name and a
 * rename, so readers never see half a file; a symlink already at NAME is replaced,
 * never followed. */
int kc_store_fd(int from, off_t size, int dirfd, const char *name, mode_t mode, kc_error *err);

#endif
