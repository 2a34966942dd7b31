/* Cheat (stopping the clock): maps the ring's memfd, an fd the worker holds, and
 * publishes the completion of the running request itself as soon as a request starts,
 * wakes the parent the way the worker would (its futex word, or the ring's eventfd),
 * then does the work after the parent's clock has stopped. */
#include <linux/futex.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
/* C[N,N] = A[N,N] x B[N,N], f32, row-major; refuse anything else. */
#include <dlpack/dlpack.h>
#include <stdint.h>

static inline int mm_check(DLTensor *args, int32_t n, int64_t *N) {
  if (n != 3)
    return -1;
  for (int i = 0; i < 3; i++)
    if (args[i].ndim != 2 || args[i].dtype.code != kDLFloat || args[i].dtype.bits != 32 ||
        args[i].shape[0] != args[0].shape[0] || args[i].shape[1] != args[0].shape[0])
      return -2;
  *N = args[0].shape[0];
  return 0;
}

/* i-k-j order: honest and reasonably fast. */
static void mm(const float *A, const float *B, float *C, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
}

typedef struct ring_ctl { /* the layout of worker/ring.h, as an attacker would copy it */
  uint32_t magic, depth;
  uint64_t sq_slot_size, cq_slot_size, sq_off, cq_off;
  uint32_t generation, max_arg, max_result;
  _Alignas(64) _Atomic uint64_t sq_tail;
  _Alignas(64) _Atomic uint64_t sq_head;
  _Alignas(64) _Atomic uint32_t sq_epoch;
  _Atomic uint32_t sq_waiters;
  _Alignas(64) _Atomic uint64_t cq_tail;
  _Atomic int32_t worker_cpu;
  _Atomic uint32_t cq_epoch, worker_tid;
  _Alignas(64) _Atomic uint64_t cq_head;
  _Atomic uint32_t cq_waiters;
} ring_ctl;
typedef struct cqe {
  uint64_t seq;
  uint32_t generation, status;
  uint64_t len, reserved;
} cqe;

static unsigned char *ring;
static unsigned calls;
static int anon[8], n_anon; /* its anonymous inodes: the ring's eventfd among them */

static void find_ring(void) {
  for (int fd = 3; fd < 64 && !ring; fd++) {
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 4096)
      continue;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
      continue;
    if (((ring_ctl *)m)->magic == 0x6b63726eu)
      ring = m;
    else
      munmap(m, (size_t)st.st_size);
  }
  for (int fd = 3; fd < 64 && n_anon < 8; fd++) {
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == 0)
      anon[n_anon++] = fd;
  }
}

/* What the worker does after a completion: a parent asleep is woken at once. */
static void wake_parent(ring_ctl *c) {
  uint32_t waiter = atomic_load(&c->cq_waiters);
  if (waiter == 2) { /* napping on the futex word */
    atomic_fetch_add(&c->cq_epoch, 1);
    syscall(SYS_futex, &c->cq_epoch, FUTEX_WAKE, 1, NULL, NULL, 0);
  } else if (waiter == 1) { /* asleep in poll() on the eventfd: the others refuse */
    uint64_t one = 1;
    for (int i = 0; i < n_anon; i++) {
      ssize_t w = write(anon[i], &one, sizeof one);
      (void)w;
    }
  }
}

/* Post "done" (an empty run reply) for the request being served. */
static void forge_completion(void) {
  ring_ctl *c = (ring_ctl *)ring;
  uint64_t seq = atomic_load(&c->cq_tail);
  if (atomic_load(&c->sq_head) != seq + 1)
    return; /* already answered */
  unsigned char *slot = ring + c->cq_off + (seq & (c->depth - 1)) * c->cq_slot_size;
  cqe h = {.seq = seq, .generation = c->generation, .status = 1, .len = 8};
  uint32_t reply[2] = {0x6b636d31u, 0};
  memcpy(slot, &h, sizeof h);
  memcpy(slot + sizeof h, reply, sizeof reply);
  atomic_store(&c->cq_tail, seq + 1);
  wake_parent(c);
}

int kernel(DLTensor *args, int32_t num_args) {
  int64_t N;
  if (mm_check(args, num_args, &N))
    return -1;
  if (!ring)
    find_ring();
  if (++calls > 8 && ring)
    forge_completion();
  mm(args[0].data, args[1].data, args[2].data, N);
  return 0;
}
