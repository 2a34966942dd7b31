/* base/'s namers: the syscall label every verdict shows (native, foreign arch, x32,
 * numbers libseccomp has no name for, short buffers) and signal names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <linux/audit.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

#include "signame.h"
#include "sysname.h"

static void test_native_names(void **state) {
  (void)state;
  char buf[48];
  assert_string_equal(kc_syscall_label(0, SYS_getpid, buf, sizeof buf), "getpid");
  /* the native arch named outright reads the same as 0 */
  assert_string_equal(kc_syscall_label(seccomp_arch_native(), SYS_socket, buf, sizeof buf),
                      "socket");
  assert_string_equal(kc_syscall_lookup(0, SYS_getpid, buf, sizeof buf), "getpid");
}

static void test_unknown_numbers(void **state) {
  (void)state;
  char buf[48];
  assert_string_equal(kc_syscall_lookup(0, 99999, buf, sizeof buf), "");
  assert_string_equal(kc_syscall_label(0, 99999, buf, sizeof buf), "#99999");
  assert_string_equal(kc_syscall_label(AUDIT_ARCH_I386, 99999, buf, sizeof buf), "i386#99999");
}

static void test_foreign_abis(void **state) {
  (void)state;
#ifdef __x86_64__
  char buf[48];
  assert_string_equal(kc_syscall_label(AUDIT_ARCH_I386, 20, buf, sizeof buf), "i386:getpid");
  assert_string_equal(kc_syscall_lookup(AUDIT_ARCH_I386, 20, buf, sizeof buf), "getpid");
  /* x32: the native arch with the x32 bit in the number (x32's read is 0) */
  assert_string_equal(kc_syscall_label(AUDIT_ARCH_X86_64, 0x40000000, buf, sizeof buf), "x32:read");
  assert_string_equal(kc_syscall_label(AUDIT_ARCH_X86_64, 0x40000000 | 9999, buf, sizeof buf),
                      "x32:?");
#else
  skip();
#endif
}

static void test_short_buffers(void **state) {
  (void)state;
  char buf[8] = "keep";
  assert_ptr_equal(kc_syscall_label(0, SYS_getpid, buf, 0), buf);
  assert_string_equal(buf, "keep");
  assert_string_equal(kc_syscall_label(0, SYS_getpid, buf, 4), "get");
  assert_string_equal(kc_syscall_lookup(0, SYS_getpid, buf, 4), "get");
}

static void test_signal_names(void **state) {
  (void)state;
  assert_string_equal(kc_signal_name(SIGSEGV), "SIGSEGV");
  assert_string_equal(kc_signal_name(SIGSYS), "SIGSYS");
  assert_string_equal(kc_signal_name(200), "SIG200");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_native_names), cmocka_unit_test(test_unknown_numbers),
      cmocka_unit_test(test_foreign_abis), cmocka_unit_test(test_short_buffers),
      cmocka_unit_test(test_signal_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
