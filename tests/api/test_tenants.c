/* Two tenants in one process, at the same time, each with its own settings: id range,
 * cgroup mode, limits fallback and policy directory.  Uses only the public API of
 * libkcage (the install test builds it against the installed package too), and checks
 * every setting from outside the sandbox: the host ids and rlimits the kernel shows in
 * /proc for the sandbox's init, the cgroup it sits in, and the verdict of a syscall
 * one tenant's policy kills and the other's allows.
 *
 *   test_tenants [SCRATCH_DIR]   (exit 0 pass, 1 fail, 77 skip) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, mkdtemp, barriers under -std=c17 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kcage/kcage.h>

/* Large enough for what a clone of this process inherits before its exec: the two
 * threads' stacks and malloc arenas count against an RLIMIT_AS until then. */
#define MEM (1ull << 30)

#if defined(__SANITIZE_ADDRESS__)
static const bool asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
static const bool asan = true;
#else
static const bool asan = false;
#endif
#else
static const bool asan = false;
#endif

typedef struct tenant {
  const char *name;
  kc_settings s;
  char dir[4200];
  bool policy_kills_uname; /* what its own policy file says */
  /* seen from outside */
  unsigned long uid, gid;
  unsigned long long as_limit; /* 0 = unlimited */
  bool in_kcage_cgroup;
  kc_status uname_status;
  char uname_syscall[48];
  bool none_refused, none_ran; /* a memory limit in mode none: refused, or ran ok */
  char fail[512];
} tenant;

static pthread_barrier_t both_running, both_checked;

static int failf(tenant *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->fail, sizeof t->fail, fmt, ap);
  va_end(ap);
  return -1;
}

/* "Uid:\treal\teffective..." of /proc/PID/status; the field after the name. */
static unsigned long status_field(pid_t pid, const char *key) {
  char p[64], line[256];
  snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
  FILE *f = fopen(p, "re");
  unsigned long v = (unsigned long)-1;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl))
      v = strtoul(line + kl, NULL, 10);
  if (f)
    fclose(f);
  return v;
}

static unsigned long long as_limit_of(pid_t pid) {
  char p[64], line[256];
  snprintf(p, sizeof p, "/proc/%d/limits", (int)pid);
  FILE *f = fopen(p, "re");
  unsigned long long v = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Max address space", 17))
      v = strtoull(line + 17, NULL, 10); /* "unlimited" reads 0 */
  if (f)
    fclose(f);
  return v;
}

static bool in_kcage_cgroup(pid_t pid) {
  char p[64], line[1024];
  snprintf(p, sizeof p, "/proc/%d/cgroup", (int)pid);
  FILE *f = fopen(p, "re");
  bool yes = false;
  while (f && fgets(line, sizeof line, f))
    yes = yes || strstr(line, "/kcage/") != NULL;
  if (f)
    fclose(f);
  return yes;
}

static int write_policy(tenant *t, kc_error *err) {
  char p[4300];
  snprintf(p, sizeof p, "%s/tenant.policy", t->dir);
  FILE *f = fopen(p, "we");
  if (!f)
    return kc_error_set(err, errno, "%s", p);
  fprintf(f, "include base\ndefault allow\n%s", t->policy_kills_uname ? "kill uname\n" : "");
  return fclose(f) == 0 ? 0 : kc_error_set(err, errno, "%s", p);
}

/* A program that stays until it is killed: alive while the parent looks at it. */
static int hold_one(tenant *t, const kc_policy *pol, kc_sandbox **sb, kc_error *e) {
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  c.policy = pol;
  c.settings = t->s;
  /* Under ASan no RLIMIT_AS can hold a copy of this process (its shadow memory alone
   * is past any): the rlimit tenant's held run goes without one there. */
  c.limits.memory_bytes = asan && t->s.limits_fallback == KC_LIMITS_FALLBACK_RLIMIT ? 0 : MEM;
  c.limits.wall_s = 60;
  char *argv[] = {"/bin/sleep", "60", NULL};
  c.argv = argv;
  return kc_sandbox_spawn(&c, sb, e);
}

/* As root, the sandbox's init leaves the caller's uid once its user namespace is set
 * up (spawn may return before that). */
static void wait_setup(pid_t pid) {
  for (int i = 0; i < 1000 && geteuid() == 0 && status_field(pid, "Uid:") == 0; i++)
    usleep(10000);
}

static int run_tenant(tenant *t) {
  kc_error e = {0};
  kc_policy *pol = NULL;
  if (kc_settings_check(&t->s, &e) < 0 || kc_policy_load_in(&t->s, "tenant", &pol, &e) < 0)
    return failf(t, "%s", e.msg);
  kc_sandbox *sb = NULL;
  int rc = hold_one(t, pol, &sb, &e);
  if (rc < 0)
    failf(t, "spawn: %s", e.msg);
  pthread_barrier_wait(&both_running); /* both sandboxes alive now */
  if (rc == 0) {
    pid_t pid = kc_sandbox_pid(sb);
    wait_setup(pid);
    t->uid = status_field(pid, "Uid:");
    t->gid = status_field(pid, "Gid:");
    t->as_limit = as_limit_of(pid);
    t->in_kcage_cgroup = in_kcage_cgroup(pid);
  }
  pthread_barrier_wait(&both_checked);
  if (rc == 0) {
    kc_sandbox_kill(sb);
    kc_result r;
    if (kc_sandbox_wait(sb, &r, &e) < 0 || r.status != KC_STATUS_SIGNALED)
      rc = failf(t, "held run: %s %s", e.msg, r.message);
    kc_sandbox_free(sb);
  }
  /* The policy from its own directory decides a syscall's fate. */
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  c.policy = pol;
  c.settings = t->s;
  c.limits.wall_s = 60;
  char *argv[] = {"/bin/uname", NULL};
  c.argv = argv;
  kc_result r;
  if (kc_sandbox_run(&c, &r, &e) < 0)
    rc = failf(t, "uname: %s", e.msg);
  t->uname_status = r.status;
  snprintf(t->uname_syscall, sizeof t->uname_syscall, "%s", r.syscall);
  /* Mode none with this tenant's fallback: a memory limit held as an rlimit, or
   * refused. */
  kc_settings none = t->s;
  none.cgroup_mode = KC_CGROUP_NONE;
  c.settings = none;
  c.limits.memory_bytes = MEM;
  char *tr[] = {"/bin/true", NULL};
  c.argv = tr;
  e = (kc_error){0};
  if (kc_sandbox_run(&c, &r, &e) < 0) {
    t->none_refused = e.code == ENOTSUP;
  } else {
    t->none_refused = strstr(r.message, "cannot be enforced") != NULL;
    t->none_ran = r.status == KC_STATUS_OK;
    if (!t->none_ran)
      fprintf(stderr, "%s: mode none: %s: %s\n", t->name, kc_status_name(r.status), r.message);
  }
  kc_policy_free(pol);
  return rc;
}

