/* kc_pool: PopenPoolExecutor without threads.  The pool spreads calls over its
 * workers' rings (several in flight per worker) and makes progress whenever the caller
 * waits: it spins on every ring briefly, then sleeps in one poll() over every worker's
 * eventfd, pidfd and seccomp listener, bounded by the earliest call deadline. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kcage/pool.h"
#include "worker_internal.h"

#define KC_POOL_SPIN_NS 50000

struct kc_future {
  kc_pool *pool;
  bool done, taken, abandoned;
  kc_call_result res;
  /* the call itself, kept until it is done: calls queued behind a timeout or a crash
   * on the same worker never ran, and are sent again rather than failed */
  char *fn;
  void *arg;
  size_t len;
  kc_future *next_retry;
};

typedef struct slot {
  kc_worker *w;
  kc_future **q; /* FIFO of the futures in flight on this worker */
  uint32_t head, count, cap;
} slot;

struct kc_pool {
  kc_pool_opts o;
  kc_zygote *zyg;
  slot *slots;
  unsigned n;
  kc_future *retry_head, *retry_tail; /* to send again, in order */
  struct pollfd *pfds;                /* 3 per worker: eventfd, pidfd, listener */
};

static void release_call(kc_future *f) {
  free(f->fn);
  free(f->arg);
  f->fn = NULL;
  f->arg = NULL;
}

void kc_pool_opts_init(kc_pool_opts *o) {
  memset(o, 0, sizeof *o);
  kc_worker_opts_init(&o->worker);
}

static int new_workers(kc_pool *p, kc_error *err);

int kc_pool_new(const kc_pool_opts *opts, kc_pool **out, kc_error *err) {
  kc_pool *p = calloc(1, sizeof *p);
  if (!p)
    return kc_error_set(err, ENOMEM, "pool");
  if (opts)
    p->o = *opts;
  else
    kc_pool_opts_init(&p->o);
  p->n = p->o.max_workers ? p->o.max_workers : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
  if (!p->n)
    p->n = 1;
  p->slots = calloc(p->n, sizeof *p->slots);
  p->pfds = calloc(3 * (size_t)p->n, sizeof *p->pfds);
  if (!p->slots || !p->pfds) {
    free(p->pfds);
    free(p->slots);
    free(p);
    return kc_error_set(err, ENOMEM, "pool");
  }
  if (!p->o.worker.policy && p->o.worker.isolation == KC_ISOLATION_SANDBOX)
    p->o.worker.policy = "measure"; /* the zygote preloads it before its root moves */
  if (kc_zygote_begin(&p->o.worker, &p->zyg, err) < 0) {
    kc_pool_shutdown(p, false);
    return kc_error_prefix(err, "pool");
  }
  if (new_workers(p, err) < 0 || kc_zygote_await(&p->o.worker, p->zyg, err) < 0) {
    kc_pool_shutdown(p, false);
    return kc_error_prefix(err, "pool");
  }
  *out = p;
  return 0;
}

/* The workers, each asked of the zygote while it starts: their cgroups and rings are
 * made meanwhile, and their requests wait on its socket for its hello.  A worker that
 * could not be asked for yet (a limit its cgroup refuses, say) meets the error again
 * at its first call, as it would have without the head start. */
static int new_workers(kc_pool *p, kc_error *err) {
  for (unsigned i = 0; i < p->n; i++) {
    slot *s = &p->slots[i];
    if (kc_worker_new_shared(&p->o.worker, p->zyg, &s->w, err) < 0)
      return -1;
    s->cap = kc_worker_depth(s->w);
    s->q = calloc(s->cap, sizeof *s->q);
    if (!s->q)
      return kc_error_set(err, ENOMEM, "worker queue");
    kc_error ignored = {0};
    kc_worker_prestart(s->w, &ignored);
  }
  return 0;
}

unsigned kc_pool_size(const kc_pool *p) {
  return p->n;
}

