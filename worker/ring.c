/* The per-worker shared-memory ring (see ring.h for the protocol). */
#include "ring.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KC_PAGE 4096u

static uint64_t round_up(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

int kc_futex_wait(_Atomic uint32_t *word, uint32_t expect, int64_t timeout_ns) {
  struct timespec ts, *tp = NULL;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tp = &ts;
  }
  /* Not FUTEX_PRIVATE: the word lives in a MAP_SHARED memfd shared by two processes. */
  return (int)syscall(SYS_futex, word, FUTEX_WAIT, expect, tp, NULL, 0);
}

int kc_futex_wake(_Atomic uint32_t *word, int n) {
  return (int)syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* The robust list of the worker's main thread: one entry, whose futex word is
 * worker_tid in the shared control page.  Static: it must outlive everything but the
 * process. */
static struct robust_list_head death_head;
static struct robust_list death_entry;

void kc_ring_arm_death_notice(kc_ring *r) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  atomic_store(&r->ctl->worker_tid, (uint32_t)tid & FUTEX_TID_MASK);
  death_entry.next = &death_head.list;
  death_head.list.next = &death_entry;
  death_head.futex_offset = (long)((char *)&r->ctl->worker_tid - (char *)&death_entry);
  death_head.list_op_pending = NULL;
  /* glibc's own list of this thread (robust mutexes) is given up: the worker has none
   * that outlive it.  A failure leaves the nap's end to notice a death. */
  syscall(SYS_set_robust_list, &death_head, sizeof death_head);
}

bool kc_ring_nap(kc_ring *r, uint32_t key, uint64_t ns) {
  kc_ring_ctl *c = r->ctl;
  uint32_t t = atomic_load_explicit(&c->worker_tid, memory_order_seq_cst);
#ifdef __NR_futex_waitv
  if ((t & FUTEX_TID_MASK) && !(t & FUTEX_OWNER_DIED)) {
    /* FUTEX_WAITERS asks the dying worker's kernel side for the wake-up */
    t = atomic_fetch_or_explicit(&c->worker_tid, FUTEX_WAITERS, memory_order_seq_cst);
    if (t & FUTEX_OWNER_DIED)
      return false;
    struct futex_waitv wv[2] = {
        {.val = key, .uaddr = (uint64_t)(uintptr_t)&c->cq_epoch, .flags = FUTEX_32},
        {.val = t | FUTEX_WAITERS,
         .uaddr = (uint64_t)(uintptr_t)&c->worker_tid,
         .flags = FUTEX_32}};
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    uint64_t e = (uint64_t)end.tv_nsec + ns;
    end.tv_sec += (time_t)(e / 1000000000u);
    end.tv_nsec = (long)(e % 1000000000u);
    if (syscall(__NR_futex_waitv, wv, 2, 0, &end, CLOCK_MONOTONIC) >= 0 || errno != ENOSYS)
      return !(atomic_load_explicit(&c->worker_tid, memory_order_seq_cst) & FUTEX_OWNER_DIED);
  }
#endif
  if (t & FUTEX_OWNER_DIED)
    return false;
  kc_futex_wait(&c->cq_epoch, key, (int64_t)ns);
  return true;
}

size_t kc_ring_layout(const kc_ring_params *p, uint64_t *sq_off, uint64_t *sq_slot,
                      uint64_t *cq_off, uint64_t *cq_slot) {
  uint64_t sqs = round_up(sizeof(kc_sqe) + KC_RING_FN_MAX + 1 + (uint64_t)p->max_arg, 64);
  uint64_t cqs = round_up(sizeof(kc_cqe) + (uint64_t)p->max_result, 64);
  uint64_t so = round_up(sizeof(kc_ring_ctl), KC_PAGE);
  uint64_t co = round_up(so + sqs * p->depth, KC_PAGE);
  *sq_off = so;
  *sq_slot = sqs;
  *cq_off = co;
  *cq_slot = cqs;
  return (size_t)round_up(co + cqs * p->depth, KC_PAGE);
}

static void fill_view(kc_ring *r, const kc_ring_params *p) {
  r->depth = p->depth;
  r->mask = p->depth - 1;
  r->max_arg = p->max_arg;
  r->max_result = p->max_result;
  r->size = kc_ring_layout(p, &r->sq_off, &r->sq_slot_size, &r->cq_off, &r->cq_slot_size);
}

