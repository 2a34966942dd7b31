/* Network escape: connect to a port the test listens on at the host's 127.0.0.1
 * (argv[2]).  Exit 0 when refused and lo is the only interface. */
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0)
    return 0; /* no sockets at all is fine too */
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
    fprintf(stderr, "connected to the host\n");
    return 10;
  }
  struct if_nameindex *ifs = if_nameindex();
  int n = 0;
  for (struct if_nameindex *i = ifs; i && i->if_index; i++, n++)
    fprintf(stderr, "if %s\n", i->if_name);
  if (n != 1)
    return 11;
  return 0;
}
