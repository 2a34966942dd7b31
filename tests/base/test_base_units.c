/* base/'s parsers of sizes and decimals: what the command line and the policy files
 * accept, and every kind of text they refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kcage/units.h"

static void test_decimals(void **state) {
  (void)state;
  double d = -1;
  assert_int_equal(kc_parse_decimal("2", &d), 0);
  assert_true(d == 2);
  assert_int_equal(kc_parse_decimal("0.5", &d), 0);
  assert_true(d == 0.5);
  assert_int_equal(kc_parse_decimal(".25", &d), 0);
  assert_true(d == 0.25);
  assert_int_equal(kc_parse_decimal("1e3", &d), 0);
  assert_true(d == 1000);
  assert_int_equal(kc_parse_decimal("0", &d), 0);
  assert_true(d == 0);
  static const char *const bad[] = {"",    " 1",  "+1",    "-1",  "-0", "1s",
                                    "inf", "nan", "1e999", "abc", ".",  "1 "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    d = 7;
    assert_int_equal(kc_parse_decimal(bad[i], &d), -1);
    assert_true(d == 7); /* untouched on refusal */
  }
  assert_int_equal(kc_parse_decimal(NULL, &d), -1);
}

static void test_sizes(void **state) {
  (void)state;
  uint64_t v = 0;
  assert_int_equal(kc_parse_size("4096", &v), 0);
  assert_int_equal(v, 4096);
  assert_int_equal(kc_parse_size("64M", &v), 0);
  assert_int_equal(v, 64u << 20);
  assert_int_equal(kc_parse_size("1GiB", &v), 0);
  assert_int_equal(v, 1u << 30);
  assert_int_equal(kc_parse_size("12Q", &v), -1);
  assert_int_equal(kc_parse_size("-1", &v), -1);
  assert_int_equal(kc_parse_size("99999999999999999999", &v), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_decimals), cmocka_unit_test(test_sizes)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
