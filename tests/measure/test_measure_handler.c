/* The in-worker logic called directly (kc_mstate), and the plain runner's protocol:
 * outputs poisoned and returned for the checked calls, read-only inputs, timeouts,
 * forbidden syscalls and crashes as verdicts. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>

#include "kcage/measure.h"
#include "measure_internal.h"

#define N 16
#define ARGS "f32[16,16] f32[16,16] f32[16,16]:out"

static char cache[512], dir[600], inputs[700];
static kc_args_spec spec;
static float *in_data; /* 2 sets */

static const char *build(const char *name) {
  static char art[8][4096];
  static int k;
  char src[600];
  snprintf(src, sizeof src, "%s/%s", KC_EXAMPLES_DIR, name);
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  if (kc_build_kernel(&o, src, &r, &err) < 0 ||
      (r.status != KC_BUILD_OK && r.status != KC_BUILD_CACHED))
    fail_msg("build %s: %s %s", name, err.msg, r.message);
  k = (k + 1) % 8;
  snprintf(art[k], sizeof art[k], "%s", r.artifact);
  return art[k];
}

static int setup(void **state) {
  (void)state;
  snprintf(cache, sizeof cache, "%s/handler-%d", KC_TEST_CACHE_DIR, (int)getpid());
  snprintf(dir, sizeof dir, "%s/session", cache);
  kc_error err;
  if (kc_mkdir_p(dir, &err) < 0 || kc_args_parse(ARGS, &spec, &err) < 0)
    return -1;
  uint64_t region = kc_args_region_bytes(&spec, false);
  in_data = calloc(2, region);
  for (uint32_t s = 0; s < 2; s++)
    for (uint32_t i = 0; i < 2; i++)
      kc_data_fill(&spec.t[i], (char *)in_data + s * region + kc_args_offset(&spec, i), 3, s, i);
  snprintf(inputs, sizeof inputs, "%s/inputs.bin", dir);
  return kc_write_file(inputs, in_data, 2 * region, 0444, &err);
}

static int teardown(void **state) {
  (void)state;
  kc_rm_rf(dir);
  kc_rm_rf(cache);
  free(in_data);
  return 0;
}

static void expect_matmul(const float *C, uint32_t set) {
  uint64_t region = kc_args_region_bytes(&spec, false);
  const float *A = (const float *)((char *)in_data + set * region);
  const float *B = (const float *)((char *)in_data + set * region + kc_args_offset(&spec, 1));
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < N; k++)
        acc += (double)A[i * N + k] * B[k * N + j];
      if (fabs(acc - C[i * N + j]) > 1e-4)
        fail_msg("set %u C[%d][%d] = %g, want %g", set, i, j, C[i * N + j], acc);
    }
}

static void test_state_runs_and_checks(void **state) {
  (void)state;
  kc_mstate *s;
  char e[512];
  assert_int_equal(kc_mstate_load(&s, build("tiled.c"), KC_ABI_DLPACK, "kernel", inputs, ARGS, 2,
                                  false, e, sizeof e),
                   0);
  uint64_t region = kc_args_region_bytes(&spec, true);
  size_t cap = sizeof(kc_mreply_run) + 2 * region;
  unsigned char *out = malloc(cap);
  kc_mreq_run req = {.magic = KC_MPROTO_MAGIC,
                     .op = KC_MOP_RUN,
                     .number = 4,
                     .first_set = 1,
                     .n_checks = 2,
                     .poison_seed = 99,
                     .checks = {0, 3}};
  size_t len;
  assert_int_equal(kc_mstate_run(s, &req, out, cap, &len, e, sizeof e), 0);
  assert_int_equal(len, cap);
  expect_matmul((const float *)(out + sizeof(kc_mreply_run)), 1);          /* call 0: set 1 */
  expect_matmul((const float *)(out + sizeof(kc_mreply_run) + region), 0); /* call 3: set 0 */
  /* Requests are validated: unsorted checks, too small a buffer. */
  req.checks[0] = 3;
  req.checks[1] = 0;
  assert_int_equal(kc_mstate_run(s, &req, out, cap, &len, e, sizeof e), -1);
  req.checks[0] = 0;
  req.checks[1] = 3;
  assert_int_equal(kc_mstate_run(s, &req, out, cap - 1, &len, e, sizeof e), -1);
  kc_mstate_flush(s);
  free(out);
  kc_mstate_free(s);
}

