/* The TVM tracker wire: frames (int32 LE length + JSON) and the message shapes of
 * reference/tvm.md §2.2, validated strictly: anything TVM's own peers never send is
 * refused, and the caller closes only that connection. */
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frame_reader.h"
#include "kcage/tracker.h"

static int bad(kc_error *err, const char *what) {
  return kc_error_set(err, EPROTO, "%s", what);
}

static bool short_string(const json_t *v, size_t max) {
  return json_is_string(v) && json_string_length(v) > 0 && json_string_length(v) <= max &&
         strlen(json_string_value(v)) == json_string_length(v); /* no embedded NUL */
}

/* A port as TVM's peers send it: an integer (Python) or a digit string (C++ server). */
static bool valid_port(const json_t *v) {
  if (json_is_integer(v))
    return json_integer_value(v) >= 0 && json_integer_value(v) <= 65535;
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 5)
    return false;
  const char *s = json_string_value(v);
  for (size_t i = 0; s[i]; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return atoi(s) <= 65535;
}

static int parse_put(json_t *a, kc_tracker_msg *m, kc_error *err) {
  size_t n = json_array_size(a);
  if (n != 3 && n != 4)
    return bad(err, "PUT: expected [3, key, [port, matchkey], custom_addr]");
  json_t *key = json_array_get(a, 1), *pm = json_array_get(a, 2);
  if (!short_string(key, KC_TRACKER_MAX_KEY))
    return bad(err, "PUT: key must be a short string");
  if (!json_is_array(pm) || json_array_size(pm) != 2 || !valid_port(json_array_get(pm, 0)) ||
      !short_string(json_array_get(pm, 1), KC_TRACKER_MAX_MATCHKEY))
    return bad(err, "PUT: expected [port, matchkey]");
  m->key = json_string_value(key);
  m->port = json_array_get(pm, 0);
  m->matchkey = json_string_value(json_array_get(pm, 1));
  if (n == 4) {
    json_t *ca = json_array_get(a, 3);
    if (json_is_null(ca))
      m->custom_addr = NULL;
    else if (short_string(ca, KC_TRACKER_MAX_ADDR - 1))
      m->custom_addr = json_string_value(ca);
    else
      return bad(err, "PUT: custom_addr must be a string or null");
  }
  return 0;
}

static int parse_request(json_t *a, kc_tracker_msg *m, kc_error *err) {
  if (json_array_size(a) != 4)
    return bad(err, "REQUEST: expected [4, key, user, priority]");
  json_t *key = json_array_get(a, 1), *user = json_array_get(a, 2), *prio = json_array_get(a, 3);
  if (!short_string(key, KC_TRACKER_MAX_KEY))
    return bad(err, "REQUEST: key must be a short string");
  (void)user; /* TVM ignores it (and sends "") */
  if (!json_is_number(prio) || !isfinite(json_number_value(prio)))
    return bad(err, "REQUEST: priority must be a number");
  m->key = json_string_value(key);
  m->priority = json_number_value(prio);
  return 0;
}

#define KC_TRACKER_MAX_INFO_FIELDS 64
/* TVM's servers send {"key": .., "addr": [..]} (depth 2).  The tracker stores the info
 * and repeats it in SUMMARY, where deep nesting kills Python's json.loads
 * (RecursionError) in TVM's query_rpc_tracker: keep it shallow. */
#define KC_TRACKER_MAX_INFO_DEPTH 8

/* Depth of v (a scalar is 0), giving up past max. */
static bool deeper_than(const json_t *v, int max) {
  if (max < 0)
    return true;
  size_t i;
  const char *k;
  json_t *x;
  if (json_is_array(v))
    json_array_foreach(v, i, x) if (deeper_than(x, max - 1)) return true;
  if (json_is_object(v))
    json_object_foreach((json_t *)v, k, x) if (deeper_than(x, max - 1)) return true;
  return false;
}

static int parse_update_info(json_t *a, kc_tracker_msg *m, kc_error *err) {
  if (json_array_size(a) != 2)
    return bad(err, "UPDATE_INFO: expected [5, {...}]");
  json_t *info = json_array_get(a, 1);
  if (!json_is_object(info) || json_object_size(info) > KC_TRACKER_MAX_INFO_FIELDS)
    return bad(err, "UPDATE_INFO: info must be an object");
  if (deeper_than(info, KC_TRACKER_MAX_INFO_DEPTH))
    return bad(err, "UPDATE_INFO: info is nested too deep");
  json_t *addr = json_object_get(info, "addr"), *key = json_object_get(info, "key");
  /* TVM reads info["addr"][0] unconditionally; the port is an int (Python server) or a
   * string (C++ server). */
  if (!json_is_array(addr) || json_array_size(addr) < 1 || json_array_size(addr) > 4)
    return bad(err, "UPDATE_INFO: addr must be [host or null, port]");
  json_t *h = json_array_get(addr, 0), *p = json_array_get(addr, 1);
  if (!json_is_null(h) && !short_string(h, KC_TRACKER_MAX_ADDR - 1))
    return bad(err, "UPDATE_INFO: addr[0] must be a string or null");
  if (p && !valid_port(p) && !json_is_null(p))
    return bad(err, "UPDATE_INFO: addr[1] must be a port");
  if (key && !short_string(key, KC_TRACKER_MAX_KEY + 16))
    return bad(err, "UPDATE_INFO: key must be a short string");
  m->info = info;
  return 0;
}

