/* cgroup layer on this host, with real processes: the shared limit cases in the
 * detected mode (hybrid here), again in forced pure v1 (freezer kill, cpuacct), and
 * the "none" fallback. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cgroup_cases.h"
#include "cgroup_internal.h"
#include "kcage/cgroup.h"

static void run_case(void **state) {
  const kc_cgt_case *c = *state;
  char msg[512] = "";
  int rc = c->fn(msg, sizeof msg);
  if (rc != 0)
    fail_msg("%s [%s]: %s", c->name, kc_cgroup_mode_name(kc_cgroup_mode_for(&kc_cgt_settings)),
             msg);
  if (msg[0])
    print_message("  %s [%s]: %s\n", c->name,
                  kc_cgroup_mode_name(kc_cgroup_mode_for(&kc_cgt_settings)), msg);
}

static bool exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* This host (and CI): v1 controllers + a controller-less cgroup2 at .../unified. */
static void test_detect(void **state) {
  (void)state;
  kc_cgroup_mode m = kc_cgroup_detect();
  if (getuid() != 0) {
    skip();
  }
  if (exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") &&
      exists("/sys/fs/cgroup/unified/cgroup.procs"))
    assert_int_equal(m, KC_CGROUP_HYBRID);
  else if (exists("/sys/fs/cgroup/cgroup.controllers"))
    assert_int_equal(m, KC_CGROUP_V2);
  assert_string_equal(kc_cgroup_mode_name(KC_CGROUP_HYBRID), "hybrid");
  const kc_cgroup_host *h = kc_cgroup_host_get();
  if (m == KC_CGROUP_HYBRID) {
    assert_true(h->have_v2);
    assert_true(h->v1_ctrl & KC_CG_MEMORY);
    assert_true(h->v1_ctrl & KC_CG_PIDS);
    assert_true(h->v1_ctrl & KC_CG_CPU);
  }
}

static void test_bad_name(void **state) {
  (void)state;
  kc_error err = {0};
  kc_cgroup *cg = (kc_cgroup *)1;
  assert_int_equal(kc_cgroup_create("../x", NULL, &kc_cgt_settings, &cg, &err), -1);
  assert_int_equal(err.code, EINVAL);
  assert_null(cg);
  assert_int_equal(kc_cgroup_create("", NULL, &kc_cgt_settings, &cg, &err), -1);
}

/* v2 fd placement: a clone3(CLONE_INTO_CGROUP)-able directory fd on v2/hybrid. */
static void test_v2_fd(void **state) {
  (void)state;
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  assert_int_equal(kc_cgroup_create("t-fd", NULL, &kc_cgt_settings, &cg, &err), 0);
  kc_cgroup_mode m = kc_cgroup_mode_of(cg);
  if (m == KC_CGROUP_V2 || m == KC_CGROUP_HYBRID) {
    int fd = kc_cgroup_v2_fd(cg);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstatat(fd, "cgroup.procs", &st, 0), 0);
  } else {
    assert_int_equal(kc_cgroup_v2_fd(cg), -1);
  }
  kc_cgroup_destroy(cg);
}

static int force_v1(void **state) {
  (void)state;
  kc_error err = {0};
  if (kc_cgroup_detect() == KC_CGROUP_V1)
    return 0;
  kc_cgt_settings.cgroup_mode = KC_CGROUP_V1;
  if (kc_cgroup_detect() != KC_CGROUP_HYBRID || kc_settings_check(&kc_cgt_settings, &err) < 0) {
    print_message("pure v1 not available here: %s\n", err.msg);
    kc_cgt_settings.cgroup_mode = KC_CGROUP_AUTO;
    return -1;
  }
  return 0;
}

static kc_cgroup_mode auto_mode;
static int restore_mode(void **state) {
  (void)state;
  kc_cgt_settings.cgroup_mode = KC_CGROUP_AUTO;
  return 0;
}

static int force_none(void **state) {
  (void)state;
  kc_cgt_settings.cgroup_mode = KC_CGROUP_NONE;
  return 0;
}

/* "none": no limits, but a kill still takes the attached process and its group. */
static void test_none(void **state) {
  (void)state;
  kc_error err = {0};
  kc_cgroup *cg = NULL;
  assert_int_equal(kc_cgroup_mode_for(&kc_cgt_settings), KC_CGROUP_NONE);
  kc_cgroup_limits lim = {.memory_bytes = 1 << 20};
  assert_int_equal(kc_cgroup_create("t-none", &lim, &kc_cgt_settings, &cg, &err), -1);
  assert_int_equal(err.code, ENOTSUP);
  assert_int_equal(kc_cgroup_create("t-none", NULL, &kc_cgt_settings, &cg, &err), 0);
  assert_int_equal(kc_cgroup_v2_fd(cg), -1);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    if (fork() == 0) {
      pause();
      _exit(0);
    }
    pause();
    _exit(0);
  }
  setpgid(pid, pid);
  assert_int_equal(kc_cgroup_attach(cg, pid, &err), 0);
  kc_cgroup_counters c;
  assert_int_equal(kc_cgroup_read(cg, &c, &err), 0);
  assert_int_equal(c.oom_kills, -1);
  assert_int_equal(c.cpu_usec, -1);
  assert_int_equal(kc_cgroup_kill(cg, &err), 0);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  kc_cgroup_destroy(cg);
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
}

#define MAXT 16
static struct CMUnitTest cases_tests[MAXT];

static size_t case_tests(void) {
  size_t k = 0;
  for (const kc_cgt_case *c = kc_cgt_cases; c->name && k < MAXT; c++, k++)
    cases_tests[k] = (struct CMUnitTest){c->name, run_case, NULL, NULL, (void *)c};
  return k;
}

int main(void) {
  kc_cgt_init();
  if (getuid() != 0) {
    fprintf(stderr, "cgroup tests need root\n");
    return 77;
  }
  auto_mode = kc_cgroup_detect();
  int fails = 0;
  const struct CMUnitTest basic[] = {
      cmocka_unit_test(test_detect),
      cmocka_unit_test(test_bad_name),
      cmocka_unit_test(test_v2_fd),
  };
  fails += cmocka_run_group_tests_name("cgroup_basic", basic, NULL, NULL);
  size_t k = case_tests();
  fails += _cmocka_run_group_tests("cgroup_cases_auto", cases_tests, k, NULL, NULL);
  if (auto_mode == KC_CGROUP_HYBRID)
    fails +=
        _cmocka_run_group_tests("cgroup_cases_forced_v1", cases_tests, k, force_v1, restore_mode);
  const struct CMUnitTest none[] = {cmocka_unit_test(test_none)};
  fails += cmocka_run_group_tests_name("cgroup_none", none, force_none, restore_mode);
  return fails ? 1 : 0;
}
