/* Internals of the cgroup layer (sandbox/cgroup*.c).  Not installed; tests include it
 * to find the directories a kc_cgroup owns. */
#ifndef KCAGE_CGROUP_INTERNAL_H
#define KCAGE_CGROUP_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/cgroup.h"

/* Controllers we use, as bits. */
enum {
  KC_CG_MEMORY = 1u << 0,
  KC_CG_CPU = 1u << 1,
  KC_CG_CPUACCT = 1u << 2,
  KC_CG_PIDS = 1u << 3,
  KC_CG_FREEZER = 1u << 4,
};

#define KC_CG_V1_MAX 5     /* one hierarchy per controller at most */
#define KC_CG_NONE_PIDS 16 /* "none" mode: pids remembered for the kill */

/* One hierarchy we create cgroups in: its kcage/ parent directory. */
typedef struct kc_cgroup_hier {
  char base[PATH_MAX]; /* ".../kcage" */
  unsigned ctrl;       /* v1: controllers bound to this mount; v2: enabled controllers */
  bool delegated;      /* base is below our own cgroup (the hierarchy root is not ours) */
} kc_cgroup_hier;

/* What detection found for one mode (cached per mode: kc_cgroup_host_for). */
typedef struct kc_cgroup_host {
  kc_cgroup_mode mode; /* never KC_CGROUP_AUTO */
  bool bases_done;     /* kc_cgroup_bases_ready made the kcage/ parents */
  bool have_v2;        /* a v2 hierarchy is used (pure v2, or the hybrid unified mount) */
  kc_cgroup_hier v2;
  int nv1;
  kc_cgroup_hier v1[KC_CG_V1_MAX];
  unsigned v1_ctrl; /* union of the controllers of v1[] */
  int kernel_major, kernel_minor;
  /* Why a limit cannot be enforced by cgroups here (indexed by kc_cgroup_why_index), one
   * clause each ("" when it can): the first half of a refusal. */
  char why[3][512];
} kc_cgroup_host;

/* KC_CG_MEMORY/CPU/PIDS -> 0/1/2 for kc_cgroup_host.why. */
int kc_cgroup_why_index(unsigned c);
/* Fill every empty why[] whose controller is not in `have` with the clause. */
void kc_cgroup_why_set(kc_cgroup_host *h, unsigned have, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

struct kc_cgroup {
  kc_cgroup_mode mode;
  char name[NAME_MAX + 1]; /* leaf directory name: <pidns>.<pid>.<starttime>.<seq>.<name> */
  int v2_fd;               /* O_DIRECTORY fd of the v2 leaf, -1 when none */
  int nv1;
  int v1_fd[KC_CG_V1_MAX];
  unsigned v1_ctrl[KC_CG_V1_MAX];
  unsigned ctrl;     /* union: which controllers this cgroup can use */
  int peak_fd;       /* v2 memory.peak fd, reset per fd (>= 6.12); -1 when none */
  bool peak_unknown; /* a reset was asked for and the host cannot do it */
  bool v2_killed;    /* cgroup.kill was used: no more CLONE_INTO_CGROUP (see v2_fd) */
  const struct kc_cgroup_host *host; /* the hierarchies of the tenant's mode */
  kc_limits_fallback fallback;       /* the tenant's, for limits added later */
  uint64_t rl_as;    /* rlimit fallback: RLIMIT_AS of attached processes, 0 = none */
  uint32_t rl_nproc; /* rlimit fallback: RLIMIT_NPROC, 0 = none */
  int npids;         /* none mode */
  pid_t pids[KC_CG_NONE_PIDS];
};

/* cgroup_detect.c */
/* The host's best mode (detected once). */
const kc_cgroup_host *kc_cgroup_host_get(void);
/* Mode m as a tenant's settings name it (AUTO = kc_cgroup_host_get), its kcage/ parents
 * made; NULL (ENOTSUP) when the host cannot provide it. */
const kc_cgroup_host *kc_cgroup_host_for(kc_cgroup_mode m, kc_error *err);
/* Make (once per host) the kcage/ parent of every hierarchy; in v2 enable the
 * controllers. */
int kc_cgroup_bases_ready(kc_cgroup_host *host, kc_error *err);
/* The start time (clock ticks since boot, /proc/PID/stat field 22) of pid; 0 if gone. */
unsigned long long kc_cgroup_starttime(pid_t pid);
/* Inode number of our pid namespace: pids in leaf names only mean something there. */
unsigned long kc_cgroup_pidns(void);

/* cgroup_file.c: small helpers relative to a directory fd. */
int kc_cgroup_write(int dirfd, const char *file, const char *val, kc_error *err);
int kc_cgroup_writef(int dirfd, const char *file, kc_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Read a whole small file into buf (NUL-terminated); -1 with errno on failure. */
ssize_t kc_cgroup_read_file(int dirfd, const char *file, char *buf, size_t size);
/* "key value" lines: value of key, or -1 when absent/unreadable. */
int64_t kc_cgroup_read_key(int dirfd, const char *file, const char *key);
/* A single number; -1 when absent/unreadable. */
int64_t kc_cgroup_read_u64(int dirfd, const char *file);
/* rmdir name under parent_fd and every cgroup below it, deepest first, retrying
 * EBUSY briefly (a killed task may still be leaving). */
int kc_cgroup_rmdir_tree(int parent_fd, const char *name);
/* Is the cgroup (v1 or v2 dir) without processes, descendants included? */
bool kc_cgroup_empty(int dirfd, bool v2);

/* cgroup_leaf.c: the leaf directories (below cgroup.c and cgroup_resources.c). */
/* An O_DIRECTORY fd of a hierarchy's kcage/ parent, -1 with errno. */
int kc_cgroup_base_fd(const char *base);
/* mkdir (create) or just open the leaf `name` under base; -1 (err set only if create). */
int kc_cgroup_leaf_fd(const char *base, const char *name, bool create, kc_error *err);
/* Does a cgroup without a CPU limit stay out of v1 hierarchy hh (cgroup_leaf.c: why)? */
bool kc_cgroup_cpu_only(const kc_cgroup_hier *hh, kc_cgroup_mode mode);
/* Record v1 leaf fd (controllers ctrl) in cg; destroy closes and removes it. */
void kc_cgroup_add_v1(kc_cgroup *cg, int fd, unsigned ctrl);

/* cgroup_resources.c: one writer per resource, both v1 and v2 names. */
int kc_cgroup_set_memory(kc_cgroup *cg, uint64_t bytes, kc_error *err);
int kc_cgroup_set_cpu(kc_cgroup *cg, double cpus, kc_error *err);
int kc_cgroup_set_pids(kc_cgroup *cg, uint32_t pids, kc_error *err);
/* fd of the directory holding controller c (v2 leaf or the right v1 leaf), -1 none. */
int kc_cgroup_dirfd(const kc_cgroup *cg, unsigned c);

/* cgroup_fallback.c: limits the cgroups here cannot enforce, as rlimits of the
 * attached processes (only when the caller asked for it). */
int kc_cgroup_fallback_limits(kc_cgroup *cg, const kc_cgroup_limits *lim, kc_error *err);
int kc_cgroup_fallback_attach(const kc_cgroup *cg, pid_t pid, kc_error *err);

/* cgroup.c */
/* Open (not create) the leaf `name` in every hierarchy: used by the reaper. */
int kc_cgroup_open_existing(const char *name, kc_cgroup **out, kc_error *err);
/* Is limit c (KC_CG_MEMORY/PIDS/CPU) held by h's cgroups? */
bool kc_cgroup_host_has(const kc_cgroup_host *h, unsigned c);

#endif
