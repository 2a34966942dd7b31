/* The build stage: compile, cache hit, key changes with flags, compiler errors and
 * time limits as results, caller errors as -1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kcage/measure.h"

static char cache[512];

static int setup(void **state) {
  (void)state;
  snprintf(cache, sizeof cache, "%s/build-%d", KC_TEST_CACHE_DIR, (int)getpid());
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_build_then_cached(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r, &err), 0);
  if (r.status != KC_BUILD_OK)
    fail_msg("status %d: %s", r.status, r.message);
  assert_int_equal(strlen(r.key), 64);
  assert_int_equal(access(r.artifact, R_OK), 0);
  assert_true(r.build_s > 0);
  char first[sizeof r.artifact];
  strcpy(first, r.artifact);

  kc_build_result r2;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r2, &err), 0);
  assert_int_equal(r2.status, KC_BUILD_CACHED);
  assert_string_equal(r2.artifact, first);
  assert_true(r2.build_s == 0);

  /* Other flags: another key, another artifact. */
  o.cflags = "-O1 -fPIC -shared";
  kc_build_result r3;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r3, &err), 0);
  assert_int_equal(r3.status, KC_BUILD_OK);
  assert_string_not_equal(r3.key, r.key);

  /* --no-cache compiles again. */
  o.cflags = NULL;
  o.no_cache = true;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r3, &err), 0);
  assert_int_equal(r3.status, KC_BUILD_OK);
  assert_string_equal(r3.key, r.key);
}

static void test_compile_error(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/build_error.c", &r, &err), 0);
  assert_int_equal(r.status, KC_BUILD_ERROR);
  assert_non_null(strstr(r.message, "build_error.c"));
  assert_non_null(strstr(r.message, "undeclared_variable"));
  assert_null(strstr(r.message, cache)); /* the scratch path is not the user's business */
  assert_int_not_equal(access(r.artifact, F_OK), 0);
}

static void test_time_limit(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache, .timeout_s = 0.001, .no_cache = true};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), 0);
  assert_int_equal(r.status, KC_BUILD_TIMEOUT);
}

static void test_caller_errors(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/no-such-file.c", &r, &err), -1);
  assert_non_null(strstr(err.msg, "no-such-file.c"));
  o.cc = "no-such-compiler-kcage";
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), -1);
  assert_non_null(strstr(err.msg, "not found"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_then_cached),
      cmocka_unit_test(test_compile_error),
      cmocka_unit_test(test_time_limit),
      cmocka_unit_test(test_caller_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
