/* Reads what /proc says of PID 1 and of the host from inside a sandbox.  argv[1] is the
 * case's marker (it is on kcage's own command line, so /proc/1/cmdline of a forked
 * init would show it); argv[2] is "BOOT_ID,BTIME" of the host.  Exit 0 when PID 1's
 * command line and environment hold nothing of the host and every host-wide
 * identifier or counter is masked or the sandbox's own; 3 otherwise (the reason is
 * printed). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t slurp(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0)
    return -1;
  for (ssize_t i = 0; i < n; i++)
    if (!buf[i])
      buf[i] = ' ';
  buf[n] = 0;
  return n;
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  const char *marker = argv[1];
  char host_boot[64] = "", *comma = strchr(argv[2], ',');
  if (!comma)
    return 2;
  snprintf(host_boot, sizeof host_boot, "%.*s", (int)(comma - argv[2]), argv[2]);
  long long host_btime = atoll(comma + 1);
  static char buf[1 << 16];
  int rc = 0;
  if (slurp("/proc/1/cmdline", buf, sizeof buf) > 0 &&
      (strstr(buf, marker) || strstr(buf, "--ro-bind") || strchr(buf, '/'))) {
    printf("/proc/1/cmdline: %s\n", buf);
    rc = 3;
  }
  if (slurp("/proc/1/environ", buf, sizeof buf) > 0) {
    printf("/proc/1/environ: %.200s\n", buf);
    rc = 3;
  }
  if (slurp("/proc/sys/kernel/random/boot_id", buf, sizeof buf) > 0 && strstr(buf, host_boot)) {
    printf("boot_id is the host's: %s", buf);
    rc = 3;
  }
  if (slurp("/proc/stat", buf, sizeof buf) > 0) {
    char *b = strstr(buf, "btime ");
    if (b && atoll(b + 6) == host_btime) {
      printf("/proc/stat: the host's boot time %lld\n", host_btime);
      rc = 3;
    }
  }
  static const char *const empty[] = {"/proc/diskstats",  "/proc/vmstat",
                                      "/proc/softirqs",   "/proc/schedstat",
                                      "/proc/partitions", "/proc/sys/fs/file-nr"};
  for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++)
    if (slurp(empty[i], buf, sizeof buf) > 0) {
      printf("%s: %.100s\n", empty[i], buf);
      rc = 3;
    }
  /* The sandbox started moments ago: an uptime or load of the host's would show. */
  if (slurp("/proc/uptime", buf, sizeof buf) > 0 && atof(buf) > 60) {
    printf("/proc/uptime: %s", buf);
    rc = 3;
  }
  if (slurp("/proc/loadavg", buf, sizeof buf) > 0 && strncmp(buf, "0.00 0.00 0.00", 14)) {
    printf("/proc/loadavg: %s", buf);
    rc = 3;
  }
  return rc;
}
