/* Fork bomb: children pile up until fork fails at pids.max; then it fails
 * (expected: pids). */
#include <signal.h>
#include <unistd.h>
int main(void) {
  for (int i = 0; i < 100000; i++) {
    pid_t p = fork();
    if (p < 0)
      return 1;
    if (p == 0) {
      for (;;)
        pause();
    }
  }
  return 0;
}
