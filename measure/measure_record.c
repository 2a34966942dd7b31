/* The per-kernel record of `kcage bench` (docs/contracts.md): statistics as hyperfine
 * reports them, what a tuning log needs to reproduce a figure (seed, compiler and
 * flags, kcage version, timestamps, the reference's own timing), and the printing of
 * one record as a JSON Lines line (ASCII only) with its numbers in their shortest form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nettle/sha2.h>

#include "measure_internal.h"
#include "measure_kernel.h"

#ifndef KC_VERSION
#define KC_VERSION "unknown"
#endif

void kc_sha256_hex(const void *data, size_t len, char out[65]) {
  struct sha256_ctx h;
  uint8_t d[SHA256_DIGEST_SIZE];
  sha256_init(&h);
  sha256_update(&h, len, data);
  sha256_digest(&h, sizeof d, d);
  for (size_t i = 0; i < sizeof d; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void kc_mstats_of(const double *v, uint32_t n, kc_mstats *s) {
  s->median = s->min = s->max = s->mean = s->stddev = s->cv = NAN;
  if (!n)
    return;
  double *t = malloc(n * sizeof *t);
  if (!t)
    return;
  memcpy(t, v, n * sizeof *t);
  qsort(t, n, sizeof *t, cmp_double);
  s->median = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  s->min = t[0];
  s->max = t[n - 1];
  free(t);
  double sum = 0, sq = 0;
  for (uint32_t i = 0; i < n; i++)
    sum += v[i];
  s->mean = sum / n;
  for (uint32_t i = 0; i < n; i++)
    sq += (v[i] - s->mean) * (v[i] - s->mean);
  s->stddev = n > 1 ? sqrt(sq / (n - 1)) : 0;
  s->cv = s->mean > 0 ? s->stddev / s->mean : NAN;
}

void kc_rfc3339(const struct timespec *ts, char *buf, size_t len) {
  struct tm tm;
  gmtime_r(&ts->tv_sec, &tm);
  char base[32];
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%06ldZ", base, ts->tv_nsec / 1000);
}

static json_t *num_or_null(double v) {
  return isfinite(v) ? json_real(v) : json_null();
}

static json_t *secs_array(const double *v, uint32_t n) {
  json_t *a = json_array();
  for (uint32_t i = 0; i < n; i++)
    json_array_append_new(a, json_real(v[i]));
  return a;
}

static void set_timing(json_t *o, const kc_mrecord_in *in) {
  const kc_kmeasure *m = in->m;
  bool timed = in->status == KC_MEASURE_OK && m && m->repeat > 0;
  kc_mstats s;
  kc_mstats_of(timed ? m->run_secs : NULL, timed ? m->repeat : 0, &s);
  json_object_set_new(o, "run_secs", timed ? secs_array(m->run_secs, m->repeat) : json_null());
  json_object_set_new(o, "median_s", num_or_null(s.median));
  json_object_set_new(o, "min_s", num_or_null(s.min));
  json_object_set_new(o, "cv", num_or_null(s.cv));
  json_object_set_new(o, "number", timed ? json_integer((json_int_t)m->number) : json_null());
  json_object_set_new(o, "repeat", timed ? json_integer(m->repeat) : json_null());
  json_object_set_new(o, "max_abs_err", m ? num_or_null(m->max_abs_err) : json_null());
  json_object_set_new(o, "build_s", num_or_null(in->build_s));
  json_object_set_new(o, "device", json_string(in->device));
  json_object_set_new(o, "mean_s", num_or_null(s.mean));
  json_object_set_new(o, "stddev_s", num_or_null(s.stddev));
  json_object_set_new(o, "max_s", num_or_null(s.max));
  json_object_set_new(o, "warmup_secs",
                      m && m->n_warmup && m->warmup_secs ? secs_array(m->warmup_secs, m->n_warmup)
                                                         : json_null());
  double max_cv = in->max_cv < 0 ? INFINITY : in->max_cv > 0 ? in->max_cv : 0.1;
  json_object_set_new(o, "unstable",
                      timed ? json_boolean(isfinite(s.cv) && s.cv > max_cv) : json_null());
  json_object_set_new(o, "timeout",
                      in->status == KC_MEASURE_TIMEOUT && m && m->limit ? json_string(m->limit)
                                                                        : json_null());
}

static json_t *str_or_null(const char *s) {
  return s ? json_string(s) : json_null();
}

/* What was asked (the tensors, the entry point, the truth and its tolerances) and of
 * which bytes: enough to rerun the same measurement from the record alone. */
