/* Internals of the sandbox layer that other layers of kcage use; not installed.  The
 * public part is include/kcage/sandbox.h, which this file extends: in-tree code that
 * includes "kcage/sandbox.h" gets both (internal/ comes first on its include path). */
#ifndef KCAGE_INTERNAL_SANDBOX_H
#define KCAGE_INTERNAL_SANDBOX_H

#include_next <kcage/sandbox.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The run's cgroup (NULL when the run needed none); owned by the sandbox. */
struct kc_cgroup *kc_sandbox_cgroup(const kc_sandbox *sb);
/* For a sandbox started ahead of its work: the wall clock starts now, with this limit
 * (0 = none).  Call before kc_sandbox_wait. */
void kc_sandbox_start_wall(kc_sandbox *sb, double wall_s);

typedef struct kc_sandbox_ids {
  uid_t uid;
  gid_t gid;
  int lock_fd; /* -1 when nothing is held (a non-root caller's own ids) */
} kc_sandbox_ids;

/* Take a free pair of the range settings s name (as root; NULL = the default range) or
 * the caller's own. */
int kc_sandbox_ids_acquire(kc_sandbox_ids *ids, const kc_settings *s, kc_error *err);
void kc_sandbox_ids_release(kc_sandbox_ids *ids);
/* The range settings s name, checked against the account files: an error names the
 * entry that collides. */
int kc_sandbox_ids_range(const kc_settings *s, uint32_t *base, uint32_t *count, kc_error *err);
int kc_sandbox_ids_check(uint32_t base, uint32_t count, const char *passwd, const char *group,
                         const char *subuid, const char *subgid, kc_error *err);

#ifdef __cplusplus
}
#endif
#endif
