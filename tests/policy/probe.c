/* A program run under a compiled policy by test_policy_seccomp: it makes one kind of
 * call named by argv[1].  Built without sanitizers (it runs under `measure`). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2)
    return 100;
  const char *m = argv[1];
  if (!strcmp(m, "ok")) {
    printf("probe ok\n"); /* stdio, malloc, exit: a normal program's life */
    return 0;
  }
  if (!strcmp(m, "socket"))
    return socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 1 : 2;
  if (!strcmp(m, "mmap-exec")) {
    void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? 2 : 1;
  }
  if (!strcmp(m, "mprotect-exec")) {
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      return 3;
    return mprotect(p, 4096, PROT_READ | PROT_EXEC) == 0 ? 1 : 2;
  }
  if (!strcmp(m, "fork")) {
    pid_t pid = fork();
    if (pid == 0)
      _exit(0);
    return pid > 0 ? 1 : 2;
  }
  if (!strcmp(m, "exec-again")) {
    char *const args[] = {argv[0], "ok", NULL};
    execv(argv[0], args);
    return 2;
  }
  if (!strcmp(m, "open-write")) {
    int fd = open("/tmp/kcage-probe-should-not-exist", O_WRONLY | O_CREAT, 0600);
    return fd < 0 && errno == EROFS ? 0 : 1;
  }
  if (!strcmp(m, "ptrace"))
    return ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0 ? 1 : 2;
  if (!strcmp(m, "high-bits-socket")) {
    /* AF_INET with garbage in the upper half of the int register */
    long r = syscall(SYS_socket, 0x100000000L | AF_INET, SOCK_STREAM, 0);
    return r >= 0 ? 1 : 2;
  }
  return 100;
}
