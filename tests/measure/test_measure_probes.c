/* A kernel cannot tell that a call repeats earlier work: one probe kernel per channel it
 * can observe (the `args` array's address, its inputs' addresses and the stride between
 * them, samples of their content, clocks and call counts, page residency, the cache
 * timing of its own loads, the CPU it runs on), each memoising whatever it takes for a
 * repeat; and one per secret of the parent's that reaches the kernel (the poison, which
 * comes from the parent's draws; the inputs, which come from the run's seed), each
 * predicting what it can from it.  Measured beside the honest kernel it imitates, each
 * must come out either not `ok`, or `ok` at a time not far below the honest one's: a
 * fake speed-up never passes.
 * And honest kernels of about a microsecond and about ten milliseconds per call stay
 * `ok`, run after run (docs/measurement-integrity.md). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kcage/measure.h"

static char cache[512];

static void init_cfg(kc_measure_config *cfg, const char *args, const char *reference) {
  kc_measure_config_init(cfg);
  cfg->args = args;
  cfg->reference = reference;
  cfg->timeout_s = 60; /* generous: 2 loaded vCPUs */
  cfg->memory_bytes = 512u << 20;
  cfg->repeat = 5;
  cfg->min_repeat_ms = 20; /* rounds of ~200 calls: many passes over any rotation */
  cfg->build.cache_dir = cache;
}

static json_t *run(kc_measure_config *cfg, const char *const *k, size_t n) {
  json_t *recs = NULL;
  kc_error err = {0};
  if (kc_measure_run_batch(cfg, k, n, &recs, &err) < 0)
    fail_msg("batch: %s", err.msg);
  return recs;
}

static const char *status_of(json_t *r) {
  return json_string_value(json_object_get(r, "status"));
}

/* One batch of the probe beside the honest 64x64 matmul it imitates (--sets 16,
 * --checks 8, as in the attack that once got through).  Returns 1 when the probe came
 * out `ok` at less than half the honest time: a fake speed-up. */
static int fake_speedup(const char *probe, const char *want_status, uint32_t number, bool f64) {
  const char *honest = f64 ? KC_HONEST_DIR "/mm_f64_ijk.c" : KC_HONEST_DIR "/mm_f32.c";
  kc_measure_config cfg;
  init_cfg(&cfg,
           f64 ? "f64[64,64] f64[64,64] f64[64,64]:out" : "f32[64,64] f32[64,64] f32[64,64]:out",
           honest);
  cfg.sets = 16;
  cfg.checks = 8;
  if (number) { /* TVM's default: `number` calls a round, never grown */
    cfg.number = number;
    cfg.min_repeat_ms = 0;
  }
  const char *k[] = {honest, probe};
  json_t *recs = run(&cfg, k, 2);
  json_t *h = json_array_get(recs, 0), *p = json_array_get(recs, 1);
  double th = json_number_value(json_object_get(h, "median_s"));
  double tp = json_number_value(json_object_get(p, "median_s"));
  const char *msg = json_string_value(json_object_get(p, "message"));
  printf("honest %-10s %.3g s | %s %-10s %.3g s  %s\n", status_of(h), th, strrchr(probe, '/') + 1,
         status_of(p), tp, msg ? msg : "");
  assert_string_equal(status_of(h), "ok");
  if (want_status)
    assert_string_equal(status_of(p), want_status);
  int fake = !strcmp(status_of(p), "ok") && tp < 0.5 * th;
  json_decref(recs);
  return fake;
}

/* The two kernels run one after the other, so a burst of load on a shared 2-vCPU host
 * can slow the honest one alone by 2x.  A memoising probe that beats the defence is
 * tens of times faster in every batch (0.9 us against 114 us once), so the verdict is a
 * fake speed-up only when each of three batches shows one. */
static void probe_at(const char *probe, const char *want_status, uint32_t number, bool f64) {
  int fakes = 0;
  for (int tries = 0; tries < 3 && fakes == tries; tries++)
    fakes += fake_speedup(probe, want_status, number, f64);
  assert_true(fakes < 3);
}

static void probe_vs_honest(const char *probe, const char *want_status) {
  probe_at(probe, want_status, 0, false);
}

static void test_args_address(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/args_memo.c", NULL);
}

static void test_address_stride(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/stride_memo.c", NULL);
}

static void test_content(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/exact_memo.c", NULL);
}

static void test_call_count(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/counter_memo.c", NULL);
}

static void test_cache_timing(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/cache_memo.c", NULL);
}

static void test_cpu(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/cpu_memo.c", NULL);
}

/* The parent's own draws (the poison seed, the near-copy's call, the calls checked),
 * predicted from the poison the kernel finds in its outputs; rounds of a fixed number
 * of calls, so that the count it learns holds for the next round. */
static void test_parent_draws(void **state) {
  (void)state;
  probe_at(KC_PROBES_DIR "/draw_predict.c", NULL, 400, false);
}

/* The inputs' generator: the run's seed worked out from f64 inputs (53 bits of every
 * draw), the rounds to come computed in advance, in one slow round. */
static void test_data_seed(void **state) {
  (void)state;
  probe_at(KC_PROBES_DIR "/seed_predict.c", NULL, 100, true);
}

/* mincore is outside the measure policy: the worker dies of it before it can matter. */
static void test_page_residency(void **state) {
  (void)state;
  probe_vs_honest(KC_PROBES_DIR "/mincore_memo.c", "syscall");
}

/* No false alarms at either end of the speeds: a ~1 us and a ~10 ms kernel (matmuls of
 * 16x16 and 256x256), each against itself as the reference, `ok` in every one of
 * several batches. */
static void test_honest_speeds(void **state) {
  (void)state;
  static const char *const args[] = {"f32[16,16] f32[16,16] f32[16,16]:out",
                                     "f32[256,256] f32[256,256] f32[256,256]:out"};
  const char *mm = KC_HONEST_DIR "/mm_f32.c";
  int bad = 0;
  for (int a = 0; a < 2; a++)
    for (int rep = 0; rep < 4; rep++) {
      kc_measure_config cfg;
      init_cfg(&cfg, args[a], mm);
      const char *k[] = {mm, mm};
      json_t *recs = run(&cfg, k, 2);
      for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(recs, i);
        const char *msg = json_string_value(json_object_get(r, "message"));
        printf("%-44s %-10s median %.3g s  %s\n", args[a], status_of(r),
               json_number_value(json_object_get(r, "median_s")), msg ? msg : "");
        bad += strcmp(status_of(r), "ok") != 0;
      }
      json_decref(recs);
    }
  assert_int_equal(bad, 0);
}

int main(int argc, char **argv) {
  snprintf(cache, sizeof cache, "%s/probes", KC_TEST_CACHE_DIR);
  if (argc > 1) /* one test by name (a pattern), as test_hostile takes it */
    cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_args_address),   cmocka_unit_test(test_address_stride),
      cmocka_unit_test(test_content),        cmocka_unit_test(test_call_count),
      cmocka_unit_test(test_cache_timing),   cmocka_unit_test(test_cpu),
      cmocka_unit_test(test_parent_draws),   cmocka_unit_test(test_data_seed),
      cmocka_unit_test(test_page_residency), cmocka_unit_test(test_honest_speeds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
