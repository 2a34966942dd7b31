/* The tracker server: TVM's TrackerServerHandler + PriorityScheduler (reference/tvm.md
 * §2.3) on one epoll thread.  Differences from TVM, none visible on the wire:
 *  - a connection that closes takes its free PUTs (and its waiting REQUESTs) with it at
 *    once, whether or not it sent UPDATE_INFO; silent peers die by TCP keepalive and
 *    TCP_USER_TIMEOUT;
 *  - replies are one write each, TCP_NODELAY, and TCP_QUICKACK after every read so
 *    TVM's split-writing clients never wait for a delayed ACK (tracker-load.md);
 *  - backlog SOMAXCONN; no per-PUT history is kept; every table is bounded;
 *  - a connection that has not sent the magic within a few seconds is dropped, and at
 *    the fd limit the oldest such connection makes room for a new one, so idle
 *    connections cannot lock agents and clients out. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "frame_reader.h"
#include "kcage/cleanup.h"
#include "kcage/log.h"
#include "kcage/tracker.h"
#include "metrics.h"
#include "netio.h"

#define MAX_KEYS 65536
#define MAX_PUTS_PER_CONN 4096
#define MAX_REQS_PER_CONN 256 /* TVM's clients wait on one at a time */
#define MAX_OUT_BYTES (8u << 20)
#define MAX_INFO_FIELDS 64
#define MAX_INFO_BYTES 16384
/* All connections' buffers together: a flood of half-sent 1 MiB frames cannot take
 * the tracker's memory.  Buffers up to SMALL_BUFFER (every message TVM's peers send)
 * stay outside the budget, so hogs near it cannot lock out a newcomer's small frame. */
#define MAX_BUFFERED_BYTES (256u << 20)
#define SMALL_BUFFER 4096

struct conn;
struct keyq;

struct res {                 /* one free PUT: one allocation with its strings */
  struct res *kprev, *knext; /* the key's FIFO */
  struct res *cprev, *cnext; /* the owner's list */
  struct conn *owner;
  struct keyq *kq;
  char *matchkey; /* points into data */
  char *frame;    /* the encoded lease reply [0, [addr, port, matchkey]], into data */
  size_t frame_len;
  char data[];
};

struct req { /* one waiting REQUEST */
  struct req *cprev, *cnext;
  struct conn *conn;
  struct keyq *kq;
  size_t idx; /* in kq->heap */
  double prio;
  uint64_t seq;
  double queued_at; /* for the lease wait metric */
};

struct keyq {
  char *key;
  struct keyq *hnext;      /* hash chain */
  struct keyq *order_next; /* creation order (queue_info order, like a Python dict) */
  struct res *head, *tail;
  size_t nfree;
  struct req **heap;
  size_t nheap, cap;
  uint64_t seq;
};

struct conn {
  int fd;
  bool magic_done, dead;
  kc_frame_reader rd;
  char *out;
  size_t out_off, out_len, out_cap;
  char peer[INET6_ADDRSTRLEN];
  char peer_json[6 * INET6_ADDRSTRLEN + 3]; /* peer as a JSON string, for lease replies */
  size_t peer_json_len;                     /* 0 until the first PUT */
  json_t *info;
  struct res *res_head;
  size_t nres;
  struct req *req_head;
  size_t nreq;
  struct conn *prev, *next; /* all live connections, in accept order */
  struct conn *dead_next;
  double accepted_at;             /* kc_now_s() */
  struct conn *hs_prev, *hs_next; /* before the magic: s->hs_head.., in accept order */
  const char *drop_why;           /* why we dropped it (logs, metrics); NULL: the peer closed */
};

struct kc_tracker_server {
  int lfd, efd, stopfd, spare_fd;
  uint16_t port;
  kc_tracker_opts o;
  char stop_key[64];
  struct keyq **buckets;
  size_t nbuckets, nkeys;
  struct keyq *order_head, *order_tail;
  struct conn *conns_head, *conns_tail;
  struct conn *hs_head, *hs_tail; /* connections still owing the magic */
  struct conn *dead;
  bool stopping;
  size_t max_frame;
  size_t buffered;     /* sum of every connection's in+out buffer capacity */
  size_t max_buffered; /* o.max_buffered or MAX_BUFFERED_BYTES */
};

