/* Opens sockets of families a network namespace does not isolate (AF_VSOCK: ports
 * shared with the host; AF_ALG) and one legacy family.  Exit 0: every one refused with
 * EAFNOSUPPORT; 3: one was created (an escape); 4: refused with another errno.  Under
 * `measure` the expected end is status syscall naming socket. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif

int main(void) {
  static const int fam[][2] = {{AF_VSOCK, SOCK_STREAM},
                               {AF_VSOCK, SOCK_DGRAM},
                               {AF_ALG, SOCK_SEQPACKET},
                               {3 /* AF_AX25 */, SOCK_DGRAM}};
  int rc = 0;
  for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
    int fd = socket(fam[i][0], fam[i][1], 0);
    if (fd >= 0) {
      printf("family %d: created\n", fam[i][0]);
      close(fd);
      rc = 3;
    } else if (errno != EAFNOSUPPORT && rc == 0) {
      printf("family %d: %s\n", fam[i][0], strerror(errno));
      rc = 4;
    }
  }
  return rc;
}
