/* The build stage: one kernel source compiled by the system `cc` inside a `build`
 * sandbox (its own wall time and memory limits, only a scratch directory writable),
 * stored in a content-addressed cache so identical source + compiler + flags compile
 * once. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kcage/cleanup.h"

/* Paths are built from directories whose length was checked when they were made; a
 * truncated name fails at open(), never silently. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "kcage/measure.h"
#include "kcage/sandbox.h"
#include "measure_internal.h"

#define DEFAULT_CFLAGS KC_BUILD_DEFAULT_CFLAGS

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kc_build_cache_dir(const kc_build_opts *o, char *buf, size_t len, kc_error *err) {
  int n;
  if (o && o->cache_dir)
    n = snprintf(buf, len, "%s", o->cache_dir);
  else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
    n = snprintf(buf, len, "%s/kcage", getenv("XDG_CACHE_HOME"));
  else if (getenv("HOME") && *getenv("HOME"))
    n = snprintf(buf, len, "%s/.cache/kcage", getenv("HOME"));
  else
    n = snprintf(buf, len, "/tmp/kcage-cache-%u", (unsigned)getuid());
  if (n < 0 || (size_t)n >= len)
    return kc_error_set(err, ENAMETOOLONG, "cache dir");
  return kc_mkdir_p(buf, err);
}

int kc_mkdir_p(const char *path, kc_error *err) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
    return kc_error_set(err, ENAMETOOLONG, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return kc_error_set(err, errno, "mkdir %s", tmp);
      *p = '/';
    }
  if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
    return kc_error_set(err, errno, "mkdir %s", tmp);
  return 0;
}

int kc_read_file(const char *path, char **data, size_t *len, size_t max, kc_error *err) {
  kc_cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return kc_error_set(err, errno, "%s", path);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return kc_error_set(err, errno, "%s", path);
  if (!S_ISREG(st.st_mode))
    return kc_error_set(err, 0, "%s: not a regular file", path);
  if ((uint64_t)st.st_size > max)
    return kc_error_set(err, EFBIG, "%s", path);
  char *buf = malloc((size_t)st.st_size + 1);
  if (!buf)
    return kc_error_set(err, ENOMEM, "%s", path);
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      free(buf);
      return kc_error_set(err, r < 0 ? errno : EIO, "read %s", path);
    }
    got += (size_t)r;
  }
  buf[got] = 0;
  *data = buf;
  *len = got;
  return 0;
}

int kc_write_file(const char *path, const void *data, size_t len, mode_t mode, kc_error *err) {
  kc_cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return kc_error_set(err, errno, "create %s", path);
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return kc_error_set(err, errno, "write %s", path);
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Whole transfers over a pipe or socket between kcage's own processes (EINTR retried). */
int kc_io_all(int fd, void *buf, size_t len, bool wr) {
  char *p = buf;
  while (len) {
    ssize_t n = wr ? write(fd, p, len) : read(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

void kc_rm_rf(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      char sub[PATH_MAX];
      if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub)
        continue;
      if (e->d_type == DT_DIR)
        kc_rm_rf(sub);
      else
        unlink(sub);
    }
    closedir(d);
  }
  rmdir(path);
}

/* Resolve `cc` through PATH so the key names the real compiler binary. */
static int resolve_cc(const char *cc, char *out, size_t len) {
  if (strchr(cc, '/'))
    return realpath(cc, out) ? 0 : -1;
  const char *path = getenv("PATH");
  if (!path || !*path)
    path = "/usr/local/bin:/usr/bin:/bin";
  char dir[PATH_MAX];
  while (*path) {
    size_t n = strcspn(path, ":");
    char cand[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)n, path);
    if (snprintf(cand, sizeof cand, "%s/%s", *dir ? dir : ".", cc) < (int)sizeof cand &&
        access(cand, X_OK) == 0 && realpath(cand, out))
      return 0;
    path += n + (path[n] == ':');
  }
  (void)len;
  return -1;
}

static void cpu_identity(kc_sha256 *h) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[4096];
  int seen = 0;
  while (seen < 2 && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5)) {
      kc_sha256_update(h, line, strlen(line));
      seen++;
    }
  fclose(f);
}

