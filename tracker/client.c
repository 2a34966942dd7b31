/* Tracker client: TVM's TrackerSession (reference/tvm.md §3.1) with a deadline on
 * every wait, plus the RPC handshake (§2.5) a device agent answers. */
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fnum.h"
#include "kcage/cleanup.h"
#include "kcage/escape.h"
#include "kcage/tracker.h"
#include "netio.h"

#define DEFAULT_CALL_TIMEOUT 10.0

struct kc_tracker_conn {
  int fd;
  char host[KC_TRACKER_MAX_ADDR];
  uint16_t port;
};

int kc_parse_hostport(const char *s, uint16_t default_port, char *host, size_t host_len,
                      uint16_t *port, kc_error *err) {
  if (!s || !*s)
    return kc_error_set(err, EINVAL, "empty address");
  const char *colon;
  const char *h = s;
  size_t hl;
  if (*s == '[') {
    const char *e = strchr(s, ']');
    if (!e)
      return kc_error_set(err, EINVAL, "%s: missing ']'", s);
    h = s + 1;
    hl = (size_t)(e - h);
    colon = e[1] == ':' ? e + 1 : NULL;
    if (e[1] && !colon)
      return kc_error_set(err, EINVAL, "%s: bad address", s);
  } else {
    colon = strrchr(s, ':');
    if (colon && strchr(s, ':') != colon)
      colon = NULL; /* a bare IPv6 address */
    hl = colon ? (size_t)(colon - s) : strlen(s);
  }
  if (hl == 0 || hl >= host_len)
    return kc_error_set(err, EINVAL, "%s: bad host", s);
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = default_port;
  if (colon) {
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p == 0 || p > 65535)
      return kc_error_set(err, EINVAL, "%s: bad port", s);
    *port = (uint16_t)p;
  }
  return 0;
}

/* TVM's own variables: where to find the tracker, nothing about isolation.  Ignored in
 * a set-id process (secure_getenv), like every variable libkcage reads. */
void kc_tracker_env_default(char *host, size_t host_len, uint16_t *port) {
  const char *h = secure_getenv("TVM_TRACKER_HOST"), *p = secure_getenv("TVM_TRACKER_PORT");
  snprintf(host, host_len, "%s", h && *h ? h : "127.0.0.1");
  *port = KC_TRACKER_DEFAULT_PORT;
  if (p && *p) {
    long v = strtol(p, NULL, 10);
    if (v > 0 && v <= 65535)
      *port = (uint16_t)v;
  }
}

int kc_tcp_connect(const char *host, uint16_t port, double timeout_s, kc_error *err) {
  double deadline = kc_deadline(timeout_s);
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
  int g = getaddrinfo(host, ps, &hints, &ai);
  if (g)
    return kc_error_set(err, 0, "resolve %s: %s", host, gai_strerror(g));
  int last = ECONNREFUSED;
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = errno;
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      for (;;) {
        int ms = -1;
        if (deadline >= 0) {
          double left = deadline - kc_now_s();
          ms = left > 0 ? (int)(left * 1000) + 1 : 0;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = poll(&p, 1, ms);
        if (n < 0 && errno == EINTR)
          continue;
        if (n == 0) {
          errno = ETIMEDOUT;
          break;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr == 0)
          rc = 0;
        else
          errno = soerr;
        break;
      }
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      freeaddrinfo(ai);
      return fd;
    }
    last = errno;
    close(fd);
  }
  freeaddrinfo(ai);
  return kc_error_set(err, last, "connect %s:%u", host, port);
}

int kc_tracker_connect(const char *host, uint16_t port, double timeout_s, kc_tracker_conn **out,
                       kc_error *err) {
  if (timeout_s == 0)
    timeout_s = DEFAULT_CALL_TIMEOUT;
  double deadline = kc_deadline(timeout_s);
  kc_cleanup_close int fd = kc_tcp_connect(host, port, timeout_s, err);
  if (fd < 0)
    return kc_error_prefix(err, "tracker");
  uint32_t magic;
  if (kc_write_u32(fd, KC_TRACKER_MAGIC, deadline, err) < 0 ||
      kc_read_u32(fd, &magic, deadline, err) < 0)
    return kc_error_prefix(err, "tracker %s:%u", host, port);
  if (magic != KC_TRACKER_MAGIC)
    return kc_error_set(err, EPROTO, "%s:%u is not an RPC tracker", host, port);
  kc_tracker_conn *c = calloc(1, sizeof *c);
  if (!c)
    return kc_error_set(err, ENOMEM, "tracker");
  c->fd = kc_steal_fd(fd);
  snprintf(c->host, sizeof c->host, "%s", host);
  c->port = port;
  *out = c;
  return 0;
}

