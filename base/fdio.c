#include "fdio.h"

#include <errno.h>
#include <unistd.h>

void kc_close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

int kc_io_all(int fd, void *buf, size_t len, bool wr) {
  char *p = buf;
  while (len) {
    ssize_t n = wr ? write(fd, p, len) : read(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}
