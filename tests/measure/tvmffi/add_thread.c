/* Hostile: add.c whose call starts a thread of its own (pthread_create), to work
 * beside the timed one or outlive the call.  Under `kcage bench` it is a `syscall`
 * verdict, whatever pool the worker runs for parallel loops. */
#include <pthread.h>
#include <stdint.h>

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

static void *spin(void *arg) {
  for (;;)
    *(volatile int *)arg += 1;
  return 0;
}

int __tvm_ffi_add(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result) {
  (void)self;
  (void)result;
  (void)num_args;
  static int counter;
  pthread_t t;
  if (pthread_create(&t, 0, spin, &counter) != 0)
    return -1;
  DLTensor *a = args[0].v_ptr, *b = args[1].v_ptr, *c = args[2].v_ptr;
  const float *x = a->data, *y = b->data;
  float *z = c->data;
  for (int64_t i = 0; i < a->shape[0]; i++)
    z[i] = x[i] + y[i];
  return 0;
}
