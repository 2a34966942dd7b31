/* Sandbox core: one program (or one pre-started worker) in Linux namespaces, its own
 * cgroup, seccomp and dropped capabilities, with an exact verdict (docs/contracts.md). */
#ifndef KCAGE_SANDBOX_H
#define KCAGE_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/error.h"
#include "kcage/policy.h"
#include "kcage/settings.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

/* Limits for one run.  0 means "no limit" (or "the policy's default" where a policy
 * sets one). */
typedef struct kc_limits {
  uint64_t memory_bytes; /* cgroup memory limit, swap off */
  double cpu_s;          /* CPU time of the whole tree */
  double wall_s;         /* wall clock, enforced by the parent */
  uint32_t pids;         /* cgroup pids.max */
  double cpus;           /* CPU bandwidth in CPUs (cfs quota / cpu.max) */
  uint64_t output_bytes; /* cap on captured stdout+stderr */
} kc_limits;
/* A policy's default limits, from its `limit` lines (0 = none): what a worker or run
 * made without explicit limits gets. */
void kc_policy_get_limits(const kc_policy *p, kc_limits *out);

typedef enum kc_mount_kind { KC_MOUNT_RO_BIND, KC_MOUNT_BIND, KC_MOUNT_TMPFS } kc_mount_kind;

typedef struct kc_mount {
  kc_mount_kind kind;
  const char *src; /* host path (binds) */
  const char *dst; /* path inside the sandbox */
  uint64_t size;   /* tmpfs size in bytes, 0 = default */
} kc_mount;

/* The result record (contract, docs/contracts.md). */
typedef enum kc_status {
  KC_STATUS_OK,
  KC_STATUS_EXITED,
  KC_STATUS_SIGNALED,
  KC_STATUS_TIMEOUT,
  KC_STATUS_MEMORY,
  KC_STATUS_SYSCALL,
  KC_STATUS_PIDS,
  KC_STATUS_OUTPUT,
  KC_STATUS_SETUP_ERROR,
} kc_status;

typedef struct kc_result {
  kc_status status;
  int exit_code;             /* -1 when absent */
  int signal;                /* 0 when absent */
  char syscall[48];          /* "" when absent; set for KC_STATUS_SYSCALL */
  const char *limit;         /* "cpu" / "wall" for KC_STATUS_TIMEOUT, else NULL */
  double cpu_s;              /* < 0 when absent */
  double wall_s;             /* < 0 when absent */
  int64_t peak_memory_bytes; /* < 0 when absent */
  char message[512];         /* one human sentence (a refusal names paths and the way out) */
} kc_result;

const char *kc_status_name(kc_status status);
void kc_result_init(kc_result *r);
/* The record as one JSON object (jansson); *out is malloc'd. */
int kc_result_to_json(const kc_result *r, char **out, kc_error *err);
/* The `kcage run` exit status for a record: own exit code, 128+N, 124, 125. */
int kc_result_exit_status(const kc_result *r);

/* Everything needed to start one sandboxed program. */
typedef struct kc_sandbox_config {
  const kc_policy *policy; /* NULL = built-in layout and no seccomp filter (tests) */
  kc_limits limits;        /* non-zero fields override the policy's */
  const kc_mount *mounts;  /* extra mounts after the policy's */
  size_t n_mounts;
  const char *cwd;                  /* inside the sandbox; NULL = policy default */
  char *const *argv;                /* argv[0] resolved inside the sandbox through PATH */
  char *const *envp;                /* NULL = a minimal clean environment */
  int stdin_fd;                     /* -1 = /dev/null */
  int stdout_fd;                    /* where the program's stdout goes (after the output cap);
                                       -1 = discarded */
  int stderr_fd;                    /* likewise for stderr */
  int netns_fd;                     /* -1 = a fresh netns with lo up; else setns() into this one */
  int cancel_fd;                    /* -1 = none; when it turns readable (e.g. a signalfd for
                                       SIGINT/SIGTERM) the wait kills the tree and returns
                                       status signaled with the SIGKILL it sent */
  bool always_cgroup;               /* make a cgroup even when no limit needs one (for its
                                       counters); by default a run without memory/pids/cpus/cpu
                                       limits has none, and its tree dies with its pid namespace */
  const struct kc_sandbox_ids *ids; /* host ids held by the caller (kc_sandbox_ids_acquire);
                                       NULL = the sandbox takes its own for its lifetime */
  kc_settings settings;             /* the tenant's cgroup mode, limits fallback, id range */
} kc_sandbox_config;

void kc_sandbox_config_init(kc_sandbox_config *c); /* fds -1, everything else zero */

typedef struct kc_sandbox kc_sandbox;

/* Start: cgroup, clone3 into the namespaces, filesystem, lockdown, exec.
 * clone3 is a raw fork, and the child allocates nothing when kcage runs as root (the
 * seccomp filter and the capability state are prepared before it), so a parent with
 * other threads is fine there; as a non-root caller the child also brings lo up
 * itself, which allocates nothing either. */
int kc_sandbox_spawn(const kc_sandbox_config *c, kc_sandbox **out, kc_error *err);
/* Wait for the end, enforcing wall/cpu/output limits, then fill the verdict, kill
 * whatever is left of the tree and remove the cgroup.  Call once. */
int kc_sandbox_wait(kc_sandbox *sb, kc_result *res, kc_error *err);
int kc_sandbox_kill(kc_sandbox *sb);
pid_t kc_sandbox_pid(const kc_sandbox *sb); /* host pid of the sandbox's init */
void kc_sandbox_free(kc_sandbox *sb);

/* The host uid/gid a sandboxed program runs as (inside the sandbox it is uid 0).
 * As root: one pair of its own per live sandbox, from a reserved range that no
 * /etc/passwd, /etc/group, /etc/subuid or /etc/subgid entry uses (KC_SANDBOX_IDS_BASE,
 * KC_SANDBOX_IDS_COUNT, or the tenant's kc_settings ids_base/ids_count; no environment
 * variable moves it), so neither a host daemon nor another sandbox shares it; an id is
 * held with a lock named by the id in /run/kcage/ids while the sandbox lives.  As any
 * other user the only possible id is the caller's. */
#define KC_SANDBOX_IDS_BASE 1500000000u
#define KC_SANDBOX_IDS_COUNT 65536u

/* spawn + wait. */
int kc_sandbox_run(const kc_sandbox_config *c, kc_result *res, kc_error *err);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
