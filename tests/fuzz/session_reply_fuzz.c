/* libFuzzer target: what a kcage client and agent decode from each other.
 * Input byte 0 selects:
 *   'C' the rest is a run config as the agent reads it (kc_run_config_decode), then
 *       clamped to operator caps;
 *   'H' the rest is the key of TVM's RPC handshake as the agent parses it;
 *   'A' the rest is an agent's hello, held to the session_constructor_args the client
 *       sent (kc_session_ctor_acked); also the rest split at NULs as arguments to the
 *       client's own check (kc_session_ctor_check);
 *   'S' the rest is a byte stream from the peer, read through a socket as session
 *       frames (kc_session_recv, both sides' frame decoder) until it fails;
 *   else byte 0 is the number of kernels (mod 8: "1" is one) and the rest an agent's reply to
 *       "run", decoded by the client (kc_remote_records_decode); what it accepts must
 *       print and re-encode. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcage/measure.h"
#include "kcage/tracker.h"
#include "session_ctor.h"

static void config(const uint8_t *data, size_t size) {
  json_t *c = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
  kc_measure_config cfg;
  kc_error err;
  if (c && kc_run_config_decode(c, &cfg, &err) == 0) {
    kc_run_caps caps = {.max_memory_bytes = 1u << 28, .max_timeout_s = 5, .max_session_s = 60};
    json_decref(kc_run_config_clamp(&cfg, &caps));
    json_t *again = kc_run_config_encode(&cfg);
    kc_measure_config back;
    if (!again || kc_run_config_decode(again, &back, &err) < 0)
      abort(); /* what we accept, we can send on */
    json_decref(again);
  }
  json_decref(c);
}

static void ctor_ack(const uint8_t *data, size_t size) {
  json_t *hello = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
  json_t *asked = json_pack("[s, s, s]", "kcage.sandbox", "memory=256M", "pids=8");
  kc_error err;
  kc_session_ctor_acked(hello, asked, &err);
  json_decref(asked);
  json_decref(hello);
  char *copy = malloc(size + 1);
  const char *args[KC_SESSION_CTOR_MAX_ARGS + 2];
  size_t n = 0;
  if (!copy)
    return;
  memcpy(copy, data, size);
  copy[size] = 0;
  for (size_t at = 0; at <= size && n < sizeof args / sizeof *args; at += strlen(copy + at) + 1)
    args[n++] = copy + at;
  kc_session_ctor_check(args, n, &err);
  free(copy);
}

static void frames(const uint8_t *data, size_t size) {
  int sv[2];
  if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return;
  int big = 1 << 18;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  if (write(sv[0], data, size) == (ssize_t)size) {
    shutdown(sv[0], SHUT_WR);
    json_t *m;
    kc_error err;
    while (kc_session_recv(sv[1], -1, &m, &err) == 0) {
      if (!json_is_object(m) || !json_string_value(json_object_get(m, "op")))
        abort(); /* what it hands out always has an op */
      json_decref(m);
    }
  }
  close(sv[0]);
  close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  if (data[0] == 'H') {
    char *key = strndup((const char *)data + 1, size - 1);
    double t;
    if (key && kc_rpc_client_key(key, "cpu:0.1234", &t) && (!(t >= 0) || t > 1e308))
      abort();
    free(key);
    return 0;
  }
  if (data[0] == 'A') {
    ctor_ack(data + 1, size - 1);
    return 0;
  }
  if (data[0] == 'S') {
    frames(data + 1, size - 1);
    return 0;
  }
  if (data[0] == 'C') {
    config(data + 1, size - 1);
    return 0;
  }
  static const char *const kernels[8] = {"a.c", "b.c", "c.c", "d.c", "e.c", "f.c", "g.c", "h.c"};
  size_t n = data[0] % 8;
  json_t *r = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL), *recs = NULL;
  kc_error err;
  if (r && kc_remote_records_decode(r, kernels, n, "peer", &recs, &err) == 0) {
    char *t = json_dumps(recs, JSON_COMPACT);
    if (!t || json_array_size(recs) != n)
      abort();
    free(t);
    json_decref(recs);
  }
  json_decref(r);
  return 0;
}
