/* Makes one forbidden syscall named by argv[2].  Exit 0: the kernel refused it (an
 * error return); exit 3: it succeeded (an escape); under `measure` the expected end
 * is status syscall naming it. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  const char *n = argv[2];
  long r;
  if (!strcmp(n, "socket")) {
    r = socket(AF_INET, SOCK_STREAM, 0);
  } else if (!strcmp(n, "mount")) {
    r = mount("none", "/tmp", "tmpfs", 0, NULL);
  } else if (!strcmp(n, "ptrace")) {
    r = ptrace(PTRACE_ATTACH, 1, NULL, NULL);
  } else if (!strcmp(n, "init_module")) {
    r = syscall(SYS_init_module, "", 0UL, "");
  } else if (!strcmp(n, "bpf")) {
    char attr[128] = {0};
    r = syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, attr, sizeof attr);
  } else if (!strcmp(n, "perf_event_open")) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    r = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
  } else if (!strcmp(n, "io_uring_setup")) {
    char params[120] = {0};
    r = syscall(SYS_io_uring_setup, 4, params);
  } else if (!strcmp(n, "userfaultfd")) {
    r = syscall(SYS_userfaultfd, 0);
  } else {
    return 2;
  }
  if (r >= 0) {
    fprintf(stderr, "%s succeeded\n", n);
    return 3;
  }
  return 0;
}
