#include "netio.h"

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double kc_deadline(double timeout_s) {
  return timeout_s < 0 ? -1 : kc_now_s() + timeout_s;
}

static int wait_fd(int fd, short ev, double deadline, kc_error *err) {
  for (;;) {
    int ms = -1;
    if (deadline >= 0) {
      double left = deadline - kc_now_s();
      if (left <= 0)
        return kc_error_set(err, ETIMEDOUT, "deadline passed");
      ms = (int)(left * 1000) + 1;
    }
    struct pollfd p = {.fd = fd, .events = ev};
    int n = poll(&p, 1, ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return kc_error_set(err, errno, "poll");
    if (n > 0)
      return 0;
  }
}

int kc_write_all(int fd, const void *buf, size_t len, double deadline, kc_error *err) {
  const char *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (wait_fd(fd, POLLOUT, deadline, err) < 0)
          return -1;
        continue;
      }
      return kc_error_set(err, errno, "send");
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int kc_read_exact(int fd, void *buf, size_t len, double deadline, kc_error *err) {
  char *p = buf;
  while (len) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0)
      return kc_error_set(err, ECONNRESET, "peer closed the connection");
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (wait_fd(fd, POLLIN, deadline, err) < 0)
          return -1;
        continue;
      }
      return kc_error_set(err, errno, "recv");
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int kc_write_u32(int fd, uint32_t v, double deadline, kc_error *err) {
  uint32_t le = htole32(v);
  return kc_write_all(fd, &le, 4, deadline, err);
}

int kc_read_u32(int fd, uint32_t *v, double deadline, kc_error *err) {
  uint32_t le;
  if (kc_read_exact(fd, &le, 4, deadline, err) < 0)
    return -1;
  *v = le32toh(le);
  return 0;
}

void kc_tcp_keepalive(int fd, int seconds) {
  int one = 1, idle = seconds / 3 > 0 ? seconds / 3 : 1, intvl = seconds / 6 > 0 ? seconds / 6 : 1,
      cnt = 3;
  unsigned uto = (unsigned)seconds * 1000u;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof uto);
}
