/* The client's decoder of a device agent's "records" reply.  The agent is a network
 * peer: anyone can register under a device key, so its reply is hostile input.  Every
 * record is rebuilt from scratch: the fields of the record contract are checked for
 * type and range, other fields pass only when they are small and shallow, and the
 * client's own kernel path replaces whatever name the agent used.  A reply that does
 * not fit is an error for the batch that names the peer; nothing the agent sends can
 * reach the table or the JSON lines unchecked. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kcage/escape.h"
#include "kcage/measure.h"
#include "kcage/tracker.h"
#include "netio.h"

#define MAX_MESSAGE 65536
#define MAX_DEVICE 1024
#define MAX_RUN_SECS 100000
#define MAX_EXTRA_FIELDS 32
#define MAX_EXTRA_BYTES 4096
#define MAX_EXTRA_DEPTH 3

static int bad(kc_error *err, const char *peer, size_t i, const char *what) {
  return kc_error_set(err, EPROTO, "device agent %s sent a bad record %zu: %s", peer, i, what);
}

static bool seconds_ok(const json_t *v) {
  return json_is_null(v) ||
         (json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) >= 0);
}

static bool count_ok(const json_t *v) {
  return json_is_null(v) || (json_is_integer(v) && json_integer_value(v) >= 0 &&
                             json_integer_value(v) <= (json_int_t)UINT32_MAX);
}

static bool string_ok(const json_t *v, size_t max) {
  return json_is_string(v) && json_string_length(v) <= max &&
         strlen(json_string_value(v)) == json_string_length(v);
}

static bool run_secs_ok(const json_t *v) {
  if (json_is_null(v))
    return true;
  if (!json_is_array(v) || json_array_size(v) > MAX_RUN_SECS)
    return false;
  size_t i;
  json_t *x;
  json_array_foreach(v, i, x) if (!json_is_number(x) || !seconds_ok(x)) return false;
  return true;
}

/* The named fields of a record, each with its check. */
static const struct field {
  const char *name;
  bool (*ok)(const json_t *);
} fields[] = {
    {"run_secs", run_secs_ok},
    {"median_s", seconds_ok},
    {"min_s", seconds_ok},
    {"cv", seconds_ok},
    {"number", count_ok},
    {"repeat", count_ok},
    {"max_abs_err", seconds_ok},
    {"build_s", seconds_ok},
    {"mean_s", seconds_ok},
    {"stddev_s", seconds_ok},
    {"max_s", seconds_ok},
    {"warmup_secs", run_secs_ok},
    {"reference_median_s", seconds_ok},
    {"speedup", seconds_ok},
};

static const struct field *known(const char *k) {
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
    if (!strcmp(fields[i].name, k))
      return &fields[i];
  return NULL;
}

static bool shallow(const json_t *v, int depth) {
  if (depth > MAX_EXTRA_DEPTH)
    return false;
  size_t i;
  const char *k;
  json_t *x;
  if (json_is_array(v))
    json_array_foreach(v, i, x) if (!shallow(x, depth + 1)) return false;
  if (json_is_object(v))
    json_object_foreach((json_t *)v, k, x) if (!shallow(x, depth + 1)) return false;
  return true;
}

static int copy_extra(json_t *out, const char *k, json_t *v, size_t *nextra) {
  if (strlen(k) > 64 || ++*nextra > MAX_EXTRA_FIELDS || !shallow(v, 0) ||
      json_dumpb(v, NULL, 0, JSON_COMPACT) > MAX_EXTRA_BYTES)
    return -1;
  return json_object_set(out, k, v);
}

static json_t *decode_one(const json_t *rec, const char *kernel, const char *peer, size_t i,
                          kc_error *err) {
  kc_measure_status st;
  const char *status = json_string_value(json_object_get(rec, "status"));
  json_t *msg = json_object_get(rec, "message"), *dev = json_object_get(rec, "device");
  if (!json_is_object(rec))
    return bad(err, peer, i, "not an object"), NULL;
  if (!status || kc_measure_status_parse(status, &st) < 0)
    return bad(err, peer, i, "unknown status"), NULL;
  if (msg && !json_is_null(msg) && !string_ok(msg, MAX_MESSAGE))
    return bad(err, peer, i, "message is not a short string"), NULL;
  if (!string_ok(dev, MAX_DEVICE))
    return bad(err, peer, i, "device is not a short string"), NULL;
  json_t *out = json_pack("{s:s, s:s, s:O}", "kernel", kernel, "status", kc_measure_status_name(st),
                          "message", msg ? msg : json_null());
  const char *k;
  json_t *v;
  size_t nextra = 0;
  json_object_foreach((json_t *)rec, k, v) {
    if (!strcmp(k, "kernel") || !strcmp(k, "status") || !strcmp(k, "message") ||
        !strcmp(k, "device"))
      continue;
    const struct field *f = known(k);
    if (f ? !f->ok(v) || json_object_set(out, k, v) < 0 : copy_extra(out, k, v, &nextra) < 0) {
      json_decref(out);
      char what[320], name[260];
      snprintf(what, sizeof what, "field %s is out of shape", kc_escape(k, name, sizeof name));
      return bad(err, peer, i, what), NULL;
    }
  }
  json_object_set(out, "device", dev);
  return out;
}

int kc_remote_records_decode(const json_t *reply, const char *const *kernels, size_t n,
                             const char *peer, json_t **records, kc_error *err) {
  json_t *recs = json_object_get(reply, "records");
  if (!json_is_array(recs) || json_array_size(recs) != n)
    return kc_error_set(err, EPROTO, "device agent %s returned %zu records for %zu kernels", peer,
                        json_array_size(recs), n);
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *r = decode_one(json_array_get(recs, i), kernels[i], peer, i, err);
    if (!r) {
      json_decref(out);
      return -1;
    }
    json_array_append_new(out, r);
  }
  *records = out;
  return 0;
}