void kc_tracker_close(kc_tracker_conn *c) {
  if (!c)
    return;
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

int kc_tracker_fd(const kc_tracker_conn *c) {
  return c->fd;
}

int kc_tracker_call(kc_tracker_conn *c, const json_t *msg, double timeout_s, json_t **reply,
                    kc_error *err) {
  if (timeout_s == 0)
    timeout_s = DEFAULT_CALL_TIMEOUT;
  double deadline = kc_deadline(timeout_s);
  kc_cleanup_free char *frame = NULL;
  size_t len;
  if (kc_tracker_frame_encode(msg, &frame, &len, err) < 0)
    return -1;
  if (kc_write_all(c->fd, frame, len, deadline, err) < 0)
    return kc_error_prefix(err, "tracker");
  uint32_t n;
  if (kc_read_u32(c->fd, &n, deadline, err) < 0)
    return kc_error_prefix(err, "tracker");
  if (n == 0 || n > KC_TRACKER_MAX_REPLY)
    return kc_error_set(err, EPROTO, "tracker: bad reply length %u", n);
  kc_cleanup_free char *buf = malloc(n);
  if (!buf)
    return kc_error_set(err, ENOMEM, "tracker reply");
  if (kc_read_exact(c->fd, buf, n, deadline, err) < 0)
    return kc_error_prefix(err, "tracker");
  json_error_t jerr;
  json_t *v = json_loadb(buf, n, JSON_DECODE_ANY, &jerr);
  if (!v)
    return kc_error_set(err, EPROTO, "tracker: bad reply: %s", jerr.text);
  *reply = v;
  return 0;
}

int kc_tracker_summary(kc_tracker_conn *c, json_t **summary, kc_error *err) {
  json_t *msg = json_pack("[i]", KC_TRK_SUMMARY), *r = NULL;
  int rc = kc_tracker_call(c, msg, 0, &r, err);
  json_decref(msg);
  if (rc < 0)
    return -1;
  json_t *s = json_array_get(r, 1);
  if (json_integer_value(json_array_get(r, 0)) != KC_TRK_SUCCESS || !json_is_array(r) ||
      !json_is_object(s)) {
    json_decref(r);
    return kc_error_set(err, EPROTO, "tracker: invalid SUMMARY reply");
  }
  json_incref(s);
  json_decref(r);
  *summary = s;
  return 0;
}

/* ---- text_summary: TVM's exact layout ----------------------------------------- */

struct sbuf {
  char *p;
  size_t len, cap;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + (size_t)n + 1)
      cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np)
      return;
    b->p = np;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Every string in a SUMMARY came from a peer: shown with control characters escaped,
 * so a key or an address cannot drive the terminal of whoever runs `kcage query`. */
#define SHOWN_MAX (4 * (KC_TRACKER_MAX_MATCHKEY + 16) + 1)
static const char *shown(const char *s, char buf[SHOWN_MAX]) {
  return kc_escape(s, buf, SHOWN_MAX);
}

