/* base/cache_size.c: the last-level cache a round in pieces is sized by, read from the
 * kernel's cache topology, never larger than what CPUID claims. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_size.h"
#include "kcage/units.h"

/* The size of the highest-level data or unified cache of CPU 0, read again through the
 * shell: one `level type size` line per cache from sysfs; 0 when none. */
static uint64_t sysfs_llc_here(void) {
  FILE *p = popen("for d in /sys/devices/system/cpu/cpu0/cache/index*; do "
                  "echo \"$(cat $d/level) $(cat $d/type) $(cat $d/size)\"; done 2>/dev/null",
                  "r");
  if (!p)
    return 0;
  uint64_t best = 0;
  int best_level = 0, level;
  char type[32], size[32];
  while (fscanf(p, "%d %31s %31s", &level, type, size) == 3) {
    uint64_t b;
    if (strcmp(type, "Instruction") && kc_parse_size(size, &b) == 0 && level >= best_level) {
      best = level > best_level || b > best ? b : best;
      best_level = level;
    }
  }
  pclose(p);
  return best;
}

static void test_llc(void **state) {
  (void)state;
  uint64_t llc = kc_llc_bytes();
  assert_true(llc >= (64u << 10));
  assert_int_equal(kc_llc_bytes(), llc); /* one answer per process */
  long cpuid = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (cpuid > (1 << 20))
    assert_true(llc <= (uint64_t)cpuid);
  uint64_t fs = sysfs_llc_here();
  if (fs)
    assert_true(llc <= fs);
  if (fs && (cpuid <= (1 << 20) || fs <= (uint64_t)cpuid))
    assert_int_equal(llc, fs);
  if (!fs && cpuid <= (1 << 20))
    assert_int_equal(llc, 32u << 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_llc)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
