/* The leaf directories of a kcage cgroup: made or opened under each hierarchy's kcage/
 * parent, and which of them a cgroup holds.  Below both cgroup.c (which creates and
 * kills) and cgroup_resources.c (which writes limits, and may add the cpu leaf later). */
#include "cgroup_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"

int kc_cgroup_base_fd(const char *base) {
  return open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* mkdir (create) or just open the leaf under base. */
int kc_cgroup_leaf_fd(const char *base, const char *name, bool create, kc_error *err) {
  kc_cleanup_close int b = kc_cgroup_base_fd(base);
  if (b < 0)
    return create ? kc_error_set(err, errno, "open %s", base) : -1;
  if (create && mkdirat(b, name, 0755) < 0)
    return kc_error_set(err, errno, "mkdir %s/%s", base, name);
  int fd = openat(b, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && create)
    return kc_error_set(err, errno, "open %s/%s", base, name);
  return fd;
}

/* Does a cgroup without a CPU limit stay out of v1 hierarchy hh?  A v1 cpu cgroup is
 * one scheduling entity: every sandbox under kcage/ would share one weight against the
 * host's processes (cpu.shares 1024, like a single process), however many run.  Out of
 * it, a sandbox's processes stay in their parent's cpu cgroup and weigh like any child
 * process.  Only a hierarchy that holds nothing else we need is left out: pure v1
 * counts CPU time in cpuacct (hybrid in the unified cpu.stat). */
bool kc_cgroup_cpu_only(const kc_cgroup_hier *hh, kc_cgroup_mode mode) {
  unsigned need = KC_CG_MEMORY | KC_CG_PIDS | KC_CG_FREEZER;
  if (mode == KC_CGROUP_V1)
    need |= KC_CG_CPUACCT;
  return (hh->ctrl & KC_CG_CPU) && !(hh->ctrl & need);
}

void kc_cgroup_add_v1(kc_cgroup *cg, int fd, unsigned ctrl) {
  cg->v1_fd[cg->nv1] = fd;
  cg->v1_ctrl[cg->nv1] = ctrl;
  cg->ctrl |= ctrl;
  cg->nv1++;
}
