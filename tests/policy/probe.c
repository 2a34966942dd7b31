/* A program run under a compiled policy by test_policy_seccomp: it makes one kind of
 * call named by argv[1].  Built without sanitizers (it runs under `measure`). */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void *thread_main(void *arg) {
  return arg;
}

/* The deny list of `exec`: each probed call fails the polite way. */
static int exec_denials(void) {
  errno = 0;
  if (syscall(SYS_io_uring_setup, 8, NULL) != -1 || errno != ENOSYS)
    return 10;
  if (syscall(SYS_bpf, 0, NULL, 0) != -1 || errno != EPERM)
    return 11;
  if (syscall(SYS_unshare, CLONE_NEWUSER) != -1 || errno != EPERM)
    return 12;
  struct clone_args ca = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
  if (syscall(SYS_clone3, &ca, sizeof ca) != -1 || errno != ENOSYS)
    return 13;
  if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != -1 || errno != EPERM)
    return 14;
  if (syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0) != -1 || errno != EPERM)
    return 15;
  if (syscall(SYS_userfaultfd, 0) != -1 || errno != EPERM)
    return 16;
  if (syscall(SYS_keyctl, 0, 0, 0, 0, 0) != -1 || errno != EPERM)
    return 17;
  /* ordinary life still works: a thread (clone3 -> ENOSYS -> clone) and a child */
  pthread_t t;
  if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
    return 18;
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/true", "true", (char *)NULL);
    _exit(127);
  }
  int st;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
    return 19;
  return 0;
}

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
#ifdef __x86_64__
  if (!strcmp(m, "int80")) { /* the i386 ABI from a 64-bit process: getpid = 20 */
    long r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    return r > 0 ? 1 : 2;
  }
  if (!strcmp(m, "x32")) /* the x32 ABI: getpid | __X32_SYSCALL_BIT */
    return syscall(0x40000000L | SYS_getpid) > 0 ? 1 : 2;
#endif
  if (!strcmp(m, "raw") && argc > 2) { /* syscall NR with all-zero arguments */
    long r = syscall(atol(argv[2]), 0, 0, 0, 0, 0, 0);
    return r == -1 ? 2 : 1;
  }
  if (!strcmp(m, "exec-denials"))
    return exec_denials();
  if (!strcmp(m, "mount"))
    return mount("none", "/tmp", "tmpfs", 0, NULL) == 0 ? 1 : 2;
  if (!strcmp(m, "thread")) {
    pthread_t t;
    return pthread_create(&t, NULL, thread_main, NULL) == 0 ? 1 : 2;
  }
  if (!strcmp(m, "build-net")) {
    int s1 = socket(AF_INET, SOCK_STREAM, 0);
    if (s1 >= 0 || errno != EAFNOSUPPORT)
      return 1;
    int s2 = socket(AF_UNIX, SOCK_STREAM, 0);
    return s2 >= 0 ? 0 : 2;
  }
  return 100;
}
