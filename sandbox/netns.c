/* Loopback in a fresh network namespace: SIOCSIFFLAGS on "lo" through a datagram
 * socket of the caller's namespace.  One socket and two ioctls, no allocation (so it
 * is safe in a child forked from a threaded process) and no netlink round trip: a
 * netlink library's socket set-up, buffers and reply parsing were a visible part of
 * every launch's CPU. */
#include "kcage/sandbox_parts.h"

#include <errno.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int kc_sandbox_lo_up(kc_error *err) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return kc_error_set(err, errno, "bring lo up: socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  memcpy(ifr.ifr_name, "lo", 3);
  int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
  if (rc == 0 && !(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags |= IFF_UP;
    rc = ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  int e = errno;
  close(s);
  if (rc < 0)
    return kc_error_set(err, e, "bring lo up");
  return 0;
}
