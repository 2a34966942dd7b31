#include "trk_test.h"

/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <arpa/inet.h>
#include <endian.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run(void *arg) {
  trk_srv *t = arg;
  kc_error err;
  kc_tracker_server_run(t->s, &err);
  return NULL;
}

void trk_start(trk_srv *t) {
  trk_start_ka(t, 0);
}

void trk_start_ka(trk_srv *t, double keepalive_s) {
  trk_start_hs(t, keepalive_s, 0);
}

void trk_start_hs(trk_srv *t, double keepalive_s, double handshake_s) {
  kc_tracker_opts o;
  kc_tracker_opts_init(&o);
  o.keepalive_s = keepalive_s;
  o.handshake_s = handshake_s;
  trk_start_opts(t, &o);
}

void trk_start_opts(trk_srv *t, kc_tracker_opts *opts) {
  kc_tracker_opts o = *opts;
  o.host = "127.0.0.1";
  o.port = 0;
  o.stop_key = "tracker:0.test";
  kc_error err = {0};
  assert_int_equal(kc_tracker_server_new(&o, &t->s, &err), 0);
  t->port = kc_tracker_server_port(t->s);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, run, t), 0);
  t->thread = (unsigned long)th;
}

void trk_stop(trk_srv *t) {
  kc_tracker_server_stop(t->s);
  pthread_join((pthread_t)t->thread, NULL);
  kc_tracker_server_free(t->s);
  t->s = NULL;
}

static int read_full(int fd, void *buf, size_t len, double timeout_s) {
  double end = now_s() + timeout_s;
  char *p = buf;
  while (len) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int ms = (int)((end - now_s()) * 1000);
    if (ms < 0 || poll(&pf, 1, ms) <= 0)
      return -1;
    ssize_t n = recv(fd, p, len, 0);
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int raw_connect(uint16_t port, bool magic) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  if (magic) {
    uint32_t m = htole32(KC_TRACKER_MAGIC), r = 0;
    assert_int_equal(send(fd, &m, 4, MSG_NOSIGNAL), 4);
    assert_int_equal(read_full(fd, &r, 4, 5), 0);
    assert_int_equal(le32toh(r), KC_TRACKER_MAGIC);
  }
  return fd;
}

void raw_send_bytes(int fd, const void *buf, size_t len) {
  ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
  (void)n; /* a closed peer is what some tests expect */
}

void raw_send(int fd, const char *json) {
  uint32_t l = htole32((uint32_t)strlen(json));
  raw_send_bytes(fd, &l, 4);
  raw_send_bytes(fd, json, strlen(json));
}

char *raw_recv(int fd, double timeout_s) {
  uint32_t l;
  if (read_full(fd, &l, 4, timeout_s) < 0)
    return NULL;
  l = le32toh(l);
  if (l == 0 || l > (1u << 24))
    return NULL;
  char *b = calloc(1, l + 1);
  if (read_full(fd, b, l, timeout_s) < 0) {
    free(b);
    return NULL;
  }
  return b;
}

bool raw_closed(int fd, double timeout_s) {
  double end = now_s() + timeout_s;
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int ms = (int)((end - now_s()) * 1000);
    if (ms < 0 || poll(&pf, 1, ms) <= 0)
      return false;
    char b[256];
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n <= 0)
      return true;
  }
}

bool raw_quiet(int fd, double timeout_s) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  return poll(&pf, 1, (int)(timeout_s * 1000)) == 0;
}

void raw_call_expect(int fd, const char *json, const char *want) {
  raw_send(fd, json);
  char *r = raw_recv(fd, 5);
  assert_non_null(r);
  assert_string_equal(r, want);
  free(r);
}

void raw_register(int fd, const char *key, int port, const char *matchkey) {
  char buf[1024];
  snprintf(buf, sizeof buf, "[5, {\"key\": \"server:%s\", \"addr\": [null, %d]}]", key, port);
  raw_call_expect(fd, buf, "0");
  snprintf(buf, sizeof buf, "[3, \"%s\", [%d, \"%s\"], null]", key, port, matchkey);
  raw_call_expect(fd, buf, "0");
}

static json_t *get_summary(uint16_t port) {
  int fd = raw_connect(port, true);
  raw_send(fd, "[6]");
  char *r = raw_recv(fd, 5);
  close(fd);
  assert_non_null(r);
  json_t *v = json_loads(r, 0, NULL);
  free(r);
  assert_non_null(v);
  return v;
}

int summary_count(uint16_t port, const char *key, const char *field) {
  json_t *v = get_summary(port);
  json_t *q = json_object_get(
      json_object_get(json_object_get(json_array_get(v, 1), "queue_info"), key), field);
  int r = q ? (int)json_integer_value(q) : -1;
  json_decref(v);
  return r;
}

int summary_servers(uint16_t port) {
  json_t *v = get_summary(port);
  int n = (int)json_array_size(json_object_get(json_array_get(v, 1), "server_info"));
  json_decref(v);
  return n;
}

int wait_count(uint16_t port, const char *key, const char *field, int want, double timeout_s) {
  double end = now_s() + timeout_s;
  int v;
  while ((v = summary_count(port, key, field)) != want && now_s() < end)
    usleep(10000);
  return v;
}
