/* `kcage run` end to end: exit statuses, records, options (real sandboxes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>

#include "kc_run_helper.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"

#define RUN(o, ...)                                                                                \
  do {                                                                                             \
    const char *a_[] = {__VA_ARGS__, NULL};                                                        \
    assert_int_equal(kc_test_run(a_, (o)), 0);                                                     \
  } while (0)

static void check_clean(const kc_run_out *o) {
  assert_true(kc_test_no_cgroup_left(o->kcage_pid));
  assert_true(kc_test_no_stray_mount());
}

static void done(kc_run_out *o) {
  check_clean(o);
  json_decref(o->report);
}

static void test_true_ok(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--", "/bin/true");
  assert_int_equal(o.exit_status, 0);
  assert_string_equal(kc_test_str(&o, "status"), "ok");
  assert_int_equal(kc_test_int(&o, "exit_code"), 0);
  assert_true(json_is_null(json_object_get(o.report, "signal")));
  assert_true(json_is_real(json_object_get(o.report, "wall_s")));
  done(&o);
}

static void test_exit_3(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--", "sh", "-c", "exit 3");
  assert_int_equal(o.exit_status, 3);
  assert_string_equal(kc_test_str(&o, "status"), "exited");
  assert_int_equal(kc_test_int(&o, "exit_code"), 3);
  done(&o);
}

static void test_signaled(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--", "sh", "-c", "kill -SEGV $$");
  assert_int_equal(o.exit_status, 128 + 11);
  assert_string_equal(kc_test_str(&o, "status"), "signaled");
  assert_int_equal(kc_test_int(&o, "signal"), 11);
  assert_string_equal(kc_test_str(&o, "signal_name"), "SIGSEGV");
  done(&o);
}

static void test_not_found_127(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--", "/no/such/program");
  assert_int_equal(o.exit_status, 127);
  assert_string_equal(kc_test_str(&o, "status"), "setup_error");
  assert_non_null(kc_test_str(&o, "message"));
  done(&o);
  RUN(&o, "--", "no-such-program-in-path");
  assert_int_equal(o.exit_status, 127);
  done(&o);
}

static void test_not_executable_126(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--", "/usr/lib/os-release"); /* a regular file without x bits, bound in */
  assert_int_equal(o.exit_status, 126);
  assert_string_equal(kc_test_str(&o, "status"), "setup_error");
  done(&o);
  RUN(&o, "--", "/usr"); /* a directory */
  assert_int_equal(o.exit_status, 126);
  done(&o);
}

/* Bad usage is a failure of kcage, not of the program: 125 with one line. */
static void test_bad_usage_125(void **s) {
  (void)s;
  kc_run_out o;
  const char *cases[][4] = {
      {"--memory", "lots", "--", "/bin/true"},    {"--wall", "-1", "--", "/bin/true"},
      {"--pids", "0", "--", "/bin/true"},         {"--no-such-option", "--", "/bin/true", NULL},
      {"--tmpfs", "relative", "--", "/bin/true"}, {"--", NULL, NULL, NULL}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(kc_test_run(cases[i], &o), 0);
    /* 125, not 2: a program's own exit status 2 must stay distinguishable */
    assert_int_equal(o.exit_status, 125);
    json_decref(o.report);
  }
  RUN(&o, "--policy", "/no/such.policy", "--", "/bin/true");
  assert_int_equal(o.exit_status, 125);
  json_decref(o.report);
}

static void test_help(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--help");
  assert_int_equal(o.exit_status, 0);
  assert_non_null(strstr(o.out, "--report FILE"));
  json_decref(o.report);
}

static void test_output_env_cwd(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--env", "KC_X=hello", "--cwd", "/tmp", "--", "sh", "-c", "echo $KC_X; pwd; id -u");
  assert_int_equal(o.exit_status, 0);
  assert_string_equal(o.out, "hello\n/tmp\n0\n");
  done(&o);
}

/* Inside uid 0 is a host id of the sandbox's own, never host root. */
static void test_uid_map(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--", "cat", "/proc/self/uid_map");
  assert_int_equal(o.exit_status, 0);
  unsigned in, host, count;
  assert_int_equal(sscanf(o.out, "%u %u %u", &in, &host, &count), 3);
  assert_int_equal(in, 0);
  assert_int_not_equal(host, 0);
  assert_int_equal(count, 1);
  done(&o);
}

