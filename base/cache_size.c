#include "cache_size.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcage/units.h"

/* One line of a sysfs file of cache `index`, without its newline; 0 when absent. */
static int cache_attr(unsigned index, const char *name, char *buf, size_t cap) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%u/%s", index, name);
  FILE *f = fopen(path, "re");
  if (!f)
    return 0;
  int ok = fgets(buf, (int)cap, f) != NULL;
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
  return ok;
}

/* The data or unified cache of `level` in sysfs (0: the highest level there is); 0 when
 * sysfs names none. */
static uint64_t sysfs_cache(long want) {
  uint64_t best = 0;
  long best_level = 0;
  char level[16], type[32], size[32];
  for (unsigned i = 0; i < 16; i++) {
    if (!cache_attr(i, "level", level, sizeof level) || !cache_attr(i, "type", type, sizeof type) ||
        !cache_attr(i, "size", size, sizeof size))
      continue;
    uint64_t bytes;
    long l = atol(level);
    if (!strcmp(type, "Instruction") || kc_parse_size(size, &bytes) < 0 ||
        (want ? l != want : l < best_level))
      continue;
    best = l > best_level || bytes > best ? bytes : best;
    best_level = l;
  }
  return best;
}

uint64_t kc_cache_bytes(unsigned level) {
  static uint64_t known[4];
  if (level == 0 || level > 3)
    return 0;
  if (!known[level])
    known[level] = sysfs_cache(level) + 1; /* +1: asked, even when the answer is 0 */
  return known[level] - 1;
}

/* CPUID's figure alone can be the whole package's: on AMD guests glibc reported 256 MiB
 * where one core reaches a 32 MiB L3 (sysfs, lscpu).  A round sized to the larger one
 * writes outputs that left the cache long before (measure.c's pieces). */
uint64_t kc_llc_bytes(void) {
  static uint64_t llc;
  if (llc)
    return llc;
  uint64_t fs = sysfs_cache(0);
  long cpuid = sysconf(_SC_LEVEL3_CACHE_SIZE);
  uint64_t c = cpuid > (1 << 20) ? (uint64_t)cpuid : 0;
  uint64_t v = fs && c ? (fs < c ? fs : c) : fs ? fs : c;
  llc = v ? v : 32u << 20;
  return llc;
}
