/* A fresh scratch for one process of a pool (kc_sandbox_fresh_scratch): the pool's
 * processes are forks of one zygote and share its mount and IPC namespaces, so a file
 * one of them leaves in /tmp or a SysV segment would be there for the next.  Where each
 * process is one tenant's session, it gets those namespaces of its own and every tmpfs
 * of the pool's layout mounted anew over the shared one: empty, and gone with the last
 * process of the session.  An abstract unix socket lives only while a process holds it:
 * a caller that runs one tenant at a time and kills the last one's processes before
 * the next one's code runs (the agent) needs no network namespace per process. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <unistd.h>

#include "kcage/policy.h"
#include "kcage/sandbox_parts.h"

#define SCRATCH_DEFAULT_SIZE (64ull << 20) /* fs.c's default for a tmpfs without one */

static int fresh_tmpfs(const char *dst, uint64_t size, kc_error *err) {
  char opts[64];
  snprintf(opts, sizeof opts, "size=%llu,mode=1777",
           (unsigned long long)(size ? size : SCRATCH_DEFAULT_SIZE));
  if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
    return kc_error_set(err, errno, "scratch: tmpfs on %s", dst);
  return 0;
}

int kc_sandbox_fresh_scratch(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                             const char *cwd, kc_error *err) {
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC) < 0)
    return kc_error_set(err, errno, "scratch: unshare");
  const kc_policy_spec *s = policy ? kc_policy_get_spec(policy) : NULL;
  for (size_t i = 0; s && i < s->n_mounts; i++)
    if (s->mounts[i].kind == KC_POLICY_MOUNT_TMPFS &&
        fresh_tmpfs(s->mounts[i].dst, s->mounts[i].size, err) < 0)
      return -1;
  for (size_t i = 0; i < n_extra; i++)
    if (extra[i].kind == KC_MOUNT_TMPFS && extra[i].dst &&
        fresh_tmpfs(extra[i].dst, extra[i].size, err) < 0)
      return -1;
  /* the old directory is the shared tmpfs's, under the new mount */
  if (chdir(cwd ? cwd : "/") < 0)
    return kc_error_set(err, errno, "scratch: chdir %s", cwd ? cwd : "/");
  return 0;
}
