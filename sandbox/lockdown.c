/* The last step before untrusted code: limits, no capabilities, no_new_privs, seccomp.
 * Also the SCM_RIGHTS helpers that carry the seccomp listener to the supervisor. */
#include "kcage/sandbox_parts.h"

#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

int kc_sandbox_lockdown(const kc_policy *policy, double cpu_s, int *listener_fd, kc_error *err) {
  *listener_fd = -1;
  if (kc_sandbox_set_rlimits(policy, cpu_s, err) < 0)
    return -1;
  if (kc_sandbox_drop_caps(err) < 0)
    return -1;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return kc_error_set(err, errno, "no_new_privs");
  /* Not ptrace-able or /proc/PID/fd-readable by anything else at our uid. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return kc_error_set(err, errno, "dumpable");
  if (policy && kc_policy_install_seccomp(policy, listener_fd, err) < 0)
    return kc_error_prefix(err, "seccomp");
  return 0;
}

int kc_sandbox_send_fd(int sock, int fd, kc_error *err) {
  char byte = 'L';
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof u.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != 1)
    return kc_error_set(err, n < 0 ? errno : EIO, "send fd");
  return 0;
}

int kc_sandbox_recv_fd(int sock, int *fd, kc_error *err) {
  char byte;
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof u.buf};
  ssize_t n;
  do
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return kc_error_set(err, errno, "receive fd");
  if (n == 0)
    return kc_error_set(err, EPIPE, "receive fd");
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
      c->cmsg_len != CMSG_LEN(sizeof(int)))
    return kc_error_set(err, EPROTO, "receive fd: no descriptor");
  memcpy(fd, CMSG_DATA(c), sizeof *fd);
  return 0;
}
