/* Kernel ABIs, and the TVM-FFI runtime services the worker gives a module TVM exported
 * (tvmffi.h).  A module's parallel loops run on the worker's pool (tvmffi_pool.c) and
 * its workspaces come from malloc. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcage/measure.h"

#include "tvmffi.h"

const char *kc_abi_name(kc_kernel_abi a) {
  return a == KC_ABI_TVM_FFI ? "tvm-ffi" : "dlpack";
}

int kc_abi_parse(const char *name, kc_kernel_abi *out) {
  if (!strcmp(name, "dlpack"))
    *out = KC_ABI_DLPACK;
  else if (!strcmp(name, "tvm-ffi"))
    *out = KC_ABI_TVM_FFI;
  else
    return -1;
  return 0;
}

const char *kc_abi_default_entry(kc_kernel_abi a) {
  return a == KC_ABI_TVM_FFI ? "main" : "kernel";
}

/* ---- the error setter ----------------------------------------------------------- */
static char last_error[1024];

static void append(size_t *at, const char *s) {
  if (!s)
    return;
  size_t room = sizeof last_error - 1 - *at, l = strnlen(s, room);
  memcpy(last_error + *at, s, l);
  *at += l;
  last_error[*at] = 0;
}

void kc_tvmffi_raise(const char *kind, const char *const *parts, int32_t num_parts) {
  size_t at = 0;
  last_error[0] = 0;
  append(&at, kind ? kind : "Error");
  append(&at, ": ");
  for (int32_t i = 0; parts && i < num_parts && i < 64; i++)
    append(&at, parts[i]);
}

const char *kc_tvmffi_take_error(void) {
  static char taken[sizeof last_error];
  memcpy(taken, last_error, sizeof taken);
  last_error[0] = 0;
  return taken;
}

/* ---- tvm/runtime/c_backend_api.h, served in-process ------------------------------ */
static void *alloc_workspace(int device_type, int device_id, uint64_t nbytes, int code_hint,
                             int bits_hint) {
  (void)code_hint;
  (void)bits_hint;
  if (device_type != 1 || device_id != 0 || nbytes > (1ull << 40)) /* kDLCPU only */
    return NULL;
  size_t len = (size_t)((nbytes + 63) & ~(uint64_t)63);
  return aligned_alloc(64, len ? len : 64);
}

static int free_workspace(int device_type, int device_id, void *ptr) {
  (void)device_type;
  (void)device_id;
  free(ptr);
  return 0;
}

void kc_tvmffi_raise_cstr(const char *kind, const char *message) {
  kc_tvmffi_raise(kind, &message, 1);
}

static int handle_init_once(void **handle, int (*init)(void **result)) {
  if (*handle)
    return 0;
  void *r = NULL;
  if (init(&r) != 0)
    return -1;
  *handle = r;
  return 0;
}

int kc_tvmffi_bind(void *dl, char *msg, size_t cap) {
  /* Calls out of the module (other packed functions, an imported module's kernels):
   * they need TVM's runtime, which never enters the worker. */
  static const char *const refused[] = {"__TVMFFIFunctionCall", "__TVMFFIEnvModLookupFromImports",
                                        "__tvm_ffi__library_bin"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
    if (dlsym(dl, refused[i])) {
      snprintf(msg, cap,
               "error: the module needs TVM's runtime (it has %s: it calls other packed "
               "functions or imports modules); kcage runs host-only modules",
               refused[i]);
      return -1;
    }
  static const struct {
    const char *name;
    void *fn;
  } served[] = {
      {"__TVMBackendParallelLaunch", (void *)(uintptr_t)kc_tvmffi_parallel_launch},
      {"__TVMBackendParallelBarrier", (void *)(uintptr_t)kc_tvmffi_parallel_barrier},
      {"__TVMBackendAllocWorkspace", (void *)(uintptr_t)alloc_workspace},
      {"__TVMBackendFreeWorkspace", (void *)(uintptr_t)free_workspace},
      {"__TVMFFIErrorSetRaisedFromCStr", (void *)(uintptr_t)kc_tvmffi_raise_cstr},
      {"__TVMFFIHandleInitOnce", (void *)(uintptr_t)handle_init_once},
  };
  for (size_t i = 0; i < sizeof served / sizeof served[0]; i++) {
    void **slot = dlsym(dl, served[i].name);
    if (slot)
      *slot = served[i].fn;
  }
  return 0;
}
