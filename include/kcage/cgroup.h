/* One small cgroup interface over pure v2, pure v1 and hybrid hosts (v1 controllers
 * plus a controller-less v2 mount used for placement and cgroup.kill).  One writer
 * per resource knows both the v1 and the v2 file names (after crun). */
#ifndef KCAGE_CGROUP_H
#define KCAGE_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kc_cgroup_mode {
  KC_CGROUP_NONE,   /* no usable cgroups: limits refused, kill by process group */
  KC_CGROUP_V1,
  KC_CGROUP_V2,
  KC_CGROUP_HYBRID, /* v1 controllers + v2 mount for placement/kill/events */
} kc_cgroup_mode;

/* Detected once per process (cached). */
kc_cgroup_mode kc_cgroup_detect(void);
const char *kc_cgroup_mode_name(kc_cgroup_mode m);

typedef struct kc_cgroup_limits {
  uint64_t memory_bytes; /* 0 = unlimited; swap is always off */
  uint32_t pids;         /* 0 = unlimited */
  double cpus;           /* CPU bandwidth; 0 = unlimited */
} kc_cgroup_limits;

/* Counters; each is -1 when the host cannot say. */
typedef struct kc_cgroup_counters {
  int64_t oom_kills;      /* v1 memory.oom_control oom_kill, v2 memory.events oom_kill */
  int64_t pids_max_hits;  /* pids.events max */
  int64_t cpu_usec;       /* cpuacct.usage / cpu.stat usage_usec */
  int64_t peak_memory;    /* max_usage_in_bytes / memory.peak (since creation or reset) */
} kc_cgroup_counters;

typedef struct kc_cgroup kc_cgroup;

/* Create kcage/<name> in every hierarchy, owned by this process (its pid is recorded
 * so a later kcage can reap it when this process is gone). */
int kc_cgroup_create(const char *name, const kc_cgroup_limits *lim, kc_cgroup **out,
                     kc_error *err);
/* Rewrite limits of a live cgroup (long-lived worker slots). */
int kc_cgroup_set_limits(kc_cgroup *cg, const kc_cgroup_limits *lim, kc_error *err);
/* An O_DIRECTORY fd of the v2 cgroup for clone3(CLONE_INTO_CGROUP); -1 when none. */
int kc_cgroup_v2_fd(const kc_cgroup *cg);
/* Move a process into every hierarchy (v1 by pid; v2 unless placed by clone3). */
int kc_cgroup_attach(kc_cgroup *cg, pid_t pid, kc_error *err);
/* Kill every process in the tree and wait until it is empty (bounded). */
int kc_cgroup_kill(kc_cgroup *cg, kc_error *err);
int kc_cgroup_read(const kc_cgroup *cg, kc_cgroup_counters *out, kc_error *err);
/* Reset the peak-memory watermark where the host allows it (v1; v2 >= 6.12). */
int kc_cgroup_reset_peak(kc_cgroup *cg, kc_error *err);
/* Kill, remove every directory, free.  Safe with NULL. */
void kc_cgroup_destroy(kc_cgroup *cg);
/* Remove kcage cgroups whose owning process is gone (after a SIGKILLed kcage). */
int kc_cgroup_reap_stale(kc_error *err);

#ifdef __cplusplus
}
#endif
#endif
