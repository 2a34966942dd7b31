/* Readying the cgroup attach lock ahead of an attach (cgroup.h: kc_cgroup_warm_attach).
 *
 * Every write to a cgroup.procs takes the kernel's cgroup_threadgroup_rwsem (one for
 * all hierarchies) for writing; after a quiet spell that first waits for an RCU grace
 * period (5-16 ms measured on a busy 2-vCPU guest), and for about one grace period
 * after it further writes take microseconds.  A new pool paid that wait on its first
 * slot attach, after its zygote had started: most of its time to first result.
 * Moving the zygote while it starts takes the wait there, overlapped with the
 * start-up.  Its destination is a kcage/ parent (warm_base): limit-free and ours,
 * where workers and slots leave the caller's cgroup for anyway; nothing is created.
 * Where the kernel refuses the move (a v2 kcage/ with controllers enabled for its
 * children holds no process) the lock was taken all the same. */
#include "cgroup_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* Where the zygote goes: a hierarchy that is not the v1 cpu one, so that it and the
 * sandboxes it forks keep their caller's cpu cgroup (a sandbox joins a cpu cgroup of
 * its own only for a CPU limit; cgroup.c).  Hybrid: the controller-less unified one. */
static const char *warm_base(const kc_cgroup_host *h) {
  if (h->mode == KC_CGROUP_NONE)
    return NULL;
  if (h->mode == KC_CGROUP_HYBRID || (h->have_v2 && !h->nv1))
    return h->v2.base;
  for (int i = 0; i < h->nv1; i++)
    if (!(h->v1[i].ctrl & KC_CG_CPU))
      return h->v1[i].base;
  return h->nv1 ? h->v1[0].base : NULL;
}

void kc_cgroup_warm_attach(pid_t pid) {
  const char *base = warm_base(kc_cgroup_host_get());
  if (!base)
    return;
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/cgroup.procs", base);
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%d", (int)pid);
  ssize_t w = write(fd, buf, (size_t)n);
  (void)w;
  close(fd);
}
