/* `kcage run` as root against the host: bind sources only root can reach, and the
 * sandbox's own host identity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "kcage/cgroup.h"
#include "kcage/sandbox.h"

#include "kc_run_helper.h"

#define RUN(o, ...)                                                                                \
  do {                                                                                             \
    const char *a_[] = {__VA_ARGS__, NULL};                                                        \
    assert_int_equal(kc_test_run(a_, (o)), 0);                                                     \
  } while (0)

static void put(const char *dir, const char *name, const char *text, mode_t mode) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(p, mode), 0);
}

/* A source inside a 0700 directory binds (the parent opens it), and inside the files'
 * own modes still rule: a 0600 root file stays unreadable, a root 0755 directory
 * unwritable, a 0777 one writable. */
static void test_bind_root_only_path(void **s) {
  (void)s;
  if (geteuid() != 0)
    skip();
  char top[] = "/tmp/kc-test-private-XXXXXX";
  assert_non_null(mkdtemp(top)); /* 0700: only root gets through */
  char data[128], open_dir[160], spec_ro[200], spec_rw[200];
  snprintf(data, sizeof data, "%s/data", top);
  assert_int_equal(mkdir(data, 0755), 0);
  put(data, "public", "visible\n", 0644);
  put(data, "secret", "hidden\n", 0600);
  snprintf(open_dir, sizeof open_dir, "%s/open", data);
  assert_int_equal(mkdir(open_dir, 0777), 0);
  assert_int_equal(chmod(open_dir, 0777), 0);
  snprintf(spec_ro, sizeof spec_ro, "%s:/data", data);
  kc_run_out o;
  RUN(&o, "--ro-bind", spec_ro, "--", "sh", "-c",
      "cat /data/public; cat /data/secret 2>/dev/null && echo LEAK; "
      "{ echo x > /data/open/x; } 2>/dev/null && echo WROTE-RO; echo done");
  if (o.exit_status != 0)
    fail_msg("exit %d: %s", o.exit_status,
             kc_test_str(&o, "message") ? kc_test_str(&o, "message") : "");
  assert_string_equal(o.out, "visible\ndone\n");
  json_decref(o.report);
  snprintf(spec_rw, sizeof spec_rw, "%s:/data", data);
  RUN(&o, "--bind", spec_rw, "--", "sh", "-c",
      "{ echo x > /data/new; } 2>/dev/null && echo WROTE-ROOT-DIR; echo y > /data/open/y && echo "
      "ok");
  assert_int_equal(o.exit_status, 0);
  assert_string_equal(o.out, "ok\n");
  json_decref(o.report);
  assert_true(kc_test_no_stray_mount());
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
  assert_int_equal(system(cmd), 0);
}

/* The host uid of a uid_map line "0 HOST 1". */
static unsigned long map_host(const char *text) {
  unsigned long in, host, n;
  if (!text || sscanf(text, "%lu %lu %lu", &in, &host, &n) != 3)
    return 0;
  return host;
}

/* A host pid whose real uid is UID, or -1. */
static pid_t pid_of_uid(unsigned long uid) {
  DIR *d = opendir("/proc");
  assert_non_null(d);
  struct dirent *e;
  pid_t found = -1;
  while (found < 0 && (e = readdir(d))) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    char p[300], line[256];
    snprintf(p, sizeof p, "/proc/%s/status", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f)
      continue;
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "Uid:", 4) && strtoul(line + 4, NULL, 10) == uid)
        found = atoi(e->d_name);
    fclose(f);
  }
  closedir(d);
  return found;
}

/* Two sandboxes alive at once run as different host ids, neither nobody: one cannot
 * read the other's private file through a shared bind, and a process with one's id
 * cannot signal the other's program. */