int kc_tracker_msg_parse(const void *buf, size_t len, kc_tracker_msg *m, kc_error *err) {
  memset(m, 0, sizeof *m);
  json_error_t jerr;
  json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  if (!root)
    return kc_error_set(err, EPROTO, "bad JSON: %s", jerr.text);
  m->root = root;
  int rc = -1;
  json_t *code = json_array_get(root, 0);
  if (!json_is_array(root) || !json_is_integer(code)) {
    bad(err, "a message must be [code, ...]");
    goto out;
  }
  m->code = (int)json_integer_value(code);
  if ((json_int_t)m->code != json_integer_value(code)) {
    bad(err, "unknown code");
    goto out;
  }
  size_t n = json_array_size(root);
  switch (m->code) {
  case KC_TRK_PING:
  case KC_TRK_SUMMARY:
  case KC_TRK_GET_PENDING_MATCHKEYS:
    rc = n == 1 ? 0 : bad(err, "expected [code]");
    break;
  case KC_TRK_STOP:
    if (n == 2 && json_is_string(json_array_get(root, 1))) {
      m->stop_key = json_string_value(json_array_get(root, 1));
      rc = 0;
    } else {
      bad(err, "STOP: expected [2, stop_key]");
    }
    break;
  case KC_TRK_PUT:
    rc = parse_put(root, m, err);
    break;
  case KC_TRK_REQUEST:
    rc = parse_request(root, m, err);
    break;
  case KC_TRK_UPDATE_INFO:
    rc = parse_update_info(root, m, err);
    break;
  default:
    kc_error_set(err, EPROTO, "unknown tracker code %d", m->code);
  }
out:
  if (rc < 0) {
    json_decref(root);
    memset(m, 0, sizeof *m);
  }
  return rc;
}

void kc_tracker_msg_clear(kc_tracker_msg *m) {
  if (m->root)
    json_decref(m->root);
  memset(m, 0, sizeof *m);
}

static int count_cb(const char *buf, size_t size, void *data) {
  (void)buf;
  *(size_t *)data += size;
  return 0;
}

struct fill {
  char *p;
};
static int fill_cb(const char *buf, size_t size, void *data) {
  struct fill *f = data;
  memcpy(f->p, buf, size);
  f->p += size;
  return 0;
}

int kc_tracker_frame_encode(const json_t *value, char **out, size_t *out_len, kc_error *err) {
  /* Two passes through jansson's callback writer: no temporary copy of the text. */
  size_t n = 0;
  json_dump_callback(value, count_cb, &n, KC_TRACKER_JSON_FLAGS);
  if (n == 0 || n > KC_TRACKER_MAX_REPLY)
    return kc_error_set(err, EMSGSIZE, "frame of %zu bytes", n);
  char *buf = malloc(n + 4);
  if (!buf)
    return kc_error_set(err, ENOMEM, "frame");
  uint32_t le = (uint32_t)n; /* x86/arm LE hosts: the wire is little-endian */
  le = htole32(le);
  memcpy(buf, &le, 4);
  struct fill f = {buf + 4};
  json_dump_callback(value, fill_cb, &f, KC_TRACKER_JSON_FLAGS);
  *out = buf;
  *out_len = n + 4;
  return 0;
}

void kc_frame_reader_init(kc_frame_reader *r, size_t max_frame) {
  memset(r, 0, sizeof *r);
  r->max_frame = max_frame ? max_frame : KC_TRACKER_MAX_FRAME;
}

void kc_frame_reader_free(kc_frame_reader *r) {
  free(r->buf);
  r->buf = NULL;
  r->off = r->len = r->cap = r->taken = 0;
}

int kc_frame_reader_push(kc_frame_reader *r, const void *data, size_t len, kc_error *err) {
  if (r->taken) {
    r->off += r->taken;
    r->taken = 0;
  }
  if (r->off) {
    memmove(r->buf, r->buf + r->off, r->len - r->off);
    r->len -= r->off;
    r->off = 0;
  }
  /* Never more than one maximal frame plus one read's worth buffered: a peer that
   * pipelines without reading replies cannot grow us without bound. */
  if (r->len + len > r->max_frame + 4 + 65536)
    return kc_error_set(err, EMSGSIZE, "peer sent too much without reading replies");
  if (r->len + len > r->cap) {
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + len)
      cap *= 2;
    char *nb = realloc(r->buf, cap);
    if (!nb)
      return kc_error_set(err, ENOMEM, "frame buffer");
    r->buf = nb;
    r->cap = cap;
  }
  memcpy(r->buf + r->len, data, len);
  r->len += len;
  return 0;
}

int kc_frame_reader_next(kc_frame_reader *r, const char **payload, size_t *plen, kc_error *err) {
  r->off += r->taken;
  r->taken = 0;
  if (r->off == r->len)
    r->off = r->len = 0;
  size_t avail = r->len - r->off;
  if (avail < 4)
    return 0;
  uint32_t raw;
  memcpy(&raw, r->buf + r->off, 4);
  int32_t n = (int32_t)le32toh(raw);
  if (n <= 0 || (size_t)n > r->max_frame)
    return kc_error_set(err, EMSGSIZE, "bad frame length %d", n);
  if (avail < 4 + (size_t)n)
    return 0;
  *payload = r->buf + r->off + 4;
  *plen = (size_t)n;
  r->taken = 4 + (size_t)n;
  return 1;
}

bool kc_rpc_client_key(const char *key, const char *matchkey, double *timeout_s) {
  *timeout_s = 0;
  size_t tok = strcspn(key, " \t\n"), ml = strlen(matchkey);
  if (tok != 7 + ml || strncmp(key, "client:", 7) || strncmp(key + 7, matchkey, ml))
    return false;
  const char *t = strstr(key + tok, "-timeout=");
  if (t) {
    double v = strtod(t + 9, NULL);
    *timeout_s = isfinite(v) && v > 0 ? v : 0;
  }
  return true;
}
