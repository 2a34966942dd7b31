/* Which cgroup layout the host has, found once from /proc/self/mountinfo (after crun's
 * libcrun_get_cgroup_mode, which also recognises the hybrid layout). */
#include "cgroup_internal.h"
#include "fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "kcage/cleanup.h"

/* One detection per mode a caller asks for, indexed by kc_cgroup_mode: the host's best
 * (AUTO) and each mode a tenant's settings name, each made once and kept.  A tenant's
 * mode is then a choice of one of these, never a change to what another tenant uses. */
#define KC_CG_NMODES (KC_CGROUP_HYBRID + 1)
static kc_cgroup_host hosts[KC_CG_NMODES];
static bool forced_done[KC_CG_NMODES], forced_ok[KC_CG_NMODES];
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t hosts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t bases_lock = PTHREAD_MUTEX_INITIALIZER;

/* v1 mounts seen, before a mode is chosen. */
typedef struct {
  const char *path, *root; /* in cg_mounts.pool */
  unsigned ctrl;
} v1_mount;

static unsigned ctrl_bits(const char *opts) {
  unsigned c = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", opts);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "memory"))
      c |= KC_CG_MEMORY;
    else if (!strcmp(t, "cpu"))
      c |= KC_CG_CPU;
    else if (!strcmp(t, "cpuacct"))
      c |= KC_CG_CPUACCT;
    else if (!strcmp(t, "pids"))
      c |= KC_CG_PIDS;
    else if (!strcmp(t, "freezer"))
      c |= KC_CG_FREEZER;
  }
  return c;
}

/* mountinfo escapes blanks as \040 etc. */
static void unescape(char *s) {
  char *o = s;
  for (char *p = s; *p; p++) {
    if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] && p[3]) {
      *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
      p += 3;
    } else {
      *o++ = *p;
    }
  }
  *o = '\0';
}

/* Our own cgroup in a hierarchy, from /proc/self/cgroup: v2 is the "0::" line, v1 the
 * line whose controller list holds `ctrl_name`. */
static bool own_cgroup(const char *ctrl_name, char *out, size_t n) {
  kc_cleanup_fclose FILE *f = fopen("/proc/self/cgroup", "re");
  if (!f)
    return false;
  char line[PATH_MAX + 128];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c1 = *c2 = '\0';
    const char *ctrls = c1 + 1;
    bool match = false;
    if (!ctrl_name) {
      match = !strcmp(line, "0") && ctrls[0] == '\0';
    } else {
      char buf[256];
      snprintf(buf, sizeof buf, "%s", ctrls);
      char *save = NULL;
      for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!strcmp(t, ctrl_name))
          match = true;
    }
    if (match) {
      snprintf(out, n, "%s", c2 + 1);
      return true;
    }
  }
  return false;
}

/* Where a process that moved itself into a leaf (v2's no-internal-process rule) is:
 * the delegated cgroup is the leaf's parent. */
#define KC_CG_SELF_LEAF "kcage.self"

/* The kcage/ parent of a hierarchy.  As root we use the hierarchy's root: then a later
 * kcage in any cgroup finds (and reaps) what a killed one left, and v2 controllers can
 * be enabled (only the root may hold processes and delegate controllers at once).
 * Where the root is not writable (unprivileged: systemd's Delegate=yes, or an admin's
 * chown) we nest under our own cgroup.  This deliberately escapes a limit-free harness
 * cgroup such as this host's memory:/process_api/<id>; the sandbox sets its own
 * limits. */
static void set_base(kc_cgroup_hier *h, const char *mnt, const char *mnt_root, const char *ctrl) {
  char own[PATH_MAX];
  h->delegated = false;
  if (access(mnt, W_OK) != 0 && own_cgroup(ctrl, own, sizeof own)) {
    size_t ol = strlen(own), sl = strlen("/" KC_CG_SELF_LEAF);
    if (!ctrl && ol > sl && !strcmp(own + ol - sl, "/" KC_CG_SELF_LEAF))
      own[ol - sl] = '\0';
    size_t rl = strlen(mnt_root);
    const char *rel = own;
    if (strcmp(mnt_root, "/") && !strncmp(own, mnt_root, rl))
      rel = own + rl;
    if (snprintf(h->base, sizeof h->base, "%s%s/kcage", mnt, strcmp(rel, "/") ? rel : "") <
        (int)sizeof h->base) {
      h->delegated = true;
      return;
    }
  }
  if (snprintf(h->base, sizeof h->base, "%s/kcage", mnt) >= (int)sizeof h->base)
    h->base[0] = '\0';
}

