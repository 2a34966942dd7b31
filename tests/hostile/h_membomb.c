/* Memory bomb: touch 1 GiB in 16 MiB steps (expected: memory). */
#include <stdlib.h>
#include <string.h>
int main(void) {
  for (int i = 0; i < 64; i++) {
    char *p = malloc(16 << 20);
    if (!p)
      return 3;
    memset(p, 0xa5, 16 << 20);
  }
  return 0;
}
