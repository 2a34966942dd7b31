/* The kcage-worker program's body: the per-pool zygote (and, forked from it, every
 * worker).  Started only by the kcage library: `kcage-worker zygote FD`.  The program's
 * own main (measure/worker_main.c) adds the built-in handlers of the layers above. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env_path.h"
#include "worker_internal.h"

/* kcage-worker zygote FD [--policy NAME] [--fs] [--ro-bind|--bind SRC:DST]...
 * [--tmpfs DST[:SIZE]]... [--python LIBPYTHON BOOT_SOURCE] */
int kc_worker_program_main(int argc, char **argv, const kc_builtin *builtins) {
  kc_handlers_set_builtins(builtins);
  /* The kcage that started us checked $KCAGE_POLICY_DIR before the exec; inside the
   * pool's user namespace ownership reads as the overflow id and cannot be checked. */
  kc_env_path_checked_by_parent();
  if (argc < 3 || strcmp(argv[1], "zygote")) {
    fprintf(stderr, "kcage-worker: started by the kcage library only\n");
    return 2;
  }
  kc_zygote_args a = {.ctl = atoi(argv[2]), .argv = argv};
  kc_mount mounts[64];
  for (int i = 3; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "--fs")) {
      a.setup_fs = true;
      continue;
    }
    if (!strcmp(o, "--lo")) {
      a.lo_up = true;
      continue;
    }
    if (!strcmp(o, "--ns")) {
      a.userns = true;
      continue;
    }
    if (!strcmp(o, "--netns")) {
      a.join_netns = true;
      continue;
    }
    if (!strcmp(o, "--hostnet")) {
      a.host_net = true;
      continue;
    }
    if (i + 1 >= argc)
      return 2;
    char *v = argv[++i];
    if (!strcmp(o, "--policy")) {
      a.policy = v;
      continue;
    }
    if (!strcmp(o, "--python") && i + 1 < argc) {
      a.python_lib = v;
      a.python_boot = argv[++i];
      continue;
    }
    if (a.n_mounts == sizeof mounts / sizeof mounts[0])
      return 2;
    /* Split a copy: argv stays whole for the zygote's exec of itself in the pool's
     * namespaces (zygote.c), which parses it again. */
    static char *copies[64]; /* the mounts point into them for the process's life */
    if (!(v = copies[a.n_mounts] = strdup(v)))
      return 2;
    kc_mount *m = &mounts[a.n_mounts++];
    memset(m, 0, sizeof *m);
    char *colon = strchr(v, ':');
    if (!strcmp(o, "--tmpfs")) {
      m->kind = KC_MOUNT_TMPFS;
      if (colon) {
        *colon = 0;
        m->size = strtoull(colon + 1, NULL, 10);
      }
      m->dst = v;
    } else if (!strcmp(o, "--ro-bind") || !strcmp(o, "--bind")) {
      m->kind = o[2] == 'r' ? KC_MOUNT_RO_BIND : KC_MOUNT_BIND;
      if (colon)
        *colon = 0;
      m->src = v;
      m->dst = colon ? colon + 1 : v;
    } else {
      return 2;
    }
  }
  a.mounts = mounts;
  return kc_zygote_main(&a);
}