void kc_ring_reset(kc_ring *r, uint32_t generation) {
  kc_ring_ctl *c = r->ctl;
  r->generation = generation;
  r->sent = r->reaped = 0;
  c->magic = KC_RING_MAGIC;
  c->depth = r->depth;
  c->sq_slot_size = r->sq_slot_size;
  c->cq_slot_size = r->cq_slot_size;
  c->sq_off = r->sq_off;
  c->cq_off = r->cq_off;
  c->generation = generation;
  c->max_arg = r->max_arg;
  c->max_result = r->max_result;
  atomic_store(&c->sq_tail, 0);
  atomic_store(&c->sq_head, 0);
  atomic_store(&c->sq_epoch, 0);
  atomic_store(&c->sq_waiters, 0);
  atomic_store(&c->cq_tail, 0);
  atomic_store(&c->cq_head, 0);
  atomic_store(&c->cq_waiters, KC_CQ_AWAKE);
  atomic_store(&c->cq_epoch, 0);
  atomic_store(&c->began_seq, 0);
  atomic_store(&c->began_ns, 0);
  atomic_store(&c->host_pid, 0);
  atomic_store(&c->worker_tid, 0);
  atomic_store(&c->parent_gone, 0);
  atomic_store(&c->trapped_syscall, 0xffffffffu);
  atomic_store(&c->parent_cpu, -1);
  atomic_store(&c->worker_spin_ns, KC_WORKER_SPIN_NS);
  atomic_store(&c->worker_cpu, -2);
}

int kc_ring_create(kc_ring *r, const kc_ring_params *p, uint32_t generation, kc_error *err) {
  memset(r, 0, sizeof *r);
  r->memfd = -1;
  if (!p->depth || (p->depth & (p->depth - 1)) || p->depth > 4096 ||
      p->max_result < KC_RING_MSG_MAX)
    return kc_error_set(err, EINVAL, "ring: bad parameters");
  fill_view(r, p);
  int fd = memfd_create("kcage-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return kc_error_set(err, errno, "ring: memfd_create");
  if (ftruncate(fd, (off_t)r->size) < 0) {
    int e = errno;
    close(fd);
    return kc_error_set(err, e, "ring: ftruncate %zu", r->size);
  }
  /* The worker gets this fd: sealing the size means it can neither shrink the file
   * under the parent's mapping (SIGBUS in the parent) nor grow it. */
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    int e = errno;
    close(fd);
    return kc_error_set(err, e, "ring: seal memfd");
  }
  void *m = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(fd);
    return kc_error_set(err, e, "ring: mmap %zu", r->size);
  }
  r->base = m;
  r->ctl = m;
  r->memfd = fd;
  kc_ring_reset(r, generation);
  return 0;
}

void kc_ring_destroy(kc_ring *r) {
  if (r->base)
    munmap(r->base, r->size);
  if (r->memfd >= 0)
    close(r->memfd);
  r->base = NULL;
  r->ctl = NULL;
  r->memfd = -1;
}

int kc_ring_attach(kc_ring *r, int memfd, kc_error *err) {
  memset(r, 0, sizeof *r);
  r->memfd = memfd;
  struct stat st;
  if (fstat(memfd, &st) < 0)
    return kc_error_set(err, errno, "ring: fstat");
  if ((size_t)st.st_size < sizeof(kc_ring_ctl))
    return kc_error_set(err, EINVAL, "ring: too small");
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (m == MAP_FAILED)
    return kc_error_set(err, errno, "ring: mmap");
  r->base = m;
  r->ctl = m;
  r->size = (size_t)st.st_size;
  kc_ring_params p = {r->ctl->depth, r->ctl->max_arg, r->ctl->max_result};
  if (r->ctl->magic != KC_RING_MAGIC || !p.depth || (p.depth & (p.depth - 1)))
    return kc_error_set(err, EINVAL, "ring: bad header");
  fill_view(r, &p);
  if (r->size > (size_t)st.st_size)
    return kc_error_set(err, EINVAL, "ring: size mismatch");
  r->generation = r->ctl->generation;
  return 0;
}

uint64_t kc_ring_outstanding(const kc_ring *r) {
  return r->sent - r->reaped;
}

