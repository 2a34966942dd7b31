/* Test helper: run the real `kcage run` binary and parse its --report record, then
 * check that it left nothing behind (its cgroups, processes carrying a marker, stray
 * mounts).  Header-only so tests/sandbox and tests/hostile share it. */
#ifndef KC_RUN_HELPER_H
#define KC_RUN_HELPER_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef KC_KCAGE_BIN
#error "KC_KCAGE_BIN must name the kcage binary"
#endif

typedef struct kc_run_out {
  int exit_status; /* kcage's exit status, or 1000+signal */
  pid_t kcage_pid;
  json_t *report; /* NULL when kcage wrote none */
  char out[8192]; /* the program's stdout as forwarded by kcage (truncated) */
  size_t out_len;
  char err[4096]; /* kcage's and the program's stderr (truncated) */
} kc_run_out;

/* argv: the arguments after `kcage run` (NULL-terminated).  --report FILE is added. */
static inline int kc_test_run(const char *const *args, kc_run_out *o) {
  memset(o, 0, sizeof *o);
  char report[] = "/tmp/kc-test-report-XXXXXX";
  int rfd = mkstemp(report);
  if (rfd < 0)
    return -1;
  close(rfd);
  char outp[] = "/tmp/kc-test-out-XXXXXX";
  int ofd = mkstemp(outp);
  if (ofd < 0)
    return -1;
  unlink(outp);
  char errp[] = "/tmp/kc-test-err-XXXXXX";
  int efd = mkstemp(errp);
  if (efd < 0)
    return -1;
  unlink(errp);
  const char *argv[64];
  int n = 0;
  argv[n++] = KC_KCAGE_BIN;
  argv[n++] = "run";
  argv[n++] = "--report";
  argv[n++] = report;
  for (int i = 0; args[i] && n < 63; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    int dn = open("/dev/null", O_RDWR);
    dup2(dn, 0);
    dup2(ofd, 1);
    dup2(efd, 2);
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  o->kcage_pid = pid;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  o->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st);
  ssize_t got = pread(ofd, o->out, sizeof o->out - 1, 0);
  o->out_len = got > 0 ? (size_t)got : 0;
  close(ofd);
  got = pread(efd, o->err, sizeof o->err - 1, 0);
  o->err[got > 0 ? got : 0] = '\0';
  close(efd);
  json_error_t je;
  o->report = json_load_file(report, 0, &je);
  unlink(report);
  return 0;
}

static inline const char *kc_test_str(const kc_run_out *o, const char *key) {
  json_t *v = o->report ? json_object_get(o->report, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static inline long long kc_test_int(const kc_run_out *o, const char *key) {
  json_t *v = o->report ? json_object_get(o->report, key) : NULL;
  return json_is_integer(v) ? json_integer_value(v) : -1;
}

/* No cgroup directory of this kcage run is left in any hierarchy. */
static inline bool kc_test_no_cgroup_left(pid_t kcage_pid) {
  char needle[32];
  snprintf(needle, sizeof needle, ".run-%d-", (int)kcage_pid);
  static const char *const roots[] = {
      "/sys/fs/cgroup/unified/kcage", "/sys/fs/cgroup/memory/kcage",
      "/sys/fs/cgroup/pids/kcage",    "/sys/fs/cgroup/cpu/kcage",
      "/sys/fs/cgroup/cpuacct/kcage", "/sys/fs/cgroup/freezer/kcage",
      "/sys/fs/cgroup/kcage"};
  for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
    DIR *d = opendir(roots[i]);
    if (!d)
      continue;
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)))
      if (strstr(e->d_name, needle))
        found = true;
    closedir(d);
    if (found)
      return false;
  }
  return true;
}

/* No process on the host has `marker` in its command line. */
static inline bool kc_test_no_process_with(const char *marker) {
  DIR *d = opendir("/proc");
  if (!d)
    return false;
  struct dirent *e;
  bool found = false;
  while ((e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9')
      continue;
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
      continue;
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] == '\0')
        buf[i] = ' ';
    buf[n] = '\0';
    if (strstr(buf, marker))
      found = true;
  }
  closedir(d);
  return !found;
}

/* No mount of a sandbox's setup shows in the host's mount table. */
static inline bool kc_test_no_stray_mount(void) {
  FILE *f = fopen("/proc/self/mountinfo", "r");
  if (!f)
    return false;
  char line[4096];
  bool found = false;
  while (fgets(line, sizeof line, f))
    if (strstr(line, ".kcage-oldroot"))
      found = true;
  fclose(f);
  return !found;
}

#endif
