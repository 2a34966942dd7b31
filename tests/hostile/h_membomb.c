/* Memory bomb: touch 1 GiB in 16 MiB steps (expected: memory).  Every page is written
 * through a volatile pointer and kept, so no compiler can elide the allocation. */
#include <stdlib.h>
char *volatile keep[64];
int main(void) {
  for (int i = 0; i < 64; i++) {
    volatile char *p = malloc(16 << 20);
    if (!p)
      return 3;
    for (size_t off = 0; off < (16u << 20); off += 4096)
      p[off] = (char)off;
    keep[i] = (char *)p;
  }
  return 0;
}
