/* Where kcage's own files are: next to the running binary or library.  An installed
 * kcage finds its policies and kcage-worker relative to where it is installed (so a
 * prefix chosen at install time, a DESTDIR staging or a moved tree all work); only a
 * binary that runs from its own build directory uses the source tree. */
#ifndef KCAGE_INSTALL_DIRS_H
#define KCAGE_INSTALL_DIRS_H

#include <stddef.h>

typedef enum kc_install_dir {
  KC_DIR_POLICIES, /* <datadir>/kcage/policies, or the source tree's policies/ */
  KC_DIR_WORKER,   /* <libexecdir>/kcage, or the build directory */
} kc_install_dir;

/* The directory, into buf (NUL-terminated).  -1 when it cannot be found (the module
 * holding this code is neither in its build tree nor in an install layout). */
int kc_install_dir_get(kc_install_dir which, char *buf, size_t n);
/* 1 when this code runs from its build tree (a binary or library under the build
 * directory it was configured in), 0 when installed. */
int kc_install_from_build_tree(void);

#endif
