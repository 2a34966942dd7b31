/* Sandbox policies (docs/contracts.md): policies/<name>.policy, parsed into what the
 * spawner needs (namespaces, mounts, limits, rlimits) and a seccomp filter. */
#ifndef KCAGE_POLICY_H
#define KCAGE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>

#include "kcage/error.h"
#include "kcage/settings.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

typedef struct kc_policy kc_policy;

/* NAME (a built-in profile such as "exec", "build", "measure", found in
 * $KCAGE_POLICY_DIR or kcage's own policies) or a FILE path. */
int kc_policy_load(const char *name_or_path, kc_policy **out, kc_error *err);
/* The same for a tenant: a NAME is looked for in s->policy_dir (when set) instead of
 * $KCAGE_POLICY_DIR, then in kcage's own policies. */
int kc_policy_load_in(const kc_settings *s, const char *name_or_path, kc_policy **out,
                      kc_error *err);
/* Errors read "FILE:LINE: message". */
int kc_policy_parse_file(const char *path, kc_policy **out, kc_error *err);
void kc_policy_free(kc_policy *p);
/* Print the resolved policy (includes expanded) in policy syntax. */
int kc_policy_dump(const kc_policy *p, FILE *out, kc_error *err);

/* Name of a syscall number on this architecture ("" when unknown). */
const char *kc_syscall_name(int nr, char *buf, size_t len);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
