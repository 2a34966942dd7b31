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

#include "kcage/cleanup.h"
#include "kcage/log.h"
#include "kcage/tracker.h"
#include "metrics.h"
#include "netio.h"
#include "server_internal.h"

void kc_tracker_opts_init(kc_tracker_opts *o) {
  memset(o, 0, sizeof *o);
  o->port = KC_TRACKER_DEFAULT_PORT;
}

/* ---- the scheduler ------------------------------------------------------------- */

/* Lease the key's oldest free device to c.  TVM: a requester that cannot be told puts
 * the device at the back of the list. */
static void lease_head(kc_tracker_server *s, struct keyq *k, struct conn *c) {
  struct res *r = k->head;
  srv_res_unlink_key(r);
  srv_res_append_key(r);
  if (srv_conn_send(s, c, r->frame, r->frame_len) == 0) {
    srv_res_unlink_key(r);
    srv_res_free(r);
  }
}

static void schedule(kc_tracker_server *s, struct keyq *k) {
  while (k->head && k->nheap) {
    struct req *q = k->heap[0];
    srv_heap_remove(k, q);
    struct conn *c = q->conn;
    kc_metrics_lease(k->key, q->queued_at);
    srv_req_free(q);
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

static int handle_put(kc_tracker_server *s, struct conn *c, kc_tracker_msg *m) {
  if (c->nres >= MAX_PUTS_PER_CONN)
    return -1;
  struct keyq *k = srv_key_find(s, m->key, true);
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
  srv_res_append_key(r);
  if (srv_reply_code(s, c, KC_TRK_SUCCESS) < 0)
    return 0; /* conn_kill already cleaned up */
  schedule(s, k);
  return 0;
}

static int handle_request(kc_tracker_server *s, struct conn *c, kc_tracker_msg *m) {
  if (c->nreq >= MAX_REQS_PER_CONN)
    return -1;
  struct keyq *k = srv_key_find(s, m->key, true);
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
  if (srv_heap_push(k, q) < 0) {
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

static int handle_update_info(kc_tracker_server *s, struct conn *c, kc_tracker_msg *m) {
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
  srv_reply_code(s, c, KC_TRK_SUCCESS);
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

static int handle_msg(kc_tracker_server *s, struct conn *c, kc_tracker_msg *m) {
  switch (m->code) {
  case KC_TRK_PING:
    srv_reply_code(s, c, KC_TRK_SUCCESS);
    return 0;
  case KC_TRK_PUT:
    return handle_put(s, c, m);
  case KC_TRK_REQUEST:
    return handle_request(s, c, m);
  case KC_TRK_UPDATE_INFO:
    return handle_update_info(s, c, m);
  case KC_TRK_SUMMARY:
    srv_reply_json(s, c, summary(s));
    return 0;
  case KC_TRK_GET_PENDING_MATCHKEYS: {
    json_t *a = json_array();
    for (struct res *r = c->res_head; r; r = r->cnext)
      json_array_insert_new(a, 0, json_string(r->matchkey)); /* PUT order */
    srv_reply_json(s, c, a);
    return 0;
  }
  case KC_TRK_STOP:
    if (!strcmp(m->stop_key, s->stop_key)) {
      srv_reply_code(s, c, KC_TRK_SUCCESS);
      s->stopping = true;
    } else {
      srv_reply_code(s, c, KC_TRK_FAIL);
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
    srv_conn_kill(s, c);
    return;
  }
  kc_error err;
  size_t cap0 = c->rd.cap;
  if (kc_frame_reader_push(&c->rd, buf, (size_t)n, &err) < 0) {
    srv_conn_drop(s, c, "frame_too_large");
    return;
  }
  s->buffered += c->rd.cap - cap0;
  if (c->rd.cap > cap0 && c->rd.cap > SMALL_BUFFER && s->buffered > s->max_buffered) {
    srv_conn_drop(s, c, "buffer_limit");
    return;
  }
  if (!c->magic_done) {
    kc_frame_reader *r = &c->rd;
    if (r->len - r->off < 4)
      return;
    uint32_t magic;
    memcpy(&magic, r->buf + r->off, 4);
    if (le32toh(magic) != KC_TRACKER_MAGIC) { /* TVM: close without a reply */
      srv_conn_drop(s, c, "bad_magic");
      return;
    }
    r->off += 4;
    c->magic_done = true;
    srv_hs_unlink(s, c);
    uint32_t le = htole32(KC_TRACKER_MAGIC);
    if (srv_conn_send(s, c, (const char *)&le, 4) < 0)
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
    kc_tracker_msg m;
    if (rc < 0 || kc_tracker_msg_parse(p, len, &m, &err) < 0) {
      kc_log(KC_LOG_DEBUG, "kcage tracker", "%s: %s", c->peer, err.msg);
      srv_conn_drop(s, c, "bad_message");
      return;
    }
    rc = handle_msg(s, c, &m);
    kc_tracker_msg_clear(&m);
    if (rc < 0)
      srv_conn_drop(s, c, "refused_message");
    if (c->dead || s->stopping)
      return;
  }
}

/* ---- life cycle ---------------------------------------------------------------- */

static int bind_listen(kc_tracker_server *s, kc_error *err) {
  unsigned end = s->o.port_end > s->o.port ? s->o.port_end : s->o.port + 1u;
  return kc_listen_first_free(s->o.host ? s->o.host : "0.0.0.0", s->o.port, end, SOCK_NONBLOCK,
                              &s->lfd, &s->port, err);
}

/* The buckets' key, and the stop key's digits unless the caller chose one.  A guessable
 * stop key would let anyone stop the tracker, so without the kernel's randomness it
 * does not start. */
static int draw_keys(kc_tracker_server *s, const char *stop_key, kc_error *err) {
  uint8_t bk[32];
  uint64_t r = 0;
  if (getrandom(bk, sizeof bk, 0) != sizeof bk || getrandom(&r, sizeof r, 0) != sizeof r)
    return kc_error_set(err, errno ? errno : EIO, "tracker: getrandom");
  hmac_sha256_set_key(&s->bucket_key, sizeof bk, bk);
  explicit_bzero(bk, sizeof bk);
  if (stop_key)
    snprintf(s->stop_key, sizeof s->stop_key, "%s", stop_key);
  else
    snprintf(s->stop_key, sizeof s->stop_key, "tracker:0.%016llu",
             (unsigned long long)(r % 10000000000000000ull));
  return 0;
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
  if (!s->buckets) {
    kc_tracker_server_free(s);
    return kc_error_set(err, ENOMEM, "tracker");
  }
  if (draw_keys(s, o->stop_key, err) < 0 || bind_listen(s, err) < 0) {
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
    srv_conn_drop(s, s->hs_head, "handshake_timeout");
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
    srv_reap_dead(s);
    int n = epoll_wait(s->efd, evs, 256, wait_ms);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return kc_error_set(err, errno, "epoll_wait");
    }
    for (int i = 0; i < n && !s->stopping; i++) {
      void *p = evs[i].data.ptr;
      if (p == &s->lfd) {
        srv_on_accept(s);
      } else if (p == &s->stopfd) {
        s->stopping = true;
      } else {
        struct conn *c = p;
        if (c->dead)
          continue;
        if (evs[i].events & EPOLLOUT)
          srv_conn_flush(s, c);
        if (!c->dead && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
          on_readable(s, c);
      }
    }
    srv_reap_dead(s);
    kc_metrics_heartbeat();
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
    srv_conn_kill(s, s->conns_head);
  srv_reap_dead(s);
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
