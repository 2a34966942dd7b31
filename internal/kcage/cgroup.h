/* One small cgroup interface over pure v2, pure v1 and hybrid hosts (v1 controllers
 * plus a controller-less v2 mount used for placement and cgroup.kill).  One writer
 * per resource knows both the v1 and the v2 file names (after crun). */
#ifndef KCAGE_CGROUP_H
#define KCAGE_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/error.h"
#include "kcage/settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Detected once per process (cached) from /proc/self/mountinfo: the best mode the
 * host has.  No environment variable changes it (one set for a daemon would reach
 * every tenant); a tenant chooses another in its kc_settings.  When the hierarchies are not
 * writable (not root, nothing delegated) the mode is NONE (and limits are refused:
 * kc_cgroup_refusal). Where cgroups go: <hierarchy root>/kcage/ when the root is writable (as
 * root), else <our own cgroup>/kcage/.  Using the root means a later kcage in any cgroup finds and
 * reaps what a killed one left, and v2 controllers can be enabled below it; on this
 * host it deliberately leaves the limit-free harness cgroup memory:/process_api/<id>.
 * The kcage/ parents are created once and stay (shared by concurrent kcage
 * processes); only the per-sandbox leaves are removed. */
/* The mode a tenant with settings s (NULL = the defaults) gets: its own choice, or the
 * host's best for KC_CGROUP_AUTO; KC_CGROUP_AUTO when the host cannot provide the
 * choice (creating its cgroup then fails, ENOTSUP). */
kc_cgroup_mode kc_cgroup_mode_for(const kc_settings *s);
typedef struct kc_cgroup_limits {
  uint64_t memory_bytes; /* 0 = unlimited; swap is always off */
  uint32_t pids;         /* 0 = unlimited */
  double cpus;           /* CPU bandwidth; 0 = unlimited */
} kc_cgroup_limits;

/* Counters; each is -1 when the host cannot say.  Absolute values: take them before
 * and after a run and subtract (a long-lived slot's counters accumulate). */
typedef struct kc_cgroup_counters {
  int64_t oom_kills;     /* v1 memory.oom_control oom_kill, v2 memory.events oom_kill */
  int64_t pids_max_hits; /* pids.events max */
  int64_t cpu_usec;      /* cpuacct.usage / cpu.stat usage_usec */
  int64_t peak_memory;   /* max_usage_in_bytes / memory.peak (since creation or reset) */
} kc_cgroup_counters;

typedef struct kc_cgroup kc_cgroup;

/* Create kcage/<pidns>.<pid>.<starttime>.<seq>.<name> in every hierarchy (name: no '/', at
 * most 200 bytes), owned by this process: the pid, its start time and its pid
 * namespace in the directory name let a later kcage (in the same pid namespace) reap
 * it when this process is gone.  Limits as in
 * kc_cgroup_set_limits.  s: the tenant's cgroup mode and limits fallback (NULL = the
 * defaults).  In mode NONE this succeeds only without limits, or with the rlimit
 * fallback; else -1/ENOTSUP with kc_cgroup_refusal's line. */
int kc_cgroup_create(const char *name, const kc_cgroup_limits *lim, const kc_settings *s,
                     kc_cgroup **out, kc_error *err);
/* Rewrite limits of a live cgroup (long-lived worker slots); 0 fields = unlimited.
 * memory: v1 memory.limit_in_bytes + memory.memsw.limit_in_bytes (swap off), v2
 * memory.max + memory.swap.max=0 (oom.group stays 0); cpus: period 100 ms, v1
 * cpu.cfs_quota_us/cfs_period_us, v2 cpu.max; pids: pids.max.  A limit the host has
 * no controller for fails with ENOTSUP. */
int kc_cgroup_set_limits(kc_cgroup *cg, const kc_cgroup_limits *lim, kc_error *err);
/* An O_DIRECTORY fd of the v2 cgroup for clone3(CLONE_INTO_CGROUP); -1 when none.
 * On a hybrid host this is the controller-less unified cgroup: the limits live in v1,
 * so the child must still be kc_cgroup_attach()ed (v1 by pid) before it runs
 * untrusted code (e.g. it waits on a pipe until the parent has attached it).
 * -1 also once the cgroup has been kc_cgroup_kill()ed: the kernel (6.18 here) SIGKILLs
 * a CLONE_INTO_CGROUP child of a cgroup that was ever cgroup.kill'ed; attach by pid
 * still works, so a reused slot falls back to kc_cgroup_attach. */
int kc_cgroup_v2_fd(const kc_cgroup *cg);
/* The leaf directory name (<pidns>.<pid>.<starttime>.<seq>.<name>). */
const char *kc_cgroup_dir_name(const kc_cgroup *cg);
kc_cgroup_mode kc_cgroup_mode_of(const kc_cgroup *cg);
/* Move a process into every hierarchy (v1 by pid, then v2; rewriting v2 after a
 * CLONE_INTO_CGROUP placement is a harmless no-op).  Mode NONE remembers the pid (up
 * to 16) so kc_cgroup_kill can kill it and its process group. */
int kc_cgroup_attach(kc_cgroup *cg, pid_t pid, kc_error *err);
/* Kill every process in the tree and wait until it is empty (bounded, 3 s; then
 * -1/ETIMEDOUT).  v2 and hybrid: cgroup.kill; pure v1: freezer freeze, SIGKILL every
 * pid, thaw.  Stopped and frozen processes die too.  Unreaped zombies do not count
 * (the caller still reaps its own child). */
int kc_cgroup_kill(kc_cgroup *cg, kc_error *err);
int kc_cgroup_read(const kc_cgroup *cg, kc_cgroup_counters *out, kc_error *err);
/* Reset the peak-memory watermark where the host allows it (v1 max_usage_in_bytes;
 * v2 memory.peak >= 6.12, where the reset is per open file: we keep that fd).  Where
 * it cannot be reset (v2 < 6.12), peak_memory reads -1 from then on rather than a
 * stale value.  Fresh cgroups need no reset. */
int kc_cgroup_reset_peak(kc_cgroup *cg, kc_error *err);
/* Does cg hold any limit as an rlimit (set on each attached process)? */
bool kc_cgroup_uses_rlimits(const kc_cgroup *cg);
/* The RLIMIT_AS that stands in for cg's memory limit; 0 when none (or cg is NULL). */
uint64_t kc_cgroup_rlimit_memory(const kc_cgroup *cg);

/* Run cg's processes only on CPU time that kcage's other cgroups leave (idle), or give
 * them their ordinary share back.  Kept outside the sandbox's reach: the caller owns the
 * cgroup.  -1/ENOTSUP when the host has no cpu controller for it. */
int kc_cgroup_set_cpu_idle(kc_cgroup *cg, bool idle, kc_error *err);

/* Kill, remove every directory, free.  Safe with NULL. */
void kc_cgroup_destroy(kc_cgroup *cg);
/* Remove kcage cgroups whose owning process is gone (after a SIGKILLed kcage): kill
 * what is left in them, rmdir in every hierarchy.  Returns how many were reaped. */
int kc_cgroup_reap_stale(kc_error *err);

/* Internal (not exported): for the worker layer. */
/* Move pid (a kcage zygote: nothing else) into the first hierarchy's kcage/ parent,
 * which readies the kernel's cgroup attach lock: attaches in the next few milliseconds
 * skip the RCU grace period the first one after a quiet spell waits for.  Blocks for
 * that grace period itself: call it while waiting anyway.  Best effort. */
void kc_cgroup_warm_attach(pid_t pid);

#ifdef __cplusplus
}
#endif
#endif