/* The timed round's form: PREPARE poisons one region per call, RUN writes call i's
 * outputs into region i (set i % n_sets), nothing comes back in the reply. */
static void test_state_prepare_area(void **state) {
  (void)state;
  kc_mstate *s;
  char e[512];
  assert_int_equal(kc_mstate_load(&s, build("tiled.c"), KC_ABI_DLPACK, "kernel", inputs, ARGS, 2,
                                  false, e, sizeof e),
                   0);
  uint64_t region = kc_args_region_bytes(&spec, true);
  kc_mreq_prepare pr = {KC_MPROTO_MAGIC, KC_MOP_PREPARE, 5, 7};
  kc_mreply_prepare rep;
  assert_int_equal(kc_mstate_prepare(s, &pr, &rep, e, sizeof e), 0);
  assert_int_equal(rep.region, region);
  const unsigned char *area = (const unsigned char *)(uintptr_t)rep.base;
  for (uint64_t i = 0; i < 5; i++)
    assert_true(kc_poison_equal(area + i * region, region, kc_poison_word(7, i)));
  kc_mreq_run req = {
      .magic = KC_MPROTO_MAGIC, .op = KC_MOP_RUN, .number = 5, .n_sets = 2, .flags = KC_MRUN_AREA};
  unsigned char out[64];
  size_t len;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), 0);
  assert_int_equal(len, sizeof(kc_mreply_run));
  for (uint32_t i = 0; i < 5; i++)
    expect_matmul((const float *)(area + i * region + kc_args_offset(&spec, 2)), i % 2);
  /* A run starting at another set (call i: set (first_set + i) % n_sets) over the same
   * area, re-poisoned. */
  pr.poison_seed = 8;
  assert_int_equal(kc_mstate_prepare(s, &pr, &rep, e, sizeof e), 0);
  assert_true(kc_poison_equal(area + 2 * region, region, kc_poison_word(8, 2)));
  req.first_set = 1;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), 0);
  for (uint32_t i = 0; i < 5; i++)
    expect_matmul((const float *)(area + i * region + kc_args_offset(&spec, 2)), (1 + i) % 2);
  /* A piece of a round: calls 3 and 4 write regions 3 and 4, and nothing else. */
  pr.poison_seed = 9;
  assert_int_equal(kc_mstate_prepare(s, &pr, &rep, e, sizeof e), 0);
  req.first_set = 1;
  req.first_call = 3;
  req.number = 2;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), 0);
  for (uint32_t i = 0; i < 3; i++)
    assert_true(kc_poison_equal(area + i * region, region, kc_poison_word(9, i)));
  for (uint32_t i = 3; i < 5; i++)
    expect_matmul((const float *)(area + i * region + kc_args_offset(&spec, 2)), (i - 2) % 2);
  /* a piece that would run past the area's end, or start beyond it: refused */
  req.number = 3;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), -1);
  req.number = 1;
  req.first_call = UINT64_MAX;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), -1);
  req.first_call = 0;
  req.number = 5;
  /* more calls than the area holds, more sets than the file, a first set out of range,
   * an empty or oversized PREPARE: refused */
  req.first_set = 2;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), -1);
  req.first_set = 0;
  req.number = 6;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), -1);
  req.number = 5;
  req.n_sets = 3;
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), -1);
  pr.number = 0;
  assert_int_equal(kc_mstate_prepare(s, &pr, &rep, e, sizeof e), -1);
  pr.number = (1ull << 32) + 1;
  assert_int_equal(kc_mstate_prepare(s, &pr, &rep, e, sizeof e), -1);
  kc_mstate_free(s);
}