static const char *ctrl_name(unsigned c) {
  if (c & KC_CG_MEMORY)
    return "memory";
  if (c & KC_CG_PIDS)
    return "pids";
  if (c & KC_CG_CPU)
    return "cpu";
  if (c & KC_CG_CPUACCT)
    return "cpuacct";
  if (c & KC_CG_FREEZER)
    return "freezer";
  return NULL;
}

static unsigned v2_controllers(const char *mnt) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/cgroup.controllers", mnt);
  kc_cleanup_fclose FILE *f = fopen(p, "re");
  if (!f)
    return 0;
  char line[512] = "";
  if (!fgets(line, sizeof line, f))
    return 0;
  line[strcspn(line, "\n")] = '\0';
  for (char *s = line; *s; s++)
    if (*s == ' ')
      *s = ',';
  return ctrl_bits(line);
}

/* The cgroup mounts of this mount namespace: the first cgroup2 and each v1 hierarchy
 * once. */
typedef struct cg_mounts {
  v1_mount v1[16];
  int nv1;
  const char *v2_path, *v2_root; /* "" when none */
  /* The strings, packed: PATH_MAX buffers per entry touched a page each (~10 page
   * faults in every process that runs a sandbox).  Full: later mounts are ignored. */
  char pool[4 * PATH_MAX];
  size_t used;
} cg_mounts;

/* A copy of s in the pool, or NULL when it is full. */
static const char *pool_dup(cg_mounts *cm, const char *s) {
  size_t n = strlen(s) + 1;
  if (n > sizeof cm->pool - cm->used)
    return NULL;
  char *d = cm->pool + cm->used;
  memcpy(d, s, n);
  cm->used += n;
  return d;
}

static void add_mount(cg_mounts *cm, const char *fstype, const char *root, const char *mnt,
                      const char *sopts) {
  if (!strcmp(fstype, "cgroup2")) {
    if (!cm->v2_path[0]) {
      const char *p = pool_dup(cm, mnt), *r = p ? pool_dup(cm, root) : NULL;
      if (r) {
        cm->v2_path = p;
        cm->v2_root = r;
      }
    }
    return;
  }
  if (strcmp(fstype, "cgroup") || cm->nv1 >= 16)
    return;
  unsigned c = ctrl_bits(sopts);
  if (!c)
    return;
  for (int i = 0; i < cm->nv1; i++)
    if (cm->v1[i].ctrl & c)
      return; /* the same hierarchy mounted twice: first wins */
  const char *p = pool_dup(cm, mnt), *r = p ? pool_dup(cm, root) : NULL;
  if (!r)
    return;
  v1_mount *v = &cm->v1[cm->nv1++];
  v->path = p;
  v->root = r;
  v->ctrl = c;
}

static void read_mounts(cg_mounts *cm) {
  kc_cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f)
    return;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
    char *sep = strstr(line, " - ");
    if (!sep)
      continue;
    char root[PATH_MAX], mnt[PATH_MAX], fstype[64], src[256], sopts[512] = "";
    if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2)
      continue;
    if (sscanf(sep + 3, "%63s %255s %511s", fstype, src, sopts) < 2)
      continue;
    unescape(root);
    unescape(mnt);
    add_mount(cm, fstype, root, mnt, sopts);
  }
  free(line);
}

/* The hierarchies mode m uses: v2's, and v1's with a controller it needs. */
static void fill_hierarchies(kc_cgroup_host *h, const cg_mounts *cm, kc_cgroup_mode m,
                             unsigned v2_ctrl) {
  if (m == KC_CGROUP_V2 || m == KC_CGROUP_HYBRID) {
    h->have_v2 = true;
    h->v2.ctrl = m == KC_CGROUP_V2 ? (v2_ctrl & (KC_CG_MEMORY | KC_CG_CPU | KC_CG_PIDS)) : 0;
    set_base(&h->v2, cm->v2_path, cm->v2_root, NULL);
  }
  if (m == KC_CGROUP_V1 || m == KC_CGROUP_HYBRID) {
    /* Limits from v1.  cpu time: v1 needs cpuacct; hybrid reads the unified cpu.stat.
     * Tree kill: v1 needs the freezer; hybrid has cgroup.kill. */
    unsigned want_ctrl = KC_CG_MEMORY | KC_CG_CPU | KC_CG_PIDS;
    if (m == KC_CGROUP_V1)
      want_ctrl |= KC_CG_CPUACCT | KC_CG_FREEZER;
    for (int i = 0; i < cm->nv1 && h->nv1 < KC_CG_V1_MAX; i++) {
      if (!(cm->v1[i].ctrl & want_ctrl))
        continue;
      kc_cgroup_hier *hh = &h->v1[h->nv1++];
      hh->ctrl = cm->v1[i].ctrl;
      set_base(hh, cm->v1[i].path, cm->v1[i].root, ctrl_name(cm->v1[i].ctrl));
      h->v1_ctrl |= cm->v1[i].ctrl;
    }
  }
}