int kc_ring_submit(kc_ring *r, const char *fn, size_t fn_len, const void *arg, size_t len,
                   kc_error *err) {
  if (r->sent - r->reaped >= r->depth)
    return kc_error_set(err, EAGAIN, "ring full");
  if (fn_len > KC_RING_FN_MAX)
    return kc_error_set(err, ENAMETOOLONG, "handler name longer than %d bytes", KC_RING_FN_MAX);
  if (len > r->max_arg)
    return kc_error_set(err, E2BIG, "argument of %zu bytes over the limit of %u", len, r->max_arg);
  uint8_t *slot = r->base + r->sq_off + (r->sent & r->mask) * r->sq_slot_size;
  kc_sqe h = {
      .seq = r->sent, .generation = r->generation, .fn_len = (uint16_t)fn_len, .arg_len = len};
  memcpy(slot, &h, sizeof h);
  memcpy(slot + sizeof h, fn, fn_len);
  if (len)
    memcpy(slot + sizeof h + fn_len, arg, len);
  r->sent++;
  atomic_store_explicit(&r->ctl->sq_tail, r->sent, memory_order_seq_cst);
  return 0;
}

void kc_ring_wake_worker(kc_ring *r) {
  /* Eventcount notify: the tail store above is seq_cst, so either the worker sees the
   * new tail in its re-check, or we see its waiter flag here. */
  atomic_fetch_add_explicit(&r->ctl->sq_epoch, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&r->ctl->sq_waiters, memory_order_seq_cst))
    kc_futex_wake(&r->ctl->sq_epoch, 1);
}

int kc_ring_check_cqe(const kc_cqe *h, uint64_t expect_seq, uint32_t expect_gen,
                      uint32_t max_result, kc_error *err) {
  if (h->generation != expect_gen)
    return kc_error_set(err, 0, "completion of generation %u, expected %u", h->generation,
                        expect_gen);
  if (h->seq != expect_seq)
    return kc_error_set(err, 0, "completion with sequence number %llu, expected %llu",
                        (unsigned long long)h->seq, (unsigned long long)expect_seq);
  if (h->status != KC_CQE_COMPLETE && h->status != KC_CQE_EXCEPTION)
    return kc_error_set(err, 0, "completion with unknown status %u", h->status);
  uint64_t cap = h->status == KC_CQE_EXCEPTION ? KC_RING_MSG_MAX : max_result;
  if (h->len > cap)
    return kc_error_set(err, 0, "completion of %llu bytes over the limit of %llu",
                        (unsigned long long)h->len, (unsigned long long)cap);
  return 0;
}

int kc_ring_reap(kc_ring *r, kc_ring_completion *out, kc_error *err) {
  memset(out, 0, sizeof *out);
  if (r->reaped == r->sent) {
    /* Nothing outstanding: any tail movement is a forgery, but harmless until a
     * request is sent; it is checked then. */
    return 0;
  }
  uint64_t tail = atomic_load_explicit(&r->ctl->cq_tail, memory_order_acquire);
  if (tail == r->reaped)
    return 0;
  if (tail < r->reaped || tail > r->sent)
    return kc_error_set(err, 0, "completion tail %llu outside [%llu, %llu]",
                        (unsigned long long)tail, (unsigned long long)r->reaped,
                        (unsigned long long)r->sent);
  const uint8_t *slot = r->base + r->cq_off + (r->reaped & r->mask) * r->cq_slot_size;
  /* Copy the header once; every check and the payload copy use this copy, so the worker
   * cannot change a length after it was checked. */
  kc_cqe h;
  memcpy(&h, slot, sizeof h);
  atomic_signal_fence(memory_order_seq_cst);
  if (kc_ring_check_cqe(&h, r->reaped, r->generation, r->max_result, err) < 0)
    return -1;
  void *p = NULL;
  if (h.len || h.status == KC_CQE_EXCEPTION) {
    p = malloc(h.len + 1);
    if (!p)
      return kc_error_set(err, ENOMEM, "completion copy");
    memcpy(p, slot + sizeof h, h.len);
    ((char *)p)[h.len] = 0;
  }
  out->seq = h.seq;
  out->status = h.status;
  out->payload = p;
  out->len = h.len;
  r->reaped++;
  atomic_store_explicit(&r->ctl->cq_head, r->reaped, memory_order_release);
  return 1;
}
