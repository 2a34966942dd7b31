/* `kcage run` with a terminal as stdin: the program reads what is typed, and nothing
 * it writes reaches the terminal except through kcage's counted output pipes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// clang-format off: cmocka needs the four headers above first
#include <cmocka.h>
// clang-format on

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef KC_KCAGE_BIN
#error "KC_KCAGE_BIN must name the kcage binary"
#endif

typedef struct tty_run {
  int status;     /* kcage's exit status */
  size_t on_tty;  /* bytes that reached the terminal */
  char out[4096]; /* kcage's stdout */
} tty_run;

/* Runs kcage with a fresh pty as its controlling terminal and stdin; `typed` is written
 * to the terminal first.  The terminal is drained all along, so an old kcage that
 * lets the program write to it cannot block the test. */
static void run_on_pty(const char *const *args, const char *typed, tty_run *r) {
  memset(r, 0, sizeof *r);
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0)
    skip();
  char slave[128];
  assert_int_equal(ptsname_r(master, slave, sizeof slave), 0);
  struct termios t; /* no echo: only what the program writes comes back */
  assert_int_equal(tcgetattr(master, &t), 0);
  t.c_lflag &= ~(tcflag_t)ECHO;
  assert_int_equal(tcsetattr(master, TCSANOW, &t), 0);
  char outp[] = "/tmp/kc-test-tty-XXXXXX";
  int ofd = mkstemp(outp);
  assert_true(ofd >= 0);
  unlink(outp);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setsid();
    int s = open(slave, O_RDWR); /* our controlling terminal now */
    if (s < 0)
      _exit(99);
    dup2(s, 0);
    dup2(ofd, 1);
    int dn = open("/dev/null", O_WRONLY);
    dup2(dn, 2);
    const char *argv[32];
    int n = 0;
    argv[n++] = KC_KCAGE_BIN;
    argv[n++] = "run";
    for (int i = 0; args[i] && n < 31; i++)
      argv[n++] = args[i];
    argv[n] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  if (typed)
    assert_int_equal(write(master, typed, strlen(typed)), (ssize_t)strlen(typed));
  time_t deadline = time(NULL) + 60;
  int st = 0;
  for (;;) {
    struct pollfd p = {master, POLLIN, 0};
    if (poll(&p, 1, 20) > 0 && (p.revents & POLLIN)) {
      char buf[4096];
      ssize_t n = read(master, buf, sizeof buf);
      if (n > 0)
        r->on_tty += (size_t)n;
    }
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      break;
    if (time(NULL) > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      fail_msg("kcage did not end within 60 s");
    }
  }
  for (;;) { /* what is left in the terminal */
    struct pollfd p = {master, POLLIN, 0};
    char buf[4096];
    ssize_t n;
    if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN) || (n = read(master, buf, sizeof buf)) <= 0)
      break;
    r->on_tty += (size_t)n;
  }
  close(master);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
  ssize_t got = pread(ofd, r->out, sizeof r->out - 1, 0);
  r->out[got > 0 ? got : 0] = 0;
  close(ofd);
}

/* Writes to fd 0 (and to a reopened /proc/self/fd/0) never reach the terminal. */
static void test_tty_stdin_not_writable(void **s) {
  (void)s;
  const char *args[] = {"--output",
                        "100",
                        "--wall",
                        "30",
                        "--",
                        "sh",
                        "-c",
                        "i=0; while [ $i -lt 300 ]; do "
                        "echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx >&0; "
                        "echo yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy "
                        ">>/proc/self/fd/0; i=$((i+1)); done 2>/dev/null; echo end",
                        NULL};
  tty_run r;
  run_on_pty(args, NULL, &r);
  if (r.status == 99)
    skip();
  assert_int_equal(r.on_tty, 0);
  assert_string_equal(r.out, "end\n");
  assert_int_equal(r.status, 0);
}

/* What is typed still reaches the program, and ^D is its end of file. */
static void test_tty_stdin_readable(void **s) {
  (void)s;
  const char *args[] = {"--wall", "30", "--", "sh", "-c", "read a; cat; echo \"[$a]\"", NULL};
  tty_run r;
  run_on_pty(args, "hello\nworld\n\004", &r);
  if (r.status == 99)
    skip();
  assert_string_equal(r.out, "world\n[hello]\n");
  assert_int_equal(r.status, 0);
  assert_int_equal(r.on_tty, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tty_stdin_not_writable),
      cmocka_unit_test(test_tty_stdin_readable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
