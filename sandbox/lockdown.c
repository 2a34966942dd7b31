/* The last step before untrusted code: limits, no capabilities, no_new_privs, seccomp.
 */
#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "sandbox_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <unistd.h>

/* Everything before the filter, in the order that keeps each step possible: rlimits
 * (only ever lowered), every capability, no_new_privs, not dumpable. */
static int before_filter(const kc_policy *policy, double cpu_s, bool caps, kc_error *err) {
  if (kc_sandbox_set_rlimits(policy, cpu_s, err) < 0)
    return -1;
  if (caps && kc_sandbox_drop_caps(err) < 0)
    return -1;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return kc_error_set(err, errno, "no_new_privs");
  /* Not ptrace-able or /proc/PID/fd-readable by anything else at our uid. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return kc_error_set(err, errno, "dumpable");
  return 0;
}

int kc_sandbox_lockdown(const kc_policy *policy, double cpu_s, int handoff_sock, int *listener_fd,
                        kc_error *err) {
  *listener_fd = -1;
  if (before_filter(policy, cpu_s, true, err) < 0)
    return -1;
  if (!policy)
    return 0;
  /* Under a policy that forbids sendmsg the hand-off must be part of the filter
   * (kcage/seccomp.h): kc_seccomp_install_and_send does both. */
  int rc = handoff_sock >= 0 ? kc_seccomp_install_and_send(policy, handoff_sock, err)
                             : kc_policy_install_seccomp(policy, listener_fd, err);
  if (rc < 0)
    return kc_error_prefix(err, "seccomp");
  return 0;
}

static int lockdown_prog(const kc_policy *policy, double cpu_s, bool caps,
                         const kc_seccomp_prog *prog, int sock, kc_error *err) {
  if (before_filter(policy, cpu_s, caps, err) < 0)
    return -1;
  if (prog && kc_seccomp_prog_load_and_send(prog, sock) < 0)
    return kc_error_set(err, errno, "seccomp: load the filter and hand over its listener");
  return 0;
}

int kc_sandbox_lockdown_prog(const kc_policy *policy, double cpu_s, const kc_seccomp_prog *prog,
                             int sock, kc_error *err) {
  return lockdown_prog(policy, cpu_s, true, prog, sock, err);
}

int kc__lockdown_prog_after_init(const kc_policy *policy, double cpu_s,
                                 const struct kc_seccomp_prog *prog, int sock, kc_error *err) {
  return lockdown_prog(policy, cpu_s, false, prog, sock, err);
}
