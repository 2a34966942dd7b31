/* Reads what /proc says of PID 1 and of the host from inside a sandbox.  argv[1] is the
 * case's marker (it is on kcage's own command line, so /proc/1/cmdline of a forked
 * init would show it); argv[2] is "BOOT_ID,BTIME" of the host.  Exit 0 when PID 1's
 * command line and environment hold nothing of the host and every host-wide
 * identifier or counter is masked or the sandbox's own, /proc, sysinfo(2) and the boot
 * clock alike; 3 otherwise (the reason is printed).  argv[2] may end in ",UPTIME",
 * the host's uptime in seconds: the boot clock and sysinfo's uptime must be the
 * sandbox's (under a minute) where the host's is over two. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <time.h>
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
  static const char *const empty[] = {
      "/proc/diskstats",  "/proc/vmstat",         "/proc/softirqs",      "/proc/schedstat",
      "/proc/partitions", "/proc/sys/fs/file-nr", "/proc/sys/fs/aio-nr", "/proc/sys/kernel/pty/nr",
      "/proc/cgroups"};
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
  struct sysinfo si;
  if (sysinfo(&si) < 0) {
    perror("sysinfo");
    rc = 3;
  } else if (si.loads[0] || si.loads[1] || si.loads[2] || si.freeram != si.totalram ||
             si.sharedram || si.bufferram || si.procs > 1) {
    printf("sysinfo: the host's loads %lu %lu %lu, free %lu of %lu, %u processes\n", si.loads[0],
           si.loads[1], si.loads[2], si.freeram, si.totalram, si.procs);
    rc = 3;
  }
  /* A buffer the caller cannot write fails as the kernel's own sysinfo does, and is
   * left as it was: code, a read-only page, one that begins writable and ends not. */
  long pg = sysconf(_SC_PAGESIZE);
  unsigned char *two =
      mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (two == MAP_FAILED || mprotect(two + pg, (size_t)pg, PROT_READ) < 0)
    return 2;
  void *const bad[] = {(void *)main, two + pg, two + pg - 8};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (sysinfo(bad[i]) == 0) {
      printf("sysinfo wrote into memory its caller cannot write (%zu)\n", i);
      rc = 3;
    }
  for (long i = 0; i < pg; i++)
    if (two[pg + i]) {
      printf("sysinfo changed a read-only page\n");
      rc = 3;
      break;
    }
  const char *up = strchr(comma + 1, ',');
  double host_up = up ? atof(up + 1) : 0;
  struct timespec boot;
  clock_gettime(CLOCK_BOOTTIME, &boot);
  /* The sandbox started a moment ago; a host up for long enough tells the two apart. */
  if (host_up > 120 && (boot.tv_sec > 60 || si.uptime > 60)) {
    printf("the host's uptime: boot clock %lld s, sysinfo %ld s, host %.0f s\n",
           (long long)boot.tv_sec, si.uptime, host_up);
    rc = 3;
  }
  return rc;
}