void kc_tracker_opts_init(kc_tracker_opts *o) {
  memset(o, 0, sizeof *o);
  o->port = KC_TRACKER_DEFAULT_PORT;
}

/* ---- keys ---------------------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void key_free(kc_tracker_server *s, struct keyq *k, struct keyq *order_prev) {
  struct keyq **p = &s->buckets[hash_str(k->key) & (s->nbuckets - 1)];
  while (*p != k)
    p = &(*p)->hnext;
  *p = k->hnext;
  if (order_prev)
    order_prev->order_next = k->order_next;
  else
    s->order_head = k->order_next;
  if (s->order_tail == k)
    s->order_tail = order_prev;
  s->nkeys--;
  free(k->heap);
  free(k->key);
  free(k);
}

/* A full table drops every key with no free device and nobody waiting: such a key is
 * only a name (SUMMARY shows it with zeros until then, as TVM does), and names alone
 * must never lock a newcomer out. */
static void keys_sweep(kc_tracker_server *s) {
  struct keyq *prev = NULL;
  for (struct keyq *k = s->order_head, *next; k; k = next) {
    next = k->order_next;
    if (!k->nfree && !k->nheap)
      key_free(s, k, prev);
    else
      prev = k;
  }
}

static struct keyq *key_find(kc_tracker_server *s, const char *key, bool create) {
  size_t b = hash_str(key) & (s->nbuckets - 1);
  for (struct keyq *k = s->buckets[b]; k; k = k->hnext)
    if (!strcmp(k->key, key))
      return k;
  if (create && s->nkeys >= MAX_KEYS)
    keys_sweep(s);
  if (!create || s->nkeys >= MAX_KEYS)
    return NULL;
  struct keyq *k = calloc(1, sizeof *k);
  if (!k || !(k->key = strdup(key))) {
    free(k);
    return NULL;
  }
  k->hnext = s->buckets[b];
  s->buckets[b] = k;
  if (s->order_tail)
    s->order_tail->order_next = k;
  else
    s->order_head = k;
  s->order_tail = k;
  s->nkeys++;
  return k;
}

/* ---- the request heap: highest priority first, FIFO among equals -------------- */

static bool req_before(const struct req *a, const struct req *b) {
  if (a->prio != b->prio)
    return a->prio > b->prio;
  return a->seq < b->seq;
}

static void heap_swap(struct keyq *k, size_t i, size_t j) {
  struct req *t = k->heap[i];
  k->heap[i] = k->heap[j];
  k->heap[j] = t;
  k->heap[i]->idx = i;
  k->heap[j]->idx = j;
}

static void heap_up(struct keyq *k, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!req_before(k->heap[i], k->heap[p]))
      break;
    heap_swap(k, i, p);
    i = p;
  }
}

static void heap_down(struct keyq *k, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < k->nheap && req_before(k->heap[l], k->heap[m]))
      m = l;
    if (r < k->nheap && req_before(k->heap[r], k->heap[m]))
      m = r;
    if (m == i)
      break;
    heap_swap(k, i, m);
    i = m;
  }
}

static int heap_push(struct keyq *k, struct req *r) {
  if (k->nheap == k->cap) {
    size_t cap = k->cap ? 2 * k->cap : 16;
    struct req **h = realloc(k->heap, cap * sizeof *h);
    if (!h)
      return -1;
    k->heap = h;
    k->cap = cap;
  }
  r->idx = k->nheap;
  k->heap[k->nheap++] = r;
  heap_up(k, r->idx);
  return 0;
}

static void heap_remove(struct keyq *k, struct req *r) {
  size_t i = r->idx;
  k->nheap--;
  if (i != k->nheap) {
    k->heap[i] = k->heap[k->nheap];
    k->heap[i]->idx = i;
    heap_down(k, i);
    heap_up(k, i);
  }
}

/* ---- lists --------------------------------------------------------------------- */

static void res_unlink_key(struct res *r) {
  struct keyq *k = r->kq;
  if (r->kprev)
    r->kprev->knext = r->knext;
  else
    k->head = r->knext;
  if (r->knext)
    r->knext->kprev = r->kprev;
  else
    k->tail = r->kprev;
  r->kprev = r->knext = NULL;
  k->nfree--;
}

