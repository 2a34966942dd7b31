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

/* python3 -c code under `exec`, started ahead and idled over until it ends or 30 s
 * pass (a timerfd as the idle's own fd), then waited for: the idle's answer, the
 * verdict in *r and its stdout in out. */
static int run_ahead(const char *code, kc_result *r, char *out, size_t cap) {
  kc_error e = {0};
  kc_policy *pol = NULL;
  if (kc_policy_load("exec", &pol, &e) < 0)
    fail_msg("policy: %s", e.msg);
  int fd = memfd_create("ahead-out", MFD_CLOEXEC);
  int t = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  struct itimerspec in30 = {.it_value = {30, 0}};
  assert_true(fd >= 0 && t >= 0 && timerfd_settime(t, 0, &in30, NULL) == 0);
  char *argv[] = {PY, "-I", "-c", (char *)code, NULL};
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  c.policy = pol;
  c.argv = argv;
  c.stdout_fd = fd;
  c.limits.wall_s = 60;
  kc_sandbox *sb = NULL;
  if (kc_sandbox_spawn_ahead(&c, &sb, &e) < 0)
    fail_msg("spawn ahead: %s", e.msg);
  int idle = kc_sandbox_idle(sb, t, &e);
  /* ended while idle, or a violation kept: the idle says so again at once */
  assert_int_equal(kc_sandbox_idle(sb, -1, &e), idle);
  assert_int_equal(kc_sandbox_wait(sb, r, &e), 0);
  ssize_t n = pread(fd, out, cap - 1, 0);
  out[n > 0 ? n : 0] = 0;
  print_message("ahead: idle %d, %s %s: %s\n", idle, kc_status_name(r->status), r->syscall, out);
  kc_sandbox_free(sb);
  kc_policy_free(pol);
  close(t);
  close(fd);
  return idle;
}

/* sysinfo answered while idle: the program ends before any wait (0); a forbidden call
 * made while idle is kept (1) and named by the wait. */
static void test_ahead(void **state) {
  (void)state;
  if (access(PY, X_OK) != 0)
    skip();
  static const struct {
    const char *code;
    int idle;
    kc_status status;
    const char *out, *syscall;
  } cases[] = {
      {"import ctypes\n"
       "b=(ctypes.c_ulong*64)()\n"
       "r=ctypes.CDLL(None).sysinfo(b)\n"
       "print(r,b[1],b[2],b[3],int(b[4]==b[5]>0),b[10]&0xffff)\n",
       0, KC_STATUS_OK, "0 0 0 0 1 1\n", ""},
      {"import ctypes\n"
       "b=(ctypes.c_ulong*64)()\n"
       "ctypes.CDLL(None).sysinfo(b)\n"
       "ctypes.CDLL(None).umount2(b'/tmp',0)\n",
       1, KC_STATUS_SYSCALL, "", "umount2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kc_result r;
    char out[128];
    assert_int_equal(run_ahead(cases[i].code, &r, out, sizeof out), cases[i].idle);
    assert_int_equal(r.status, cases[i].status);
    assert_string_equal(out, cases[i].out);
    assert_string_equal(r.syscall, cases[i].syscall);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ahead),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
