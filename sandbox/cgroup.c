/* A kcage cgroup: one leaf directory per hierarchy, placement, whole-tree kill and
 * removal.  The leaf name records the owner (<pidns>.<pid>.<starttime>.<seq>.<name>) so a later
 * kcage can reap what a SIGKILLed one left behind (cgroup_reap.c). */
#include "cgroup_internal.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kcage/cleanup.h"

#define KC_KILL_TIMEOUT_NS (3LL * 1000000000LL)

static atomic_uint seq;

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static kc_cgroup *cg_alloc(const kc_cgroup_host *h) {
  kc_cgroup *cg = calloc(1, sizeof *cg);
  if (!cg)
    return NULL;
  cg->host = h;
  cg->mode = h->mode;
  cg->v2_fd = -1;
  cg->peak_fd = -1;
  for (int i = 0; i < KC_CG_V1_MAX; i++)
    cg->v1_fd[i] = -1;
  return cg;
}

/* skip_cpu: leave the cpu-only v1 hierarchy out (see cpu_only). */
/* h: its kcage/ parents already made (kc_cgroup_host_for). */
static int cg_open(const kc_cgroup_host *h, const char *name, bool create, bool skip_cpu,
                   kc_cgroup **out, kc_error *err) {
  kc_cgroup *cg = cg_alloc(h);
  if (!cg)
    return kc_error_set(err, ENOMEM, "cgroup");
  snprintf(cg->name, sizeof cg->name, "%s", name);
  if (h->have_v2) {
    cg->v2_fd = kc_cgroup_leaf_fd(h->v2.base, name, create, err);
    if (cg->v2_fd < 0 && create)
      goto fail;
    if (h->mode == KC_CGROUP_V2)
      cg->ctrl |= h->v2.ctrl;
  }
  for (int i = 0; i < h->nv1; i++) {
    if (skip_cpu && kc_cgroup_cpu_only(&h->v1[i], h->mode))
      continue;
    int fd = kc_cgroup_leaf_fd(h->v1[i].base, name, create, err);
    if (fd < 0 && create)
      goto fail;
    if (fd >= 0)
      kc_cgroup_add_v1(cg, fd, h->v1[i].ctrl);
  }
  *out = cg;
  return 0;
fail:
  kc_cgroup_destroy(cg);
  return -1;
}

int kc_cgroup_open_existing(const char *name, kc_cgroup **out, kc_error *err) {
  return cg_open(kc_cgroup_host_get(), name, false, false, out, err);
}

int kc_cgroup_create(const char *name, const kc_cgroup_limits *lim, const kc_settings *s,
                     kc_cgroup **out, kc_error *err) {
  *out = NULL;
  if (!name || !*name || strchr(name, '/') || strlen(name) > 200 || name[0] == '.')
    return kc_error_set(err, EINVAL, "cgroup name '%s'", name ? name : "(null)");
  const kc_cgroup_host *h = kc_cgroup_host_for(s ? s->cgroup_mode : KC_CGROUP_AUTO, err);
  if (!h)
    return kc_error_prefix(err, "create cgroup %s", name);
  char leaf[NAME_MAX + 1];
  snprintf(leaf, sizeof leaf, "%lu.%d.%llu.%u.%s", kc_cgroup_pidns(), (int)getpid(),
           kc_cgroup_starttime(getpid()), atomic_fetch_add(&seq, 1), name);
  kc_cgroup *cg = NULL;
  bool no_cpu = !lim || lim->cpus == 0; /* a CPU limit given later joins then */
  if (cg_open(h, leaf, true, no_cpu, &cg, err) < 0)
    return kc_error_prefix(err, "create cgroup %s", name);
  cg->fallback = s ? s->limits_fallback : KC_LIMITS_FALLBACK_NONE;
  if (kc_cgroup_set_limits(cg, lim, err) < 0) {
    kc_cgroup_destroy(cg);
    return -1;
  }
  *out = cg;
  return 0;
}

/* Once cgroup.kill was written, the kernel (seen on 6.18) SIGKILLs every child born
 * into this cgroup by CLONE_INTO_CGROUP: it compares the kill sequence number of the
 * parent's cgroup with the target's.  Attaching by pid is not affected, so a killed
 * cgroup reports no placement fd and callers fall back to kc_cgroup_attach. */