static void test_binds_and_tmpfs(void **s) {
  (void)s;
  char dir[] = "/tmp/kc-test-bind-XXXXXX";
  assert_non_null(mkdtemp(dir));
  chmod(dir, 0777);
  char file[128], spec_ro[160], spec_rw[160];
  snprintf(file, sizeof file, "%s/in.txt", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fputs("from-host\n", f);
  fclose(f);
  snprintf(spec_ro, sizeof spec_ro, "%s:/data", dir);
  kc_run_out o;
  RUN(&o, "--ro-bind", spec_ro, "--tmpfs", "/scratch:1M", "--", "sh", "-c",
      "cat /data/in.txt; echo x > /data/new 2>/dev/null && echo WROTE; "
      "echo y > /scratch/ok && cat /scratch/ok");
  assert_int_equal(o.exit_status, 0);
  assert_string_equal(o.out, "from-host\ny\n");
  done(&o);
  snprintf(spec_rw, sizeof spec_rw, "%s:/data", dir);
  RUN(&o, "--bind", spec_rw, "--", "sh", "-c", "echo out > /data/out.txt");
  assert_int_equal(o.exit_status, 0);
  done(&o);
  char out[128];
  snprintf(out, sizeof out, "%s/out.txt", dir);
  struct stat st;
  assert_int_equal(stat(out, &st), 0);
  assert_int_not_equal(st.st_uid, 0); /* written as host nobody */
  unlink(out);
  unlink(file);
  rmdir(dir);
}

/* Setup failures come back as setup_error with a message and exit 125: one found by
 * the parent (a missing bind source), one inside the child (a missing --cwd). */
static void test_setup_errors(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--ro-bind", "/no/such/dir:/x", "--", "/bin/true");
  assert_int_equal(o.exit_status, 125);
  assert_string_equal(kc_test_str(&o, "status"), "setup_error");
  assert_non_null(strstr(kc_test_str(&o, "message"), "/no/such/dir"));
  done(&o);
  RUN(&o, "--cwd", "/no/such/dir", "--", "/bin/true");
  assert_int_equal(o.exit_status, 125);
  assert_string_equal(kc_test_str(&o, "status"), "setup_error");
  assert_non_null(strstr(kc_test_str(&o, "message"), "chdir"));
  done(&o);
}

/* netns_fd: the sandbox joins the given network namespace instead of a fresh one. */
static void test_join_netns(void **s) {
  (void)s;
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t holder = fork();
  assert_true(holder >= 0);
  if (holder == 0) {
    if (unshare(CLONE_NEWNET) < 0)
      _exit(1);
    if (write(ready[1], "r", 1) != 1)
      _exit(1);
    pause();
    _exit(0);
  }
  char b;
  assert_int_equal(read(ready[0], &b, 1), 1);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", (int)holder);
  int nsfd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(nsfd >= 0);
  struct stat want;
  assert_int_equal(fstat(nsfd, &want), 0);

  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("exec", &p, &err), 0);
  int out[2];
  assert_int_equal(pipe(out), 0);
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  char *argv[] = {"readlink", "/proc/self/ns/net", NULL};
  c.policy = p;
  c.argv = argv;
  c.netns_fd = nsfd;
  c.stdout_fd = out[1];
  kc_result r;
  assert_int_equal(kc_sandbox_run(&c, &r, &err), 0);
  close(out[1]);
  char buf[128] = {0};
  assert_true(read(out[0], buf, sizeof buf - 1) > 0);
  close(out[0]);
  assert_int_equal(r.status, KC_STATUS_OK);
  char expect[64];
  snprintf(expect, sizeof expect, "net:[%lu]\n", (unsigned long)want.st_ino);
  assert_string_equal(buf, expect);
  /* and our own netns is unchanged */
  struct stat self;
  assert_int_equal(stat("/proc/self/ns/net", &self), 0);
  assert_int_not_equal(self.st_ino, want.st_ino);
  kc_policy_free(p);
  close(nsfd);
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  close(ready[0]);
  close(ready[1]);
}

/* --cpus: a spinning program gets about that share of one CPU (cpu_s from the cgroup). */
static void test_cpus_bandwidth(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--cpus", "0.2", "--wall", "1", "--", "sh", "-c", "while :; do :; done");
  assert_int_equal(o.exit_status, 124);
  assert_string_equal(kc_test_str(&o, "limit"), "wall");
  json_t *cpu = json_object_get(o.report, "cpu_s");
  assert_true(json_is_number(cpu));
  assert_true(json_number_value(cpu) > 0.05 && json_number_value(cpu) < 0.5);
  done(&o);
}

/* RLIMIT_CPU only with --time: a run with other limits keeps unlimited CPU time (a
 * backstop of 1 s once cut every longer program with SIGXCPU). */