static void res_append_key(struct res *r) {
  struct keyq *k = r->kq;
  r->knext = NULL;
  r->kprev = k->tail;
  if (k->tail)
    k->tail->knext = r;
  else
    k->head = r;
  k->tail = r;
  k->nfree++;
}

static void res_free(struct res *r) {
  struct conn *c = r->owner;
  if (r->cprev)
    r->cprev->cnext = r->cnext;
  else
    c->res_head = r->cnext;
  if (r->cnext)
    r->cnext->cprev = r->cprev;
  c->nres--;
  free(r);
}

static void req_free(struct req *r) {
  struct conn *c = r->conn;
  if (r->cprev)
    r->cprev->cnext = r->cnext;
  else
    c->req_head = r->cnext;
  if (r->cnext)
    r->cnext->cprev = r->cprev;
  c->nreq--;
  free(r);
}

/* ---- connections --------------------------------------------------------------- */

static void hs_unlink(kc_tracker_server *s, struct conn *c) {
  if (c->hs_prev)
    c->hs_prev->hs_next = c->hs_next;
  else
    s->hs_head = c->hs_next;
  if (c->hs_next)
    c->hs_next->hs_prev = c->hs_prev;
  else
    s->hs_tail = c->hs_prev;
  c->hs_prev = c->hs_next = NULL;
}

static void hs_append(kc_tracker_server *s, struct conn *c) {
  c->hs_prev = s->hs_tail;
  if (s->hs_tail)
    s->hs_tail->hs_next = c;
  else
    s->hs_head = c;
  s->hs_tail = c;
}