/* Fill `h` for mode `want` (or the best one when !forced).  Returns false when the
 * host cannot provide `want`. */
/* Back to "nothing found", field by field: the struct is ~26 KB of path buffers, and a
 * memset of it cost 7 page faults in every process that runs a sandbox.  h is zeroed
 * or from an earlier detect_into (nv1 and have_v2 say what it filled). */
static void host_reset(kc_cgroup_host *h) {
  h->mode = KC_CGROUP_NONE;
  if (h->have_v2)
    h->v2 = (kc_cgroup_hier){.ctrl = 0};
  h->have_v2 = false;
  h->v2.ctrl = 0;
  for (int i = 0; i < h->nv1; i++) /* set_base fills an entry before nv1 counts it */
    h->v1[i] = (kc_cgroup_hier){.ctrl = 0};
  h->nv1 = 0;
  h->v1_ctrl = 0;
  h->kernel_major = h->kernel_minor = 0;
  h->bases_done = false;
  for (int i = 0; i < 3; i++)
    h->why[i][0] = '\0';
}

static bool detect_into(kc_cgroup_host *h, kc_cgroup_mode want, bool forced) {
  host_reset(h);
  struct utsname u;
  if (uname(&u) == 0)
    sscanf(u.release, "%d.%d", &h->kernel_major, &h->kernel_minor);
  bool has_kill = h->kernel_major > 5 || (h->kernel_major == 5 && h->kernel_minor >= 14);

  /* Not zero-initialised: clearing the string pool would touch every page of it. */
  cg_mounts cm;
  cm.nv1 = 0;
  cm.v2_path = cm.v2_root = "";
  cm.used = 0;
  read_mounts(&cm);
  unsigned v1_all = 0;
  for (int i = 0; i < cm.nv1; i++)
    v1_all |= cm.v1[i].ctrl;
  bool have_v2 = cm.v2_path[0];
  unsigned v2_ctrl = have_v2 ? v2_controllers(cm.v2_path) : 0;
  bool v1_limits = v1_all & (KC_CG_MEMORY | KC_CG_CPU | KC_CG_PIDS);
  bool v2_limits = v2_ctrl & (KC_CG_MEMORY | KC_CG_CPU | KC_CG_PIDS);

  kc_cgroup_mode m;
  if (forced)
    m = want;
  else if (v1_limits && have_v2 && has_kill)
    m = KC_CGROUP_HYBRID;
  else if (v1_limits)
    m = KC_CGROUP_V1;
  else if (v2_limits || (have_v2 && !cm.nv1))
    m = KC_CGROUP_V2;
  else
    m = KC_CGROUP_NONE;

  if ((m == KC_CGROUP_V1 || m == KC_CGROUP_HYBRID) && !v1_limits)
    return false;
  if ((m == KC_CGROUP_V2 || m == KC_CGROUP_HYBRID) && !have_v2)
    return false;
  h->mode = m;
  if (m == KC_CGROUP_NONE)
    return true;
  fill_hierarchies(h, &cm, m, v2_ctrl);
  kc_cgroup_why_set(h, h->v1_ctrl | h->v2.ctrl,
                    "this host has no cgroup hierarchy with that controller");
  return true;
}

/* Always the best mode the host has.  No environment variable chooses it: one set for
 * a daemon (kcage agent) would reach every tenant's sandbox, and "none" there would
 * turn cgroup limits into rlimits or drop the CPU accounting a measurement rests on.
 * A tenant that wants another mode says so in its own settings (kc_settings;
 * kcage run --cgroup). */
static void detect_once(void) {
  kc_cgroup_host *host = &hosts[KC_CGROUP_AUTO];
  detect_into(host, KC_CGROUP_NONE, false);
  /* Unusable (not root, no delegation): behave as "none" rather than fail later; the
   * reason is kept for the refusal of a limit. */
  kc_error e = {0};
  if (host->mode != KC_CGROUP_NONE && kc_cgroup_bases_ready(host, &e) < 0) {
    detect_into(host, KC_CGROUP_NONE, true);
    kc_cgroup_why_set(host, 0, "%s", e.msg);
  }
  if (host->mode == KC_CGROUP_NONE)
    kc_cgroup_why_set(host, 0, "%s", "this host has no cgroup hierarchy with that controller");
}

