#include "cache_size.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The largest data or unified cache of `level` in sysfs; 0 when sysfs names none. */
static uint64_t sysfs_cache(long want) {
  uint64_t best = 0;
  char level[16], type[32], size[32];
  for (unsigned i = 0; i < 16; i++) {
    uint64_t bytes;
    if (cache_attr(i, "level", level, sizeof level) && cache_attr(i, "type", type, sizeof type) &&
        cache_attr(i, "size", size, sizeof size) && atol(level) == want &&
        strcmp(type, "Instruction") && kc_parse_size(size, &bytes) == 0 && bytes > best)
      best = bytes;
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