static void *thread_main(void *arg) {
  tenant *t = arg;
  run_tenant(t);
  return NULL;
}

static int bad;
static void check(bool ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, ok ? "  ok: " : "  FAIL: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  bad |= !ok;
}

static void check_ids(const tenant *t) {
  if (geteuid() != 0) {
    check(t->uid == geteuid(), "%s: as a non-root caller, its own uid", t->name);
    return;
  }
  bool in = t->uid >= t->s.ids_base && t->uid < t->s.ids_base + t->s.ids_count && t->gid == t->uid;
  check(in, "%s: sandbox init runs as host uid/gid %lu/%lu, in its range %" PRIu32 "+%" PRIu32,
        t->name, t->uid, t->gid, t->s.ids_base, t->s.ids_count);
}

int main(int argc, char **argv) {
  const char *scratch = argc > 1 ? argv[1] : getenv("TMPDIR");
  char top[4096];
  snprintf(top, sizeof top, "%s/kcage-tenants.XXXXXX", scratch && *scratch ? scratch : "/tmp");
  if (!mkdtemp(top)) {
    perror("mkdtemp");
    return 1;
  }
  tenant t[2] = {
      {.name = "tenant A",
       .s = {.cgroup_mode = KC_CGROUP_NONE,
             .limits_fallback = KC_LIMITS_FALLBACK_RLIMIT,
             .ids_base = 1600000100,
             .ids_count = 4},
       .policy_kills_uname = true},
      {.name = "tenant B",
       .s = {.cgroup_mode = KC_CGROUP_AUTO,
             .limits_fallback = KC_LIMITS_FALLBACK_NONE,
             .ids_base = 1600000200,
             .ids_count = 4},
       .policy_kills_uname = false},
  };
  kc_error e = {0};
  for (int i = 0; i < 2; i++) {
    snprintf(t[i].dir, sizeof t[i].dir, "%s/%c", top, 'a' + i);
    if (mkdir(t[i].dir, 0700) < 0 || write_policy(&t[i], &e) < 0) {
      fprintf(stderr, "test_tenants: %s: %s\n", t[i].dir, e.msg[0] ? e.msg : strerror(errno));
      return 1;
    }
    t[i].s.policy_dir = t[i].dir;
  }
  /* Tenant B's memory limit needs a cgroup that holds it. */
  const char *how = kc_cgroup_enforcement(&t[1].s, "memory");
  if (!how || strcmp(how, "cgroup")) {
    printf("SKIP: no memory cgroup here for tenant B (%s)\n", how ? how : "refused");
    return 77;
  }
  pthread_barrier_init(&both_running, NULL, 2);
  pthread_barrier_init(&both_checked, NULL, 2);
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&th[i], NULL, thread_main, &t[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);

  for (int i = 0; i < 2; i++)
    check(!t[i].fail[0], "%s ran: %s", t[i].name, t[i].fail[0] ? t[i].fail : "yes");
  for (int i = 0; i < 2; i++)
    check_ids(&t[i]);
  check((t[0].as_limit == MEM || asan) && !t[0].in_kcage_cgroup,
        "tenant A (mode none, rlimit fallback): memory as RLIMIT_AS %llu, no kcage cgroup",
        t[0].as_limit);
  check(t[1].as_limit == 0 && t[1].in_kcage_cgroup,
        "tenant B (mode auto): memory in a kcage cgroup, no RLIMIT_AS (%llu)", t[1].as_limit);
  check(t[0].uname_status == KC_STATUS_SYSCALL && !strcmp(t[0].uname_syscall, "uname"),
        "tenant A: its own policy kills uname (%s %s)", kc_status_name(t[0].uname_status),
        t[0].uname_syscall);
  check(t[1].uname_status == KC_STATUS_OK, "tenant B: its own policy allows uname (%s)",
        kc_status_name(t[1].uname_status));
  /* Under ASan the shadow memory alone is past any RLIMIT_AS: the fallback is taken
   * (not refused) but the sandbox cannot start under it. */
  check(!t[0].none_refused && (t[0].none_ran || asan),
        "tenant A: mode none + memory limit held as an rlimit, not refused");
  check(t[1].none_refused, "tenant B: mode none + memory limit refused, its fallback is none");
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
  if (system(cmd) != 0)
    fprintf(stderr, "test_tenants: could not remove %s\n", top);
  printf(bad ? "test_tenants: FAIL\n" : "test_tenants: ok\n");
  return bad ? 1 : 0;
}
