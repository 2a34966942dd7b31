/* A sandbox started ahead of its wait (a TVM session's standby): its program's
 * sysinfo(2) goes to the supervisor, which answers it while it idles over the sandbox
 * (kc_sandbox_idle), before any wait: the program finishes, with the sandbox's figures
 * (no load, all memory free, one process), not the host's, and a forbidden call made
 * meanwhile is kept for the wait, whose verdict names it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cmocka.h>

#include "kcage/policy.h"
#include "kcage/sandbox.h"
#include "kcage/sandbox_parts.h"

#define PY "/usr/bin/python3"

/* The program under `exec`, started ahead; its stdout in *out (a memfd). */
static kc_sandbox *ahead(const char *code, kc_policy **pol, int *out) {
  kc_error e = {0};
  if (kc_policy_load("exec", pol, &e) < 0)
    fail_msg("policy: %s", e.msg);
  *out = memfd_create("ahead-out", MFD_CLOEXEC);
  assert_true(*out >= 0);
  char *argv[] = {PY, "-I", "-c", (char *)code, NULL};
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  c.policy = *pol;
  c.argv = argv;
  c.stdout_fd = *out;
  c.limits.wall_s = 60;
  kc_sandbox *sb = NULL;
  if (kc_sandbox_spawn_ahead(&c, &sb, &e) < 0)
    fail_msg("spawn ahead: %s", e.msg);
  return sb;
}

/* Idle over sb until it ends or 30 s pass (a timerfd as the idle's own fd). */
static int idle_until_end(kc_sandbox *sb) {
  int t = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  struct itimerspec in30 = {.it_value = {30, 0}};
  assert_true(t >= 0 && timerfd_settime(t, 0, &in30, NULL) == 0);
  kc_error e = {0};
  int rc = kc_sandbox_idle(sb, t, &e);
  close(t);
  return rc;
}

static void test_sysinfo_answered_ahead(void **state) {
  (void)state;
  if (access(PY, X_OK) != 0)
    skip();
  kc_policy *pol;
  int out;
  kc_sandbox *sb = ahead("import ctypes\n"
                         "b=(ctypes.c_ulong*64)()\n"
                         "r=ctypes.CDLL(None).sysinfo(b)\n"
                         "print(r,b[1],b[2],b[3],int(b[4]==b[5]>0),b[10]&0xffff)\n",
                         &pol, &out);
  assert_int_equal(idle_until_end(sb), 0);
  /* it ended while idle: nothing held it in sysinfo until a wait */
  assert_int_equal(kc_sandbox_idle(sb, -1, &(kc_error){0}), 0);
  kc_result r;
  kc_error e = {0};
  assert_int_equal(kc_sandbox_wait(sb, &r, &e), 0);
  char buf[128] = "";
  ssize_t n = pread(out, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = 0;
  print_message("ahead: %s: %s", kc_status_name(r.status), buf);
  assert_int_equal(r.status, KC_STATUS_OK);
  assert_string_equal(buf, "0 0 0 0 1 1\n");
  kc_sandbox_free(sb);
  kc_policy_free(pol);
  close(out);
}

static void test_violation_kept_for_the_wait(void **state) {
  (void)state;
  if (access(PY, X_OK) != 0)
    skip();
  kc_policy *pol;
  int out;
  kc_sandbox *sb = ahead("import ctypes\n"
                         "b=(ctypes.c_ulong*64)()\n"
                         "ctypes.CDLL(None).sysinfo(b)\n"
                         "ctypes.CDLL(None).umount2(b'/tmp',0)\n",
                         &pol, &out);
  assert_int_equal(idle_until_end(sb), 1);
  kc_result r;
  kc_error e = {0};
  assert_int_equal(kc_sandbox_wait(sb, &r, &e), 0);
  print_message("ahead violation: %s %s\n", kc_status_name(r.status), r.syscall);
  assert_int_equal(r.status, KC_STATUS_SYSCALL);
  assert_string_equal(r.syscall, "umount2");
  kc_sandbox_free(sb);
  kc_policy_free(pol);
  close(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sysinfo_answered_ahead),
      cmocka_unit_test(test_violation_kept_for_the_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