int kc_cgroup_v2_fd(const kc_cgroup *cg) {
  return cg && !cg->v2_killed ? cg->v2_fd : -1;
}

const char *kc_cgroup_dir_name(const kc_cgroup *cg) {
  return cg->name;
}

kc_cgroup_mode kc_cgroup_mode_of(const kc_cgroup *cg) {
  return cg->mode;
}

int kc_cgroup_attach(kc_cgroup *cg, pid_t pid, kc_error *err) {
  if (pid <= 0)
    return kc_error_set(err, EINVAL, "attach pid %d", (int)pid);
  if (kc_cgroup_fallback_attach(cg, pid, err) < 0)
    return kc_error_prefix(err, "attach %d to cgroup %s", (int)pid, cg->name);
  if (cg->mode == KC_CGROUP_NONE) {
    if (cg->npids < KC_CG_NONE_PIDS)
      cg->pids[cg->npids++] = pid;
    return 0;
  }
  /* v1 first: the memory/pids limits must hold before the v2 move makes the process
   * look "placed".  Writing the v2 cgroup.procs again after CLONE_INTO_CGROUP is a
   * no-op. */
  for (int i = 0; i < cg->nv1; i++)
    if (kc_cgroup_writef(cg->v1_fd[i], "cgroup.procs", err, "%d", (int)pid) < 0)
      return kc_error_prefix(err, "attach %d to cgroup %s", (int)pid, cg->name);
  if (cg->v2_fd >= 0 && kc_cgroup_writef(cg->v2_fd, "cgroup.procs", err, "%d", (int)pid) < 0)
    return kc_error_prefix(err, "attach %d to cgroup %s", (int)pid, cg->name);
  return 0;
}

/* SIGKILL every pid listed in dirfd's cgroup.procs; returns how many were listed. */
static int kill_listed(int dirfd) {
  int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  FILE *f = fdopen(fd, "re");
  if (!f) {
    close(fd);
    return 0;
  }
  int n = 0, pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (pid > 0 && pid != getpid())
      kill(pid, SIGKILL);
    n++;
  }
  fclose(f);
  return n;
}

/* v1 has no cgroup.kill: freeze (no more forks), SIGKILL everyone, thaw so the
 * signals are acted on. */
static void freeze_kill_thaw(int fz) {
  if (kc_cgroup_write(fz, "freezer.state", "FROZEN", NULL) == 0) {
    char st[32] = "";
    for (int i = 0; i < 200; i++) { /* bounded: a task in D state may never freeze */
      if (kc_cgroup_read_file(fz, "freezer.state", st, sizeof st) > 0 && !strncmp(st, "FROZEN", 6))
        break;
      sleep_us(i < 20 ? 50 : 500);
    }
  }
  kill_listed(fz);
  kc_cgroup_write(fz, "freezer.state", "THAWED", NULL);
}

static bool all_empty(const kc_cgroup *cg) {
  if (cg->v2_fd >= 0 && !kc_cgroup_empty(cg->v2_fd, true))
    return false;
  for (int i = 0; i < cg->nv1; i++)
    if (!kc_cgroup_empty(cg->v1_fd[i], false))
      return false;
  return true;
}

static bool pid_gone(pid_t pid) {
  return kc_cgroup_starttime(pid) == 0; /* exited (zombie or reaped) */
}

static int kill_none(kc_cgroup *cg, kc_error *err) {
  long long deadline = (long long)kc_now_ns() + KC_KILL_TIMEOUT_NS;
  for (int i = 0; i < cg->npids; i++) {
    kill(-cg->pids[i], SIGKILL); /* its process group, when it leads one */
    kill(cg->pids[i], SIGKILL);
  }
  for (long us = 50;; us = us < 2000 ? us * 2 : us) {
    bool gone = true;
    for (int i = 0; i < cg->npids; i++)
      if (!pid_gone(cg->pids[i]))
        gone = false;
    if (gone)
      return 0;
    if ((long long)kc_now_ns() > deadline)
      return kc_error_set(err, ETIMEDOUT, "kill: processes of %s still alive", cg->name);
    sleep_us(us);
  }
}