static void test_state_input_mutation(void **state) {
  (void)state;
  kc_mstate *s;
  char e[512];
  assert_int_equal(kc_mstate_load(&s, build("input_mutation.c"), KC_ABI_DLPACK, "kernel", inputs,
                                  ARGS, 2, false, e, sizeof e),
                   0);
  unsigned char out[8192];
  size_t len;
  kc_mreq_run req = {.magic = KC_MPROTO_MAGIC, .op = KC_MOP_RUN, .number = 1, .n_checks = 0};
  assert_int_equal(kc_mstate_run(s, &req, out, sizeof out, &len, e, sizeof e), -1);
  assert_non_null(strstr(e, "suspicious: the kernel wrote to its read-only input tensor 0"));
  kc_mstate_free(s);
}

static void test_state_load_errors(void **state) {
  (void)state;
  kc_mstate *s;
  char e[512];
  assert_int_equal(kc_mstate_load(&s, build("no_entry.c"), KC_ABI_DLPACK, "kernel", inputs, ARGS, 2,
                                  false, e, sizeof e),
                   -1);
  assert_non_null(strstr(e, "no symbol 'kernel'"));
  /* --entry finds it */
  assert_int_equal(kc_mstate_load(&s, build("no_entry.c"), KC_ABI_DLPACK, "matmul", inputs, ARGS, 2,
                                  false, e, sizeof e),
                   0);
  kc_mstate_free(s);
  /* inputs of the wrong size for --args */
  assert_int_equal(kc_mstate_load(&s, build("tiled.c"), KC_ABI_DLPACK, "kernel", inputs,
                                  "f32[4] f32[4]:out", 2, false, e, sizeof e),
                   -1);
  assert_non_null(strstr(e, "wrong size"));
}

/* ---- the plain runner: a forked process, the real wire protocol ---------------- */
static kc_mrunner *runner_kind(bool plain) {
  kc_mrunner_opts o = {.bind_dir = dir,
                       .memory_bytes = 512u << 20,
                       .max_arg_bytes = 65536,
                       .max_result_bytes = 65536,
                       .plain = plain};
  kc_mrunner *r;
  kc_error err;
  assert_int_equal(kc_mrunner_new(&o, &r, &err), 0);
  return r;
}
static kc_mrunner *runner(void) {
  return runner_kind(true);
}

static void load(kc_mrunner *r, const char *artifact, kc_mcall *c) {
  unsigned char buf[8192];
  kc_mreq_load h = {KC_MPROTO_MAGIC, KC_MOP_LOAD, 2, 0};
  size_t n = sizeof h;
  memcpy(buf, &h, n);
  const char *strs[4] = {artifact, "kernel", inputs, ARGS};
  for (int i = 0; i < 4; i++) {
    memcpy(buf + n, strs[i], strlen(strs[i]) + 1);
    n += strlen(strs[i]) + 1;
  }
  kc_error err;
  assert_int_equal(kc_mrunner_call(r, buf, n, 10, c, &err), 0);
  kc_mcall_clear(c); /* a load returns no value; the status stays */
}

static void run1(kc_mrunner *r, kc_mcall *c, double timeout) {
  kc_mreq_run req = {
      .magic = KC_MPROTO_MAGIC, .op = KC_MOP_RUN, .number = 2, .n_checks = 1, .checks = {1}};
  kc_error err;
  kc_mcall_clear(c);
  assert_int_equal(kc_mrunner_call(r, &req, sizeof req, timeout, c, &err), 0);
}

static void test_runner_ok(void **state) {
  (void)state;
  kc_mrunner *r = runner();
  kc_mcall c;
  load(r, build("vectorised.c"), &c);
  assert_int_equal(c.status, KC_MCALL_OK);
  run1(r, &c, 10);
  assert_int_equal(c.status, KC_MCALL_OK);
  assert_int_equal(c.value_len, sizeof(kc_mreply_run) + kc_args_region_bytes(&spec, true));
  expect_matmul((const float *)((char *)c.value + sizeof(kc_mreply_run)), 1);
  kc_mcall_clear(&c);
  kc_mrunner_free(r);
}

/* What a timed round is made of: an untimed WAKE (answered at once, even before a
 * load), then the RUN with the parent's expectation of its length.  Whatever the
 * expectation (none, far too short, far too long), the call completes with the right
 * result, and its elapsed_s is the parent's clock, within the wall time around it. */
