/* Private to sandbox/policy*.c and sandbox/seccomp*.c: the parsed policy.
 * The public view (kc_policy_spec) lives in include/kcage/policy.h. */
#ifndef KCAGE_POLICY_INTERNAL_H
#define KCAGE_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/policy.h"

typedef enum kc_sc_action {
  KC_SC_ALLOW,
  KC_SC_ERRNO,  /* fail with errno_val, the call does not happen */
  KC_SC_KILL,   /* a violation: compiled to SCMP_ACT_NOTIFY, see seccomp_compile.c */
  KC_SC_NOTIFY, /* ask the supervisor (e.g. the one exec `kcage run` allows) */
} kc_sc_action;

typedef enum kc_sc_op {
  KC_SC_EQ, /* arg == value */
  KC_SC_NE,
  KC_SC_LT,
  KC_SC_LE,
  KC_SC_GT,
  KC_SC_GE,
  KC_SC_MASKED, /* (arg & mask) == value */
  KC_SC_ANYBIT, /* (arg & mask) != 0: expanded into one libseccomp rule per bit */
} kc_sc_op;

typedef struct kc_sc_cond {
  unsigned arg; /* 0..5 */
  kc_sc_op op;
  uint64_t mask; /* KC_SC_MASKED / KC_SC_ANYBIT */
  uint64_t value;
} kc_sc_cond;

#define KC_SC_MAX_CONDS 6

typedef struct kc_sc_rule {
  int nr;     /* libseccomp number (negative pseudo numbers for other arches) */
  char *name; /* as written */
  kc_sc_action action;
  int errno_val; /* KC_SC_ERRNO */
  unsigned n_conds;
  kc_sc_cond conds[KC_SC_MAX_CONDS];
  int file; /* index into kc_policy.files: where it was written */
  int line;
} kc_sc_rule;

struct kc_policy {
  kc_policy_spec spec; /* pointers below are owned here */
  char *name;
  char *cwd;
  kc_policy_mount *mounts;
  size_t n_mounts, cap_mounts;
  kc_policy_rlimit *rlimits;
  size_t n_rlimits, cap_rlimits;

  bool has_default;
  kc_sc_action default_action;
  int default_errno;
  kc_sc_rule *rules;
  size_t n_rules, cap_rules;
  uint64_t nr_seen[16]; /* syscall numbers 0..1023 with a rule: skips the scans */

  char **files; /* every file read, by real path; files[0] = the top file */
  size_t n_files, cap_files;
};

/* Names and numeric constants (policy_consts.c). */
int kc_policy_const_lookup(const char *name, uint64_t *out);
int kc_policy_errno_lookup(const char *name);  /* -1 when unknown */
const char *kc_policy_errno_name(int e);       /* NULL when not in the table */
int kc_policy_rlimit_lookup(const char *name); /* RLIMIT_*, -1 when unknown */
const char *kc_policy_rlimit_name(int resource);

/* seccomp_cache.c: compiled programs kept in root's /run/kcage/bpf under the complete
 * key of what the compile read (seccomp_compile.c builds it).  get: 0 and a malloc'd
 * copy on a hit, -1 on any miss. */
struct sock_filter;
int kc__bpf_cache_get(const void *key, size_t klen, struct sock_filter **insns,
                      unsigned short *len);
void kc__bpf_cache_put(const void *key, size_t klen, const struct sock_filter *insns,
                       unsigned short len);

/* Does a (syscall nr, args) pair match this rule's conditions (userspace mirror of
 * the compiled filter, used to classify notifications)? */
bool kc_sc_rule_matches(const kc_sc_rule *r, int nr, const uint64_t args[6]);

#endif