/* Python's str() of a JSON scalar as json.loads returns it. */
static void py_str(struct sbuf *b, const json_t *v) {
  char e[SHOWN_MAX];
  if (json_is_string(v))
    sb_add(b, "%s", shown(json_string_value(v), e));
  else if (json_is_integer(v))
    sb_add(b, "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v))
    sb_add(b, "%.17g", json_real_value(v));
  else if (json_is_null(v))
    sb_add(b, "None");
  else if (json_is_true(v))
    sb_add(b, "True");
  else if (json_is_false(v))
    sb_add(b, "False");
  else {
    char *t = json_dumps(v, KC_TRACKER_JSON_FLAGS);
    sb_add(b, "%s", t ? t : "");
    free(t);
  }
}

struct srv {
  const char *key;
  const json_t *info;
  size_t idx;
};

static int srv_cmp(const void *a, const void *b) {
  const struct srv *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->idx > y->idx) - (x->idx < y->idx); /* sorted() is stable */
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Python len() counts code points, not bytes. */
static size_t u8len(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

static void pad_to(struct sbuf *b, const char *s, size_t width) {
  sb_add(b, "%s", s);
  for (size_t l = u8len(s); l < width; l++)
    sb_add(b, " ");
}

/* TVM's total_ct: servers per key (the part of a server's key after its first ':'), in
 * first-seen order. */
typedef struct key_counts {
  char **key;
  long *count;
  size_t n;
} key_counts;

static void count_key(key_counts *kc, const char *server_key) {
  const char *c1 = strchr(server_key, ':');
  if (!c1)
    return; /* TVM would raise IndexError here; we just skip the count */
  const char *c2 = strchr(c1 + 1, ':');
  size_t kl = c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
  size_t t = 0;
  while (t < kc->n && (strlen(kc->key[t]) != kl || strncmp(kc->key[t], c1 + 1, kl)))
    t++;
  if (t == kc->n && !(kc->key[kc->n++] = strndup(c1 + 1, kl))) {
    kc->n--;
    return;
  }
  kc->count[t]++;
}

static long key_count(const key_counts *kc, const char *key) {
  long total = 0;
  for (size_t t = 0; t < kc->n; t++)
    if (!strcmp(kc->key[t], key))
      total = kc->count[t];
  return total;
}

/* "Server List": each server's address and key, sorted like TVM's; counts the keys. */
static void server_list(struct sbuf *b, const json_t *si, struct srv *sv, key_counts *kc) {
  size_t ns = json_array_size(si);
  for (size_t i = 0; i < ns; i++) {
    const json_t *it = json_array_get(si, i);
    const char *k = json_string_value(json_object_get(it, "key"));
    sv[i] = (struct srv){k ? k : "", it, i};
  }
  qsort(sv, ns, sizeof *sv, srv_cmp);
  sb_add(b, "Server List\n------------------------------\nserver-address           key\n"
            "------------------------------\n");
  for (size_t i = 0; i < ns; i++) {
    struct sbuf a = {0};
    json_t *addr = json_object_get(sv[i].info, "addr");
    for (size_t j = 0; j < json_array_size(addr); j++) {
      if (j)
        sb_add(&a, ":");
      py_str(&a, json_array_get(addr, j));
    }
    pad_to(b, a.p ? a.p : "", 21);
    free(a.p);
    char e[SHOWN_MAX];
    sb_add(b, "    %s\n", shown(sv[i].key, e));
    count_key(kc, sv[i].key);
  }
  sb_add(b, "------------------------------\n\n");
}

static void dashes(struct sbuf *b, size_t n) {
  for (size_t d = 0; d < n; d++)
    sb_add(b, "-");
  sb_add(b, "\n");
}

/* "Queue Status": each key with servers or pending requests, sorted. */
static void queue_status(struct sbuf *b, const json_t *qi, const key_counts *kc) {
  size_t nq = json_object_size(qi), maxk = 0, i = 0;
  const char **keys = calloc(nq + 1, sizeof *keys);
  if (!keys)
    return;
  const char *k;
  json_t *v;
  char e[SHOWN_MAX];
  json_object_foreach((json_t *)qi, k, v) {
    keys[i++] = k;
    if (u8len(shown(k, e)) > maxk)
      maxk = u8len(e);
  }
  qsort(keys, nq, sizeof *keys, str_cmp);
  struct sbuf title = {0};
  pad_to(&title, "key", maxk);
  sb_add(&title, "   total  free  pending\n");
  size_t n = u8len(title.p);
  sb_add(b, "Queue Status\n");
  dashes(b, n);
  sb_add(b, "%s", title.p);
  dashes(b, n);
  for (i = 0; i < nq; i++) {
    long total = key_count(kc, keys[i]);
    json_t *q = json_object_get(qi, keys[i]);
    long long fr = json_integer_value(json_object_get(q, "free")),
              pe = json_integer_value(json_object_get(q, "pending"));
    if (total || pe) {
      pad_to(b, shown(keys[i], e), maxk);
      sb_add(b, "   %-5ld  %-4lld  %-7lld\n", total, fr, pe);
    }
  }
  dashes(b, n);
  free(title.p);
  free(keys);
}

char *kc_tracker_text_summary(const json_t *data) {
  struct sbuf b = {0};
  json_t *si = json_object_get(data, "server_info"), *qi = json_object_get(data, "queue_info");
  size_t ns = json_array_size(si);
  struct srv *sv = calloc(ns + 1, sizeof *sv);
  key_counts kc = {calloc(ns + 1, sizeof *kc.key), calloc(ns + 1, sizeof *kc.count), 0};
  if (sv && kc.key && kc.count) {
    server_list(&b, si, sv, &kc);
    queue_status(&b, qi, &kc);
  }
  for (size_t t = 0; t < kc.n; t++)
    free(kc.key[t]);
  free(kc.key);
  free(kc.count);
  free(sv);
  return b.p;
}

/* ---- leases and the RPC handshake ---------------------------------------------- */

void kc_request_opts_init(kc_request_opts *o) {
  memset(o, 0, sizeof *o);
  o->priority = 1;
  o->max_retry = 5;
}

static json_t *number(double v) {
  /* TVM sends Python ints for integral priorities: keep the wire identical. */
  if (v == floor(v) && fabs(v) < 9e15)
    return json_integer((json_int_t)v);
  return json_real(v);
}

/* A host or matchkey from the tracker goes into connect calls and error messages: no
 * control characters (no real address or key has any). */
static bool plain(const json_t *v) {
  for (const unsigned char *p = (const unsigned char *)json_string_value(v); p && *p; p++)
    if (*p < 0x20 || *p == 0x7f)
      return false;
  return true;
}

int kc_tracker_request_lease(kc_tracker_conn *c, const char *key, double priority, double timeout_s,
                             kc_lease *lease, kc_error *err) {
  json_t *msg = json_pack("[i, s, s, o]", KC_TRK_REQUEST, key, "", number(priority)), *r = NULL;
  if (!msg)
    return kc_error_set(err, EINVAL, "REQUEST: bad key");
  int rc = kc_tracker_call(c, msg, timeout_s, &r, err);
  json_decref(msg);
  if (rc < 0) {
    if (err && err->code == ETIMEDOUT)
      kc_error_set(err, ETIMEDOUT, "no %s device was free within %.3g s", key, timeout_s);
    return -1;
  }
  json_t *v = json_array_get(r, 1);
  json_t *h = json_array_get(v, 0), *p = json_array_get(v, 1), *m = json_array_get(v, 2);
  long port = json_is_integer(p)  ? (long)json_integer_value(p)
              : json_is_string(p) ? strtol(json_string_value(p), NULL, 10)
                                  : -1;
  if (!json_is_array(r) || json_integer_value(json_array_get(r, 0)) != KC_TRK_SUCCESS ||
      !json_is_string(h) || !json_is_string(m) || !plain(h) || !plain(m) || port <= 0 ||
      port > 65535 || json_string_length(h) >= sizeof lease->host ||
      json_string_length(m) >= sizeof lease->matchkey) {
    char *t = json_dumps(r, KC_TRACKER_JSON_FLAGS);
    kc_error_set(err, EPROTO, "Invalid return value %s", t ? t : "?");
    free(t);
    json_decref(r);
    return -1;
  }
  memset(lease, 0, sizeof *lease);
  snprintf(lease->host, sizeof lease->host, "%s", json_string_value(h));
  lease->port = (uint16_t)port;
  snprintf(lease->matchkey, sizeof lease->matchkey, "%s", json_string_value(m));
  json_decref(r);
  return 0;
}

int kc_rpc_connect(const char *host, uint16_t port, const char *matchkey, double session_timeout_s,
                   double timeout_s, char *server_key, size_t server_key_len, kc_error *err) {
  if (timeout_s == 0)
    timeout_s = DEFAULT_CALL_TIMEOUT;
  double deadline = kc_deadline(timeout_s);
  kc_cleanup_close int fd = kc_tcp_connect(host, port, timeout_s, err);
  if (fd < 0)
    return -1;
  char key[KC_TRACKER_MAX_MATCHKEY + 64];
  int kl;
  if (session_timeout_s > 0) /* integer seconds: TVM's C++ server only parses digits */
    kl = snprintf(key, sizeof key, "client:%s -timeout=%lld", matchkey,
                  kc_ceil_ll(session_timeout_s));
  else
    kl = snprintf(key, sizeof key, "client:%s", matchkey);
  if (kl < 0 || (size_t)kl >= sizeof key)
    return kc_error_set(err, EINVAL, "matchkey too long");
  /* One write: magic, length, key. */
  char hs[sizeof key + 8];
  uint32_t m = htole32(KC_RPC_MAGIC), l = htole32((uint32_t)kl);
  memcpy(hs, &m, 4);
  memcpy(hs + 4, &l, 4);
  memcpy(hs + 8, key, (size_t)kl);
  uint32_t code;
  if (kc_write_all(fd, hs, 8 + (size_t)kl, deadline, err) < 0 ||
      kc_read_u32(fd, &code, deadline, err) < 0)
    return kc_error_prefix(err, "connect to %s:%u", host, port);
  if (code == KC_RPC_CODE_MISMATCH)
    return kc_error_set(err, EPROTO, "%s:%u: cannot find server that matches key=%s", host, port,
                        matchkey);
  if (code == KC_RPC_CODE_DUPLICATE)
    return kc_error_set(err, EPROTO, "%s:%u: server already have key=%s", host, port, matchkey);
  if (code != KC_RPC_CODE_SUCCESS)
    return kc_error_set(err, EPROTO, "%s:%u is not TVM RPC server", host, port);
  uint32_t rl;
  if (kc_read_u32(fd, &rl, deadline, err) < 0)
    return kc_error_prefix(err, "connect to %s:%u", host, port);
  if (rl > 4096)
    return kc_error_set(err, EPROTO, "%s:%u: bad remote key length", host, port);
  char rk[4097];
  if (kc_read_exact(fd, rk, rl, deadline, err) < 0)
    return kc_error_prefix(err, "connect to %s:%u", host, port);
  rk[rl] = '\0';
  if (server_key)
    snprintf(server_key, server_key_len, "%s", rk);
  return kc_steal_fd(fd);
}

int kc_tracker_request(const char *th, uint16_t tp, const char *key, const kc_request_opts *o,
                       kc_lease *lease, int *fd, kc_error *err) {
  kc_request_opts def;
  if (!o) {
    kc_request_opts_init(&def);
    o = &def;
  }
  /* Refused before the tracker is asked: a lease the session could not use is one that
   * another tenant waited for. */
  if (kc_session_ctor_check(o->session_constructor_args, o->n_session_constructor_args, err) < 0)
    return -1;
  unsigned tries = o->max_retry ? o->max_retry : 5;
  double wait = o->wait_s == 0 ? 60 : o->wait_s;
  double deadline = kc_deadline(wait);
  kc_tracker_conn *c = NULL;
  kc_error last = {0};
  snprintf(last.msg, sizeof last.msg, "no attempt made");
  unsigned i;
  for (i = 0; i < tries; i++) {
    double left = deadline < 0 ? -1 : deadline - kc_now_s();
    if (deadline >= 0 && left <= 0) {
      kc_error_set(&last, ETIMEDOUT, "no %s device was free within %.3g s", key, wait);
      break;
    }
    if (i > 0) { /* back off between attempts (0.1 s doubling), within the deadline */
      double pause = kc_fmin(0.1 * (double)(1u << (i < 6 ? i - 1 : 5)), 2.0);
      if (deadline >= 0)
        pause = kc_fmin(pause, kc_fmax(0, deadline - kc_now_s()));
      struct timespec ts = {(time_t)pause, (long)((pause - floor(pause)) * 1e9)};
      nanosleep(&ts, NULL);
      left = deadline < 0 ? -1 : deadline - kc_now_s();
      if (deadline >= 0 && left <= 0) {
        kc_error_set(&last, ETIMEDOUT, "no %s device was free within %.3g s", key, wait);
        break;
      }
    }
    if (!c && kc_tracker_connect(th, tp, left < 0 ? 10 : kc_fmin(left, 10), &c, &last) < 0) {
      c = NULL;
      continue;
    }
    if (kc_tracker_request_lease(c, key, o->priority, left, lease, &last) < 0) {
      /* The connection is in an unknown state (a reply may still come): drop it, which
       * also withdraws the REQUEST on a kcage tracker. */
      kc_tracker_close(c);
      c = NULL;
      if (last.code == ETIMEDOUT) {
        kc_error_set(&last, ETIMEDOUT, "no %s device was free within %.3g s", key, wait);
        break;
      }
      continue;
    }
    int f = kc_rpc_connect(lease->host, lease->port, lease->matchkey, o->session_timeout_s, 10,
                           lease->server_key, sizeof lease->server_key, &last);
    if (f >= 0) {
      kc_tracker_close(c);
      lease->session_constructor_args = o->session_constructor_args;
      lease->n_session_constructor_args = o->n_session_constructor_args;
      *fd = f;
      return 0;
    }
  }
  kc_tracker_close(c);
  /* last.msg already carries its strerror: keep the code without repeating it. */
  kc_error_set(err, 0, "Cannot request %s after %u retry, last_error:%s", key,
               i < tries ? i + 1 : tries, last.msg);
  if (err)
    err->code = last.code ? last.code : EIO;
  return -1;
}

/* Waited for a device the whole time: one line, with what happened to an earlier one. */
static int no_device_free(const char *key, const kc_request_opts *o, const kc_error *run_err,
                          kc_error *err) {
  double wait = o->wait_s == 0 ? 60 : o->wait_s;
  if (run_err->msg[0])
    kc_error_set(err, 0, "no %s device became free within %.3g s (before that: %s)", key, wait,
                 run_err->msg);
  else
    kc_error_set(err, 0, "no %s device became free within %.3g s", key, wait);
  if (err)
    err->code = ETIMEDOUT;
  return -1;
}

int kc_tracker_request_and_run(const char *th, uint16_t tp, const char *key,
                               const kc_request_opts *o, unsigned max_retry, kc_session_fn fn,
                               void *ctx, kc_error *err) {
  kc_request_opts def;
  if (!o) {
    kc_request_opts_init(&def);
    o = &def;
  }
  if (!max_retry)
    max_retry = 2;
  kc_error last = {0}, run_err = {0};
  for (unsigned i = 0; i < max_retry; i++) {
    kc_lease lease;
    int fd;
    if (kc_tracker_request(th, tp, key, o, &lease, &fd, &last) < 0) {
      if (last.code == ETIMEDOUT) /* the whole wait is spent: a retry would wait as long */
        return no_device_free(key, o, &run_err, err);
      continue; /* TVM raises UnboundLocalError here (tvm.md §3.1); we retry */
    }
    double t0 = kc_now_s();
    int rc = fn(fd, &lease, ctx, &last);
    close(fd);
    if (rc == 0)
      return 0;
    run_err = last;
    double took = kc_now_s() - t0;
    if (last.code == ETIMEDOUT ||
        (o->session_timeout_s > 0 && took >= o->session_timeout_s * 0.95)) {
      kc_error_set(err, 0, "Session timeout when running on %s: %s", key, last.msg);
      if (err)
        err->code = ETIMEDOUT;
      return -1;
    }
  }
  /* Keep what went wrong on the device (say, the agent died) even when the retry then
   * failed for another reason (no device left). */
  if (run_err.msg[0] && strcmp(run_err.msg, last.msg))
    kc_error_set(err, 0, "Failed to run on %s after %u retry, last_error:%s (before that: %s)", key,
                 max_retry, last.msg, run_err.msg);
  else
    kc_error_set(err, 0, "Failed to run on %s after %u retry, last_error:%s", key, max_retry,
                 last.msg);
  if (err)
    err->code = last.code ? last.code : EIO;
  return -1;
}
