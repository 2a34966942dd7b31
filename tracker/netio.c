#include "netio.h"

#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
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

void kc_tcp_keepalive(int fd, double seconds) {
  int one = 1, idle = (int)(seconds / 3) > 0 ? (int)(seconds / 3) : 1,
      intvl = (int)(seconds / 6) > 0 ? (int)(seconds / 6) : 1, cnt = 3;
  unsigned uto = (unsigned)(seconds * 1000);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof uto);
}

int kc_listen_first_free(const char *host, unsigned first, unsigned end, int sock_flags,
                         int *fd_out, uint16_t *port_out, kc_error *err) {
  int last = 0;
  for (unsigned p = first; p < end; p++) {
    char ps[8];
    snprintf(ps, sizeof ps, "%u", p);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g)
      return kc_error_set(err, 0, "resolve %s: %s", host, gai_strerror(g));
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
      int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | sock_flags, 0);
      if (fd < 0) {
        last = errno;
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
        *fd_out = fd;
        freeaddrinfo(ai);
        return 0;
      }
      last = errno;
      close(fd);
    }
    freeaddrinfo(ai);
    if (last != EADDRINUSE)
      break;
  }
  return kc_error_set(err, last, "cannot bind %s to any port in [%u, %u)", host, first, end);
}
