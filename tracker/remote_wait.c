/* A key nobody serves is said at once: TVM's client would wait for a device that never
 * comes and then report a nested retry error.  The tracker's SUMMARY (TVM's as well as
 * kcage's) names every registered agent, free or busy, and every key's queue. */
#include "remote_wait.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kcage/escape.h"
#include "kcage/log.h"
#include "kcage/tracker.h"
#include "netio.h"

typedef struct key_state {
  size_t agents;    /* registered under the key (UPDATE_INFO "server:<key>") */
  size_t free;      /* of them, free now */
  size_t pending;   /* requests already waiting for one */
  char others[256]; /* other keys the tracker knows, for the message */
} key_state;

static size_t count(const json_t *v) {
  return json_is_integer(v) && json_integer_value(v) > 0 ? (size_t)json_integer_value(v) : 0;
}

static void add_other(key_state *ks, const char *k) {
  char shown[128];
  size_t l = strlen(ks->others);
  if (!k || !*k || l + 8 >= sizeof ks->others || strstr(ks->others, k))
    return;
  snprintf(ks->others + l, sizeof ks->others - l, "%s%s", l ? ", " : "",
           kc_escape(k, shown, sizeof shown));
}

static void read_summary(const json_t *sum, const char *key, key_state *ks) {
  const json_t *q = json_object_get(sum, "queue_info"), *v;
  const char *k;
  json_object_foreach((json_t *)q, k, v) {
    if (!strcmp(k, key)) {
      ks->free = count(json_object_get(v, "free"));
      ks->pending = count(json_object_get(v, "pending"));
    } else if (count(json_object_get(v, "free")))
      add_other(ks, k);
  }
  size_t i;
  json_array_foreach(json_object_get(sum, "server_info"), i, v) {
    const char *sk = json_string_value(json_object_get(v, "key"));
    if (!sk || strncmp(sk, "server:", 7))
      continue;
    if (!strcmp(sk + 7, key))
      ks->agents++;
    else
      add_other(ks, sk + 7);
  }
  if (ks->free > ks->agents) /* a device PUT without UPDATE_INFO */
    ks->agents = ks->free;
}

static int query(const char *host, uint16_t port, const char *key, key_state *ks, kc_error *err) {
  kc_tracker_conn *c;
  json_t *sum = NULL;
  memset(ks, 0, sizeof *ks);
  if (kc_tracker_connect(host, port, 5, &c, err) < 0)
    return -1;
  int rc = kc_tracker_summary(c, &sum, err);
  kc_tracker_close(c);
  if (rc < 0)
    return kc_error_prefix(err, "tracker %s:%u", host, port);
  read_summary(sum, key, ks);
  json_decref(sum);
  return 0;
}

int kc_remote_key_check(const char *host, uint16_t port, const char *key, double grace_s,
                        kc_error *err) {
  double deadline = kc_deadline(grace_s);
  key_state ks;
  for (;;) {
    if (query(host, port, key, &ks, err) < 0)
      return -1;
    if (ks.agents)
      break;
    if (kc_now_s() >= deadline) {
      char shown[KC_TRACKER_MAX_KEY * 4 + 1];
      kc_escape(key, shown, sizeof shown);
      kc_error_set(err, 0,
                   "no agent has registered key \"%s\" with the tracker at %s:%u (it knows %s); "
                   "start one with `kcage agent --tracker %s:%u --key %s`",
                   shown, host, port, ks.others[0] ? ks.others : "no keys", host, port, shown);
      if (err)
        err->code = ENOENT;
      return -1;
    }
    struct timespec ts = {0, 250 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!ks.free) {
    char shown[KC_TRACKER_MAX_KEY * 4 + 1];
    kc_log(KC_LOG_INFO, "kcage bench",
           "waiting for a \"%s\" device: %zu registered, all busy; this request is number %zu in "
           "the queue",
           kc_escape(key, shown, sizeof shown), ks.agents, ks.pending + 1);
  }
  return 0;
}
