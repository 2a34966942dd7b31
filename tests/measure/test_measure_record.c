/* The per-kernel record: statistics, the unstable flag, the speed-up, RFC 3339 times,
 * and numbers printed in their shortest round-trip form. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "measure_kernel.h"

/* The number printed for v, as kc_measure_record_dumps writes it. */
static void printed(double v, char *out, size_t cap) {
  json_t *o = json_pack("{s:f}", "x", v);
  char *s = kc_measure_record_dumps(o);
  assert_non_null(s);
  assert_int_equal(strncmp(s, "{\"x\":", 5), 0);
  snprintf(out, cap, "%.*s", (int)(strlen(s) - 6), s + 5);
  free(s);
  json_decref(o);
}

static void test_shortest_floats(void **state) {
  (void)state;
  char p[64];
  printed(0.1, p, sizeof p);
  assert_string_equal(p, "0.1");
  printed(1e-5, p, sizeof p);
  assert_string_equal(p, "1e-5");
  printed(0.0056, p, sizeof p);
  assert_string_equal(p, "0.0056");
  printed(1.0 / 3, p, sizeof p);
  assert_string_equal(p, "0.333333333333"); /* 12 significant digits, no more */
  /* Random values: what is printed parses back to a value that prints the same, and
   * no shorter precision would give that value. */
  uint64_t st = 7;
  for (int i = 0; i < 2000; i++) {
    double v = (double)(kc_splitmix64(&st) >> 11) * 0x1p-53 * pow(10, (int)(i % 20) - 12);
    printed(v, p, sizeof p);
    double back = strtod(p, NULL);
    assert_true(fabs(back - v) <= fabs(v) * 1e-11);
    char again[64];
    printed(back, again, sizeof again);
    assert_string_equal(p, again);
    /* As many significant digits as the shortest %g that gives the same double. */
    int q = 1;
    for (char sh[64];; q++) {
      snprintf(sh, sizeof sh, "%.*g", q, back);
      if (strtod(sh, NULL) == back)
        break;
    }
    int digits = 0;
    bool lead = true;
    for (const char *c = p; *c && *c != 'e'; c++)
      if (*c >= '0' && *c <= '9' && !(lead && *c == '0')) {
        digits++;
        lead = false;
      }
    /* Neither is the ".0" jansson adds to an integer, nor that integer's trailing zeros. */
    if (strchr(p, '.') && !strchr(p, 'e') && !strcmp(strchr(p, '.'), ".0")) {
      digits--;
      for (const char *c = strchr(p, '.') - 1; c > p && *c == '0'; c--)
        digits--;
    }
    assert_int_equal(digits, q);
  }
}

static void test_stats(void **state) {
  (void)state;
  double v[] = {4, 1, 3, 2};
  kc_mstats s;
  kc_mstats_of(v, 4, &s);
  assert_true(s.median == 2.5 && s.min == 1 && s.max == 4 && s.mean == 2.5);
  assert_true(fabs(s.stddev - sqrt(5.0 / 3)) < 1e-12);
  assert_true(fabs(s.cv - sqrt(5.0 / 3) / 2.5) < 1e-12);
  kc_mstats_of(v, 0, &s);
  assert_true(isnan(s.median) && isnan(s.cv));
}

static json_t *rec(double max_cv, double *secs, uint32_t n, double ref) {
  kc_kmeasure m = {.status = KC_MEASURE_OK, .run_secs = secs, .repeat = n, .number = 3};
  m.max_abs_err = 0;
  kc_mrecord_in in = {.kernel = "k.c",
                      .status = KC_MEASURE_OK,
                      .m = &m,
                      .build_s = NAN,
                      .device = "d",
                      .reference_median_s = ref,
                      .max_cv = max_cv,
                      .seed = 42,
                      .seed_set = true,
                      .isolation = "sandbox",
                      .cc = "cc",
                      .cflags = "-O2"};
  return kc_mrecord(&in);
}

static void test_unstable_and_speedup(void **state) {
  (void)state;
  double noisy[] = {1e-3, 1e-3, 1e-3, 3e-3}, calm[] = {1e-3, 1.01e-3, 0.99e-3};
  json_t *r = rec(0, noisy, 4, NAN); /* default threshold 0.1 */
  assert_string_equal(json_string_value(json_object_get(r, "isolation")), "sandbox");
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(r, "checked_calls"), "timed")), 0);
  assert_true(json_is_true(json_object_get(r, "unstable")));
  assert_true(json_is_null(json_object_get(r, "speedup")));
  assert_int_equal(json_integer_value(json_object_get(r, "seed")), 42);
  assert_string_equal(json_string_value(json_object_get(r, "cflags")), "-O2");
  assert_true(json_number_value(json_object_get(r, "max_s")) == 3e-3);
  assert_true(json_number_value(json_object_get(r, "mean_s")) == 1.5e-3);
  json_decref(r);
  r = rec(2, noisy, 4, NAN);
  assert_true(json_is_false(json_object_get(r, "unstable")));
  json_decref(r);
  r = rec(-1, noisy, 4, NAN); /* never */
  assert_true(json_is_false(json_object_get(r, "unstable")));
  json_decref(r);
  r = rec(0, calm, 3, 4e-3);
  assert_true(json_is_false(json_object_get(r, "unstable")));
  assert_true(fabs(json_number_value(json_object_get(r, "speedup")) - 4) < 1e-12);
  assert_true(json_number_value(json_object_get(r, "reference_median_s")) == 4e-3);
  json_decref(r);
}

static void test_rfc3339(void **state) {
  (void)state;
  char b[64];
  struct timespec ts = {0, 0};
  kc_rfc3339(&ts, b, sizeof b);
  assert_string_equal(b, "1970-01-01T00:00:00.000000Z");
  ts = (struct timespec){1796256000 + 3723, 123456789};
  kc_rfc3339(&ts, b, sizeof b);
  assert_string_equal(b, "2026-12-03T01:02:03.123456Z");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shortest_floats),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_unstable_and_speedup),
      cmocka_unit_test(test_rfc3339),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
