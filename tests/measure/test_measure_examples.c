/* Every kernel of examples/kernels through the whole pipeline (build sandbox, cache,
 * measuring worker, verification): each gets the status examples/kernels/MANIFEST
 * names.  How fast the honest variants are is `make bench`'s business, not a test's:
 * on a shared 2-vCPU machine their order depends on the CPU and the neighbours. */
#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kcage/measure.h"

/* The kernels of MANIFEST (only those named in `only`, when given) through one batch;
 * piece_bytes as kc_measure_config's; pin: the rounds on the CPU this test runs on, the
 * parent asleep there while they run (--cpu). */
static void run_manifest(const char *const *only, uint64_t piece_bytes, bool pin) {
  FILE *f = fopen(KC_EXAMPLES_DIR "/MANIFEST", "r");
  assert_non_null(f);
  char line[512], names[32][256], want[32][32];
  const char *paths[32];
  size_t n = 0;
  while (fgets(line, sizeof line, f) && n < 32) {
    char k[200], s[32];
    if (line[0] == '#' || sscanf(line, "%199s %31s", k, s) != 2)
      continue;
    bool named = !only;
    for (size_t j = 0; only && only[j]; j++)
      named |= !strcmp(only[j], k);
    if (!named)
      continue;
    snprintf(names[n], sizeof names[n], "%s/%s", KC_EXAMPLES_DIR, k);
    snprintf(want[n], sizeof want[n], "%s", s);
    paths[n] = names[n];
    n++;
  }
  fclose(f);
  assert_true(only || n >= 17);

  f = fopen(KC_EXAMPLES_DIR "/ARGS", "r");
  assert_non_null(f);
  char args[256];
  assert_non_null(fgets(args, sizeof args, f));
  fclose(f);
  args[strcspn(args, "\n")] = 0;

  char cache[512];
  snprintf(cache, sizeof cache, "%s/examples", KC_TEST_CACHE_DIR);
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.args = args;
  cfg.reference = KC_EXAMPLES_DIR "/reference.c";
  cfg.atol = 1e-4;
  cfg.rtol = 1e-4;
  /* generous: the suite shares 2 vCPUs with other tests (ctest -j), and the honest
   * naive matmul runs ~30 calls of 25 ms in one measurement */
  cfg.timeout_s = 15;
  cfg.memory_bytes = 256u << 20;
  cfg.build.cache_dir = cache;
  cfg.piece_bytes = piece_bytes;
  int cpu = sched_getcpu();
  cfg.pin_cpu = pin && cpu >= 0;
  cfg.cpu = cpu >= 0 ? (uint32_t)cpu : 0;
  json_t *recs = NULL;
  kc_error err = {0};
  if (kc_measure_run_batch(&cfg, paths, n, &recs, &err) < 0)
    fail_msg("batch: %s", err.msg);
  assert_int_equal(json_array_size(recs), n);

  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *r = json_array_get(recs, i);
    const char *k = json_string_value(json_object_get(r, "kernel"));
    const char *st = json_string_value(json_object_get(r, "status"));
    const char *msg = json_string_value(json_object_get(r, "message"));
    json_t *cv = json_object_get(r, "cv"), *med = json_object_get(r, "median_s"),
           *mn = json_object_get(r, "min_s");
    printf("%-22s %-13s %-13s median %-10.3g min %-10.3g CV %5.1f%%  %s\n", strrchr(k, '/') + 1, st,
           strcmp(st, want[i]) ? want[i] : "(as expected)", json_number_value(med),
           json_number_value(mn), json_is_number(cv) ? json_number_value(cv) * 100 : NAN,
           msg ? msg : "");
    assert_string_equal(k, paths[i]);
    if (strcmp(st, want[i]))
      bad++;
    if (!strcmp(st, "ok")) {
      assert_true(json_is_number(med) && json_is_number(mn) && json_is_number(cv));
      assert_int_equal(json_array_size(json_object_get(r, "run_secs")), 5);
      assert_true(json_number_value(json_object_get(r, "max_abs_err")) <= 1e-3);
    }
  }
  json_decref(recs);
  assert_int_equal(bad, 0);
}

static void test_examples(void **state) {
  (void)state;
  run_manifest(NULL, 0, false);
}

/* The same verdicts when every timed round runs in pieces of one call, each piece's
 * outputs poisoned from outside right before it, all of them read after the round (what
 * a round whose outputs outgrow the cache does), with the parent asleep on the worker's
 * CPU (--cpu): the classes a piece could open a gap for (ending a
 * round early, skipping calls, reading the schedule, caches of every kind) and the
 * honest kernels. */
static void test_examples_in_pieces(void **state) {
  (void)state;
  static const char *const only[] = {"reference.c",
                                     "tiled.c",
                                     "vectorised.c",
                                     "skip_work.c",
                                     "clock_stopper.c",
                                     "schedule_reader.c",
                                     "poison_dependent.c",
                                     "memoised.c",
                                     "pointer_cache.c",
                                     "content_memo.c",
                                     "input_mutation.c",
                                     "wrong_result.c",
                                     NULL};
  /* one call's outputs (ARGS: 256x256 f32); pinned, so that a completion the worker
   * forges must wake a parent asleep on its CPU, as the default wait does only when the
   * scheduler puts both there */
  run_manifest(only, 256 * 256 * 4, true);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_examples),
                                     cmocka_unit_test(test_examples_in_pieces)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
