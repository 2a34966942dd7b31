/* The tracker's key table (bounded, swept when full), each key's request heap (highest
 * priority first, FIFO among equals, as TVM's PriorityScheduler) and free-device FIFO. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcage/log.h"
#include "metrics.h"
#include "server_internal.h"

/* ---- keys ---------------------------------------------------------------------- */

/* HMAC-SHA-256 of the name (nettle's digest leaves the context keyed for the next). */
size_t srv_bucket_of(kc_tracker_server *s, const char *key) {
  uint8_t d[sizeof(uint64_t)];
  uint64_t h;
  hmac_sha256_update(&s->bucket_key, strlen(key), (const uint8_t *)key);
  hmac_sha256_digest(&s->bucket_key, sizeof d, d);
  memcpy(&h, d, sizeof h);
  return (size_t)(h & (s->nbuckets - 1));
}

static void key_free(kc_tracker_server *s, struct keyq *k, struct keyq *order_prev) {
  struct keyq **p = &s->buckets[srv_bucket_of(s, k->key)];
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

struct keyq *srv_key_find(kc_tracker_server *s, const char *key, bool create) {
  size_t b = srv_bucket_of(s, key);
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

int srv_heap_push(struct keyq *k, struct req *r) {
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

void srv_heap_remove(struct keyq *k, struct req *r) {
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

void srv_res_unlink_key(struct res *r) {
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

void srv_res_append_key(struct res *r) {
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

void srv_res_free(struct res *r) {
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

void srv_req_free(struct req *r) {
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
