/* add.c's c = a + b as TVM compiles a `parallel` loop: the body is a lambda the module
 * hands to TVMBackendParallelLaunch (a pointer global the loader fills), one chunk per
 * task, num_task 0 (one per thread of the runtime's pool), a barrier after.  Each task
 * notes the thread it ran on; the call fails unless the tasks ran on two threads or
 * more, so an `ok` record is the proof that they did. */
#include <stdint.h>
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
int (*__TVMBackendParallelBarrier)(int, TVMParallelGroupEnv *);
void TVMFFIErrorSetRaisedFromCStr(const char *kind, const char *message);

enum { MAX_TASKS = 256 };
typedef struct {
  const float *x, *y;
  float *z;
  int64_t n;
  int num_task;
  long tid[MAX_TASKS];
} closure;

static int body(int task, TVMParallelGroupEnv *env, void *cdata) {
  closure *c = cdata;
  int nt = env->num_task;
  if (nt < 1 || nt > MAX_TASKS || task < 0 || task >= nt)
    return -1;
  int64_t per = (c->n + nt - 1) / nt, lo = task * per, hi = lo + per < c->n ? lo + per : c->n;
  for (int64_t i = lo; i < hi; i++)
    c->z[i] = c->x[i] + c->y[i];
  c->tid[task] = syscall(SYS_gettid);
  if (task == 0)
    c->num_task = nt;
  return __TVMBackendParallelBarrier(task, env);
}

static DLTensor *tensor(const TVMFFIAny *a) {
  return a->type_index == 7 ? a->v_ptr : 0;
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
  closure k = {a->data, b->data, c->data, a->shape[0], 0, {0}};
  if (__TVMBackendParallelLaunch(body, &k, 0) != 0)
    return -1;
  int threads = 1;
  for (int i = 1; i < k.num_task; i++)
    threads += k.tid[i] != k.tid[0];
  if (threads < 2) {
    TVMFFIErrorSetRaisedFromCStr("RuntimeError", "the parallel loop ran on one thread");
    return -1;
  }
  return 0;
}