static void test_distinct_ids(void **s) {
  (void)s;
  if (geteuid() != 0)
    skip();
  char dir[] = "/tmp/kc-test-ids-XXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 0777), 0);
  char spec[128], amap[160];
  snprintf(spec, sizeof spec, "%s:/s", dir);
  snprintf(amap, sizeof amap, "%s/a.map", dir);
  pid_t a = fork();
  assert_true(a >= 0);
  if (a == 0) {
    int dn = open("/dev/null", O_RDWR);
    dup2(dn, 0);
    dup2(dn, 1);
    execl(KC_KCAGE_BIN, KC_KCAGE_BIN, "run", "--wall", "30", "--bind", spec, "--", "sh", "-c",
          "umask 077; echo private > /s/a.txt; cat /proc/self/uid_map > /s/a.tmp; "
          "mv /s/a.tmp /s/a.map; sleep 20",
          (char *)NULL);
    _exit(99);
  }
  char text[128] = "";
  for (int i = 0; i < 3000 && !text[0]; i++) { /* up to 30 s on a loaded machine */
    FILE *f = fopen(amap, "r");
    if (f) {
      if (!fgets(text, sizeof text, f))
        text[0] = 0;
      fclose(f);
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  unsigned long ua = map_host(text);
  assert_true(ua != 0 && ua != 65534);
  pid_t prog_a = pid_of_uid(ua);
  assert_true(prog_a > 0);

  kc_run_out o;
  RUN(&o, "--bind", spec, "--", "sh", "-c",
      "cat /proc/self/uid_map; cat /s/a.txt 2>/dev/null || echo DENIED");
  assert_int_equal(o.exit_status, 0);
  unsigned long ub = map_host(o.out);
  assert_true(ub != 0 && ub != 65534);
  assert_true(ub != ua);
  assert_non_null(strstr(o.out, "DENIED"));
  assert_null(strstr(o.out, "private"));
  json_decref(o.report);

  /* A process holding B's id (the worst a host process of that id could do). */
  pid_t c = fork();
  assert_true(c >= 0);
  if (c == 0) {
    if (setresgid((gid_t)ub, (gid_t)ub, (gid_t)ub) < 0 ||
        setresuid((uid_t)ub, (uid_t)ub, (uid_t)ub) < 0)
      _exit(2);
    _exit(kill(prog_a, SIGTERM) < 0 && errno == EPERM ? 0 : 1);
  }
  int st;
  assert_int_equal(waitpid(c, &st, 0), c);
  kill(a, SIGTERM);
  waitpid(a, NULL, 0);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* A range that an account uses is refused with the entry named, before anything runs. */
static void test_id_range_check(void **s) {
  (void)s;
  char pw[] = "/tmp/kc-test-passwd-XXXXXX", gr[] = "/tmp/kc-test-group-XXXXXX";
  int fd = mkstemp(pw);
  assert_true(fd >= 0);
  dprintf(fd, "root:x:0:0::/root:/bin/sh\nsvc:x:700005:700005::/:/bin/false\n"
              "nopw::700100:1::/:/bin/sh\n");
  close(fd);
  fd = mkstemp(gr);
  assert_true(fd >= 0);
  dprintf(fd, "root:x:0:\ngrp:x:800003:\n");
  close(fd);
  kc_error err = {0};
  assert_int_equal(kc_sandbox_ids_check(700000, 10, pw, gr, "/nonexistent", "/nonexistent", &err),
                   -1);
  assert_non_null(strstr(err.msg, "svc"));
  assert_int_equal(kc_sandbox_ids_check(800000, 4, pw, gr, "/nonexistent", "/nonexistent", &err),
                   -1);
  assert_non_null(strstr(err.msg, "grp"));
  assert_int_equal(kc_sandbox_ids_check(700100, 1, pw, gr, "/nonexistent", "/nonexistent", &err),
                   -1);
  assert_non_null(strstr(err.msg, "nopw")); /* an empty password field is still a field */
  assert_int_equal(kc_sandbox_ids_check(900000, 100, pw, gr, "/nonexistent", "/nonexistent", &err),
                   0);
  assert_int_equal(kc_sandbox_ids_check(65530, 10, pw, gr, "/nonexistent", "/nonexistent", &err),
                   -1);
  char sub[] = "/tmp/kc-test-subuid-XXXXXX";
  fd = mkstemp(sub);
  assert_true(fd >= 0);
  dprintf(fd, "builder:600000:65536\n");
  close(fd);
  assert_int_equal(kc_sandbox_ids_check(650000, 10, pw, gr, sub, "/nonexistent", &err), -1);
  assert_non_null(strstr(err.msg, "builder"));
  unlink(sub);
  unlink(pw);
  unlink(gr);

  /* End to end: a range over a real account of this host. */
  if (geteuid() != 0)
    skip();
  FILE *f = fopen("/etc/passwd", "r");
  if (!f)
    skip();
  char line[512], name[128] = "";
  unsigned long uid = 0;
  while (!name[0] && fgets(line, sizeof line, f))
    if (sscanf(line, "%127[^:]:%*[^:]:%lu", name, &uid) != 2 || uid == 0 || uid == 65534)
      name[0] = 0;
  fclose(f);
  if (!name[0])
    skip();
  char range[64];
  snprintf(range, sizeof range, "%lu:4", uid);
  kc_run_out o;
  RUN(&o, "--sandbox-ids", range, "--", "/bin/true");
  assert_int_equal(o.exit_status, 125);
  assert_non_null(strstr(o.err, name));
  assert_non_null(strstr(o.err, "--sandbox-ids"));
  json_decref(o.report);
}

/* The variables that once moved the sandbox ids and the cgroup mode reach nothing: with
 * them set, kcage run still runs the program as an id of the default range and holds
 * --memory by a cgroup; only the caller's own --sandbox-ids moves the ids. */
static void test_env_cannot_weaken(void **s) {
  (void)s;
  if (geteuid() != 0)
    skip();
  setenv("KCAGE_SANDBOX_IDS", "1600000000:4", 1);
  setenv("KCAGE_CGROUP", "none", 1);
  kc_run_out o;
  RUN(&o, "--memory", "64M", "--limits-fallback", "rlimit", "--", "cat", "/proc/self/uid_map");
  unsetenv("KCAGE_SANDBOX_IDS");
  unsetenv("KCAGE_CGROUP");
  assert_int_equal(o.exit_status, 0);
  unsigned long id = map_host(o.out);
  assert_true(id >= KC_SANDBOX_IDS_BASE && id < KC_SANDBOX_IDS_BASE + KC_SANDBOX_IDS_COUNT);
  json_t *lim = json_object_get(o.report, "limits");
  const char *how = json_string_value(json_object_get(lim, "memory"));
  if (kc_cgroup_enforcement(NULL, "memory") &&
      !strcmp(kc_cgroup_enforcement(NULL, "memory"), "cgroup"))
    assert_string_equal(how ? how : "null", "cgroup");
  json_decref(o.report);
  /* The caller's option does move them, to ids of that range. */
  RUN(&o, "--sandbox-ids", "1600000000:4", "--", "cat", "/proc/self/uid_map");
  assert_int_equal(o.exit_status, 0);
  id = map_host(o.out);
  assert_true(id >= 1600000000ul && id < 1600000004ul);
  json_decref(o.report);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bind_root_only_path),
      cmocka_unit_test(test_distinct_ids),
      cmocka_unit_test(test_id_range_check),
      cmocka_unit_test(test_env_cannot_weaken),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