static void set_problem(json_t *o, const kc_mrecord_in *in) {
  json_object_set_new(o, "args", str_or_null(in->args));
  json_object_set_new(o, "entry", str_or_null(in->entry));
  json_object_set_new(o, "reference", str_or_null(in->reference));
  json_object_set_new(o, "reference_sha256", str_or_null(in->reference_sha256));
  json_object_set_new(o, "rtol", num_or_null(in->rtol));
  json_object_set_new(o, "atol", num_or_null(in->atol));
  json_object_set_new(o, "sha256", str_or_null(in->sha256));
  json_object_set_new(o, "cached", in->cached < 0 ? json_null() : json_boolean(in->cached));
}

json_t *kc_mrecord(const kc_mrecord_in *in) {
  json_t *o = json_object();
  json_object_set_new(o, "kernel", json_string(in->kernel));
  json_object_set_new(o, "status", json_string(kc_measure_status_name(in->status)));
  json_object_set_new(o, "message",
                      in->message && in->message[0] ? json_string(in->message) : json_null());
  set_timing(o, in);
  kc_measure_record_set_reference(o, in->reference_median_s);
  /* Whether the inputs could have been known in advance (README, threat model). */
  json_object_set_new(o, "seed",
                      !in->seed_set                     ? json_string("secret")
                      : in->seed <= (uint64_t)INT64_MAX ? json_integer((json_int_t)in->seed)
                                                        : json_real((double)in->seed));
  json_object_set_new(o, "cc", in->cc ? json_string(in->cc) : json_null());
  json_object_set_new(o, "cflags", in->cflags ? json_string(in->cflags) : json_null());
  json_object_set_new(o, "kcage_version", json_string(KC_VERSION));
  char t[64];
  kc_rfc3339(&in->started, t, sizeof t);
  json_object_set_new(o, "started_at", json_string(t));
  kc_rfc3339(&in->ended, t, sizeof t);
  json_object_set_new(o, "ended_at", json_string(t));
  /* How many timed calls were compared with the reference, out of how many. */
  json_object_set_new(o, "checked_calls",
                      in->m && in->status == KC_MEASURE_OK
                          ? json_pack("{s:I, s:I}", "verified", (json_int_t)in->m->checked_calls,
                                      "timed", (json_int_t)in->m->timed_calls)
                          : json_null());
  json_object_set_new(o, "isolation", json_string(in->isolation ? in->isolation : "sandbox"));
  json_object_set_new(o, "abi", json_string(kc_abi_name(in->abi)));
  set_problem(o, in);
  return o;
}

void kc_measure_record_set_reference(json_t *rec, double reference_median_s) {
  json_t *m = json_object_get(rec, "median_s");
  double med = json_is_number(m) ? json_number_value(m) : NAN;
  json_object_set_new(rec, "reference_median_s", num_or_null(reference_median_s));
  json_object_set_new(rec, "speedup",
                      isfinite(reference_median_s) && med > 0 ? json_real(reference_median_s / med)
                                                              : json_null());
}

/* Twelve significant digits: far finer than any clock here (and than the spread of
 * any timing), and few enough that "%.12g" of the rounded value is its shortest
 * round-trip form (decimals of 12 digits are 1e-11 apart relative, doubles 1e-16). */
static void quantise(json_t *v) {
  size_t i;
  const char *k;
  json_t *e;
  if (json_is_real(v)) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.12g", json_real_value(v));
    json_real_set(v, strtod(buf, NULL));
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, e) quantise(e);
  } else if (json_is_object(v)) {
    json_object_foreach(v, k, e) quantise(e);
  }
}

char *kc_measure_record_dumps(const json_t *rec) {
  json_t *c = json_deep_copy(rec);
  if (!c)
    return NULL;
  quantise(c);
  char *s = json_dumps(c, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII |
                              JSON_REAL_PRECISION(12));
  json_decref(c);
  return s;
}