pid_t kc_pool_worker_pid(const kc_pool *p, unsigned i) {
  return i < p->n ? kc_worker_pid(p->slots[i].w) : 0;
}

static kc_future *pop(slot *s) {
  kc_future *f = s->q[s->head];
  s->head = (s->head + 1) % s->cap;
  s->count--;
  return f;
}

static void complete(slot *s, kc_call_result *res) {
  kc_future *f = pop(s);
  release_call(f);
  if (f->abandoned) {
    kc_call_result_clear(res);
    free(f);
    return;
  }
  f->res = *res;
  f->done = true;
}

/* After a failure, the calls behind it on that worker go back to the pool's queue. */
static void take_back_orphans(kc_pool *p, slot *s) {
  uint64_t n = kc_worker_take_orphans(s->w);
  for (uint64_t i = 0; i < n && s->count; i++) {
    kc_future *f = pop(s);
    f->next_retry = NULL;
    if (p->retry_tail)
      p->retry_tail->next_retry = f;
    else
      p->retry_head = f;
    p->retry_tail = f;
  }
}

static int send_to(kc_pool *p, kc_future *f, kc_error *err);

static void resend(kc_pool *p) {
  while (p->retry_head) {
    kc_future *f = p->retry_head;
    p->retry_head = f->next_retry;
    if (!p->retry_head)
      p->retry_tail = NULL;
    kc_error err = {0};
    if (send_to(p, f, &err) < 0) { /* e.g. no worker can start: fail it */
      kc_call_result r;
      kc_call_result_init(&r);
      r.status = KC_CALL_CHILD_ERROR;
      r.verdict.status = KC_STATUS_SETUP_ERROR;
      snprintf(r.message, sizeof r.message, "%.1000s", err.msg);
      release_call(f);
      if (f->abandoned) {
        free(f);
      } else {
        f->res = r;
        f->done = true;
      }
    }
  }
}

/* Take whatever is ready without blocking.  Returns how many calls finished. */
static int harvest(kc_pool *p) {
  int got = 0;
  for (unsigned i = 0; i < p->n; i++) {
    slot *s = &p->slots[i];
    while (s->count) {
      /* straight into the future: a result is 1.6 KB, not worth a copy per call */
      kc_future *f = s->q[s->head];
      kc_call_result tmp, *r = f->abandoned ? &tmp : &f->res;
      if (kc_worker_try(s->w, r, NULL) != 1)
        break;
      kc_call_status st = r->status;
      pop(s);
      release_call(f);
      if (f->abandoned) {
        kc_call_result_clear(&tmp);
        free(f);
      } else {
        f->done = true;
      }
      got++;
      if (st == KC_CALL_TIMEOUT || st == KC_CALL_CHILD_ERROR)
        take_back_orphans(p, s);
    }
  }
  if (p->retry_head)
    resend(p);
  return got;
}

