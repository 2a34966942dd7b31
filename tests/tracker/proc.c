#include "proc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

unsigned long proc_nofile;

static void child_limits(void) {
  if (proc_nofile) {
    struct rlimit rl = {proc_nofile, proc_nofile};
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

uint16_t proc_start(pid_t *pid, const char *const *argv) {
  int p[2];
  if (pipe(p) < 0)
    return 0;
  pid_t c = fork();
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test never leaves these behind */
    child_limits();
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    const char *av[32] = {KCAGE_BIN};
    for (int i = 0; argv[i] && i < 30; i++)
      av[i + 1] = argv[i];
    execv(KCAGE_BIN, (char *const *)av);
    _exit(127);
  }
  close(p[1]);
  *pid = c;
  char line[256];
  size_t n = 0;
  while (n < sizeof line - 1) {
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    if (poll(&pf, 1, 5000) <= 0)
      break;
    ssize_t r = read(p[0], line + n, 1);
    if (r <= 0 || line[n] == '\n')
      break;
    n++;
  }
  line[n] = '\0';
  close(p[0]); /* later output goes nowhere; the programs ignore SIGPIPE on sockets only */
  char *colon = strrchr(line, ':');
  return colon ? (uint16_t)atoi(colon + 1) : 0;
}

void proc_kill(pid_t *pid) {
  if (*pid > 0) {
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
  }
  *pid = 0;
}

uint16_t free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  bind(fd, (struct sockaddr *)&a, sizeof a);
  getsockname(fd, (struct sockaddr *)&a, &l);
  close(fd);
  return ntohs(a.sin_port);
}

void proc_stop(pid_t *pid) {
  if (*pid <= 0)
    return;
  kill(*pid, SIGTERM);
  for (int i = 0; i < 200; i++) {
    if (waitpid(*pid, NULL, WNOHANG) == *pid) {
      *pid = 0;
      return;
    }
    usleep(10000);
  }
  proc_kill(pid);
}

static int run_to_end(const char *const *argv, double timeout_s, int errfd) {
  pid_t c = fork();
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    if (errfd >= 0)
      dup2(errfd, 2);
    const char *av[64] = {KCAGE_BIN};
    for (int i = 0; argv[i] && i < 62; i++)
      av[i + 1] = argv[i];
    execv(KCAGE_BIN, (char *const *)av);
    _exit(127);
  }
  for (int i = 0; i < (int)(timeout_s * 100); i++) {
    int st;
    if (waitpid(c, &st, WNOHANG) == c)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(c, SIGKILL);
  waitpid(c, NULL, 0);
  return -1;
}

int proc_run(const char *const *argv, double timeout_s) {
  return run_to_end(argv, timeout_s, -1);
}

int proc_run_err(const char *const *argv, double timeout_s, char *err, size_t len) {
  char path[] = "/tmp/kc-trk-err-XXXXXX";
  int fd = mkstemp(path);
  unlink(path);
  int rc = run_to_end(argv, timeout_s, fd);
  ssize_t n = pread(fd, err, len - 1, 0);
  err[n > 0 ? n : 0] = '\0';
  close(fd);
  return rc;
}