#define MAX_FLAGS 64

static int split_flags(char *s, char **argv, int max) {
  int n = 0;
  for (char *tok = strtok(s, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
    if (n == max)
      return -1;
    argv[n++] = tok;
  }
  return n;
}

/* Without the sandbox layer (not linked yet, or a host without namespaces): a plain
 * process group with rlimits and a wall clock, so a runaway compiler still ends. */
static int run_plain(char *const *argv, char *const *envp, const char *cwd, int out_fd,
                     const kc_build_opts *o, kc_result *res, kc_error *err) {
  kc_result_init_local(res);
  pid_t pid = fork();
  if (pid < 0)
    return kc_error_set(err, errno, "fork");
  if (pid == 0) {
    setpgid(0, 0);
    struct rlimit rl = {o->memory_bytes, o->memory_bytes};
    setrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = rl.rlim_max = (rlim_t)(o->timeout_s + 1);
    setrlimit(RLIMIT_CPU, &rl);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0)
      dup2(nul, 0);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    if (chdir(cwd) < 0)
      _exit(127);
    execvpe(argv[0], argv, envp);
    _exit(127);
  }
  setpgid(pid, pid);
  double deadline = now_s() + o->timeout_s, start = now_s();
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      break;
    if (r < 0 && errno != EINTR)
      return kc_error_set(err, errno, "waitpid");
    if (now_s() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
      res->status = KC_STATUS_TIMEOUT;
      res->limit = "wall";
      res->wall_s = now_s() - start;
      return 0;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  kill(-pid, SIGKILL); /* leftovers of the compiler driver */
  res->wall_s = now_s() - start;
  if (WIFEXITED(st)) {
    res->exit_code = WEXITSTATUS(st);
    res->status = res->exit_code ? KC_STATUS_EXITED : KC_STATUS_OK;
  } else {
    res->signal = WTERMSIG(st);
    res->status = res->signal == SIGXCPU ? KC_STATUS_TIMEOUT : KC_STATUS_SIGNALED;
  }
  return 0;
}

#ifdef KC_HAVE_SANDBOX
#include "kcage/policy.h"
#define KC_BUILD_HOST_ID 65534 /* the sandbox's host id for its root when run as root */
static int run_sandboxed(char *const *argv, char *const *envp, const char *scratch, int out_fd,
                         const kc_build_opts *o, kc_result *res, kc_error *err) {
  /* Run as root, the sandbox maps its root to the host's nobody (never host root,
   * sandbox/spawn.c): the compiler can write the scratch directory only if nobody owns
   * it.  As any other user the mapping is that user, who owns it already. */
  if (geteuid() == 0 && chown(scratch, KC_BUILD_HOST_ID, KC_BUILD_HOST_ID) < 0)
    return kc_error_set(err, errno, "chown %s", scratch);
  kc_policy *pol = NULL;
  if (kc_policy_load("build", &pol, err) < 0)
    return kc_error_prefix(err, "build policy");
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  c.policy = pol;
  c.limits.memory_bytes = o->memory_bytes;
  c.limits.wall_s = o->timeout_s;
  c.limits.cpu_s = o->timeout_s;
  kc_mount m = {.kind = KC_MOUNT_BIND, .src = scratch, .dst = scratch};
  c.mounts = &m;
  c.n_mounts = 1;
  c.cwd = scratch;
  c.argv = argv;
  c.envp = envp;
  c.stdout_fd = out_fd;
  c.stderr_fd = out_fd;
  int rc = kc_sandbox_run(&c, res, err);
  kc_policy_free(pol);
  return rc;
}
#endif

/* Copy into the cache under a temporary name, then rename: readers never see half a
 * file, and concurrent builds of the same key just replace each other's copy. */
static int store_artifact(const char *from, const char *to, kc_error *err) {
  char tmp[PATH_MAX + 32];
  if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", to, (int)gettid()) >= (int)sizeof tmp)
    return kc_error_set(err, ENAMETOOLONG, "%s", to);
  char *data = NULL;
  size_t len;
  if (kc_read_file(from, &data, &len, 1u << 30, err) < 0)
    return kc_error_prefix(err, "built artifact");
  int rc = kc_write_file(tmp, data, len, 0755, err);
  free(data);
  if (rc < 0)
    return -1;
  if (rename(tmp, to) < 0) {
    unlink(tmp);
    return kc_error_set(err, errno, "store %s", to);
  }
  return 0;
}

static void trim_message(char *msg, const char *scratch) {
  /* The scratch path means nothing to the user: drop it from the diagnostics. */
  size_t sl = strlen(scratch);
  char *p;
  while ((p = strstr(msg, scratch))) {
    size_t skip = sl + (p[sl] == '/');
    memmove(p, p + skip, strlen(p + skip) + 1);
  }
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
    msg[--n] = 0;
}

int kc_build_kernel(const kc_build_opts *opts, const char *source, kc_build_result *res,
                    kc_error *err) {
  memset(res, 0, sizeof *res);
  kc_build_opts o = opts ? *opts : (kc_build_opts){0};
  if (!o.cc)
    o.cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  if (!o.cflags)
    o.cflags = DEFAULT_CFLAGS;
  if (o.timeout_s <= 0)
    o.timeout_s = 60;
  if (!o.memory_bytes)
    o.memory_bytes = 1ull << 30;

  kc_cleanup_free char *src = NULL;
  size_t src_len;
  if (kc_read_file(source, &src, &src_len, 16u << 20, err) < 0)
    return -1;
  char cc_path[PATH_MAX];
  if (resolve_cc(o.cc, cc_path, sizeof cc_path) < 0)
    return kc_error_set(err, 0, "compiler '%s' not found", o.cc);
  struct stat cst;
  if (stat(cc_path, &cst) < 0)
    return kc_error_set(err, errno, "%s", cc_path);

  kc_sha256 h;
  kc_sha256_init(&h);
  /* -march=native makes the binary this CPU's: a cache shared between machines (an NFS
   * home) must not hand it to another model. */
  cpu_identity(&h);
  char hdr[PATH_MAX + 256];
  int hn = snprintf(hdr, sizeof hdr, "kcage-build-v1\n%s\n%lld %lld\n%s\n", cc_path,
                    (long long)cst.st_size, (long long)cst.st_mtime, o.cflags);
  kc_sha256_update(&h, hdr, (size_t)hn);
  kc_sha256_update(&h, src, src_len);
  uint8_t d[32];
  kc_sha256_final(&h, d);
  for (int i = 0; i < 32; i++)
    snprintf(res->key + 2 * i, 3, "%02x", d[i]);

  char cache[PATH_MAX];
  if (kc_build_cache_dir(&o, cache, sizeof cache, err) < 0)
    return -1;
  if (snprintf(res->artifact, sizeof res->artifact, "%s/%.2s/%s.so", cache, res->key,
               res->key + 2) >= (int)sizeof res->artifact)
    return kc_error_set(err, ENAMETOOLONG, "%s", cache);
  if (!o.no_cache && access(res->artifact, R_OK) == 0) {
    res->status = KC_BUILD_CACHED;
    return 0;
  }

  /* The scratch directory lives under $TMPDIR, not in the cache: the sandbox's user
   * must be able to reach it, and a cache under a private home (0700) is out of its
   * reach when kcage runs as root. */
  char sub[PATH_MAX + 8], scratch[PATH_MAX + 32];
  const char *tmp = getenv("TMPDIR");
  if (snprintf(sub, sizeof sub, "%s/%.2s", cache, res->key) >= (int)sizeof sub ||
      snprintf(scratch, sizeof scratch, "%s/kcage-build.XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
          (int)sizeof scratch)
    return kc_error_set(err, ENAMETOOLONG, "%s", cache);
  if (kc_mkdir_p(sub, err) < 0)
    return -1;
  if (!mkdtemp(scratch))
    return kc_error_set(err, errno, "mkdtemp %s", scratch);
  chmod(scratch, 0755);
#ifdef KC_HAVE_SANDBOX
  /* The sandboxed compiler runs as kc_sandbox_host_uid() (never host root). */
  if (chown(scratch, kc_sandbox_host_uid(), kc_sandbox_host_gid()) < 0 && geteuid() == 0)
    return kc_error_set(err, errno, "chown %s", scratch);
#endif

  const char *base = strrchr(source, '/') ? strrchr(source, '/') + 1 : source;
  char srcname[NAME_MAX + 1];
  snprintf(srcname, sizeof srcname, "%s", base);
  size_t bl = strlen(srcname);
  if (bl < 2 || strcmp(srcname + bl - 2, ".c"))
    snprintf(srcname, sizeof srcname, "kernel.c");
  char spath[PATH_MAX + NAME_MAX + 2], opath[PATH_MAX + 16], lpath[PATH_MAX + 16];
  snprintf(spath, sizeof spath, "%s/%s", scratch, srcname);
  snprintf(opath, sizeof opath, "%s/kernel.so", scratch);
  snprintf(lpath, sizeof lpath, "%s/cc.log", scratch);
  int rc = -1;
  if (kc_write_file(spath, src, src_len, 0644, err) < 0)
    goto out;
  int log_fd = open(lpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    kc_error_set(err, errno, "create %s", lpath);
    goto out;
  }

  char flagbuf[4096];
  snprintf(flagbuf, sizeof flagbuf, "%s", o.cflags);
  char *argv[MAX_FLAGS + 8];
  int an = 0;
  argv[an++] = cc_path;
  int nf = split_flags(flagbuf, argv + an, MAX_FLAGS);
  if (nf < 0) {
    close(log_fd);
    kc_error_set(err, 0, "too many compiler flags");
    goto out;
  }
  an += nf;
  argv[an++] = "-o";
  argv[an++] = opath;
  argv[an++] = spath;
  argv[an] = NULL;
  char tmpenv[PATH_MAX + 8];
  snprintf(tmpenv, sizeof tmpenv, "TMPDIR=%s", scratch);
  char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", tmpenv, NULL};

  kc_result vr;
  double t0 = now_s();
  int r;
#ifdef KC_HAVE_SANDBOX
  if (getenv("KCAGE_BENCH_NO_SANDBOX"))
    r = run_plain(argv, envp, scratch, log_fd, &o, &vr, err);
  else
    r = run_sandboxed(argv, envp, scratch, log_fd, &o, &vr, err);
#else
  r = run_plain(argv, envp, scratch, log_fd, &o, &vr, err);
#endif
  res->build_s = now_s() - t0;
  if (r < 0) {
    close(log_fd);
    res->status = KC_BUILD_FAILED;
    snprintf(res->message, sizeof res->message, "could not run the compiler: %s", err->msg);
    rc = 0;
    goto out;
  }
  ssize_t got = pread(log_fd, res->message, sizeof res->message - 1, 0);
  close(log_fd);
  res->message[got > 0 ? got : 0] = 0;
  trim_message(res->message, scratch);

  switch (vr.status) {
  case KC_STATUS_OK:
    if (access(opath, R_OK) < 0) {
      res->status = KC_BUILD_ERROR;
      snprintf(res->message, sizeof res->message, "the compiler produced no shared object");
    } else if (store_artifact(opath, res->artifact, err) < 0) {
      goto out;
    } else {
      res->status = KC_BUILD_OK;
    }
    break;
  case KC_STATUS_EXITED:
    res->status = KC_BUILD_ERROR;
    if (!res->message[0])
      snprintf(res->message, sizeof res->message, "the compiler exited with status %d",
               vr.exit_code);
    break;
  case KC_STATUS_TIMEOUT:
    res->status = KC_BUILD_TIMEOUT;
    snprintf(res->message, sizeof res->message, "the compiler ran past %.3g s", o.timeout_s);
    break;
  case KC_STATUS_MEMORY:
    res->status = KC_BUILD_MEMORY;
    snprintf(res->message, sizeof res->message, "the compiler ran out of its %llu MiB",
             (unsigned long long)(o.memory_bytes >> 20));
    break;
  default:
    res->status = KC_BUILD_FAILED;
    snprintf(res->message, sizeof res->message, "compiler %s: %s", kc_status_name_local(&vr),
             vr.message[0] ? vr.message : "no details");
  }
  rc = 0;
out:
  kc_rm_rf(scratch);
  return rc;
}