/* Make progress until at least one call finishes or until_ns passes. */
static void drive(kc_pool *p, uint64_t until_ns) {
  if (harvest(p))
    return;
  uint64_t t0 = kc_now_ns();
  for (unsigned n = 1; kc_now_ns() - t0 < KC_POOL_SPIN_NS && kc_now_ns() < until_ns; n++) {
    for (int i = 0; i < 16; i++) {
      __builtin_ia32_pause();
      if (harvest(p))
        return;
    }
    if (n % 2 == 0)
      sched_yield(); /* a worker may be waiting for this CPU */
  }
  for (;;) {
    /* the eventfds first ([0, ne)), the only ones to drain: a worker's third fd may be
     * the sysinfo relay's socket, whose reads take the violation it carries */
    struct pollfd *fds = p->pfds;
    unsigned ne = 0, no = 0, cap = 3 * p->n;
    uint64_t dl = until_ns;
    bool any = false;
    for (unsigned i = 0; i < p->n; i++) {
      slot *s = &p->slots[i];
      if (!s->count)
        continue;
      any = true;
      uint64_t d = kc_worker_deadline(s->w);
      if (d < dl)
        dl = d;
      int f[3];
      if (kc_worker_pollfds(s->w, f)) {
        kc_worker_set_waiting(s->w, true);
        if (f[0] >= 0)
          fds[ne++] = (struct pollfd){.fd = f[0], .events = POLLIN};
        for (int k = 1; k < 3; k++)
          if (f[k] >= 0)
            fds[cap - ++no] = (struct pollfd){.fd = f[k], .events = POLLIN};
      }
    }
    memmove(fds + ne, fds + cap - no, no * sizeof *fds);
    unsigned nf = ne + no;
    if (!any)
      return;
    /* re-check after announcing we sleep (eventcount) */
    if (harvest(p)) {
      for (unsigned i = 0; i < p->n; i++)
        kc_worker_set_waiting(p->slots[i].w, false);
      return;
    }
    uint64_t now = kc_now_ns();
    if (now >= until_ns)
      break;
    uint64_t left = dl == UINT64_MAX ? 1000000000u : (dl > now ? dl - now : 0);
    if (left > 1000000000u)
      left = 1000000000u;
    struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
    int r = ppoll(fds, nf, &ts, NULL);
    for (unsigned i = 0; i < p->n; i++)
      kc_worker_set_waiting(p->slots[i].w, false);
    for (unsigned k = 0; r > 0 && k < ne; k++)
      if (fds[k].revents & POLLIN) {
        uint64_t v;
        ssize_t rd = read(fds[k].fd, &v, sizeof v);
        (void)rd;
      }
    if (harvest(p))
      return;
  }
}

/* Send on the least-loaded worker, driving the pool while every ring is full. */
static int send_to(kc_pool *p, kc_future *f, kc_error *err) {
  for (;;) {
    unsigned best = p->n;
    for (unsigned i = 0; i < p->n; i++) {
      slot *s = &p->slots[i];
      if (s->count < s->cap && kc_worker_can_take(s->w) &&
          (best == p->n || s->count < p->slots[best].count))
        best = i;
    }
    if (best == p->n) {
      drive(p, UINT64_MAX);
      continue;
    }
    slot *s = &p->slots[best];
    if (kc_worker_send(s->w, f->fn, f->arg, f->len, p->o.timeout_s, err) < 0) {
      /* A dead zygote (killed from outside, or OOM) is replaced once, for every slot;
       * running workers are the parent's children and carry on. */
      if (kc_zygote_alive(p->zyg))
        return -1;
      kc_zygote *nz;
      kc_error e2 = {0};
      if (kc_zygote_start(&p->o.worker, &nz, &e2) < 0)
        return -1;
      kc_zygote_stop(p->zyg);
      p->zyg = nz;
      for (unsigned i = 0; i < p->n; i++)
        kc_worker_set_zygote(p->slots[i].w, nz);
      if (kc_worker_send(s->w, f->fn, f->arg, f->len, p->o.timeout_s, err) < 0)
        return -1;
    }
    s->q[(s->head + s->count) % s->cap] = f;
    s->count++;
    return 0;
  }
}

kc_future *kc_pool_submit(kc_pool *p, const char *fn, const void *arg, size_t len, kc_error *err) {
  kc_future *f = calloc(1, sizeof *f);
  if (!f || !(f->fn = strdup(fn ? fn : "")) || (len && !(f->arg = malloc(len)))) {
    if (f)
      free(f->fn);
    free(f);
    kc_error_set(err, ENOMEM, "submit");
    return NULL;
  }
  if (len)
    memcpy(f->arg, arg, len);
  f->len = len;
  f->pool = p;
  if (send_to(p, f, err) < 0) {
    release_call(f);
    free(f);
    return NULL;
  }
  return f;
}

bool kc_future_done(kc_future *f) {
  if (!f->done && f->pool)
    harvest(f->pool);
  return f->done;
}