static void conn_kill(kc_tracker_server *s, struct conn *c) {
  if (c->dead)
    return;
  c->dead = true;
  if (!c->magic_done)
    hs_unlink(s, c);
  epoll_ctl(s->efd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
  /* TVM keeps these until a client trips over them; we drop them now. */
  while (c->req_head) {
    heap_remove(c->req_head->kq, c->req_head);
    req_free(c->req_head);
  }
  while (c->res_head) {
    res_unlink_key(c->res_head);
    res_free(c->res_head);
  }
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns_head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    s->conns_tail = c->prev;
  c->dead_next = s->dead;
  s->dead = c;
  kc_metrics_conn_closed(c->drop_why);
  if (c->drop_why)
    kc_log(KC_LOG_WARN, "kcage tracker", "dropped %s: %s", c->peer, c->drop_why);
  else if (s->o.verbose)
    kc_log(KC_LOG_INFO, "kcage tracker", "%s closed", c->peer);
}

static void conn_drop(kc_tracker_server *s, struct conn *c, const char *why) {
  c->drop_why = why;
  conn_kill(s, c);
}

static void conn_release(struct conn *c) {
  kc_frame_reader_free(&c->rd);
  free(c->out);
  if (c->info)
    json_decref(c->info);
  free(c);
}

static void reap_dead(kc_tracker_server *s) {
  while (s->dead) {
    struct conn *c = s->dead;
    s->dead = c->dead_next;
    s->buffered -= c->rd.cap + c->out_cap;
    conn_release(c);
  }
}

static void want_out(kc_tracker_server *s, struct conn *c, bool on) {
  struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
  epoll_ctl(s->efd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* One reply, one write.  -1 when the peer is gone (the connection is then dead). */
static int conn_send(kc_tracker_server *s, struct conn *c, const char *buf, size_t len) {
  if (c->dead)
    return -1;
  size_t done = 0;
  if (c->out_len == c->out_off) {
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      conn_kill(s, c);
      return -1;
    }
    done = n > 0 ? (size_t)n : 0;
    if (done == len)
      return 0;
  }
  size_t rest = len - done;
  if (c->out_len - c->out_off + rest > MAX_OUT_BYTES) { /* a peer that never reads */
    conn_drop(s, c, "not_reading");
    return -1;
  }
  if (c->out_off && c->out_off == c->out_len)
    c->out_off = c->out_len = 0;
  if (c->out_len + rest > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap : 1024;
    while (cap < c->out_len + rest)
      cap *= 2;
    bool over = cap > SMALL_BUFFER && s->buffered + (cap - c->out_cap) > s->max_buffered;
    char *nb = over ? NULL : realloc(c->out, cap);
    if (!nb) {
      conn_kill(s, c);
      return -1;
    }
    s->buffered += cap - c->out_cap;
    c->out = nb;
    c->out_cap = cap;
  }
  bool was_empty = c->out_len == c->out_off;
  memcpy(c->out + c->out_len, buf + done, rest);
  c->out_len += rest;
  if (was_empty)
    want_out(s, c, true);
  return 0;
}

static void conn_flush(kc_tracker_server *s, struct conn *c) {
  while (c->out_off < c->out_len) {
    ssize_t n =
        send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      if (errno == EINTR)
        continue;
      conn_kill(s, c);
      return;
    }
    c->out_off += (size_t)n;
  }
  c->out_off = c->out_len = 0;
  if (c->out_cap > 65536) {
    s->buffered -= c->out_cap;
    free(c->out);
    c->out = NULL;
    c->out_cap = 0;
  }
  want_out(s, c, false);
}

static int reply_json(kc_tracker_server *s, struct conn *c, json_t *v) {
  char *buf;
  size_t len;
  int rc = kc_trk_frame_encode(v, &buf, &len, NULL);
  json_decref(v);
  if (rc < 0) {
    conn_kill(s, c);
    return -1;
  }
  rc = conn_send(s, c, buf, len);
  free(buf);
  return rc;
}

static int reply_code(kc_tracker_server *s, struct conn *c, int code) {
  /* The hot path (PUT's 0): constant frames, no JSON machinery, no printf. */
  static const char ok[] = {1, 0, 0, 0, '0'}, fail[] = {2, 0, 0, 0, '-', '1'};
  if (code == KC_TRK_SUCCESS)
    return conn_send(s, c, ok, sizeof ok);
  if (code == KC_TRK_FAIL)
    return conn_send(s, c, fail, sizeof fail);
  char buf[16];
  int n = snprintf(buf + 4, sizeof buf - 4, "%d", code);
  uint32_t le = htole32((uint32_t)n);
  memcpy(buf, &le, 4);
  return conn_send(s, c, buf, 4 + (size_t)n);
}

/* ---- the scheduler ------------------------------------------------------------- */

/* Lease the key's oldest free device to c.  TVM: a requester that cannot be told puts
 * the device at the back of the list. */
static void lease_head(kc_tracker_server *s, struct keyq *k, struct conn *c) {
  struct res *r = k->head;
  res_unlink_key(r);
  res_append_key(r);
  if (conn_send(s, c, r->frame, r->frame_len) == 0) {
    res_unlink_key(r);
    res_free(r);
  }
}

static void schedule(kc_tracker_server *s, struct keyq *k) {
  while (k->head && k->nheap) {
    struct req *q = k->heap[0];
    heap_remove(k, q);
    struct conn *c = q->conn;
    kc_metrics_lease(k->key, q->queued_at);
    req_free(q);
    lease_head(s, k, c);
  }
}

/* Append a literal or one jansson-encoded value to buf at `at`; 0 once anything failed
 * or did not fit (and from then on). */
static size_t frame_lit(char *buf, size_t cap, size_t at, const char *lit) {
  size_t l = strlen(lit);
  if (!at || at + l > cap)
    return 0;
  memcpy(buf + at, lit, l);
  return at + l;
}
static size_t frame_value(char *buf, size_t cap, size_t at, const json_t *v) {
  if (!at || !v)
    return 0;
  size_t l = json_dumpb(v, buf + at, cap - at, KC_TRACKER_JSON_FLAGS);
  return l && at + l <= cap ? at + l : 0;
}

static int handle_put(kc_tracker_server *s, struct conn *c, kc_trk_msg *m) {
  if (c->nres >= MAX_PUTS_PER_CONN)
    return -1;
  struct keyq *k = key_find(s, m->key, true);
  if (!k)
    return -1;
  /* The lease reply [0, [addr, port, matchkey]], encoded now, once: jansson encodes each
   * value (addr, and the port and matchkey as they were parsed), we only join them with
   * jansson's own separators.  Every piece is bounded, so it always fits. */
  char frame[4 + 6 * (KC_TRACKER_MAX_ADDR + KC_TRACKER_MAX_MATCHKEY) + 64];
  size_t n = 4;
  if (!c->peer_json_len) {
    json_t *pj = json_string(c->peer);
    c->peer_json_len =
        pj ? json_dumpb(pj, c->peer_json, sizeof c->peer_json, KC_TRACKER_JSON_FLAGS) : 0;
    json_decref(pj);
    if (!c->peer_json_len || c->peer_json_len > sizeof c->peer_json)
      return -1;
  }
  n = frame_lit(frame, sizeof frame, n, "[0, [");
  if (m->custom_addr)
    n = frame_value(frame, sizeof frame, n, json_array_get(m->root, 3));
  else if (n && n + c->peer_json_len <= sizeof frame)
    n = (size_t)((char *)mempcpy(frame + n, c->peer_json, c->peer_json_len) - frame);
  else
    n = 0;
  n = frame_lit(frame, sizeof frame, n, ", ");
  n = frame_value(frame, sizeof frame, n, m->port);
  n = frame_lit(frame, sizeof frame, n, ", ");
  n = frame_value(frame, sizeof frame, n, json_array_get(json_array_get(m->root, 2), 1));
  n = frame_lit(frame, sizeof frame, n, "]]");
  if (!n)
    return -1;
  n -= 4;
  size_t mk = strlen(m->matchkey) + 1;
  struct res *r = malloc(sizeof *r + mk + 4 + n);
  if (!r)
    return -1;
  memset(r, 0, sizeof *r);
  uint32_t le = htole32((uint32_t)n);
  memcpy(frame, &le, 4);
  r->matchkey = memcpy(r->data, m->matchkey, mk);
  r->frame = memcpy(r->data + mk, frame, 4 + n);
  r->frame_len = 4 + n;
  r->owner = c;
  r->kq = k;
  r->cnext = c->res_head;
  if (c->res_head)
    c->res_head->cprev = r;
  c->res_head = r;
  c->nres++;
  res_append_key(r);
  if (reply_code(s, c, KC_TRK_SUCCESS) < 0)
    return 0; /* conn_kill already cleaned up */
  schedule(s, k);
  return 0;
}

static int handle_request(kc_tracker_server *s, struct conn *c, kc_trk_msg *m) {
  if (c->nreq >= MAX_REQS_PER_CONN)
    return -1;
  struct keyq *k = key_find(s, m->key, true);
  if (!k)
    return -1;
  if (k->head && !k->nheap) { /* the common case: a free device, nobody waiting */
    kc_metrics_lease(k->key, 0);
    lease_head(s, k, c);
    return 0;
  }
  struct req *q = calloc(1, sizeof *q);
  if (!q)
    return -1;
  q->conn = c;
  q->kq = k;
  q->prio = m->priority;
  q->seq = k->seq++;
  q->queued_at = kc_metrics_on() ? kc_metrics_now() : 0;
  if (heap_push(k, q) < 0) {
    free(q);
    return -1;
  }
  q->cnext = c->req_head;
  if (c->req_head)
    c->req_head->cprev = q;
  c->req_head = q;
  c->nreq++;
  schedule(s, k);
  return 0;
}

static int handle_update_info(kc_tracker_server *s, struct conn *c, kc_trk_msg *m) {
  json_t *info = json_deep_copy(m->info);
  if (!info)
    return -1;
  json_t *addr = json_object_get(info, "addr");
  if (json_is_null(json_array_get(addr, 0)))
    json_array_set_new(addr, 0, json_string(c->peer));
  if (!c->info)
    c->info = json_object();
  json_object_update(c->info, info);
  json_decref(info);
  if (json_object_size(c->info) > MAX_INFO_FIELDS ||
      json_dumpb(c->info, NULL, 0, KC_TRACKER_JSON_FLAGS) > MAX_INFO_BYTES)
    return -1;
  reply_code(s, c, KC_TRK_SUCCESS);
  return 0;
}

static json_t *summary(kc_tracker_server *s) {
  json_t *q = json_object();
  for (struct keyq *k = s->order_head; k; k = k->order_next)
    json_object_set_new(
        q, k->key,
        json_pack("{s:I, s:I}", "free", (json_int_t)k->nfree, "pending", (json_int_t)k->nheap));
  json_t *si = json_array();
  for (struct conn *c = s->conns_head; c; c = c->next) {
    const char *key = json_string_value(json_object_get(c->info, "key"));
    if (key && !strncmp(key, "server", 6))
      json_array_append(si, c->info);
  }
  return json_pack("[i, {s:o, s:o}]", KC_TRK_SUCCESS, "queue_info", q, "server_info", si);
}

static int handle_msg(kc_tracker_server *s, struct conn *c, kc_trk_msg *m) {
  switch (m->code) {
  case KC_TRK_PING:
    reply_code(s, c, KC_TRK_SUCCESS);
    return 0;
  case KC_TRK_PUT:
    return handle_put(s, c, m);
  case KC_TRK_REQUEST:
    return handle_request(s, c, m);
  case KC_TRK_UPDATE_INFO:
    return handle_update_info(s, c, m);
  case KC_TRK_SUMMARY:
    reply_json(s, c, summary(s));
    return 0;
  case KC_TRK_GET_PENDING_MATCHKEYS: {
    json_t *a = json_array();
    for (struct res *r = c->res_head; r; r = r->cnext)
      json_array_insert_new(a, 0, json_string(r->matchkey)); /* PUT order */
    reply_json(s, c, a);
    return 0;
  }
  case KC_TRK_STOP:
    if (!strcmp(m->stop_key, s->stop_key)) {
      reply_code(s, c, KC_TRK_SUCCESS);
      s->stopping = true;
    } else {
      reply_code(s, c, KC_TRK_FAIL);
    }
    return 0;
  }
  return -1;
}

static void on_readable(kc_tracker_server *s, struct conn *c) {
  char buf[65536];
  ssize_t n = recv(c->fd, buf, sizeof buf, 0);
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return;
    conn_kill(s, c);
    return;
  }
  kc_error err;
  size_t cap0 = c->rd.cap;
  if (kc_frame_reader_push(&c->rd, buf, (size_t)n, &err) < 0) {
    conn_drop(s, c, "frame_too_large");
    return;
  }
  s->buffered += c->rd.cap - cap0;
  if (c->rd.cap > cap0 && c->rd.cap > SMALL_BUFFER && s->buffered > s->max_buffered) {
    conn_drop(s, c, "buffer_limit");
    return;
  }
  if (!c->magic_done) {
    kc_frame_reader *r = &c->rd;
    if (r->len - r->off < 4)
      return;
    uint32_t magic;
    memcpy(&magic, r->buf + r->off, 4);
    if (le32toh(magic) != KC_TRACKER_MAGIC) { /* TVM: close without a reply */
      conn_drop(s, c, "bad_magic");
      return;
    }
    r->off += 4;
    c->magic_done = true;
    hs_unlink(s, c);
    uint32_t le = htole32(KC_TRACKER_MAGIC);
    if (conn_send(s, c, (const char *)&le, 4) < 0)
      return;
  }
  for (;;) {
    const char *p;
    size_t len;
    int rc = kc_frame_reader_next(&c->rd, &p, &len, &err);
    if (rc == 0) {
      /* Half a frame (TVM's Python writes the length and the JSON separately): ACK now,
       * or the peer's Nagle holds the rest until our delayed ACK fires (~40 ms). */
      if (c->rd.len > c->rd.off) {
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
      } else if (c->rd.cap > 65536) { /* after a big frame: give the memory back */
        s->buffered -= c->rd.cap;
        kc_frame_reader_free(&c->rd);
      }
      return;
    }
    kc_trk_msg m;
    if (rc < 0 || kc_trk_msg_parse(p, len, &m, &err) < 0) {
      kc_log(KC_LOG_DEBUG, "kcage tracker", "%s: %s", c->peer, err.msg);
      conn_drop(s, c, "bad_message");
      return;
    }
    rc = handle_msg(s, c, &m);
    kc_trk_msg_clear(&m);
    if (rc < 0)
      conn_drop(s, c, "refused_message");
    if (c->dead || s->stopping)
      return;
  }
}

