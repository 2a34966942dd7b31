/* Output flood on stdout and stderr (expected: output). */
#include <string.h>
#include <unistd.h>
int main(void) {
  char buf[4096];
  memset(buf, 'x', sizeof buf);
  for (;;) {
    if (write(1, buf, sizeof buf) < 0 || write(2, buf, 100) < 0)
      return 3;
  }
}
