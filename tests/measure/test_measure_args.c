/* The --args language, deterministic data, poison, comparison and SHA-256. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kcage/measure.h"

static void test_parse_matmul(void **state) {
  (void)state;
  kc_args_spec a;
  kc_error err;
  assert_int_equal(kc_args_parse("f32[512,512] f32[512,512] f32[512,512]:out", &a, &err), 0);
  assert_int_equal(a.n, 3);
  assert_false(a.t[0].out);
  assert_true(a.t[2].out);
  assert_int_equal(a.t[1].ndim, 2);
  assert_int_equal(a.t[1].shape[1], 512);
  assert_int_equal(a.t[0].nbytes, 512 * 512 * 4);
  assert_int_equal(a.in_bytes, 2 * 512 * 512 * 4);
  assert_int_equal(a.out_bytes, 512 * 512 * 4);
  /* inputs and outputs live in separate regions */
  assert_int_equal(kc_args_offset(&a, 0), 0);
  assert_int_equal(kc_args_offset(&a, 1), 512 * 512 * 4);
  assert_int_equal(kc_args_offset(&a, 2), 0);
  char buf[128];
  kc_args_format(&a, buf, sizeof buf);
  assert_string_equal(buf, "f32[512,512] f32[512,512] f32[512,512]:out");
}

static void test_parse_all_dtypes(void **state) {
  (void)state;
  kc_args_spec a;
  kc_error err;
  assert_int_equal(
      kc_args_parse("f32[3] f64[3] i32[3] i64[3] i8[3] u8[3] f16[3] bf16[2,  3]:out f32[]:out", &a,
                    &err),
      0);
  assert_int_equal(a.n, 9);
  static const unsigned sizes[] = {12, 24, 12, 24, 3, 3, 6, 12, 4};
  for (unsigned i = 0; i < 9; i++)
    assert_int_equal(a.t[i].nbytes, sizes[i]);
  assert_int_equal(a.t[8].ndim, 0);
  char buf[256];
  kc_args_format(&a, buf, sizeof buf);
  assert_string_equal(buf,
                      "f32[3] f64[3] i32[3] i64[3] i8[3] u8[3] f16[3] bf16[2,3]:out f32[]:out");
}

static void expect_error(const char *text, const char *needle) {
  kc_args_spec a;
  kc_error err = {0};
  assert_int_equal(kc_args_parse(text, &a, &err), -1);
  if (!strstr(err.msg, needle))
    fail_msg("'%s': error '%s' lacks '%s'", text, err.msg, needle);
}

static void test_parse_errors(void **state) {
  (void)state;
  expect_error("f33[4] f32[4]:out", "unknown dtype 'f33'");
  expect_error("", "no tensors");
  expect_error("f32[4] f32[4]", "no output tensor");
  expect_error("f32[4", "expected ']'");
  expect_error("f32(4):out", "expected '['");
  expect_error("f32[0]:out", "bad dimension");
  expect_error("f32[-3]:out", "expected a dimension");
  expect_error("f32[4]:in", "only ':out'");
  expect_error("f32[1,1,1,1,1,1,1,1,1]:out", "more than 8 dimensions");
  expect_error("f32[1099511627776,1099511627776]:out", "too large");
  expect_error(
      "f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] f32[1] "
      "f32[1] f32[1] f32[1] f32[1] f32[1]:out",
      "more than 16 tensors");
  expect_error("[4]:out", "expected a dtype");
}

static void test_data_deterministic(void **state) {
  (void)state;
  kc_args_spec a;
  kc_error err;
  assert_int_equal(kc_args_parse("f32[1000] i8[1000] f16[100]:out", &a, &err), 0);
  float x[1000], y[1000], z[1000];
  kc_data_fill(&a.t[0], x, 7, 0, 0);
  kc_data_fill(&a.t[0], y, 7, 0, 0);
  kc_data_fill(&a.t[0], z, 7, 1, 0);
  assert_memory_equal(x, y, sizeof x);
  assert_memory_not_equal(x, z, sizeof x); /* another set */
  kc_data_fill(&a.t[0], z, 8, 0, 0);
  assert_memory_not_equal(x, z, sizeof x); /* another seed */
  for (int i = 0; i < 1000; i++)
    assert_true(x[i] >= -1 && x[i] < 1);
  int8_t b[1000];
  kc_data_fill(&a.t[1], b, 7, 0, 1);
  for (int i = 0; i < 1000; i++)
    assert_true(b[i] >= -8 && b[i] <= 8);
}

static void test_half(void **state) {
  (void)state;
  static const float exact[] = {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 0.000060975552f, 1.5f};
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
    assert_true(kc_half_to_float(kc_float_to_half(exact[i])) == exact[i]);
    assert_true(fabsf(kc_bf16_to_float(kc_float_to_bf16(exact[i])) - exact[i]) <=
                fabsf(exact[i]) / 128);
  }
  assert_int_equal(kc_float_to_half(1.0f), 0x3c00);
  assert_int_equal(kc_float_to_half(1e6f), 0x7c00); /* overflow -> inf */
  assert_true(isnan(kc_half_to_float(kc_float_to_half(NAN))));
  assert_int_equal(kc_float_to_bf16(1.0f), 0x3f80);
}

