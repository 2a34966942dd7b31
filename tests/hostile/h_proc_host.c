/* Reads the /proc files that describe the host (boot command line, kernel memory,
 * keys, timers, scheduler, modules, interrupts).  Exit 0: each one absent, empty or
 * unreadable; 3: one gave content (printed); under `measure` as well. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
  static const char *const files[] = {
      "/proc/cmdline",       "/proc/kcore",      "/proc/keys",       "/proc/timer_list",
      "/proc/sched_debug",   "/proc/modules",    "/proc/interrupts", "/proc/kallsyms",
      "/proc/latency_stats", "/proc/bootconfig", "/proc/config.gz",  "/proc/iomem"};
  int rc = 0;
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    int fd = open(files[i], O_RDONLY);
    if (fd < 0)
      continue;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n > 0) {
      printf("%s: readable\n", files[i]);
      rc = 3;
    }
  }
  return rc;
}