const kc_cgroup_host *kc_cgroup_host_get(void) {
  pthread_once(&auto_once, detect_once);
  return &hosts[KC_CGROUP_AUTO];
}

/* Mode m exactly as the caller chose it: made once, then shared by every tenant that
 * chose it. */
static const kc_cgroup_host *host_forced(kc_cgroup_mode m, kc_error *err) {
  kc_cgroup_host *h = &hosts[m];
  pthread_mutex_lock(&hosts_lock);
  if (!forced_done[m]) {
    forced_done[m] = true;
    forced_ok[m] = detect_into(h, m, true);
    if (forced_ok[m] && m == KC_CGROUP_NONE)
      kc_cgroup_why_set(h, 0, "%s", "cgroups are off (the caller chose mode none)");
  }
  bool ok = forced_ok[m];
  pthread_mutex_unlock(&hosts_lock);
  if (!ok) {
    kc_error_set(err, 0, "cgroup mode %s is not available on this host", kc_cgroup_mode_name(m));
    if (err)
      err->code = ENOTSUP;
    return NULL;
  }
  if (m != KC_CGROUP_NONE && kc_cgroup_bases_ready(h, err) < 0) {
    kc_error_prefix(err, "cgroup mode %s", kc_cgroup_mode_name(m));
    return NULL;
  }
  return h;
}

const kc_cgroup_host *kc_cgroup_host_for(kc_cgroup_mode m, kc_error *err) {
  if (m == KC_CGROUP_AUTO)
    return kc_cgroup_host_get();
  if ((unsigned)m >= KC_CG_NMODES) {
    kc_error_set(err, EINVAL, "cgroup mode %d", (int)m);
    return NULL;
  }
  return host_forced(m, err);
}

kc_cgroup_mode kc_cgroup_mode_for(const kc_settings *s) {
  const kc_cgroup_host *h = kc_cgroup_host_for(s ? s->cgroup_mode : KC_CGROUP_AUTO, NULL);
  return h ? h->mode : KC_CGROUP_AUTO;
}

kc_cgroup_mode kc_cgroup_detect(void) {
  return kc_cgroup_host_get()->mode;
}

const char *kc_cgroup_mode_name(kc_cgroup_mode m) {
  switch (m) {
  case KC_CGROUP_AUTO:
    return "auto";
  case KC_CGROUP_NONE:
    return "none";
  case KC_CGROUP_V1:
    return "v1";
  case KC_CGROUP_V2:
    return "v2";
  case KC_CGROUP_HYBRID:
    return "hybrid";
  }
  return "?";
}

static int mkdir_p(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
      return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
    return -1;
  return 0;
}

/* v2: controllers reach a leaf only if every ancestor lists them in
 * cgroup.subtree_control.  Enable each one we need in the parent of kcage/ and in
 * kcage/ itself, one at a time so a missing controller does not block the others. */
static unsigned v2_enable(const char *base, unsigned want) {
  static const struct {
    unsigned bit;
    const char *name;
  } ctl[] = {{KC_CG_MEMORY, "+memory"}, {KC_CG_CPU, "+cpu"}, {KC_CG_PIDS, "+pids"}};
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", base);
  char *slash = strrchr(parent, '/');
  if (slash)
    *slash = '\0';
  unsigned got = 0;
  for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
    if (!(want & ctl[i].bit))
      continue;
    bool ok = true;
    const char *dirs[2] = {parent, base};
    for (int d = 0; d < 2 && ok; d++) {
      char p[PATH_MAX + 32];
      snprintf(p, sizeof p, "%s/cgroup.subtree_control", dirs[d]);
      int fd = open(p, O_WRONLY | O_CLOEXEC);
      if (fd < 0) {
        ok = false;
        break;
      }
      ssize_t n = write(fd, ctl[i].name, strlen(ctl[i].name));
      close(fd);
      if (n < 0)
        ok = false;
    }
    if (ok)
      got |= ctl[i].bit;
  }
  return got;
}

/* The clause of a refusal for a base we could not create: why, and whose cgroup. */
static int base_error(kc_error *err, int e, const kc_cgroup_hier *h) {
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", h->base);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent)
    *slash = '\0';
  if (e == EACCES || e == EPERM || e == EROFS)
    return kc_error_set(err, 0, "cgroup %s is not delegated to uid %d (not writable)", parent,
                        (int)geteuid());
  return kc_error_set(err, e, "cgroup %s: mkdir kcage", parent);
}

