/* Capabilities: after setup the sandbox holds none, in any set, and can never regain
 * one (bounding set emptied, ambient cleared, no_new_privs). */
#include "kcage/sandbox_parts.h"
#include "sandbox_internal.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* An empty capability state made once in the parent (kc__caps_prepare, before clone3):
 * the child then drops its capabilities without calling malloc, which a raw clone3
 * from a process with other threads must avoid (a malloc lock may be copied held). */
static cap_t prepared_none;

void kc__caps_prepare(void) {
  if (!prepared_none)
    prepared_none = cap_init();
}

/* CAP_SETPCAP in the effective set, by the raw call (no allocation, see above). */
static bool can_setpcap(void) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
  if (syscall(SYS_capget, &h, d) < 0)
    return false;
  return d[CAP_TO_INDEX(CAP_SETPCAP)].effective & CAP_TO_MASK(CAP_SETPCAP);
}

int kc_sandbox_drop_caps(kc_error *err) {
  /* The bounding set needs CAP_SETPCAP, so it goes first, while we still hold it.
   * Holding it, a drop of an absent capability is a no-op: one call per capability
   * (a launch's init), not a read and a drop. */
  bool setpcap = can_setpcap();
  for (cap_value_t c = 0; c <= CAP_LAST_CAP; c++) {
    if (setpcap) {
      if (cap_drop_bound(c) == 0 || errno == EINVAL) /* EINVAL: unknown to this kernel */
        continue;
      return kc_error_set(err, errno, "drop bounding capability %d", (int)c);
    }
    /* Dropping needs CAP_SETPCAP even for an absent capability: skip those, so a
     * process that already dropped everything can call this again. */
    if (cap_get_bound(c) != 1)
      continue;
    if (cap_drop_bound(c) < 0)
      return kc_error_set(err, errno, "drop bounding capability %d", (int)c);
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
    return kc_error_set(err, errno, "clear ambient capabilities");
  cap_t none = prepared_none ? prepared_none : cap_init(); /* all three sets empty */
  if (!none)
    return kc_error_set(err, errno, "cap_init");
  int rc = cap_set_proc(none);
  int e = errno;
  if (none != prepared_none)
    cap_free(none);
  if (rc < 0)
    return kc_error_set(err, e, "drop capabilities");
  return 0;
}
