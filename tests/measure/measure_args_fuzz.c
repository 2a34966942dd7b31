/* libFuzzer: the --args parser on arbitrary text (it reads user input and the tracker
 * passes it along from remote clients).  Whatever parses must format to a canonical
 * text that parses to the same tensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kcage/measure.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = 0;
  kc_args_spec a, b;
  kc_error err;
  if (kc_args_parse(text, &a, &err) == 0) {
    char canon[4096];
    int n = kc_args_format(&a, canon, sizeof canon);
    if (n > 0 && (size_t)n < sizeof canon) {
      if (kc_args_parse(canon, &b, &err) != 0 || a.n != b.n || a.in_bytes != b.in_bytes ||
          a.out_bytes != b.out_bytes)
        abort();
      for (uint32_t i = 0; i < a.n; i++)
        if (a.t[i].nbytes != b.t[i].nbytes || a.t[i].out != b.t[i].out ||
            kc_args_offset(&a, i) != kc_args_offset(&b, i))
          abort();
    }
  }
  free(text);
  return 0;
}
