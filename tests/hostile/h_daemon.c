/* Daemonizes a grandchild (which keeps this argv, i.e. the test's marker) and exits
 * at once with 0 (expected: ok, and the grandchild is gone afterwards). */
#include <stdlib.h>
#include <unistd.h>
int main(void) {
  int p[2];
  if (pipe(p) < 0)
    return 3;
  pid_t c = fork();
  if (c < 0)
    return 3;
  if (c == 0) {
    setsid();
    if (fork() != 0)
      _exit(0);
    close(p[0]);
    if (write(p[1], "r", 1) != 1)
      _exit(1);
    close(p[1]);
    for (;;)
      sleep(60);
  }
  close(p[1]);
  char b;
  if (read(p[0], &b, 1) != 1) /* the grandchild runs before we leave */
    return 3;
  return 0;
}
