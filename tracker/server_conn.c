/* The tracker's connections: one write per reply, bounded output, the handshake list
 * (connections still owing the magic, oldest first) and accepting under fd pressure. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kcage/log.h"
#include "metrics.h"
#include "netio.h"
#include "server_internal.h"

/* ---- connections --------------------------------------------------------------- */

void srv_hs_unlink(kc_tracker_server *s, struct conn *c) {
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

void srv_conn_kill(kc_tracker_server *s, struct conn *c) {
  if (c->dead)
    return;
  c->dead = true;
  if (!c->magic_done)
    srv_hs_unlink(s, c);
  epoll_ctl(s->efd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
  /* TVM keeps these until a client trips over them; we drop them now. */
  while (c->req_head) {
    srv_heap_remove(c->req_head->kq, c->req_head);
    srv_req_free(c->req_head);
  }
  while (c->res_head) {
    srv_res_unlink_key(c->res_head);
    srv_res_free(c->res_head);
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

void srv_conn_drop(kc_tracker_server *s, struct conn *c, const char *why) {
  c->drop_why = why;
  srv_conn_kill(s, c);
}

static void conn_release(struct conn *c) {
  kc_frame_reader_free(&c->rd);
  free(c->out);
  if (c->info)
    json_decref(c->info);
  free(c);
}

void srv_reap_dead(kc_tracker_server *s) {
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
int srv_conn_send(kc_tracker_server *s, struct conn *c, const char *buf, size_t len) {
  if (c->dead)
    return -1;
  size_t done = 0;
  if (c->out_len == c->out_off) {
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      srv_conn_kill(s, c);
      return -1;
    }
    done = n > 0 ? (size_t)n : 0;
    if (done == len)
      return 0;
  }
  size_t rest = len - done;
  if (c->out_len - c->out_off + rest > MAX_OUT_BYTES) { /* a peer that never reads */
    srv_conn_drop(s, c, "not_reading");
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
      srv_conn_kill(s, c);
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

void srv_conn_flush(kc_tracker_server *s, struct conn *c) {
  while (c->out_off < c->out_len) {
    ssize_t n =
        send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      if (errno == EINTR)
        continue;
      srv_conn_kill(s, c);
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

int srv_reply_json(kc_tracker_server *s, struct conn *c, json_t *v) {
  char *buf;
  size_t len;
  int rc = kc_tracker_frame_encode(v, &buf, &len, NULL);
  json_decref(v);
  if (rc < 0) {
    srv_conn_kill(s, c);
    return -1;
  }
  rc = srv_conn_send(s, c, buf, len);
  free(buf);
  return rc;
}

int srv_reply_code(kc_tracker_server *s, struct conn *c, int code) {
  /* The hot path (PUT's 0): constant frames, no JSON machinery, no printf. */
  static const char ok[] = {1, 0, 0, 0, '0'}, fail[] = {2, 0, 0, 0, '-', '1'};
  if (code == KC_TRK_SUCCESS)
    return srv_conn_send(s, c, ok, sizeof ok);
  if (code == KC_TRK_FAIL)
    return srv_conn_send(s, c, fail, sizeof fail);
  char buf[16];
  int n = snprintf(buf + 4, sizeof buf - 4, "%d", code);
  uint32_t le = htole32((uint32_t)n);
  memcpy(buf, &le, 4);
  return srv_conn_send(s, c, buf, 4 + (size_t)n);
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
    srv_conn_drop(s, s->hs_head, "out_of_fds");
    return true;
  }
  return false;
}

void srv_on_accept(kc_tracker_server *s) {
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
    kc_tcp_keepalive(fd, s->o.keepalive_s);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
