/* base/cache_size.c: each cache level's size, read from the kernel's cache topology,
 * which sizes a round's input sets and its pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cache_size.h"
#include "kcage/units.h"

/* The size of CPU 0's largest data or unified cache of level `want`, read again through
 * the shell: one `level type size` line per cache from sysfs; 0 when none. */
static uint64_t sysfs_cache_here(int want) {
  FILE *p = popen("for d in /sys/devices/system/cpu/cpu0/cache/index*; do "
                  "echo \"$(cat $d/level) $(cat $d/type) $(cat $d/size)\"; done 2>/dev/null",
                  "r");
  if (!p)
    return 0;
  uint64_t best = 0;
  int level;
  char type[32], size[32];
  while (fscanf(p, "%d %31s %31s", &level, type, size) == 3) {
    uint64_t b;
    if (strcmp(type, "Instruction") && kc_parse_size(size, &b) == 0 && level == want && b > best)
      best = b;
  }
  pclose(p);
  return best;
}

/* Each level as sysfs has it (0 where it has none), the same answer every time, and
 * nothing for levels that are not caches of a CPU. */
static void test_levels(void **state) {
  (void)state;
  for (int level = 1; level <= 3; level++) {
    uint64_t here = sysfs_cache_here(level);
    assert_int_equal(kc_cache_bytes((unsigned)level), here);
    assert_int_equal(kc_cache_bytes((unsigned)level), here);
  }
  if (kc_cache_bytes(1) && kc_cache_bytes(2))
    assert_true(kc_cache_bytes(1) <= kc_cache_bytes(2));
  assert_int_equal(kc_cache_bytes(0), 0);
  assert_int_equal(kc_cache_bytes(4), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_levels)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