static void test_rlimit_cpu_only_with_time(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--memory", "64M", "--", "sh", "-c", "grep 'Max cpu time' /proc/self/limits");
  assert_int_equal(o.exit_status, 0);
  assert_non_null(strstr(o.out, "unlimited"));
  done(&o);
  RUN(&o, "--time", "2.5", "--", "sh", "-c", "grep 'Max cpu time' /proc/self/limits");
  assert_int_equal(o.exit_status, 0);
  assert_null(strstr(o.out, "unlimited"));
  done(&o);
}

/* Without cgroups (--cgroup none) --time falls back to RLIMIT_CPU: SIGXCPU reaches the
 * program (not PID 1 of its namespace: our init is), and the verdict is still
 * timeout/cpu.  A limit only a cgroup holds is refused there, with one line, never
 * dropped; so is a mode that does not exist. */
static void test_time_without_cgroup(void **s) {
  (void)s;
  kc_run_out o;
  RUN(&o, "--cgroup", "none", "--memory", "64M", "--", "/bin/true");
  assert_int_equal(o.exit_status, 125);
  assert_non_null(strstr(o.err, "memory limit cannot be enforced"));
  assert_non_null(strstr(o.err, "cgroups are off"));
  json_decref(o.report);
  RUN(&o, "--cgroup", "v9", "--", "/bin/true");
  assert_int_equal(o.exit_status, 125);
  assert_non_null(strstr(o.err, "want auto, v1, v2, hybrid or none"));
  json_decref(o.report);
  RUN(&o, "--cgroup", "none", "--time", "0.2", "--wall", "20", "--", "sh", "-c",
      "while :; do :; done");
  assert_int_equal(o.exit_status, 124);
  assert_string_equal(kc_test_str(&o, "status"), "timeout");
  assert_string_equal(kc_test_str(&o, "limit"), "cpu");
  assert_int_equal(kc_test_int(&o, "signal"), 24); /* SIGXCPU */
  done(&o);
}

/* SIGTERM to kcage: the tree is killed, the cgroup removed, the record says so and
 * kcage exits as terminated by that signal. */
static void test_cancel(void **s) {
  (void)s;
  char report[] = "/tmp/kc-test-cancel-XXXXXX";
  int rfd = mkstemp(report);
  assert_true(rfd >= 0);
  close(rfd);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int dn = open("/dev/null", O_RDWR);
    dup2(dn, 0);
    dup2(dn, 1);
    execl(KC_KCAGE_BIN, KC_KCAGE_BIN, "run", "--memory", "256M", "--report", report, "--", "sh",
          "-c", "sleep 30", "kc-cancel-marker-30", (char *)NULL);
    _exit(99);
  }
  usleep(300 * 1000);
  kill(pid, SIGTERM);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
  json_error_t je;
  json_t *r = json_load_file(report, 0, &je);
  unlink(report);
  assert_non_null(r);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "signaled");
  json_decref(r);
  assert_true(kc_test_no_cgroup_left(pid));
  assert_true(kc_test_no_process_with("kc-cancel-marker-30"));
}

/* The library API directly. */
static void test_api(void **s) {
  (void)s;
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("exec", &p, &err), 0);
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  char *argv[] = {"sh", "-c", "exit 7", NULL};
  c.policy = p;
  c.argv = argv;
  kc_result r;
  assert_int_equal(kc_sandbox_run(&c, &r, &err), 0);
  assert_int_equal(r.status, KC_STATUS_EXITED);
  assert_int_equal(r.exit_code, 7);
  assert_int_equal(kc_result_exit_status(&r), 7);
  char *json = NULL;
  assert_int_equal(kc_result_to_json(&r, &json, &err), 0);
  assert_non_null(strstr(json, "\"status\":\"exited\""));
  free(json);
  kc_policy_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_true_ok),
      cmocka_unit_test(test_exit_3),
      cmocka_unit_test(test_signaled),
      cmocka_unit_test(test_not_found_127),
      cmocka_unit_test(test_not_executable_126),
      cmocka_unit_test(test_bad_usage_125),
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_output_env_cwd),
      cmocka_unit_test(test_uid_map),
      cmocka_unit_test(test_binds_and_tmpfs),
      cmocka_unit_test(test_api),
      cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_setup_errors),
      cmocka_unit_test(test_join_netns),
      cmocka_unit_test(test_cpus_bandwidth),
      cmocka_unit_test(test_rlimit_cpu_only_with_time),
      cmocka_unit_test(test_time_without_cgroup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