int kc_future_wait(kc_future *f, double timeout_s, kc_call_result *res) {
  uint64_t until = timeout_s < 0 ? UINT64_MAX : kc_now_ns() + (uint64_t)(timeout_s * 1e9);
  while (!f->done && f->pool && kc_now_ns() < until)
    drive(f->pool, until);
  if (!f->done || f->taken)
    return 0;
  *res = f->res;
  f->taken = true;
  memset(&f->res, 0, sizeof f->res);
  return 1;
}

void kc_future_free(kc_future *f) {
  if (!f)
    return;
  if (!f->done && f->pool) {
    f->abandoned = true; /* freed when its result arrives or at shutdown */
    return;
  }
  kc_call_result_clear(&f->res);
  free(f);
}

/* How many calls map keeps in flight: every ring full, and as many again queued
 * behind them so a worker that finishes finds its next call at once.  Bounded, so a
 * map of a million calls touches the memory of a few thousand: futures are reused
 * from the allocator instead of faulting in fresh pages per result. */
static size_t map_window(const kc_pool *p) {
  size_t w = 0;
  for (unsigned i = 0; i < p->n; i++)
    w += p->slots[i].cap;
  return w ? 2 * w : 1;
}

int kc_pool_map_with_error_catching(kc_pool *p, const char *fn, const kc_blob *args, size_t n,
                                    kc_call_result *results, kc_error *err) {
  size_t window = map_window(p);
  kc_future **fs = calloc(window, sizeof *fs);
  if (!fs)
    return kc_error_set(err, ENOMEM, "map");
  int rc = 0;
  size_t sent = 0, done = 0;
  while (done < n) {
    while (rc == 0 && sent < n && sent - done < window) {
      if (!(fs[sent % window] = kc_pool_submit(p, fn, args[sent].data, args[sent].len, err)))
        rc = -1;
      else
        sent++;
    }
    if (done == sent)
      break;
    kc_future *f = fs[done % window];
    if (rc == 0)
      kc_future_wait(f, -1, &results[done]);
    kc_future_free(f); /* after a failure: still running, dropped on arrival */
    done++;
  }
  /* A failed map hands back no results: the ones already taken are cleared. */
  for (size_t k = 0; rc < 0 && k < done; k++)
    kc_call_result_clear(&results[k]);
  free(fs);
  return rc;
}

void kc_pool_shutdown(kc_pool *p, bool wait) {
  if (!p)
    return;
  if (wait) {
    for (;;) {
      bool busy = false;
      for (unsigned i = 0; i < p->n; i++)
        busy = busy || (p->slots && p->slots[i].count) || p->retry_head;
      if (!busy)
        break;
      drive(p, UINT64_MAX);
    }
  }
  while (p->retry_head) { /* taken back but not sent again: never ran */
    kc_future *f = p->retry_head;
    p->retry_head = f->next_retry;
    release_call(f);
    if (f->abandoned) {
      free(f);
      continue;
    }
    kc_call_result_init(&f->res);
    f->res.status = KC_CALL_CHILD_ERROR;
    f->res.verdict.status = KC_STATUS_SIGNALED;
    strcpy(f->res.message, "pool shut down");
    f->done = true;
    f->pool = NULL;
  }
  for (unsigned i = 0; p->slots && i < p->n; i++) {
    slot *s = &p->slots[i];
    while (s->count) {
      kc_call_result r;
      kc_call_result_init(&r);
      r.status = KC_CALL_CHILD_ERROR;
      r.verdict.status = KC_STATUS_SIGNALED;
      strcpy(r.message, "pool shut down");
      strcpy(r.verdict.message, "pool shut down");
      kc_future *f = s->q[s->head];
      if (!f->abandoned)
        f->pool = NULL; /* before complete(), which frees an abandoned one */
      complete(s, &r);
    }
    kc_worker_free(s->w);
    free(s->q);
  }
  free(p->slots);
  free(p->pfds);
  kc_zygote_stop(p->zyg);
  free(p);
}
