/* The caches of this host, as the kernel describes them. */
#ifndef KCAGE_CACHE_SIZE_H
#define KCAGE_CACHE_SIZE_H

#include <stdint.h>

/* Bytes of CPU 0's data or unified cache of `level` (1 to 3) as sysfs describes it; 0
 * when it does not. */
uint64_t kc_cache_bytes(unsigned level);

#endif
