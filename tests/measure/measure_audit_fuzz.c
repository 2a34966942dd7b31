/* libFuzzer: the two decoders of the mapping audit on arbitrary bytes: a kernel's ELF
 * program headers (the file is the kernel author's) and a line of /proc/PID/maps (its
 * path is named by whatever the worker mapped).  Neither may crash or read out of
 * bounds; a refusal always comes with a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "measure_kernel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char msg[512];
  msg[0] = 0;
  if (kc_audit_elf_image(data, size, msg, sizeof msg) < 0 && !msg[0])
    abort();
  char *line = malloc(size + 1);
  if (!line)
    return 0;
  memcpy(line, data, size);
  line[size] = 0;
  msg[0] = 0;
  if (kc_audit_maps_line(line, "/tmp/kcage-bench.x/view/kernel.so", "/usr/libexec/kcage-worker",
                         msg, sizeof msg) < 0 &&
      !msg[0])
    abort();
  free(line);
  return 0;
}
