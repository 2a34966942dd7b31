/* See or signal host processes: argv[2] is a host pid (the test's own).  Exit 0 when
 * it is invisible and unsignalable and only the sandbox's own processes are in /proc. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  pid_t host = (pid_t)atoi(argv[2]);
  if (kill(host, 0) == 0 && host != getpid() && host != 1)
    return 10;
  kill(1, SIGKILL);  /* our init: ignored inside the namespace */
  kill(-1, SIGTERM); /* everything we may signal: nothing of the host */
  DIR *d = opendir("/proc");
  if (!d)
    return 11;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (isdigit((unsigned char)e->d_name[0]))
      n++;
  closedir(d);
  if (n > 2) { /* init and us */
    fprintf(stderr, "%d processes visible\n", n);
    return 12;
  }
  if (getpid() != 2)
    return 13;
  return 0;
}