static void test_poison_and_close(void **state) {
  (void)state;
  kc_args_spec a;
  kc_error err;
  assert_int_equal(kc_args_parse("f32[5]:out", &a, &err), 0);
  float buf[5];
  uint64_t w0 = kc_poison_word(10, 0), w1 = kc_poison_word(11, 0);
  assert_true(w0 != w1); /* seeds differing in the low bit poison differently */
  kc_poison_fill(buf, sizeof buf, w0);
  assert_true(kc_poison_equal(buf, sizeof buf, w0));
  assert_false(kc_poison_equal(buf, sizeof buf, w1));
  float want[5] = {1, 2, 3, NAN, -1};
  float got[5] = {1, 2.0001f, 3, NAN, -1};
  double e;
  assert_true(kc_tensor_close(&a.t[0], got, want, 1e-4, 1e-5, &e));
  assert_true(e > 0 && e < 2e-4);
  got[2] = 3.1f;
  assert_false(kc_tensor_close(&a.t[0], got, want, 1e-4, 1e-5, &e));
  assert_true(fabs(e - 0.1) < 1e-5);
  got[2] = 3;
  got[3] = 0;
  assert_false(kc_tensor_close(&a.t[0], got, want, 1e-4, 1e-5, &e));
  assert_true(isinf(e));
}

/* The distance of two offsets within a 2 MiB page, either way round. */
static uint64_t phase_gap(uint64_t a, uint64_t b) {
  uint64_t d = (a - b) % (2u << 20);
  return d < (1u << 20) ? d : (2u << 20) - d;
}

/* Large tensors of a region never start at the same offset within a 2 MiB page (their
 * streams would share DRAM banks and cache sets); small ones are packed as they come;
 * the padding stays under 2 MiB a tensor and the region holds every tensor. */
static void test_layout_staggers(void **state) {
  (void)state;
  kc_args_spec a;
  kc_error err;
  assert_int_equal(kc_args_parse("f32[16777216] f32[16777216] f32[16777216]:out", &a, &err), 0);
  uint64_t b64 = 64ull << 20;
  assert_true(kc_args_offset(&a, 1) >= b64 && kc_args_offset(&a, 1) < b64 + (2u << 20));
  assert_true(phase_gap(kc_args_offset(&a, 0), kc_args_offset(&a, 1)) >= (16u << 10));
  assert_int_equal(kc_args_offset(&a, 1) % 64, 0);
  assert_int_equal(kc_args_offset(&a, 2), 0); /* the first of its own region */
  assert_int_equal(kc_args_region_bytes(&a, false), kc_args_offset(&a, 1) + b64);
  /* the output region (a call's slot in the area) is no whole number of 2 MiB pages:
   * consecutive calls' outputs step through the phases */
  uint64_t out = kc_args_region_bytes(&a, true);
  assert_true(out >= b64 && out < b64 + (2u << 20));
  assert_true(phase_gap(out, 0) >= (256u << 10));

  /* fourteen 4 MiB inputs: every pair apart, and two outputs apart in theirs */
  char text[512] = "";
  for (int i = 0; i < 14; i++)
    strcat(text, "f32[1048576] ");
  strcat(text, "f32[1048576]:out f32[1048576]:out");
  assert_int_equal(kc_args_parse(text, &a, &err), 0);
  uint64_t end = 0;
  for (uint32_t i = 0; i < a.n; i++) {
    uint64_t off = kc_args_offset(&a, i);
    for (uint32_t j = 0; j < i; j++)
      if (a.t[j].out == a.t[i].out)
        assert_true(phase_gap(off, kc_args_offset(&a, j)) >= (16u << 10));
    if (!a.t[i].out) {
      assert_true(off >= end && off - end < (2u << 20));
      end = off + a.t[i].nbytes;
    }
  }
  assert_int_equal(kc_args_region_bytes(&a, false), end);

  /* small tensors: packed, 64-byte aligned */
  assert_int_equal(kc_args_parse("f32[10] f32[32,32] f32[32,32]:out", &a, &err), 0);
  assert_int_equal(kc_args_offset(&a, 1), 64);
  assert_int_equal(kc_args_region_bytes(&a, false), 64 + 4096);
  assert_int_equal(kc_args_region_bytes(&a, true), 4096); /* small: as it is */
}

static void test_status_names(void **state) {
  (void)state;
  static const char *const names[] = {"ok",    "build_error", "wrong_result", "timeout",   "memory",
                                      "crash", "syscall",     "error",        "suspicious"};
  for (int i = 0; i < 9; i++) {
    kc_measure_status s;
    assert_string_equal(kc_measure_status_name((kc_measure_status)i), names[i]);
    assert_int_equal(kc_measure_status_parse(names[i], &s), 0);
    assert_int_equal(s, i);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_matmul), cmocka_unit_test(test_parse_all_dtypes),
      cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_data_deterministic),
      cmocka_unit_test(test_half),         cmocka_unit_test(test_poison_and_close),
      cmocka_unit_test(test_status_names), cmocka_unit_test(test_layout_staggers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
