/* What the sandbox layer reads of a policy, and its seccomp filter.  Not installed: it extends the
 * public include/kcage/policy.h, which it includes first; in-tree code that includes
 * "kcage/policy.h" gets both (internal/ comes first on its include path). */
#ifndef KCAGE_INTERNAL_POLICY_H
#define KCAGE_INTERNAL_POLICY_H

#include_next <kcage/policy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kc_policy_namespaces {
  bool user, pid, mount, ipc, uts, cgroup, net;
} kc_policy_namespaces;

typedef enum kc_policy_mount_kind {
  KC_POLICY_MOUNT_RO,    /* read-only bind */
  KC_POLICY_MOUNT_RW,    /* read-write bind */
  KC_POLICY_MOUNT_TMPFS, /* tmpfs of a size */
  KC_POLICY_MOUNT_PROC,
  KC_POLICY_MOUNT_DEV,     /* minimal /dev: null zero full random urandom tty */
  KC_POLICY_MOUNT_SYMLINK, /* src = link target, dst = link path */
} kc_policy_mount_kind;

typedef struct kc_policy_mount {
  kc_policy_mount_kind kind;
  char *src;
  char *dst;
  uint64_t size; /* tmpfs */
  bool optional; /* a missing source is skipped rather than an error */
} kc_policy_mount;

typedef struct kc_policy_rlimit {
  int resource; /* RLIMIT_* */
  rlim_t soft, hard;
} kc_policy_rlimit;

/* The parts of a policy the spawner reads directly.  Seccomp rules stay private. */
typedef struct kc_policy_spec {
  const char *name;
  kc_policy_namespaces ns;
  const kc_policy_mount *mounts;
  size_t n_mounts;
  const kc_policy_rlimit *rlimits;
  size_t n_rlimits;
  /* default limits (0 = none): memory bytes, cpu s, wall s, pids, cpus, output bytes */
  uint64_t memory_bytes;
  double cpu_s, wall_s;
  uint32_t pids;
  double cpus;
  uint64_t output_bytes;
  const char *cwd;
} kc_policy_spec;

/* Is NAME_OR_PATH taken as a file path (it contains '/' or ends in ".policy")? */
bool kc_policy_is_path(const char *name_or_path);
/* The file kc_policy_load would read: a path as given, else NAME.policy in
 * $KCAGE_POLICY_DIR (an error, not a fall-through, when someone other than root and
 * the caller could change that directory or the file found in it), then in kcage's
 * own policies: <datadir>/kcage/policies relative
 * to where the library or binary is installed (the source tree's policies/ only for
 * a binary that runs from its build directory). */
int kc_policy_resolve(const char *name_or_path, char *path, size_t len, kc_error *err);
int kc_policy_resolve_in(const kc_settings *s, const char *name_or_path, char *path, size_t len,
                         kc_error *err);

const kc_policy_spec *kc_policy_get_spec(const kc_policy *p);

/* Install the policy's seccomp filter in the calling process (after no_new_privs).
 * Rules whose action is "kill" (and the default action when it is kill) notify a
 * supervisor instead of killing silently, so the verdict can name the syscall: the
 * listener fd is returned in *listener_fd (-1 when the policy kills nothing); the
 * caller must hand it to its supervisor and close its own copy before running
 * untrusted code.  See sandbox/seccomp_*.c for the full reasoning.
 * The hand-off itself runs under the filter: under a policy whose default is kill
 * (measure), sendmsg and close would be violations that wait for a supervisor who does
 * not hold the listener yet.  So this call also allows sendmsg and close when the
 * policy says nothing about them.  Tighter (sendmsg on the hand-off fd only):
 * kc_seccomp_install_and_send(); tighter and cheaper in a forked child (compiled once
 * by the parent): kc_seccomp_prog_compile() + kc_seccomp_prog_load_and_send(), both
 * in kcage/seccomp.h. */
int kc_policy_install_seccomp(const kc_policy *p, int *listener_fd, kc_error *err);
/* Compile the filter without loading it: catches what libseccomp rejects (the
 * `kcage policy check` path).  With out != NULL, writes the filter as libseccomp's
 * pseudo-filter-code text.  Returns the number of BPF instructions, or -1. */
int kc_policy_check_seccomp(const kc_policy *p, FILE *out, kc_error *err);
/* Does the policy need a supervisor on a seccomp listener (any kill/notify action)? */
bool kc_policy_needs_listener(const kc_policy *p);

#ifdef __cplusplus
}
#endif
#endif
