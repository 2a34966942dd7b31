/* add.c that uses its first input as scratch: the inputs are mapped read-only. */
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

void TVMFFIErrorSetRaisedFromCStr(const char *kind, const char *message);

static DLTensor *tensor(const TVMFFIAny *a) {
  if (a->type_index == 7)
    return a->v_ptr;
  if (a->type_index == 70)
    return (DLTensor *)((char *)a->v_ptr + 24);
  return 0;
}

int __tvm_ffi_add(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result) {
  (void)self;
  (void)result;
  if (num_args != 3) {
    TVMFFIErrorSetRaisedFromCStr("TypeError", "add wants 3 tensors");
    return -1;
  }
  DLTensor *a = tensor(&args[0]), *b = tensor(&args[1]), *c = tensor(&args[2]);
  if (!a || !b || !c || a->ndim != 1 || b->shape[0] != a->shape[0] || c->shape[0] != a->shape[0]) {
    TVMFFIErrorSetRaisedFromCStr("ValueError", "add wants three float32 vectors of one length");
    return -1;
  }
  const float *x = a->data, *y = b->data;
  float *z = c->data;
  for (int64_t i = 0; i < a->shape[0]; i++)
    z[i] = x[i] + y[i];
  ((float *)a->data)[0] = 0;
  return 0;
}
