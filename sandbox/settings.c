/* A tenant's settings, checked before its first sandbox: an id range that collides
 * with an account, or a cgroup mode the host lacks, is refused with one line. */
#include "kcage/settings.h"
#include "safe_fs.h"

#include "cgroup_internal.h"
#include "kcage/cleanup.h"
#include "kcage/sandbox.h"

#include <errno.h>

int kc_settings_check(const kc_settings *s, kc_error *err) {
  uint32_t base, count;
  if (kc_sandbox_ids_range(s, &base, &count, err) < 0)
    return -1;
  if (!kc_cgroup_host_for(s ? s->cgroup_mode : KC_CGROUP_AUTO, err))
    return -1;
  if (s && s->policy_dir) {
    if (!s->policy_dir[0])
      return kc_error_set(err, EINVAL, "policy directory: empty");
    /* A policy is the sandbox: its directory must be as trusted as kcage's own. */
    kc_cleanup_close int fd = kc_safe_dir_open(s->policy_dir, KC_DIR_TRUSTED, false, NULL, 0, err);
    if (fd < 0)
      return kc_error_prefix(err, "policy directory");
  }
  return 0;
}
