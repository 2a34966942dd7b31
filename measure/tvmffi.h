/* Private: calling a kernel through TVM-FFI's packed C ABI (tvm/ffi/c_api.h), and the
 * runtime services a module TVM exported may ask of whoever loads it.  The worker
 * provides them itself (tvmffi.c), so no TVM library is ever mapped into it: a module
 * built for `llvm` has no DT_NEEDED, one undefined function (the error setter, exported
 * by the programs that load kernels: export/tvmffi_error.c) and a few pointer globals
 * that the loader fills. */
#ifndef KCAGE_MEASURE_TVMFFI_H
#define KCAGE_MEASURE_TVMFFI_H

#include <stddef.h>
#include <stdint.h>

/* TVMFFIAny: a type index, 4 bytes of zero padding, an 8-byte value. */
typedef struct kc_tvmffi_any {
  int32_t type_index;
  uint32_t zero_padding;
  union {
    int64_t v_int64;
    void *v_ptr;
  };
} kc_tvmffi_any;
_Static_assert(sizeof(kc_tvmffi_any) == 16, "TVMFFIAny is 16 bytes");

#define KC_TVMFFI_NONE 0
#define KC_TVMFFI_DLTENSOR_PTR 7
#define KC_TVMFFI_SYMBOL_PREFIX "__tvm_ffi_"

/* TVMFFISafeCallType: 0, or non-zero with the error raised through the error setter. */
typedef int (*kc_tvmffi_fn)(void *self, const kc_tvmffi_any *args, int32_t num_args,
                            kc_tvmffi_any *result);

/* Fill the module's runtime pointer globals with the worker's own services, and refuse
 * (0 fine, -1 with msg) a module that needs what the worker does not provide: calls
 * into other packed functions or imported modules (device code). */
int kc_tvmffi_bind(void *dl, char *msg, size_t cap);

/* The error setter's body: the text of the last error a module raised ("Kind: parts"),
 * kept until taken.  The strings are the kernel's: read with a bound. */
void kc_tvmffi_raise(const char *kind, const char *const *parts, int32_t num_parts);
/* The last raised error's text ("" when none), then forgotten. */
const char *kc_tvmffi_take_error(void);

/* ---- tvm/runtime/c_backend_api.h: parallel loops (tvmffi_pool.c) ---- */
typedef struct kc_parallel_env {
  void *sync_handle;
  int32_t num_task;
} kc_parallel_env;
typedef int (*kc_parallel_lambda)(int task_id, kc_parallel_env *penv, void *cdata);

#define KC_TVMFFI_MAX_THREADS 256

/* Start the pool: threads in all, the calling thread included (<= 1: none, launches
 * run serially).  Only before any untrusted code runs, under a policy that lets a
 * thread clone through.  0, or -1 when fewer threads could be started (those that did
 * are used). */
int kc_tvmffi_pool_start(int threads);
/* The threads a launch runs on, the caller's included (1 without a pool). */
int kc_tvmffi_pool_threads(void);
int kc_tvmffi_parallel_launch(kc_parallel_lambda f, void *cdata, int num_task);
int kc_tvmffi_parallel_barrier(int task_id, kc_parallel_env *penv);
void kc_tvmffi_raise_cstr(const char *kind, const char *message);

#endif
