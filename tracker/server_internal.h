/* Private to the tracker server (server.c, server_table.c, server_conn.c): the key
 * table and request heap, the connections, and the limits they share. */
#ifndef KC_TRACKER_SERVER_INTERNAL_H
#define KC_TRACKER_SERVER_INTERNAL_H

#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nettle/hmac.h>

#include "frame_reader.h"
#include "kcage/tracker.h"

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
  /* A key's bucket is a keyed hash of its name, under a key drawn at start: a peer
   * cannot choose names that all land in one bucket and make every lookup walk them. */
  struct hmac_sha256_ctx bucket_key;
  struct keyq *order_head, *order_tail;
  struct conn *conns_head, *conns_tail;
  struct conn *hs_head, *hs_tail; /* connections still owing the magic */
  struct conn *dead;
  bool stopping;
  size_t max_frame;
  size_t buffered;     /* sum of every connection's in+out buffer capacity */
  size_t max_buffered; /* o.max_buffered or MAX_BUFFERED_BYTES */
};

/* server_table.c: the key table, each key's request heap and free-device FIFO */
size_t srv_bucket_of(kc_tracker_server *s, const char *key);
int srv_heap_push(struct keyq *k, struct req *r);
void srv_heap_remove(struct keyq *k, struct req *r);
struct keyq *srv_key_find(kc_tracker_server *s, const char *key, bool create);
void srv_req_free(struct req *r);
void srv_res_append_key(struct res *r);
void srv_res_free(struct res *r);
void srv_res_unlink_key(struct res *r);

/* server_conn.c: connections, their buffered replies, accepting new ones */
void srv_conn_drop(kc_tracker_server *s, struct conn *c, const char *why);
void srv_conn_flush(kc_tracker_server *s, struct conn *c);
void srv_conn_kill(kc_tracker_server *s, struct conn *c);
int srv_conn_send(kc_tracker_server *s, struct conn *c, const char *buf, size_t len);
void srv_hs_unlink(kc_tracker_server *s, struct conn *c);
void srv_on_accept(kc_tracker_server *s);
void srv_reap_dead(kc_tracker_server *s);
int srv_reply_code(kc_tracker_server *s, struct conn *c, int code);
int srv_reply_json(kc_tracker_server *s, struct conn *c, json_t *v);

#endif
