/* SCM_RIGHTS: the zygote and worker sockets, the seccomp listener's hand-off. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdio.h"

int kc_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds) {
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
  union {
    char b[CMSG_SPACE(sizeof(int) * KC_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds > 0) {
    if (nfds > KC_MAX_FDS) {
      errno = EINVAL;
      return -1;
    }
    memset(&u, 0, sizeof u);
    m.msg_control = u.b;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  ssize_t n;
  do
    n = sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n >= 0 && n != (ssize_t)len)
    errno = EIO;
  return n == (ssize_t)len ? 0 : -1;
}

ssize_t kc_recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds) {
  struct iovec iov = {.iov_base = buf, .iov_len = len};
  union {
    char b[CMSG_SPACE(sizeof(int) * KC_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
  int want = nfds ? *nfds : 0, got = 0;
  ssize_t n;
  do
    n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int tmp[KC_MAX_FDS * 2];
    if (k > (int)(sizeof tmp / sizeof tmp[0]))
      k = (int)(sizeof tmp / sizeof tmp[0]);
    memcpy(tmp, CMSG_DATA(c), sizeof(int) * (size_t)k);
    for (int i = 0; i < k; i++) {
      if (got < want)
        fds[got++] = tmp[i];
      else
        close(tmp[i]);
    }
  }
  if (nfds)
    *nfds = got;
  if (m.msg_flags & MSG_CTRUNC) {
    for (int i = 0; i < got; i++)
      close(fds[i]);
    if (nfds)
      *nfds = 0;
    errno = EPROTO;
    return -1;
  }
  return n;
}