static void set_keepalive(int fd, double ka) {
  int one = 1, idle = (int)(ka / 3) > 0 ? (int)(ka / 3) : 1,
      intvl = (int)(ka / 6) > 0 ? (int)(ka / 6) : 1, cnt = 3;
  unsigned uto = (unsigned)(ka * 1000);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof uto);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void peer_string(const struct sockaddr_storage *ss, char *out, size_t len) {
  snprintf(out, len, "unknown");
  if (ss->ss_family == AF_INET) {
    inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, out, (socklen_t)len);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], out, (socklen_t)len);
    else
      inet_ntop(AF_INET6, &a->sin6_addr, out, (socklen_t)len);
  }
}

/* Out of fds: the oldest connection still owing the magic makes room (it is the one
 * most likely idle on purpose); without one, the newcomer is shed instead of spinning
 * on it.  Returns true when there is room again. */
static bool make_room(kc_tracker_server *s) {
  if (s->hs_head) {
    conn_drop(s, s->hs_head, "out_of_fds");
    return true;
  }
  return false;
}

static void on_accept(kc_tracker_server *s) {
  /* A bounded batch: the connections accepted here get to send their magic before the
   * next batch may evict them. */
  for (int i = 0; i < 16; i++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        if (make_room(s))
          continue;
        if (s->spare_fd >= 0) {
          close(s->spare_fd);
          int x = accept(s->lfd, NULL, NULL);
          if (x >= 0)
            close(x);
          s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        continue;
      }
      return;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd;
    c->accepted_at = kc_now_s();
    kc_frame_reader_init(&c->rd, s->max_frame);
    peer_string(&ss, c->peer, sizeof c->peer);
    set_keepalive(fd, s->o.keepalive_s);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(s->efd, EPOLL_CTL_ADD, fd, &ev) < 0) {
      close(fd);
      conn_release(c);
      continue;
    }
    c->prev = s->conns_tail;
    if (s->conns_tail)
      s->conns_tail->next = c;
    else
      s->conns_head = c;
    s->conns_tail = c;
    hs_append(s, c);
    kc_metrics_conn_opened();
    if (s->o.verbose)
      kc_log(KC_LOG_INFO, "kcage tracker", "connection from %s", c->peer);
  }
}

