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
#include <unistd.h>

#include "kcage/policy.h"
#include "kcage/sandbox_parts.h"
#include "sandbox_internal.h"

int kc_sandbox_fresh_scratch(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                             const char *cwd, kc_error *err) {
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC) < 0)
    return kc_error_set(err, errno, "scratch: unshare");
  const kc_policy_spec *s = policy ? kc_policy_get_spec(policy) : NULL;
  for (size_t i = 0; s && i < s->n_mounts; i++)
    if (s->mounts[i].kind == KC_POLICY_MOUNT_TMPFS &&
        kc__fs_tmpfs(s->mounts[i].dst, s->mounts[i].size, err) < 0)
      return -1;
  for (size_t i = 0; i < n_extra; i++)
    if (extra[i].kind == KC_MOUNT_TMPFS && extra[i].dst &&
        kc__fs_tmpfs(extra[i].dst, extra[i].size, err) < 0)
      return -1;
  /* the old directory is the shared tmpfs's, under the new mount */
  if (chdir(cwd ? cwd : "/") < 0)
    return kc_error_set(err, errno, "scratch: chdir %s", cwd ? cwd : "/");
  return 0;
}
