/* Limits the cgroups here cannot enforce (not root and nothing delegated, or a
 * controller missing): refused with the reason and the ways out, or, only when the
 * caller asked for it, enforced as rlimits of every attached process:
 *   memory -> RLIMIT_AS, per process (a program with N processes may use N times it);
 *   pids   -> RLIMIT_NPROC, which the kernel counts per user of the sandbox's own user
 *             namespace (so it bounds the sandbox, not the host user);
 *   cpus   -> no rlimit can hold a CPU share: still refused.
 * The parent sets them with prlimit() on the attached process before it runs untrusted
 * code, the same moment the cgroups would take it. */
#include "cgroup_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Can h's cgroups hold limit c? */
bool kc_cgroup_host_has(const kc_cgroup_host *h, unsigned c) {
  if (!h || h->mode == KC_CGROUP_NONE)
    return false;
  return (h->mode == KC_CGROUP_V2 ? h->v2.ctrl : h->v1_ctrl) & c;
}

static unsigned ctrl_of(const char *which) {
  if (!strcmp(which, "memory"))
    return KC_CG_MEMORY;
  if (!strcmp(which, "pids"))
    return KC_CG_PIDS;
  if (!strcmp(which, "cpus"))
    return KC_CG_CPU;
  return 0;
}

static const char *enforcement(const kc_cgroup_host *h, kc_limits_fallback f, unsigned c) {
  if (!c)
    return NULL;
  if (kc_cgroup_host_has(h, c))
    return "cgroup";
  if (c != KC_CG_CPU && f == KC_LIMITS_FALLBACK_RLIMIT)
    return "rlimit";
  return NULL;
}

/* The way to a delegated cgroup on this host: systemd's own where systemd is the init
 * (what sd_booted() checks), else the administrator's, step by step in the docs. */
static const char *delegation_hint(void) {
  if (access("/run/systemd/system", F_OK) == 0)
    return geteuid() == 0 ? "systemd-run --scope -p Delegate=yes kcage ..."
                          : "systemd-run --user --scope -p Delegate=yes kcage ...";
  return "no systemd here: have root delegate one and move your shell into it, "
         "docs/operating.md \"Delegating cgroups by hand\"";
}

const char *kc_cgroup_enforcement(const kc_settings *s, const char *which) {
  const kc_cgroup_host *h = kc_cgroup_host_for(s ? s->cgroup_mode : KC_CGROUP_AUTO, NULL);
  return enforcement(h, s ? s->limits_fallback : KC_LIMITS_FALLBACK_NONE,
                     which ? ctrl_of(which) : 0);
}

static int refusal(const kc_cgroup_host *h, const char *which, kc_error *err) {
  unsigned c = ctrl_of(which);
  const char *why = c && h ? h->why[kc_cgroup_why_index(c)] : "";
  /* ENOTSUP without its strerror: the line already says everything. */
  kc_error_set(err, 0, "%s limit cannot be enforced: %s; run kcage in a delegated cgroup (%s)%s",
               which, why[0] ? why : "no usable cgroup", delegation_hint(),
               c == KC_CG_CPU ? "" : " or allow rlimits (--limits-fallback rlimit)");
  if (err)
    err->code = ENOTSUP;
  return -1;
}

int kc_cgroup_refusal(const kc_settings *s, const char *which, kc_error *err) {
  kc_error e = {0};
  const kc_cgroup_host *h = kc_cgroup_host_for(s ? s->cgroup_mode : KC_CGROUP_AUTO, &e);
  if (!h) {
    kc_error_set(err, e.code, "%s limit cannot be enforced: %s", which, e.msg);
    return -1;
  }
  return refusal(h, which, err);
}

int kc_cgroup_fallback_limits(kc_cgroup *cg, const kc_cgroup_limits *lim, kc_error *err) {
  const kc_cgroup_host *h = cg->host;
  cg->rl_as = 0;
  cg->rl_nproc = 0;
  if (lim->memory_bytes && !kc_cgroup_host_has(h, KC_CG_MEMORY)) {
    if (!enforcement(h, cg->fallback, KC_CG_MEMORY))
      return refusal(h, "memory", err);
    cg->rl_as = lim->memory_bytes;
  }
  if (lim->pids && !kc_cgroup_host_has(h, KC_CG_PIDS)) {
    if (!enforcement(h, cg->fallback, KC_CG_PIDS))
      return refusal(h, "pids", err);
    cg->rl_nproc = lim->pids;
  }
  if (lim->cpus > 0 && !kc_cgroup_host_has(h, KC_CG_CPU))
    return refusal(h, "cpus", err);
  return 0;
}

bool kc_cgroup_uses_rlimits(const kc_cgroup *cg) {
  return cg && (cg->rl_as || cg->rl_nproc);
}

uint64_t kc_cgroup_rlimit_memory(const kc_cgroup *cg) {
  return cg ? cg->rl_as : 0;
}

/* Only ever lower: a process must not gain a limit back by being attached. */
static int lower(pid_t pid, int res, rlim_t v, kc_error *err) {
  struct rlimit cur;
  if (prlimit(pid, res, NULL, &cur) < 0)
    return kc_error_set(err, errno, "prlimit %d", (int)pid);
  if (cur.rlim_max != RLIM_INFINITY && cur.rlim_max < v)
    v = cur.rlim_max;
  struct rlimit rl = {v, v};
  if (prlimit(pid, res, &rl, NULL) < 0)
    return kc_error_set(err, errno, "prlimit %d", (int)pid);
  return 0;
}

int kc_cgroup_fallback_attach(const kc_cgroup *cg, pid_t pid, kc_error *err) {
  if (cg->rl_as && lower(pid, RLIMIT_AS, (rlim_t)cg->rl_as, err) < 0)
    return kc_error_prefix(err, "memory limit as RLIMIT_AS");
  if (cg->rl_nproc && lower(pid, RLIMIT_NPROC, (rlim_t)cg->rl_nproc, err) < 0)
    return kc_error_prefix(err, "pids limit as RLIMIT_NPROC");
  return 0;
}
