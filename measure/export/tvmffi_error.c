/* TVM-FFI's error setters, under their C names, for the modules TVM exports: they call
 * them directly (an undefined symbol the loader resolves from the global scope).
 * Compiled into the programs that load kernels (kcage-worker, and kcage for
 * --no-isolation's plain process) and exported from them only: libkcage must not define
 * TVM's names in a process that may also load the real libtvm_ffi. */
#include <stdint.h>

#include "tvmffi.h"

#define KC_EXPORT __attribute__((visibility("default")))

KC_EXPORT void TVMFFIErrorSetRaisedFromCStrParts(const char *kind, const char **message_parts,
                                                 int32_t num_parts);
KC_EXPORT void TVMFFIErrorSetRaisedFromCStr(const char *kind, const char *message);

void TVMFFIErrorSetRaisedFromCStrParts(const char *kind, const char **message_parts,
                                       int32_t num_parts) {
  kc_tvmffi_raise(kind, message_parts, num_parts);
}

void TVMFFIErrorSetRaisedFromCStr(const char *kind, const char *message) {
  kc_tvmffi_raise(kind, &message, 1);
}
