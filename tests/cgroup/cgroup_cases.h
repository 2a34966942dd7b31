/* The cgroup limit cases, written once and run twice: by the cmocka test on this host
 * (hybrid, and forced pure v1) and by the static payload in the qemu cgroup-v2 guest
 * (tests/cgroup2-qemu).  Each returns 0 on success, or -1 with a reason in msg. */
#ifndef KC_CGROUP_CASES_H
#define KC_CGROUP_CASES_H

#include <stddef.h>

typedef int (*kc_cgt_fn)(char *msg, size_t n);

typedef struct kc_cgt_case {
  const char *name;
  kc_cgt_fn fn;
} kc_cgt_case;

#include "kcage/settings.h"

/* The settings every case creates its cgroups with (the mode under test). */
extern kc_settings kc_cgt_settings;

/* NULL-terminated. */
extern const kc_cgt_case kc_cgt_cases[];

/* Call once at start: become a child subreaper so orphaned grandchildren come back to
 * us and can be checked and reaped. */
void kc_cgt_init(void);

/* No leaf left under any kcage/ parent (the guest, where we are alone). */
int kc_cgt_no_leftovers(char *msg, size_t n);

#endif