/* v2 "populated" through an open cgroup.events fd (one pread per check). */
static int events_populated(int evfd) {
  char buf[256];
  ssize_t n = pread(evfd, buf, sizeof buf - 1, 0);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  const char *p = strstr(buf, "populated ");
  return p ? atoi(p + 10) : -1;
}

static bool v1_empty(const kc_cgroup *cg) {
  for (int i = 0; i < cg->nv1; i++)
    if (!kc_cgroup_empty(cg->v1_fd[i], false))
      return false;
  return true;
}

int kc_cgroup_kill(kc_cgroup *cg, kc_error *err) {
  if (cg->mode == KC_CGROUP_NONE)
    return kill_none(cg, err);
  long long deadline = (long long)kc_now_ns() + KC_KILL_TIMEOUT_NS;
  int fz = kc_cgroup_dirfd(cg, KC_CG_FREEZER);
  /* Waiting for "populated 0": short sleeps, not poll(POLLPRI) on cgroup.events - the
   * kernel rate-limits that notification to one per ~10 ms, so a cgroup populated a
   * moment ago would be seen empty late (measured: 8.5 ms vs 0.3 ms mean). */
  kc_cleanup_close int evfd =
      cg->v2_fd >= 0 ? openat(cg->v2_fd, "cgroup.events", O_RDONLY | O_CLOEXEC) : -1;
  bool have_kill = cg->v2_fd >= 0 && kc_cgroup_write(cg->v2_fd, "cgroup.kill", "1", NULL) == 0;
  if (have_kill)
    cg->v2_killed = true;
  if (!have_kill && fz >= 0)
    freeze_kill_thaw(fz);
  for (long us = 25, round = 0;; round++) {
    int pop = evfd >= 0 ? events_populated(evfd) : -1;
    bool v2_done = pop == 0 || (pop < 0 && (cg->v2_fd < 0 || kc_cgroup_empty(cg->v2_fd, true)));
    if (v2_done && v1_empty(cg))
      return 0;
    long long left = deadline - (long long)kc_now_ns();
    if (left <= 0)
      return kc_error_set(err, ETIMEDOUT, "kill: cgroup %s not empty after %lld ms", cg->name,
                          KC_KILL_TIMEOUT_NS / 1000000);
    /* Stragglers: a v1 hierarchy the v2 kill does not cover, a fork that raced a
     * freezer-less kill.  Kill whatever is still listed, now and then. */
    if (round % 8 == 7 || (round == 0 && !have_kill && fz < 0)) {
      if (round % 8 == 7) {
        if (have_kill)
          kc_cgroup_write(cg->v2_fd, "cgroup.kill", "1", NULL);
        else if (fz >= 0)
          freeze_kill_thaw(fz);
      }
      if (cg->v2_fd >= 0)
        kill_listed(cg->v2_fd);
      for (int i = 0; i < cg->nv1; i++)
        kill_listed(cg->v1_fd[i]);
    }
    sleep_us(us);
    if (us < 200)
      us *= 2;
  }
}

void kc_cgroup_destroy(kc_cgroup *cg) {
  if (!cg)
    return;
  if (cg->mode != KC_CGROUP_NONE && !all_empty(cg))
    kc_cgroup_kill(cg, NULL);
  const kc_cgroup_host *h = cg->host;
  if (cg->peak_fd >= 0)
    close(cg->peak_fd);
  if (cg->v2_fd >= 0) {
    close(cg->v2_fd);
    kc_cleanup_close int b = kc_cgroup_base_fd(h->v2.base);
    if (b >= 0)
      kc_cgroup_rmdir_tree(b, cg->name);
  }
  for (int i = 0; i < cg->nv1; i++)
    close(cg->v1_fd[i]);
  if (cg->nv1)
    for (int i = 0; i < h->nv1; i++) {
      kc_cleanup_close int b = kc_cgroup_base_fd(h->v1[i].base);
      if (b >= 0)
        kc_cgroup_rmdir_tree(b, cg->name);
    }
  free(cg);
}
