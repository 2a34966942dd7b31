/* The settings of one tenant: how its sandboxes use the host's cgroups, whether a limit
 * the cgroups cannot hold may become an rlimit, which host ids its sandboxes take and
 * where its policies are found.  They travel in the caller's config (kc_sandbox_config,
 * kc_worker_opts, kc_measure_config, kc_agent_opts), never in process-wide state, so one
 * process can serve tenants with different settings at the same time.  All zero (as
 * the configs' init functions leave them) means the defaults below. */
#ifndef KCAGE_SETTINGS_H
#define KCAGE_SETTINGS_H

#include <stdint.h>

#include "kcage/error.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

typedef enum kc_cgroup_mode {
  KC_CGROUP_AUTO, /* settings only: the best mode the host has (kc_cgroup_detect) */
  KC_CGROUP_NONE, /* no usable cgroups: limits refused, kill by process group */
  KC_CGROUP_V1,
  KC_CGROUP_V2,
  KC_CGROUP_HYBRID, /* v1 controllers + v2 mount for placement/kill/events */
} kc_cgroup_mode;

/* A limit the cgroups here cannot enforce (not root and nothing delegated, or a
 * controller missing) is refused with one line that says why.  A tenant may instead
 * accept weaker rlimits, set on each process when it joins its cgroup: memory as
 * RLIMIT_AS (per process), pids as RLIMIT_NPROC (counted in the sandbox's own user
 * namespace).  A CPU share has no rlimit and stays refused. */
typedef enum kc_limits_fallback {
  KC_LIMITS_FALLBACK_NONE, /* refuse (the default) */
  KC_LIMITS_FALLBACK_RLIMIT,
} kc_limits_fallback;

typedef struct kc_settings {
  /* KC_CGROUP_AUTO = the host's best; another mode the host cannot provide makes every
   * sandbox of this tenant fail (ENOTSUP), never a silent fall back. */
  kc_cgroup_mode cgroup_mode;
  kc_limits_fallback limits_fallback;
  /* As root, the host uid/gid pairs this tenant's sandboxes take: [ids_base,
   * ids_base + ids_count); 0, 0 = KC_SANDBOX_IDS_BASE, KC_SANDBOX_IDS_COUNT.  Checked
   * against /etc/passwd, group, subuid and subgid (kc_settings_check). */
  uint32_t ids_base, ids_count;
  /* Where a policy given by NAME is found, before kcage's own policies; NULL =
   * $KCAGE_POLICY_DIR.  Used only when nobody but root and the caller can change it
   * or the files in it (a policy is the sandbox). */
  const char *policy_dir;
} kc_settings;

/* The host's best cgroup mode (detected once per process; never AUTO), and a mode's
 * name: "auto", "none", "v1", "v2", "hybrid". */
kc_cgroup_mode kc_cgroup_detect(void);
const char *kc_cgroup_mode_name(kc_cgroup_mode m);
/* How a limit ("memory", "pids" or "cpus") is enforced for a tenant with settings s
 * (NULL = the defaults): "cgroup", "rlimit", or NULL when it would be refused. */
const char *kc_cgroup_enforcement(const kc_settings *s, const char *which);
/* Fill err with the one-line refusal of limit `which` for settings s (ENOTSUP): why the
 * host cannot hold it and what would (a delegated cgroup, the rlimit fallback).
 * Returns -1. */
int kc_cgroup_refusal(const kc_settings *s, const char *which, kc_error *err);

/* Is every setting usable on this host (the id range free of accounts, the cgroup
 * mode available)?  -1 with the line that says which is not. */
int kc_settings_check(const kc_settings *s, kc_error *err);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
