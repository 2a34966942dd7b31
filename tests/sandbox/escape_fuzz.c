/* kc_escape on any bytes: bounded, NUL-terminated, and nothing below 0x20, no DEL and
 * no C1 control in the output. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kcage/escape.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  size_t outlen = data[0] + 1u;
  char *out = malloc(outlen);
  if (!out)
    return 0;
  kc_escape_n((const char *)data + 1, size - 1, out, outlen);
  size_t n = strnlen(out, outlen);
  if (n == outlen)
    abort();
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)out[i];
    if (c < 0x20 || c == 0x7f)
      abort();
    if (c == 0xc2 && i + 1 < n && (unsigned char)out[i + 1] < 0xa0)
      abort();
  }
  free(out);
  return 0;
}
