/* The line under `kcage bench`'s table: how many kernels got each verdict, the fastest
 * correct one and its speed-up, and what to do about what the table cannot vouch for
 * (unstable timings, nothing verified). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kcage/escape.h"
#include "kcage/measure.h"

static double num(json_t *r, const char *key) {
  json_t *v = json_object_get(r, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

/* "4 kernels: 2 ok, 1 suspicious, 1 wrong_result" in the order --help lists them. */
static void counts(FILE *out, json_t *recs) {
  size_t n = json_array_size(recs);
  fprintf(out, "%zu kernel%s:", n, n == 1 ? "" : "s");
  const char *sep = " ";
  for (int s = KC_MEASURE_OK; s <= KC_MEASURE_SUSPICIOUS; s++) {
    const char *name = kc_measure_status_name((kc_measure_status)s);
    size_t c = 0, i;
    json_t *r;
    json_array_foreach(recs, i, r) {
      const char *st = json_string_value(json_object_get(r, "status"));
      c += st && !strcmp(st, name);
    }
    if (c) {
      fprintf(out, "%s%zu %s", sep, c, name);
      sep = ", ";
    }
  }
}

/* The ok record with the smallest median, or NULL. */
static json_t *fastest(json_t *recs) {
  json_t *best = NULL, *r;
  size_t i;
  json_array_foreach(recs, i, r) {
    const char *st = json_string_value(json_object_get(r, "status"));
    double m = num(r, "median_s");
    if (st && !strcmp(st, "ok") && isfinite(m) && (!best || m < num(best, "median_s")))
      best = r;
  }
  return best;
}

void kc_measure_summary_print(FILE *out, json_t *recs, const kc_measure_table_opts *o) {
  counts(out, recs);
  json_t *best = fastest(recs), *r;
  if (best) {
    char esc[4096];
    kc_escape(json_string_value(json_object_get(best, "kernel")), esc, sizeof esc);
    double su = num(best, "speedup");
    if (isfinite(su))
      fprintf(out, "; fastest: %s, %.2fx the reference", esc, su);
    else
      fprintf(out, "; fastest: %s", esc);
  }
  fputs(".\n", out);
  size_t unstable = 0, i;
  json_array_foreach(recs, i, r) unstable += json_is_true(json_object_get(r, "unstable"));
  if (unstable)
    fprintf(out,
            "%zu unstable (their rounds varied more than --max-cv): rerun with more rounds "
            "(--repeat 20 --min-repeat-ms 50), on one CPU (--cpu N) or on a quieter machine.\n",
            unstable);
  if (!o->verified)
    fprintf(out, "Nothing was verified: without --reference, `ok` means only that a kernel "
                 "ran.\n");
}
