#include "fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

ssize_t kc_read_proc(pid_t pid, const char *name, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || len == 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  return n;
}
