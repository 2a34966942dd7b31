/* Hostile: add.c whose parallel task on a pool thread outlives its launch, and then
 * undoes the harness's writes to the output area from outside any call.
 *
 * The worker's pool (TVM's semantics) returns from a launch only when every task is
 * done, so a task that keeps running must first make the launch believe it finished.
 * The task's environment pointer is the pool's own state: the adversary, who can read
 * kcage's source, finds the launch's counter of pending threads beside it (checked by
 * the lambda and closure pointers stored next to it, else the probe reports an error,
 * so that a changed layout fails the test rather than passing it idle), takes itself
 * off, and stays.
 *
 * From then on the detached thread keeps every output region it has seen holding what
 * the kernel last wrote there: when a region changes while no call runs (the worker's
 * prepare request has poisoned it for the next round), it writes the old output back.
 * A call that then skipped its work would look as if it had run.  The calls themselves
 * stay honest, so a parent that trusted the worker's prepare reply would report `ok`;
 * one that reads the poison back before the round sees the rewrite (`suspicious`).
 * The thread keeps pointers into the area as it was: a round that needs a bigger area
 * gets a new mapping, where they would fault. */
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
  int32_t type_index;
  uint32_t zero_padding;
  union {
    int64_t v_int64;
    void *v_ptr;
  };
} TVMFFIAny;
typedef struct {
  void *data;
  struct {
    int32_t device_type, device_id;
  } device;
  int32_t ndim;
  struct {
    uint8_t code, bits;
    uint16_t lanes;
  } dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct {
  void *sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv *penv, void *cdata);

int (*__TVMBackendParallelLaunch)(FTVMParallelLambda, void *, int);
void TVMFFIErrorSetRaisedFromCStr(const char *kind, const char *message);

enum { REGIONS = 64, MAX_BYTES = 1 << 16 };

static struct {
  _Atomic int in_call;
  _Atomic int n;      /* regions recorded */
  _Atomic int loose;  /* the detached thread is running */
  _Atomic int broken; /* the pool's layout was not as expected */
  float *at[REGIONS];
  size_t bytes[REGIONS];
  unsigned char saved[REGIONS][MAX_BYTES];
} g;

/* The detached thread: forever, outside calls, writes back any region that changed. */
static void keep_outputs(void) {
  for (;;) {
    int n = atomic_load(&g.n);
    for (int i = 0; i < n; i++) {
      if (atomic_load(&g.in_call))
        break;
      if (memcmp(g.at[i], g.saved[i], g.bytes[i]) != 0)
        memcpy(g.at[i], g.saved[i], g.bytes[i]);
    }
  }
}

/* The pool's state as kcage lays it out, seen from the task's environment: pending
 * (uint32) 32 bytes before it, the lambda 24 and the closure 16 before it. */
static int detach(int task, TVMParallelGroupEnv *env, void *cdata) {
  if (task != 1)
    return 0;
  char *e = (char *)env;
  FTVMParallelLambda f;
  void *c;
  memcpy(&f, e - 24, sizeof f);
  memcpy(&c, e - 16, sizeof c);
  if (f != detach || c != cdata) {
    atomic_store(&g.broken, 1);
    return 0;
  }
  _Atomic uint32_t *pending = (_Atomic uint32_t *)(e - 32);
  atomic_store(&g.loose, 1);
  if (atomic_fetch_sub(pending, 1) == 1)
    syscall(SYS_futex, pending, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
  keep_outputs();
  return 0;
}

static DLTensor *tensor(const TVMFFIAny *a) {
  if (a->type_index == 7)
    return a->v_ptr;
  if (a->type_index == 70)
    return (DLTensor *)((char *)a->v_ptr + 24);
  return 0;
}

/* Where this call's output is, and what it wrote there: kept for the thread. */
static void remember(float *z, size_t bytes) {
  int n = atomic_load(&g.n);
  for (int i = 0; i < n; i++)
    if (g.at[i] == z) {
      memcpy(g.saved[i], z, bytes);
      return;
    }
  if (n < REGIONS && bytes <= MAX_BYTES) {
    g.at[n] = z;
    g.bytes[n] = bytes;
    memcpy(g.saved[n], z, bytes);
    atomic_store(&g.n, n + 1);
  }
}

int __tvm_ffi_add(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result) {
  (void)self;
  (void)result;
  DLTensor *a = num_args == 3 ? tensor(&args[0]) : 0, *b = a ? tensor(&args[1]) : 0,
           *c = b ? tensor(&args[2]) : 0;
  if (!c) {
    TVMFFIErrorSetRaisedFromCStr("TypeError", "add wants 3 tensors");
    return -1;
  }
  atomic_store(&g.in_call, 1);
  if (!atomic_load(&g.loose) && __TVMBackendParallelLaunch(detach, c, 2) != 0)
    return -1;
  if (atomic_load(&g.broken)) {
    TVMFFIErrorSetRaisedFromCStr("RuntimeError", "probe: the pool's layout was not found");
    return -1;
  }
  if (!atomic_load(&g.loose)) {
    TVMFFIErrorSetRaisedFromCStr("RuntimeError", "probe: no pool thread to detach");
    return -1;
  }
  const float *x = a->data, *y = b->data;
  float *z = c->data;
  for (int64_t i = 0; i < a->shape[0]; i++)
    z[i] = x[i] + y[i];
  remember(z, (size_t)a->shape[0] * sizeof(float));
  atomic_store(&g.in_call, 0);
  return 0;
}
