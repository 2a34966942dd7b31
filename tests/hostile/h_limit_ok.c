/* Exits 0 although a limit fired.  argv[2] "memory": a child touches 1 GiB (OOM-killed
 * under --memory) and the parent reports success anyway; "pids": forks until fork
 * fails, then ends its children and exits 0; "output": writes 1 MiB and exits 0 at
 * once.  Expected: the limit's verdict and an exit status that is not 0. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *volatile keep[64];

static void bomb(void) {
  for (int i = 0; i < 64; i++) {
    volatile char *p = malloc(16 << 20);
    if (!p)
      _exit(3);
    for (size_t off = 0; off < (16u << 20); off += 4096)
      p[off] = (char)off;
    keep[i] = (char *)p;
  }
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  if (!strcmp(argv[2], "memory")) {
    pid_t c = fork();
    if (c == 0) {
      bomb();
      _exit(0);
    }
    waitpid(c, NULL, 0);
    return 0;
  }
  if (!strcmp(argv[2], "pids")) {
    pid_t kids[4096];
    int n = 0;
    while (n < 4096) {
      pid_t c = fork();
      if (c < 0)
        break;
      if (c == 0) {
        pause();
        _exit(0);
      }
      kids[n++] = c;
    }
    for (int i = 0; i < n; i++) {
      kill(kids[i], SIGKILL);
      waitpid(kids[i], NULL, 0);
    }
    return 0;
  }
  static char buf[1 << 20];
  memset(buf, 'x', sizeof buf);
  size_t off = 0;
  while (off < sizeof buf) {
    ssize_t n = write(1, buf + off, sizeof buf - off);
    if (n <= 0)
      break;
    off += (size_t)n;
  }
  return 0;
}