static void wake_and_expect(bool plain) {
  kc_mrunner *r = runner_kind(plain);
  assert_string_equal(kc_mrunner_kind(r), plain ? "plain" : "sandbox");
  kc_mcall c;
  kc_error err;
  kc_mreq_load wk = {KC_MPROTO_MAGIC, KC_MOP_WAKE, 0, 0};
  assert_int_equal(kc_mrunner_call_expect(r, &wk, 8, 10, 1e-6, &c, &err), 0);
  assert_int_equal(c.status, KC_MCALL_OK);
  assert_int_equal(c.value_len, 0);
  kc_mcall_clear(&c);
  /* a sandboxed worker sees only its bind dir: the artifact goes there, as in a batch */
  char art[700];
  snprintf(art, sizeof art, "%s/naive.so", dir);
  char *so = NULL;
  size_t so_len;
  assert_int_equal(kc_read_file(build("naive.c"), &so, &so_len, 1u << 30, &err), 0);
  unlink(art);
  assert_int_equal(kc_write_file(art, so, so_len, 0444, &err), 0);
  free(so);
  load(r, art, &c);
  if (c.status != KC_MCALL_OK)
    fail_msg("load: %s", c.message);
  const double expects[] = {0, 1e-6, 0.05};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(kc_mrunner_call_expect(r, &wk, 8, 10, 1e-6, &c, &err), 0);
    assert_int_equal(c.status, KC_MCALL_OK);
    kc_mcall_clear(&c);
    kc_mreq_run req = {
        .magic = KC_MPROTO_MAGIC, .op = KC_MOP_RUN, .number = 3, .n_checks = 1, .checks = {2}};
    double t0 = kc_now_s();
    assert_int_equal(kc_mrunner_call_expect(r, &req, sizeof req, 10, expects[i], &c, &err), 0);
    double wall = kc_now_s() - t0;
    assert_int_equal(c.status, KC_MCALL_OK);
    assert_true(c.elapsed_s > 0);
    assert_true(c.elapsed_s <= wall);
    assert_int_equal(c.value_len, sizeof(kc_mreply_run) + kc_args_region_bytes(&spec, true));
    expect_matmul((const float *)((char *)c.value + sizeof(kc_mreply_run)), 0);
    kc_mcall_clear(&c);
  }
  kc_mrunner_free(r);
}
static void test_runner_wake_and_expect(void **state) {
  (void)state;
  wake_and_expect(true);  /* the plain runner: a socket */
  wake_and_expect(false); /* a sandboxed measure worker: the ring */
}

static void test_runner_verdicts(void **state) {
  (void)state;
  kc_mrunner *r = runner();
  kc_mcall c;
  load(r, build("infinite_loop.c"), &c);
  assert_int_equal(c.status, KC_MCALL_OK);
  run1(r, &c, 0.2);
  assert_int_equal(c.status, KC_MCALL_TIMEOUT);

  load(r, build("socket.c"), &c); /* a fresh process after the kill */
  assert_int_equal(c.status, KC_MCALL_OK);
  run1(r, &c, 10);
  assert_int_equal(c.status, KC_MCALL_DIED);
  assert_int_equal(c.verdict.status, KC_STATUS_SYSCALL);
  assert_string_equal(c.verdict.syscall, "socket");

  load(r, build("segfault.c"), &c);
  run1(r, &c, 10);
  assert_int_equal(c.status, KC_MCALL_DIED);
  assert_int_equal(c.verdict.status, KC_STATUS_SIGNALED);
  assert_int_equal(c.verdict.signal, SIGSEGV);

  load(r, build("tiled.c"), &c);
  kc_mrunner_reset(r);
  run1(r, &c, 10); /* a new process has nothing loaded */
  assert_int_equal(c.status, KC_MCALL_EXCEPTION);
  assert_non_null(strstr(c.message, "run before load"));
  kc_mrunner_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_state_runs_and_checks),
      cmocka_unit_test(test_state_prepare_area),
      cmocka_unit_test(test_state_input_mutation),
      cmocka_unit_test(test_state_load_errors),
      cmocka_unit_test(test_runner_ok),
      cmocka_unit_test(test_runner_wake_and_expect),
      cmocka_unit_test(test_runner_verdicts),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
