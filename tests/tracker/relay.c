#include "relay.h"

#include <arpa/inet.h>
#include <endian.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcage/tracker.h"
#include "trk_test.h"

#define UNIT_MAX (4u << 20)
#define SEEN_MAX (8u << 20)

static int read_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 30000) <= 0)
      return -1;
    ssize_t n = recv(fd, p, len, 0);
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* One unit of the stream: a length-prefixed frame or record (*len includes the 4
 * bytes), or, after a plaintext {"op":"file"} header, the file's raw bytes. */
typedef struct unit {
  char *buf;
  size_t len;
  bool raw;
} unit;

typedef struct dir {
  relay *r;
  int from, to;
  bool client;     /* client -> agent */
  size_t raw_next; /* plaintext: raw bytes that follow a file header */
} dir;

static int read_unit(dir *d, unit *u) {
  u->raw = d->raw_next > 0;
  if (u->raw) {
    u->len = d->raw_next;
    d->raw_next = 0;
    u->buf = malloc(u->len);
    return u->buf && read_all(d->from, u->buf, u->len) == 0 ? 0 : -1;
  }
  uint32_t le;
  if (read_all(d->from, &le, 4) < 0 || le32toh(le) > UNIT_MAX)
    return -1;
  u->len = 4 + le32toh(le);
  u->buf = malloc(u->len);
  if (!u->buf)
    return -1;
  memcpy(u->buf, &le, 4);
  if (read_all(d->from, u->buf + 4, u->len - 4) < 0)
    return -1;
  json_t *m = json_loadb(u->buf + 4, u->len - 4, 0, NULL);
  const char *op = json_string_value(json_object_get(m, "op"));
  if (d->client && op && !strcmp(op, "file"))
    d->raw_next = (size_t)json_integer_value(json_object_get(m, "size"));
  json_decref(m);
  return 0;
}

/* A plaintext frame's JSON re-encoded into u (the relay's own edit). */
static void rewrite(unit *u, json_t *m) {
  char *t = json_dumps(m, JSON_COMPACT);
  free(u->buf);
  u->len = 4 + strlen(t);
  u->buf = malloc(u->len);
  uint32_t le = htole32((uint32_t)strlen(t));
  memcpy(u->buf, &le, 4);
  memcpy(u->buf + 4, t, strlen(t));
  free(t);
}

static void scale(json_t *rec, const char *k) {
  json_t *v = json_object_get(rec, k);
  if (json_is_number(v))
    json_object_set_new(rec, k, json_real(json_number_value(v) / 100));
}

/* The records made 100x faster when they can be read; otherwise one flipped bit. */
static void forge(unit *u) {
  json_t *m = json_loadb(u->buf + 4, u->len - 4, 0, NULL);
  json_t *recs = json_object_get(m, "records");
  if (!json_is_array(recs)) {
    u->buf[4 + (u->len - 4) / 2] ^= 0x20;
    json_decref(m);
    return;
  }
  size_t i, j;
  json_t *rec, *x;
  json_array_foreach(recs, i, rec) {
    scale(rec, "median_s");
    scale(rec, "min_s");
    json_t *rs = json_object_get(rec, "run_secs");
    json_array_foreach(rs, j, x) json_array_set_new(rs, j, json_real(json_number_value(x) / 100));
  }
  rewrite(u, m);
  json_decref(m);
}

static void strip_record(unit *u) {
  json_t *m = json_loadb(u->buf + 4, u->len - 4, 0, NULL);
  if (m && json_object_del(m, "record") == 0)
    rewrite(u, m);
  json_decref(m);
}

static void inject(dir *d) {
  const char *t = "{\"op\":\"file\",\"name\":\"k9-evil.c\",\"size\":5}";
  uint32_t le = htole32((uint32_t)strlen(t));
  write_all(d->to, &le, 4);
  write_all(d->to, t, strlen(t));
  write_all(d->to, "evil!", 5);
}

static void keep_seen(relay *r, const unit *u) {
  if (r->seen_len + u->len > SEEN_MAX)
    return;
  memcpy(r->seen + r->seen_len, u->buf, u->len);
  r->seen_len += u->len;
}

