/* Sleeps far past --wall, using no CPU (expected: timeout, limit wall). */
#include <unistd.h>
int main(void) {
  sleep(60);
  return 0;
}