/* ---- life cycle ---------------------------------------------------------------- */

static int bind_listen(kc_tracker_server *s, kc_error *err) {
  const char *host = s->o.host ? s->o.host : "0.0.0.0";
  unsigned first = s->o.port, end = s->o.port_end > s->o.port ? s->o.port_end : s->o.port + 1u;
  int last = 0;
  for (unsigned p = first; p < end; p++) {
    char ps[8];
    snprintf(ps, sizeof ps, "%u", p);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g)
      return kc_error_set(err, 0, "resolve %s: %s", host, gai_strerror(g));
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
      int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        last = errno;
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
        s->lfd = fd;
        freeaddrinfo(ai);
        return 0;
      }
      last = errno;
      close(fd);
    }
    freeaddrinfo(ai);
    if (last != EADDRINUSE)
      break;
  }
  return kc_error_set(err, last, "cannot bind %s to any port in [%u, %u)", host, first, end);
}

int kc_tracker_server_new(const kc_tracker_opts *o, kc_tracker_server **out, kc_error *err) {
  kc_tracker_server *s = calloc(1, sizeof *s);
  if (!s)
    return kc_error_set(err, ENOMEM, "tracker");
  s->o = *o;
  s->lfd = s->efd = s->stopfd = s->spare_fd = -1;
  if (s->o.keepalive_s <= 0)
    s->o.keepalive_s = 15;
  if (s->o.handshake_s <= 0)
    s->o.handshake_s = 5;
  s->max_frame = o->max_frame ? o->max_frame : KC_TRACKER_MAX_FRAME;
  s->max_buffered = o->max_buffered ? o->max_buffered : MAX_BUFFERED_BYTES;
  s->nbuckets = 4096;
  s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
  if (o->stop_key) {
    snprintf(s->stop_key, sizeof s->stop_key, "%s", o->stop_key);
  } else {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
      r = (uint64_t)getpid() * 2654435761u ^ (uint64_t)time(NULL);
    snprintf(s->stop_key, sizeof s->stop_key, "tracker:0.%016llu",
             (unsigned long long)(r % 10000000000000000ull));
  }
  if (!s->buckets) {
    kc_tracker_server_free(s);
    return kc_error_set(err, ENOMEM, "tracker");
  }
  if (bind_listen(s, err) < 0) {
    kc_tracker_server_free(s);
    return -1;
  }
  s->efd = epoll_create1(EPOLL_CLOEXEC);
  s->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &s->lfd};
  struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &s->stopfd};
  if (s->efd < 0 || s->stopfd < 0 || epoll_ctl(s->efd, EPOLL_CTL_ADD, s->lfd, &lev) < 0 ||
      epoll_ctl(s->efd, EPOLL_CTL_ADD, s->stopfd, &sev) < 0) {
    int e = errno;
    kc_tracker_server_free(s);
    return kc_error_set(err, e, "epoll");
  }
  *out = s;
  return 0;
}