/* What happens to unit n of this direction: forwarded (maybe changed), or not. */
static int pass_unit(dir *d, unit *u, int n, unit *held, unit *prev) {
  relay *r = d->r;
  relay_mode m = r->mode;
  if (d->client) {
    keep_seen(r, u);
    if ((m == RELAY_DROP && n == 2) || (m == RELAY_REORDER && n == 2 && !held->buf)) {
      if (m == RELAY_REORDER)
        *held = *u, u->buf = NULL;
      return 0;
    }
    int rc = write_all(d->to, u->buf, u->len);
    if (m == RELAY_REORDER && held->buf) {
      rc |= write_all(d->to, held->buf, held->len);
      free(held->buf);
      held->buf = NULL;
    }
    if (m == RELAY_INJECT && n == 1)
      inject(d);
    return rc;
  }
  if (m == RELAY_FORGE_RECORD && n == 3)
    forge(u);
  if (m == RELAY_STRIP && n == 0)
    strip_record(u);
  if (m == RELAY_INJECT && n == 2) { /* the agent's answer to the slipped upload */
    r->injected_reply = strstr(u->buf + 4, "\"ok\"") ? 1 : 2;
    return 0;
  }
  if (m == RELAY_REPLAY && n == 2 && prev->buf)
    return write_all(d->to, prev->buf, prev->len);
  return write_all(d->to, u->buf, u->len);
}

static void *pump(void *arg) {
  dir *d = arg;
  unit held = {0}, prev = {0};
  for (int n = 0;; n++) {
    unit u = {0};
    if (read_unit(d, &u) < 0 || pass_unit(d, &u, n, &held, &prev) < 0) {
      free(u.buf);
      break;
    }
    if (!d->client && n == 1) { /* kept for RELAY_REPLAY */
      prev = u;
      continue;
    }
    free(u.buf);
  }
  if (d->r->mode == RELAY_INJECT && !d->client && !d->r->injected_reply)
    d->r->injected_reply = 2;
  free(held.buf);
  free(prev.buf);
  shutdown(d->from, SHUT_RDWR);
  shutdown(d->to, SHUT_RDWR);
  return NULL;
}

/* TVM's server side of the handshake, accepting any client key. */
static int handshake(int fd, const char *front_key) {
  uint32_t magic, len;
  char key[4096], sk[300];
  if (read_all(fd, &magic, 4) < 0 || le32toh(magic) != KC_RPC_MAGIC || read_all(fd, &len, 4) < 0 ||
      le32toh(len) >= sizeof key || read_all(fd, key, le32toh(len)) < 0)
    return -1;
  snprintf(sk, sizeof sk, "server:%s", front_key);
  uint32_t reply[2] = {htole32(KC_RPC_CODE_SUCCESS), htole32((uint32_t)strlen(sk))};
  write_all(fd, reply, sizeof reply);
  return write_all(fd, sk, strlen(sk));
}

static void relay_session(relay *r, int cfd) {
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.wait_s = 30;
  kc_lease lease;
  int afd;
  kc_error err = {0};
  if (kc_tracker_request("127.0.0.1", r->tracker_port, r->back_key, &o, &lease, &afd, &err) < 0)
    return;
  dir c2a = {.r = r, .from = cfd, .to = afd, .client = true};
  dir a2c = {.r = r, .from = afd, .to = cfd, .client = false};
  pthread_t t1, t2;
  pthread_create(&t1, NULL, pump, &c2a);
  pthread_create(&t2, NULL, pump, &a2c);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  close(afd);
  r->sessions++;
}

static void *relay_main(void *arg) {
  relay *r = arg;
  int trk = raw_connect(r->tracker_port, true);
  char mk[64], put[200];
  for (int i = 0; !r->stop; i++) {
    snprintf(mk, sizeof mk, "%s:0.%d", r->front_key, i);
    if (i == 0)
      raw_register(trk, r->front_key, r->port, mk);
    else {
      snprintf(put, sizeof put, "[3, \"%s\", [%u, \"%s\"], null]", r->front_key, r->port, mk);
      raw_call_expect(trk, put, "0");
    }
    struct pollfd pf = {.fd = r->lfd, .events = POLLIN};
    while (!r->stop && poll(&pf, 1, 100) <= 0)
      ;
    if (r->stop)
      break;
    int fd = accept(r->lfd, NULL, NULL);
    if (fd >= 0 && handshake(fd, r->front_key) == 0)
      relay_session(r, fd);
    if (fd >= 0)
      close(fd);
  }
  close(trk);
  return NULL;
}

void relay_start(relay *r, uint16_t tracker_port, const char *front_key, const char *back_key,
                 relay_mode mode) {
  memset(r, 0, sizeof *r);
  r->tracker_port = tracker_port;
  r->front_key = front_key;
  r->back_key = back_key;
  r->mode = mode;
  r->seen = malloc(SEEN_MAX);
  r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  bind(r->lfd, (struct sockaddr *)&a, sizeof a);
  listen(r->lfd, 16);
  getsockname(r->lfd, (struct sockaddr *)&a, &al);
  r->port = ntohs(a.sin_port);
  pthread_t th;
  pthread_create(&th, NULL, relay_main, r);
  r->thread = (unsigned long)th;
}

void relay_stop(relay *r) {
  r->stop = 1;
  pthread_join((pthread_t)r->thread, NULL);
  close(r->lfd);
  free(r->seen);
  r->seen = NULL;
}
