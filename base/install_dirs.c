/* Finding kcage's files from the location of the module that holds this code: the
 * shared library (libkcage.so, for API users) or the executable (kcage, tests).
 *
 * The module's directory decides.  Under the build directory it was configured in,
 * the source tree's policies and the built kcage-worker are used.  Anywhere else it
 * is an installed copy: its prefix is the module's directory less the relative
 * bindir, libdir or libexecdir/kcage it was installed to, and the files are below
 * that prefix.  An installed binary never looks at the build-time source tree: that
 * directory may be gone, or writable by someone else. */
#include "install_dirs.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KC_BUILD_DIR
#define KC_BUILD_DIR ""
#endif
#ifndef KC_SOURCE_POLICY_DIR
#define KC_SOURCE_POLICY_DIR ""
#endif
/* Install layout, relative to the prefix (absolute when configured so). */
#ifndef KC_REL_BINDIR
#define KC_REL_BINDIR "bin"
#endif
#ifndef KC_REL_LIBDIR
#define KC_REL_LIBDIR "lib"
#endif
#ifndef KC_REL_LIBEXECDIR
#define KC_REL_LIBEXECDIR "libexec"
#endif
#ifndef KC_REL_DATADIR
#define KC_REL_DATADIR "share"
#endif
/* The configured install dirs, absolute: only for a module outside any layout. */
#ifndef KC_FULL_DATADIR
#define KC_FULL_DATADIR ""
#endif
#ifndef KC_FULL_LIBEXECDIR
#define KC_FULL_LIBEXECDIR ""
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char module_dir[PATH_MAX]; /* "" when unknown */
static int from_build;

/* The real directory of the object that holds this function. */
static void find_module_dir(void) {
  Dl_info info;
  struct link_map *lm = NULL;
  char path[PATH_MAX];
  const char *name = NULL;
  if (dladdr1((void *)find_module_dir, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm && lm->l_name &&
      lm->l_name[0])
    name = lm->l_name; /* a shared object */
  if (!realpath(name ? name : "/proc/self/exe", path))
    return;
  char *slash = strrchr(path, '/');
  if (!slash)
    return;
  *slash = '\0';
  snprintf(module_dir, sizeof module_dir, "%s", path[0] ? path : "/");

  char build[PATH_MAX];
  if (KC_BUILD_DIR[0] && realpath(KC_BUILD_DIR, build)) {
    size_t bl = strlen(build);
    from_build =
        !strncmp(module_dir, build, bl) && (module_dir[bl] == '\0' || module_dir[bl] == '/');
  }
}

/* The prefix of an installed module: its directory less the relative dir it lives in. */
static int install_prefix(char *buf, size_t n) {
  static const char *const rel[] = {KC_REL_BINDIR, KC_REL_LIBDIR, KC_REL_LIBEXECDIR "/kcage"};
  size_t ml = strlen(module_dir);
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    size_t rl = strlen(rel[i]);
    if (rel[i][0] == '/' || rl == 0 || rl >= ml)
      continue;
    if (module_dir[ml - rl - 1] == '/' && !strcmp(module_dir + ml - rl, rel[i])) {
      if (ml - rl - 1 >= n)
        return -1;
      memcpy(buf, module_dir, ml - rl - 1);
      buf[ml - rl - 1] = '\0';
      return 0;
    }
  }
  return -1;
}

/* dir under the prefix, or dir itself when it was configured as an absolute path.
 * A module outside any install layout (a copy of libkcage shipped inside another
 * package) falls back to the prefix configured at build time, `full`. */
static int under_prefix(const char *dir, const char *full, const char *sub, char *buf, size_t n) {
  int w;
  char prefix[PATH_MAX];
  if (dir[0] == '/')
    w = snprintf(buf, n, "%s%s", dir, sub);
  else if (install_prefix(prefix, sizeof prefix) == 0)
    w = snprintf(buf, n, "%s/%s%s", prefix, dir, sub);
  else if (full[0] == '/')
    w = snprintf(buf, n, "%s%s", full, sub);
  else
    return -1;
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

int kc_install_from_build_tree(void) {
  pthread_once(&once, find_module_dir);
  return from_build;
}

int kc_install_dir_get(kc_install_dir which, char *buf, size_t n) {
  pthread_once(&once, find_module_dir);
  if (!module_dir[0])
    return -1;
  if (from_build) {
    const char *d = which == KC_DIR_POLICIES ? KC_SOURCE_POLICY_DIR : KC_BUILD_DIR;
    int w = snprintf(buf, n, "%s", d);
    return w <= 0 || (size_t)w >= n ? -1 : 0;
  }
  if (which == KC_DIR_POLICIES)
    return under_prefix(KC_REL_DATADIR, KC_FULL_DATADIR, "/kcage/policies", buf, n);
  return under_prefix(KC_REL_LIBEXECDIR, KC_FULL_LIBEXECDIR, "/kcage", buf, n);
}
