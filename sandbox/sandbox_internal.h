/* Private to the sandbox core (spawn, init, fs, wait): the spawn plan computed by the
 * parent before clone3 so the child allocates nothing it could fail on. */
#ifndef KCAGE_SANDBOX_INTERNAL_H
#define KCAGE_SANDBOX_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/cgroup.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"
#include "kcage/seccomp.h"

/* Where the old root is reachable during setup (between the two halves of pivot). */
#define KC_OLDROOT "/.kcage-oldroot"

typedef enum kc_mnt_kind {
  KC_MNT_RO,
  KC_MNT_RW,
  KC_MNT_TMPFS,
  KC_MNT_PROC,
  KC_MNT_DEV,
  KC_MNT_SYMLINK,
} kc_mnt_kind;

/* Small on purpose: the plan is built every launch, and entries holding PATH_MAX
 * buffers cost page faults in the parent and again copy-on-write in the child. */
typedef struct kc_mnt {
  kc_mnt_kind kind;
  const char *src; /* binds: host real path; symlink: target; "" when none */
  const char *dst; /* absolute path inside */
  char *strs;      /* owns src and dst */
  uint64_t size;
  bool is_dir; /* binds: mount point is a directory (else a file) */
  int tree;    /* binds: a detached clone of src opened by the parent, or -1 */
} kc_mnt;

/* The fd number the program child hands the seccomp listener over: compact_fds()
 * (init.c) moves the child's fds to 3, 4, ... in plan order, sock_wr being the 4th.
 * The parent compiles the filter's hand-off rule for this number before clone3. */
#define KC_CHILD_SOCK_FD 6

struct kc_seccomp_prog;

/* Child-side report kinds on the setup pipe. */
enum { KC_REPORT_SETUP = 1, KC_REPORT_EXEC = 2 };

typedef struct kc_setup_report {
  int32_t kind;
  int32_t err;
  char msg[480];
} kc_setup_report;

/* Everything the clone3 child needs, prepared by the parent. */
typedef struct kc_plan {
  const kc_policy *policy;
  kc_policy_namespaces ns;
  kc_mnt *mnts;
  size_t n_mnts;
  char cwd[PATH_MAX];
  char exe[PATH_MAX]; /* argv[0] as given */
  char *const *argv;
  char *const *envp;
  const char *path_env;               /* PATH used to resolve argv[0] */
  const struct kc_seccomp_prog *prog; /* compiled by the parent; NULL = no filter */
  double cpu_s;                       /* RLIMIT_CPU backstop (0 = none) */
  bool cgroup_cpu; /* the parent polls cgroup CPU time: the rlimit is only a backstop */
  bool new_net;
  /* fds as numbered in the child after kc__child_fds() */
  int sync_rd, report_wr, status_wr, sock_wr, stdin_fd, out_wr, err_wr;
} kc_plan;

/* A started sandbox (parent side). */
struct kc_sandbox {
  pid_t pid; /* host pid of our init */
  int pidfd;
  int sync_wr; /* held open while we supervise: its hang-up tells init we died */
  bool reaped;
  bool pid_ns; /* our init is PID 1 of its own namespace: its end is the tree's end */
  kc_cgroup *cg;
  kc_cgroup_counters base; /* counters at creation: verdicts use deltas */
  int report_rd, status_rd, sock_rd, listener, out_rd, err_rd;
  int fwd_out, fwd_err;
  int in_src, in_wr;  /* a terminal stdin (not owned) fed to the program's stdin pipe */
  kc_sandbox_ids ids; /* the host ids of its root; lock_fd >= 0 when taken by the sandbox */
  int cancel_fd;      /* not owned */
  const kc_policy *policy;
  bool view_sysinfo; /* the filter hands sysinfo to us (kc_seccomp_prog_compile_sandbox) */
  /* a notification kc_sandbox_idle took that was not sysinfo's: the wait's first */
  bool has_stash;
  kc_seccomp_event stash;
  kc_limits lim;
  double t0;
};

/* caps.c: allocate what the child's capability drop needs, before clone3. */
void kc__caps_prepare(void);

/* fs.c */
int kc__fs_build_default(kc_mnt **mnts, size_t *n, kc_error *err);
int kc__fs_plan(const kc_policy_spec *spec, const kc_mount *extra, size_t n_extra, kc_mnt **out,
                size_t *n_out, kc_error *err);
int kc__fs_enter(const kc_mnt *mnts, size_t n, const char *cwd, kc_error *err);
/* A tmpfs of `size` bytes (0: the default, 64 MiB), mode 1777, on dst (made if missing). */
int kc__fs_tmpfs(const char *dst, uint64_t size, kc_error *err);
/* Per-sandbox files over /proc's host-wide counters and boot id (proc_view.c); called
 * with the new root still writable, after the host-describing files are masked. */
int kc__proc_view(const char *proc, kc_error *err);
/* Parent side, before the clone: open every bind source as a detached mount tree
 * (with its final flags) where this process may, so the child needs no access to the
 * path; kc__fs_close_trees closes them after the clone. */
void kc__fs_open_trees(kc_mnt *mnts, size_t n);
void kc__fs_close_trees(kc_mnt *mnts, size_t n);
/* Frees a plan from kc__fs_plan (its trees closed first). */
void kc__fs_free(kc_mnt *mnts, size_t n);

/* lockdown.c: kc_sandbox_lockdown_prog for the program our init vforks, less the
 * capability drop: init emptied every set (bounding and ambient included) and set
 * no_new_privs before the vfork, and the program inherits those credentials as they
 * are (no exec or user namespace in between), so the drop there was ~45 calls that
 * changed nothing. */
int kc__lockdown_prog_after_init(const kc_policy *policy, double cpu_s,
                                 const struct kc_seccomp_prog *prog, int sock, kc_error *err);

/* init.c: the clone3 child.  Never returns. */
__attribute__((noreturn)) void kc__child_main(kc_plan *plan);

/* Fallback policy pieces when no policy was given. */
extern const kc_policy_namespaces kc__all_namespaces;

#endif
