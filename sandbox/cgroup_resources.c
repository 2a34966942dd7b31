/* One writer per resource that knows both the v1 and the v2 file names (after crun's
 * libcrun/cgroup-resources.c), and the counters read back.  The CPU writer also adds
 * the cpu-only v1 leaf when a limit comes after creation (join_cpu): the cfs files
 * are written here only. */
#include "cgroup_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KC_CPU_PERIOD_US 100000

/* The pids in dirfd's cgroup.procs, sorted, at most cap (-1 when more or unreadable). */
static int read_pids(int dirfd, pid_t *out, int cap) {
  int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
  if (!f) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  int n = 0, pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (n == cap) {
      n = -1;
      break;
    }
    int j = n++;
    for (; j > 0 && out[j - 1] > pid; j--)
      out[j] = out[j - 1];
    out[j] = pid;
  }
  fclose(f);
  return n;
}

#define KC_CG_JOIN_MAX 512

/* Do two cgroups list the same processes? */
static bool same_procs(int a, int b) {
  pid_t pa[KC_CG_JOIN_MAX], pb[KC_CG_JOIN_MAX];
  int na = read_pids(a, pa, KC_CG_JOIN_MAX), nb = read_pids(b, pb, KC_CG_JOIN_MAX);
  return na >= 0 && na == nb && !memcmp(pa, pb, (size_t)na * sizeof pa[0]);
}

/* Write every pid listed in from's cgroup.procs into to's; how many were listed, -1 on
 * a write that failed for another reason than the process being gone. */