uint16_t kc_tracker_server_port(const kc_tracker_server *s) {
  return s->port;
}
const char *kc_tracker_server_stop_key(const kc_tracker_server *s) {
  return s->stop_key;
}

void kc_tracker_server_stop(kc_tracker_server *s) {
  uint64_t one = 1;
  ssize_t n = write(s->stopfd, &one, sizeof one);
  (void)n;
}

/* Drop the connections whose magic is overdue; returns the ms until the next is due
 * (-1: none waits). */
static int expire_handshakes(kc_tracker_server *s) {
  double now = kc_now_s();
  while (s->hs_head && now - s->hs_head->accepted_at >= s->o.handshake_s)
    conn_drop(s, s->hs_head, "handshake_timeout");
  if (!s->hs_head)
    return -1;
  return (int)((s->hs_head->accepted_at + s->o.handshake_s - now) * 1000) + 1;
}

int kc_tracker_server_run(kc_tracker_server *s, kc_error *err) {
  struct epoll_event evs[256];
  while (!s->stopping) {
    int wait_ms = expire_handshakes(s);
    int metrics_ms = kc_metrics_poll_ms(); /* an idle loop still publishes its queues */
    if (metrics_ms >= 0 && (wait_ms < 0 || metrics_ms < wait_ms))
      wait_ms = metrics_ms;
    reap_dead(s);
    int n = epoll_wait(s->efd, evs, 256, wait_ms);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return kc_error_set(err, errno, "epoll_wait");
    }
    for (int i = 0; i < n && !s->stopping; i++) {
      void *p = evs[i].data.ptr;
      if (p == &s->lfd) {
        on_accept(s);
      } else if (p == &s->stopfd) {
        s->stopping = true;
      } else {
        struct conn *c = p;
        if (c->dead)
          continue;
        if (evs[i].events & EPOLLOUT)
          conn_flush(s, c);
        if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
          on_readable(s, c);
      }
    }
    reap_dead(s);
    if (kc_metrics_snapshot_due())
      for (struct keyq *k = s->order_head; k; k = k->order_next)
        kc_metrics_queue(k->key, k->nfree, k->nheap);
  }
  /* STOP's own reply must still reach its sender. */
  for (struct conn *c = s->conns_head; c; c = c->next)
    if (c->out_off < c->out_len) {
      int fl = fcntl(c->fd, F_GETFL);
      fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
      send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    }
  return 0;
}

void kc_tracker_server_free(kc_tracker_server *s) {
  if (!s)
    return;
  while (s->conns_head)
    conn_kill(s, s->conns_head);
  reap_dead(s);
  for (struct keyq *k = s->order_head, *n; k; k = n) {
    n = k->order_next;
    free(k->heap);
    free(k->key);
    free(k);
  }
  free(s->buckets);
  if (s->lfd >= 0)
    close(s->lfd);
  if (s->efd >= 0)
    close(s->efd);
  if (s->stopfd >= 0)
    close(s->stopfd);
  if (s->spare_fd >= 0)
    close(s->spare_fd);
  free(s);
}