/* v2 in a delegated cgroup D: controllers can be given to D's children only while D
 * holds no process itself (the no-internal-process rule), so we move into the leaf
 * D/kcage.self first, as systemd and podman do.  Only this process moves: other
 * processes in D are not ours to move, and keep the controllers off (the refusal says
 * so). */
static void v2_leave_parent(const char *base) {
  char d[PATH_MAX], p[PATH_MAX + 32];
  snprintf(d, sizeof d, "%s", base);
  char *slash = strrchr(d, '/');
  if (!slash)
    return;
  *slash = '\0';
  snprintf(p, sizeof p, "%s/cgroup.procs", d);
  char buf[64] = "";
  kc_cleanup_fclose FILE *f = fopen(p, "re");
  if (!f || !fgets(buf, sizeof buf, f))
    return; /* empty already */
  snprintf(p, sizeof p, "%s/" KC_CG_SELF_LEAF, d);
  if (mkdir(p, 0755) < 0 && errno != EEXIST)
    return;
  snprintf(p, sizeof p, "%s/" KC_CG_SELF_LEAF "/cgroup.procs", d);
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  ssize_t n = write(fd, "0", 1); /* "0": the writing process */
  (void)n;
  close(fd);
}

/* The kcage/ parent exists and is ours to create cgroups in (another user's, root's
 * for one, may exist already). */
static int base_make(const char *base) {
  if (access(base, W_OK | X_OK) == 0)
    return 0; /* the usual case: made before, one call instead of a mkdir per level */
  if (mkdir_p(base) < 0)
    return -1;
  return access(base, W_OK | X_OK);
}

static int bases_ready_locked(kc_cgroup_host *host, kc_error *err) {
  if (host->have_v2) {
    if (base_make(host->v2.base) < 0)
      return base_error(err, errno, &host->v2);
    if (host->mode == KC_CGROUP_V2) {
      unsigned want = host->v2.ctrl;
      if (host->v2.delegated)
        v2_leave_parent(host->v2.base);
      host->v2.ctrl = v2_enable(host->v2.base, want);
      if (want & ~host->v2.ctrl)
        kc_cgroup_why_set(host, host->v2.ctrl,
                          "the controller cannot be enabled below %s (the delegating parent must "
                          "enable it, and no other process may stay in that cgroup)",
                          host->v2.base);
    }
  }
  /* A v1 hierarchy that is not delegated to us is dropped: its limit is refused, the
   * others still work. */
  for (int i = 0; i < host->nv1;) {
    if (base_make(host->v1[i].base) == 0) {
      i++;
      continue;
    }
    kc_error e = {0};
    base_error(&e, errno, &host->v1[i]);
    kc_cgroup_why_set(host, host->v1_ctrl & ~host->v1[i].ctrl, "%s", e.msg);
    host->v1_ctrl &= ~host->v1[i].ctrl;
    memmove(&host->v1[i], &host->v1[i + 1], (size_t)(host->nv1 - i - 1) * sizeof host->v1[0]);
    host->nv1--;
  }
  return 0;
}

int kc_cgroup_bases_ready(kc_cgroup_host *host, kc_error *err) {
  pthread_mutex_lock(&bases_lock);
  int rc = 0;
  if (!host->bases_done) {
    rc = bases_ready_locked(host, err);
    if (rc == 0)
      host->bases_done = true;
  }
  pthread_mutex_unlock(&bases_lock);
  return rc;
}

int kc_cgroup_why_index(unsigned c) {
  return c & KC_CG_MEMORY ? 0 : c & KC_CG_CPU ? 1 : 2;
}

void kc_cgroup_why_set(kc_cgroup_host *h, unsigned have, const char *fmt, ...) {
  static const unsigned ctl[3] = {KC_CG_MEMORY, KC_CG_CPU, KC_CG_PIDS};
  char buf[sizeof h->why[0]];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (int i = 0; i < 3; i++)
    if (!(have & ctl[i]) && !h->why[i][0])
      snprintf(h->why[i], sizeof h->why[i], "%s", buf);
}

unsigned long kc_cgroup_pidns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

unsigned long long kc_cgroup_starttime(pid_t pid) {
  char buf[1024];
  if (kc_read_proc(pid, "stat", buf, sizeof buf) < 0)
    return 0;
  char *s = strrchr(buf, ')'); /* comm may hold blanks and parentheses */
  if (!s)
    return 0;
  /* after ") ": field 3 (state) ... field 22 (starttime) */
  char state = 0;
  unsigned long long st = 0;
  if (sscanf(s + 2,
             "%c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
             &state, &st) != 2)
    return 0;
  if (state == 'Z' || state == 'X')
    return 0; /* an unreaped owner is gone for our purpose */
  return st;
}
