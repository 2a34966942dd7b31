/* File-system escapes: host secrets, paths not bound in, writes anywhere on the host.
 * argv[1] is the marker, used as a file name the test then looks for on the host.
 * Exit 0 when everything was refused, 10+N for the first escape. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *mark = argc > 1 ? argv[1] : "kc-escape";
  static const char *const secret[] = {"/etc/shadow", "/etc/passwd", "/root",          "/home",
                                       "/var",        "/run",        "/sys/fs/cgroup", "/boot"};
  for (int i = 0; i < (int)(sizeof secret / sizeof secret[0]); i++) {
    struct stat st;
    if (stat(secret[i], &st) == 0) {
      fprintf(stderr, "visible: %s\n", secret[i]);
      return 10 + i;
    }
  }
  static const char *const dirs[] = {"/", "/usr", "/usr/bin", "/dev", "/proc", "/bin"};
  for (int i = 0; i < (int)(sizeof dirs / sizeof dirs[0]); i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", strcmp(dirs[i], "/") ? dirs[i] : "", mark);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0 || mkdir(path, 0755) == 0) {
      fprintf(stderr, "created: %s\n", path);
      return 30 + i;
    }
  }
  /* Kernel knobs through /proc (root inside is nobody outside). */
  int fd = open("/proc/sys/kernel/hostname", O_WRONLY);
  if (fd >= 0 && write(fd, "owned", 5) == 5)
    return 40;
  fd = open("/proc/sysrq-trigger", O_WRONLY);
  if (fd >= 0)
    return 41;
  /* The only writable place is the sandbox's own /tmp. */
  char tmp[512];
  snprintf(tmp, sizeof tmp, "/tmp/%s", mark);
  fd = open(tmp, O_CREAT | O_WRONLY, 0644);
  if (fd < 0)
    return 42;
  return 0;
}