static int move_listed(int from, int to, kc_error *err) {
  int fd = openat(from, "cgroup.procs", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return kc_error_set(err, errno, "open cgroup.procs");
  FILE *f = fdopen(fd, "re");
  if (!f) {
    close(fd);
    return kc_error_set(err, errno, "fdopen cgroup.procs");
  }
  int n = 0, pid, rc = 0;
  while (rc == 0 && fscanf(f, "%d", &pid) == 1) {
    n++;
    if (kc_cgroup_writef(to, "cgroup.procs", err, "%d", pid) < 0 && errno != ESRCH)
      rc = -1;
  }
  fclose(f);
  return rc < 0 ? -1 : n;
}

/* A CPU limit for a cgroup created without one: make its leaf in the cpu-only v1
 * hierarchy now, with the quota written first, and move the processes it already
 * holds there.  The list is read again until a pass finds every process already
 * moved, so a fork racing the move is moved too. */
static int join_cpu(kc_cgroup *cg, long long quota, int period, kc_error *err) {
  const kc_cgroup_host *h = cg->host;
  int i = 0;
  while (i < h->nv1 && !kc_cgroup_cpu_only(&h->v1[i], h->mode))
    i++;
  if (i == h->nv1 || cg->nv1 >= KC_CG_V1_MAX)
    return kc_error_set(err, ENOTSUP, "cpu bandwidth: no cpu controller");
  int fd = kc_cgroup_leaf_fd(h->v1[i].base, cg->name, true, err);
  if (fd < 0)
    return -1;
  if (kc_cgroup_writef(fd, "cpu.cfs_period_us", err, "%d", period) < 0 ||
      kc_cgroup_writef(fd, "cpu.cfs_quota_us", err, "%lld", quota) < 0) {
    close(fd);
    return -1;
  }
  kc_cgroup_add_v1(cg, fd, h->v1[i].ctrl); /* destroy removes it with the others */
  int from = cg->nv1 > 1 ? cg->v1_fd[0] : cg->v2_fd;
  if (from < 0)
    return 0;
  for (int pass = 0; pass < 64; pass++) {
    int before = move_listed(from, fd, err);
    if (before < 0)
      return -1;
    if (before == 0 || same_procs(from, fd))
      return 0;
  }
  return kc_error_set(err, EAGAIN, "cpu limit: the processes of %s kept forking", cg->name);
}

int kc_cgroup_dirfd(const kc_cgroup *cg, unsigned c) {
  if (cg->mode == KC_CGROUP_V2)
    return (cg->ctrl & c) ? cg->v2_fd : -1;
  for (int i = 0; i < cg->nv1; i++)
    if (cg->v1_ctrl[i] & c)
      return cg->v1_fd[i];
  return -1;
}

int kc_cgroup_set_memory(kc_cgroup *cg, uint64_t bytes, kc_error *err) {
  int fd = kc_cgroup_dirfd(cg, KC_CG_MEMORY);
  if (fd < 0)
    return bytes ? kc_error_set(err, ENOTSUP, "memory limit: no memory controller") : 0;
  if (cg->mode == KC_CGROUP_V2) {
    if (bytes)
      if (kc_cgroup_writef(fd, "memory.max", err, "%" PRIu64, bytes) < 0)
        return -1;
    if (!bytes && kc_cgroup_write(fd, "memory.max", "max", err) < 0)
      return -1;
    /* Swap off; absent when the kernel has no swap accounting (then no swap either). */
    if (kc_cgroup_write(fd, "memory.swap.max", "0", NULL) < 0 && errno != ENOENT)
      return kc_error_set(err, errno, "write memory.swap.max");
    /* memory.oom.group stays 0: with it the kernel counts the victim twice in
     * memory.events oom_kill (seen on 6.1), and v1 has no equivalent.  The supervisor
     * kills the rest of the tree on an OOM verdict. */
    return 0;
  }
  /* v1: memsw (memory+swap) must stay >= memory, so the order depends on the direction:
   * lowering writes memory first, raising memsw first.  memsw is absent without swap
   * accounting (swapaccount=0); memory alone is then the limit. */
  char val[32];
  if (bytes)
    snprintf(val, sizeof val, "%" PRIu64, bytes);
  else
    snprintf(val, sizeof val, "-1");
  if (kc_cgroup_write(fd, "memory.limit_in_bytes", val, NULL) == 0) {
    if (kc_cgroup_write(fd, "memory.memsw.limit_in_bytes", val, NULL) < 0 && errno != ENOENT)
      return kc_error_set(err, errno, "write %s to memory.memsw.limit_in_bytes", val);
    return 0;
  }
  if (errno != EINVAL)
    return kc_error_set(err, errno, "write %s to memory.limit_in_bytes", val);
  if (kc_cgroup_write(fd, "memory.memsw.limit_in_bytes", val, err) < 0)
    return -1;
  return kc_cgroup_write(fd, "memory.limit_in_bytes", val, err);
}

int kc_cgroup_set_cpu(kc_cgroup *cg, double cpus, kc_error *err) {
  if (!(cpus >= 0)) /* NaN too */
    return kc_error_set(err, EINVAL, "cpu bandwidth %g", cpus);
  long long quota = -1;
  if (cpus > 0) {
    quota = (long long)(cpus * KC_CPU_PERIOD_US + 0.5);
    if (quota < 1000) /* the kernel's minimum quota is 1 ms */
      quota = 1000;
  }
  int fd = kc_cgroup_dirfd(cg, KC_CG_CPU);
  if (fd < 0 && cpus > 0 && cg->mode != KC_CGROUP_V2)
    return join_cpu(cg, quota, KC_CPU_PERIOD_US, err);
  if (fd < 0)
    return cpus > 0 ? kc_error_set(err, ENOTSUP, "cpu bandwidth: no cpu controller") : 0;
  if (cg->mode == KC_CGROUP_V2) {
    if (quota < 0)
      return kc_cgroup_writef(fd, "cpu.max", err, "max %d", KC_CPU_PERIOD_US);
    return kc_cgroup_writef(fd, "cpu.max", err, "%lld %d", quota, KC_CPU_PERIOD_US);
  }
  if (kc_cgroup_writef(fd, "cpu.cfs_period_us", err, "%d", KC_CPU_PERIOD_US) < 0)
    return -1;
  return kc_cgroup_writef(fd, "cpu.cfs_quota_us", err, "%lld", quota);
}

int kc_cgroup_set_pids(kc_cgroup *cg, uint32_t pids, kc_error *err) {
  int fd = kc_cgroup_dirfd(cg, KC_CG_PIDS);
  if (fd < 0)
    return pids ? kc_error_set(err, ENOTSUP, "pids limit: no pids controller") : 0;
  if (!pids)
    return kc_cgroup_write(fd, "pids.max", "max", err);
  return kc_cgroup_writef(fd, "pids.max", err, "%u", pids);
}

int kc_cgroup_set_limits(kc_cgroup *cg, const kc_cgroup_limits *lim, kc_error *err) {
  kc_cgroup_limits none = {0};
  if (!lim)
    lim = &none;
  /* What the cgroups cannot hold is refused, or becomes an rlimit when asked for. */
  if (kc_cgroup_fallback_limits(cg, lim, err) < 0)
    return -1;
  if (cg->mode == KC_CGROUP_NONE)
    return 0;
  kc_cgroup_limits in_cg = *lim;
  if (cg->rl_as)
    in_cg.memory_bytes = 0;
  if (cg->rl_nproc)
    in_cg.pids = 0;
  if (kc_cgroup_set_memory(cg, in_cg.memory_bytes, err) < 0 ||
      kc_cgroup_set_pids(cg, in_cg.pids, err) < 0 || kc_cgroup_set_cpu(cg, in_cg.cpus, err) < 0)
    return kc_error_prefix(err, "cgroup %s", cg->name);
  return 0;
}

int kc_cgroup_read(const kc_cgroup *cg, kc_cgroup_counters *out, kc_error *err) {
  (void)err;
  out->oom_kills = out->pids_max_hits = out->cpu_usec = out->peak_memory = -1;
  if (cg->mode == KC_CGROUP_NONE)
    return 0;
  int mem = kc_cgroup_dirfd(cg, KC_CG_MEMORY);
  bool v2 = cg->mode == KC_CGROUP_V2;
  /* OOM kills, not failcnt: with memsw == limit, failcnt stays 0 through an OOM kill
   * (reference/environment.md §3). */
  out->oom_kills = kc_cgroup_read_key(mem, v2 ? "memory.events" : "memory.oom_control", "oom_kill");
  out->pids_max_hits = kc_cgroup_read_key(kc_cgroup_dirfd(cg, KC_CG_PIDS), "pids.events", "max");
  /* CPU time: a v2 cgroup (pure, or the hybrid's controller-less unified one) has the
   * core cpu.stat; pure v1 has cpuacct (nanoseconds). */
  if (cg->v2_fd >= 0)
    out->cpu_usec = kc_cgroup_read_key(cg->v2_fd, "cpu.stat", "usage_usec");
  if (out->cpu_usec < 0) {
    int64_t ns = kc_cgroup_read_u64(kc_cgroup_dirfd(cg, KC_CG_CPUACCT), "cpuacct.usage");
    out->cpu_usec = ns < 0 ? -1 : ns / 1000;
  }
  if (!cg->peak_unknown) {
    if (v2 && cg->peak_fd >= 0) {
      char buf[32];
      ssize_t n = pread(cg->peak_fd, buf, sizeof buf - 1, 0);
      if (n > 0) {
        buf[n] = '\0';
        out->peak_memory = strtoll(buf, NULL, 10);
      }
    } else {
      out->peak_memory = kc_cgroup_read_u64(mem, v2 ? "memory.peak" : "memory.max_usage_in_bytes");
    }
  }
  return 0;
}

int kc_cgroup_reset_peak(kc_cgroup *cg, kc_error *err) {
  if (cg->mode == KC_CGROUP_NONE)
    return 0;
  int mem = kc_cgroup_dirfd(cg, KC_CG_MEMORY);
  if (mem < 0)
    return 0;
  if (cg->mode != KC_CGROUP_V2) {
    if (kc_cgroup_write(mem, "memory.max_usage_in_bytes", "0", err) < 0)
      return kc_error_prefix(err, "reset peak memory");
    kc_cgroup_write(mem, "memory.memsw.max_usage_in_bytes", "0", NULL);
    return 0;
  }
  /* v2 memory.peak is resettable from 6.12 on, per open file: a write resets what reads
   * through that same fd report.  Older kernels cannot reset it: the peak then stays
   * unknown (-1) rather than wrong for this run. */
  if (cg->peak_fd < 0)
    cg->peak_fd = openat(mem, "memory.peak", O_RDWR | O_CLOEXEC);
  if (cg->peak_fd < 0 || write(cg->peak_fd, "reset\n", 6) != 6)
    cg->peak_unknown = true;
  else
    cg->peak_unknown = false;
  return 0;
}

/* cpu.idle where the kernel has it (5.15+, v1 and v2): an idle group runs only on CPU
 * time its non-idle siblings leave; else the smallest weight the controller takes. */
static int write_idle(const kc_cgroup *cg, int fd, bool idle, kc_error *err) {
  kc_error e = {0};
  if (kc_cgroup_writef(fd, "cpu.idle", &e, "%d", idle ? 1 : 0) == 0)
    return 0;
  if (e.code != ENOENT) {
    *err = e;
    return -1;
  }
  if (cg->mode == KC_CGROUP_V2)
    return kc_cgroup_writef(fd, "cpu.weight", err, "%d", idle ? 1 : 100);
  return kc_cgroup_writef(fd, "cpu.shares", err, "%d", idle ? 2 : 1024);
}

int kc_cgroup_set_cpu_idle(kc_cgroup *cg, bool idle, kc_error *err) {
  kc_error local = {0};
  if (!err)
    err = &local;
  if (!cg || cg->mode == KC_CGROUP_NONE)
    return kc_error_set(err, ENOTSUP, "cpu priority: no cgroup");
  int fd = kc_cgroup_dirfd(cg, KC_CG_CPU);
  /* A v1 cgroup without a CPU limit stays out of the cpu hierarchy: joined here, so
   * that its priority is set beside its siblings' in kcage/, not against the host's. */
  if (fd < 0 && cg->mode != KC_CGROUP_V2) {
    if (join_cpu(cg, -1, KC_CPU_PERIOD_US, err) < 0)
      return -1;
    fd = kc_cgroup_dirfd(cg, KC_CG_CPU);
  }
  if (fd < 0)
    return kc_error_set(err, ENOTSUP, "cpu priority: no cpu controller");
  return write_idle(cg, fd, idle, err) < 0 ? kc_error_prefix(err, "cgroup %s", cg->name) : 0;
}
