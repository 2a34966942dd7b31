/* Resource limits of the sandboxed program: the policy's, plus no core dumps (a core
 * pattern may pipe to a host helper) and RLIMIT_CPU as a backstop behind the parent's
 * CPU-time polling. */
#include "kcage/sandbox_parts.h"

#include <errno.h>
#include <sys/resource.h>

static int set_one(int res, rlim_t soft, rlim_t hard, kc_error *err) {
  struct rlimit cur;
  if (getrlimit(res, &cur) == 0) {
    /* Only ever lower: raising a hard limit is a privilege the sandbox must not use. */
    if (cur.rlim_max != RLIM_INFINITY && (hard == RLIM_INFINITY || hard > cur.rlim_max))
      hard = cur.rlim_max;
    if (soft != RLIM_INFINITY && hard != RLIM_INFINITY && soft > hard)
      soft = hard;
    if (soft == RLIM_INFINITY && hard != RLIM_INFINITY)
      soft = hard;
  }
  struct rlimit rl = {soft, hard};
  if (setrlimit(res, &rl) < 0)
    return kc_error_set(err, errno, "setrlimit %d", res);
  return 0;
}

int kc_sandbox_set_rlimits(const kc_policy *policy, double cpu_s, kc_error *err) {
  if (policy) {
    const kc_policy_spec *s = kc_policy_get_spec(policy);
    for (size_t i = 0; s && i < s->n_rlimits; i++)
      if (set_one(s->rlimits[i].resource, s->rlimits[i].soft, s->rlimits[i].hard, err) < 0)
        return -1;
  }
  if (set_one(RLIMIT_CORE, 0, 0, err) < 0)
    return -1;
  if (cpu_s > 0) {
    /* SIGXCPU at the soft limit (our init is PID 1, so the program gets the default
     * action), SIGKILL one second later. */
    rlim_t soft = (rlim_t)cpu_s;
    if ((double)soft < cpu_s)
      soft++;
    if (set_one(RLIMIT_CPU, soft, soft + 1, err) < 0)
      return -1;
  }
  return 0;
}
