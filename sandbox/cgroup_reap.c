/* Remove the cgroups of kcage processes that are gone (SIGKILLed, crashed): kill what
 * is left in them and rmdir them in every hierarchy.  Ownership is in the leaf name,
 * <pidns>.<pid>.<starttime>.<seq>.<name>: the start time tells a reused pid from the owner. */
#include "cgroup_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"

/* Only judge owners in our own pid namespace: a kcage in another container sharing
 * this cgroupfs has pids we cannot see, and its sandboxes are not ours to kill. */
static bool owner_gone(const char *leaf, unsigned long ns) {
  unsigned long lns;
  int pid;
  unsigned long long st;
  unsigned s;
  int used = 0;
  if (sscanf(leaf, "%lu.%d.%llu.%u.%n", &lns, &pid, &st, &s, &used) != 4 || used == 0 || pid <= 0)
    return false; /* not a name we made: leave it alone */
  return lns == ns && kc_cgroup_starttime(pid) != st;
}

static int reap_base(const char *base, unsigned long ns, int *reaped, kc_error *err) {
  /* cgroupfs counts subdirectories in a directory's link count (2 + children): a base
   * without any skips the directory read (a 32 KB buffer, every plain run).  Other
   * counts, including a file system that does not count, read it. */
  struct stat st;
  if (stat(base, &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 2)
    return 0;
  kc_cleanup_closedir DIR *d = opendir(base);
  if (!d)
    return errno == ENOENT ? 0 : kc_error_set(err, errno, "open %s", base);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.' || !owner_gone(e->d_name, ns))
      continue;
    kc_cgroup *cg = NULL;
    if (kc_cgroup_open_existing(e->d_name, &cg, err) < 0)
      return -1;
    kc_cgroup_kill(cg, NULL);
    kc_cgroup_destroy(cg); /* every hierarchy, so later bases see it gone */
    (*reaped)++;
  }
  return 0;
}

int kc_cgroup_reap_stale(kc_error *err) {
  const kc_cgroup_host *h = kc_cgroup_host_get();
  if (h->mode == KC_CGROUP_NONE)
    return 0;
  int reaped = 0;
  unsigned long ns = kc_cgroup_pidns();
  if (h->have_v2 && reap_base(h->v2.base, ns, &reaped, err) < 0)
    return -1;
  for (int i = 0; i < h->nv1; i++)
    if (reap_base(h->v1[i].base, ns, &reaped, err) < 0)
      return -1;
  return reaped;
}
