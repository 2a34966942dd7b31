/* The build stage: one kernel source compiled by the system `cc` inside a `build`
 * sandbox (its own wall time and memory limits, only a scratch directory writable),
 * stored in a content-addressed cache so identical source + compiler + flags compile
 * once. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nettle/sha2.h>

#include "clock.h"
#include "fdio.h"
#include "kcage/cleanup.h"
#include "safe_fs.h"

/* Paths are built from directories whose length was checked when they were made; a
 * truncated name fails at open(), never silently. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "kcage/measure.h"
#include "kcage/sandbox.h"
#include "measure_internal.h"

#define DEFAULT_CFLAGS KC_BUILD_DEFAULT_CFLAGS

/* The cache of this user: --cache-dir, else $XDG_CACHE_HOME/kcage, else
 * $HOME/.cache/kcage, else the passwd home's.  Never a shared directory such as /tmp:
 * anyone could plant links there before the first build. */
static int cache_path(const kc_build_opts *o, char *buf, size_t len, kc_error *err) {
  const char *xdg = secure_getenv("XDG_CACHE_HOME"), *home = secure_getenv("HOME");
  int n;
  if (o && o->cache_dir)
    n = snprintf(buf, len, "%s", o->cache_dir);
  else if (xdg && xdg[0] == '/')
    n = snprintf(buf, len, "%s/kcage", xdg);
  else if (home && home[0] == '/')
    n = snprintf(buf, len, "%s/.cache/kcage", home);
  else {
    struct passwd *pw = getpwuid(geteuid());
    if (!pw || !pw->pw_dir || pw->pw_dir[0] != '/' || !strcmp(pw->pw_dir, "/"))
      return kc_error_set(err, ENOENT,
                          "no cache directory: HOME and XDG_CACHE_HOME are unset and uid %u has "
                          "no home (give --cache-dir)",
                          (unsigned)geteuid());
    n = snprintf(buf, len, "%s/.cache/kcage", pw->pw_dir);
  }
  if (n < 0 || (size_t)n >= len)
    return kc_error_set(err, ENAMETOOLONG, "cache dir");
  return 0;
}

static int open_cache(const kc_build_opts *o, char *buf, size_t len, kc_error *err) {
  char want[PATH_MAX];
  if (cache_path(o, want, sizeof want, err) < 0)
    return -1;
  int fd = kc_safe_dir_open(want, KC_DIR_OWN, true, buf, len, err);
  return fd < 0 ? kc_error_prefix(err, "cache dir") : fd;
}

int kc_build_cache_dir(const kc_build_opts *o, char *buf, size_t len, kc_error *err) {
  int fd = open_cache(o, buf, len, err);
  if (fd < 0)
    return -1;
  close(fd);
  return 0;
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

void kc_rm_rf(const char *path) {
  kc_rm_rf_at(AT_FDCWD, path);
}

/* Resolve `cc` through PATH so the key names the real compiler binary. */
static int resolve_cc(const char *cc, char *out, size_t len) {
  if (strchr(cc, '/'))
    return realpath(cc, out) ? 0 : -1;
  const char *path = secure_getenv("PATH");
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

static void cpu_identity(struct sha256_ctx *h) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[4096];
  int seen = 0;
  while (seen < 2 && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5)) {
      sha256_update(h, strlen(line), (const uint8_t *)line);
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

#include "kcage/policy.h"
static int run_sandboxed(char *const *argv, char *const *envp, const char *scratch,
                         const kc_sandbox_ids *ids, int out_fd, const kc_build_opts *o,
                         kc_result *res, kc_error *err) {
  kc_policy *pol = NULL;
  if (kc_policy_load_in(&o->settings, "build", &pol, err) < 0)
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
  c.ids = ids;
  c.settings = o->settings;
  int rc = kc_sandbox_run(&c, res, err);
  kc_policy_free(pol);
  return rc;
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

/* The build's scratch space: $TMPDIR/kcage-build.XXXXXX (the caller's, 0755) holding
 * work/ (the compiler's, where it writes).  The compiler's user owns only work/, so it
 * can neither move it nor put a link in its place; what it leaves inside work/ is
 * reached only through work/'s fd. */
typedef struct scratch {
  int tmp_fd, outer_fd, fd;
  char outer[32];
  char path[PATH_MAX];
} scratch;

static void scratch_free(scratch *sc) {
  if (sc->outer_fd >= 0) {
    kc_rm_rf_at(sc->tmp_fd, sc->outer);
    close(sc->outer_fd);
  }
  if (sc->fd >= 0)
    close(sc->fd);
  if (sc->tmp_fd >= 0)
    close(sc->tmp_fd);
}

static int scratch_make(scratch *sc, kc_error *err) {
  *sc = (scratch){-1, -1, -1, "", ""};
  const char *tmp = secure_getenv("TMPDIR");
  char tmpdir[PATH_MAX];
  sc->tmp_fd = kc_safe_dir_open(tmp && *tmp ? tmp : "/tmp", KC_DIR_SHARED, false, tmpdir,
                                sizeof tmpdir, err);
  if (sc->tmp_fd < 0)
    return kc_error_prefix(err, "scratch dir");
  sc->outer_fd = kc_make_temp_dir(sc->tmp_fd, "kcage-build", sc->outer, err);
  if (sc->outer_fd < 0)
    return kc_error_prefix(err, "scratch dir %s", tmpdir);
  if (mkdirat(sc->outer_fd, "work", 0755) < 0)
    return kc_error_set(err, errno, "scratch dir %s/%s/work", tmpdir, sc->outer);
  sc->fd = openat(sc->outer_fd, "work", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sc->fd < 0 ||
      snprintf(sc->path, sizeof sc->path, "%s/%s/work", tmpdir, sc->outer) >= (int)sizeof sc->path)
    return kc_error_set(err, sc->fd < 0 ? errno : ENAMETOOLONG, "scratch dir %s", tmpdir);
  return 0;
}

static int write_at(int dirfd, const char *name, const void *data, size_t len, kc_error *err) {
  kc_cleanup_close int fd =
      openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 || kc_io_all(fd, (void *)data, len, true) < 0)
    return kc_error_set(err, errno, "write %s", name);
  return 0;
}

/* The compiler's output, taken through the scratch fd and cached only if it is a
 * regular file of the compiler's own user with one link: a symbolic link, a fifo or a
 * hard link to someone else's file is not the compiler's output. */
static int take_output(const scratch *sc, uid_t builder, int sub_fd, const char *name,
                       kc_build_result *res, kc_error *err) {
  kc_cleanup_close int fd =
      openat(sc->fd, "kernel.so", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 && errno == ENOENT) {
    res->status = KC_BUILD_ERROR;
    snprintf(res->message, sizeof res->message, "the compiler produced no shared object");
    return 0;
  }
  if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
      st.st_uid != builder) {
    res->status = KC_BUILD_ERROR;
    snprintf(res->message, sizeof res->message,
             "the compiler's output is not a regular file of its own (a link?): not used");
    return 0;
  }
  if ((uint64_t)st.st_size > (1u << 30))
    return kc_error_set(err, EFBIG, "built artifact");
  if (kc_store_fd(fd, st.st_size, sub_fd, name, 0755, err) < 0)
    return kc_error_prefix(err, "cache");
  res->status = KC_BUILD_OK;
  return 0;
}

static void verdict_message(const kc_result *vr, const kc_build_opts *o, kc_build_result *res) {
  switch (vr->status) {
  case KC_STATUS_EXITED:
    res->status = KC_BUILD_ERROR;
    if (!res->message[0])
      snprintf(res->message, sizeof res->message, "the compiler exited with status %d",
               vr->exit_code);
    break;
  case KC_STATUS_TIMEOUT:
    res->status = KC_BUILD_TIMEOUT;
    snprintf(res->message, sizeof res->message, "the compiler ran past %.3g s", o->timeout_s);
    break;
  case KC_STATUS_MEMORY:
    res->status = KC_BUILD_MEMORY;
    snprintf(res->message, sizeof res->message, "the compiler ran out of its %llu MiB",
             (unsigned long long)(o->memory_bytes >> 20));
    break;
  default:
    res->status = KC_BUILD_FAILED;
    snprintf(res->message, sizeof res->message, "compiler %s: %s", kc_status_name(vr->status),
             vr->message[0] ? vr->message : "no details");
  }
}

/* Compile SRC in a fresh scratch space and cache the result as SUB_FD/NAME. */
static int compile(const kc_build_opts *o, const char *cc_path, const char *source, const char *src,
                   size_t src_len, int sub_fd, const char *name, kc_build_result *res,
                   kc_error *err) {
  __attribute__((cleanup(scratch_free))) scratch sc;
  if (scratch_make(&sc, err) < 0)
    return -1;
  const char *base = strrchr(source, '/') ? strrchr(source, '/') + 1 : source;
  char srcname[NAME_MAX + 1];
  snprintf(srcname, sizeof srcname, "%s", base);
  size_t bl = strlen(srcname);
  if (bl < 2 || strcmp(srcname + bl - 2, ".c") || srcname[0] == '.')
    snprintf(srcname, sizeof srcname, "kernel.c");
  if (write_at(sc.fd, srcname, src, src_len, err) < 0)
    return -1;
  kc_cleanup_close int log_fd =
      openat(sc.fd, "cc.log", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (log_fd < 0)
    return kc_error_set(err, errno, "create cc.log");
  /* Always in the build sandbox (no switch turns it off), as host ids of its own
   * (never host root, never shared with another sandbox): it owns work/ and nothing
   * else. */
  __attribute__((cleanup(kc_sandbox_ids_release))) kc_sandbox_ids ids = {0, 0, -1};
  if (kc_sandbox_ids_acquire(&ids, &o->settings, err) < 0)
    return kc_error_prefix(err, "build sandbox");
  uid_t builder = ids.uid;
  if (fchown(sc.fd, ids.uid, ids.gid) < 0 && geteuid() == 0)
    return kc_error_set(err, errno, "chown %s", sc.path);
  char spath[PATH_MAX + NAME_MAX + 2], opath[PATH_MAX + 16];
  snprintf(spath, sizeof spath, "%s/%s", sc.path, srcname);
  snprintf(opath, sizeof opath, "%s/kernel.so", sc.path);
  char flagbuf[4096];
  snprintf(flagbuf, sizeof flagbuf, "%s", o->cflags);
  char *argv[MAX_FLAGS + 8];
  int an = 0;
  argv[an++] = (char *)cc_path;
  int nf = split_flags(flagbuf, argv + an, MAX_FLAGS);
  if (nf < 0)
    return kc_error_set(err, 0, "too many compiler flags");
  an += nf;
  argv[an++] = "-o";
  argv[an++] = opath;
  argv[an++] = spath;
  argv[an] = NULL;
  char tmpenv[PATH_MAX + 8];
  snprintf(tmpenv, sizeof tmpenv, "TMPDIR=%s", sc.path);
  char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", tmpenv, NULL};

  kc_result vr;
  double t0 = kc_now_s();
  int r;
  r = run_sandboxed(argv, envp, sc.path, &ids, log_fd, o, &vr, err);
  res->build_s = kc_now_s() - t0;
  if (r < 0) {
    res->status = KC_BUILD_FAILED;
    snprintf(res->message, sizeof res->message, "could not run the compiler: %s", err->msg);
    return 0;
  }
  ssize_t got = pread(log_fd, res->message, sizeof res->message - 1, 0);
  res->message[got > 0 ? got : 0] = 0;
  trim_message(res->message, sc.path);
  if (vr.status == KC_STATUS_OK)
    return take_output(&sc, builder, sub_fd, name, res, err);
  verdict_message(&vr, o, res);
  return 0;
}

/* $CC, the caller's compiler: it runs inside the build sandbox like any other, so it
 * chooses how kernels are compiled, not how they are isolated. */
const char *kc_build_default_cc(void) {
  const char *cc = secure_getenv("CC");
  return cc && *cc ? cc : "cc";
}

int kc_build_find_cc(const kc_build_opts *o, char *out, size_t len, kc_error *err) {
  const char *cc = o && o->cc ? o->cc : kc_build_default_cc();
  if (len < PATH_MAX || resolve_cc(cc, out, len) < 0)
    return kc_error_set(err, ENOENT, "compiler '%s' not found (--cc, $CC, PATH)", cc);
  return 0;
}

int kc_build_kernel(const kc_build_opts *opts, const char *source, kc_build_result *res,
                    kc_error *err) {
  memset(res, 0, sizeof *res);
  kc_build_opts o = opts ? *opts : (kc_build_opts){0};
  if (!o.cc)
    o.cc = kc_build_default_cc();
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
  kc_sha256_hex(src, src_len, res->source_sha256);
  char cc_path[PATH_MAX];
  if (resolve_cc(o.cc, cc_path, sizeof cc_path) < 0)
    return kc_error_set(err, 0, "compiler '%s' not found", o.cc);
  struct stat cst;
  if (stat(cc_path, &cst) < 0)
    return kc_error_set(err, errno, "%s", cc_path);

  struct sha256_ctx h;
  sha256_init(&h);
  /* -march=native makes the binary this CPU's: a cache shared between machines (an NFS
   * home) must not hand it to another model. */
  cpu_identity(&h);
  char hdr[PATH_MAX + 256];
  int hn = snprintf(hdr, sizeof hdr, "kcage-build-v1\n%s\n%lld %lld\n%s\n", cc_path,
                    (long long)cst.st_size, (long long)cst.st_mtime, o.cflags);
  sha256_update(&h, (size_t)hn, (const uint8_t *)hdr);
  sha256_update(&h, src_len, (const uint8_t *)src);
  uint8_t d[SHA256_DIGEST_SIZE];
  sha256_digest(&h, sizeof d, d);
  for (int i = 0; i < 32; i++)
    snprintf(res->key + 2 * i, 3, "%02x", d[i]);

  char cache[PATH_MAX], sub[PATH_MAX + 8], name[80];
  kc_cleanup_close int cache_fd = open_cache(&o, cache, sizeof cache, err);
  if (cache_fd < 0)
    return -1;
  snprintf(name, sizeof name, "%s.so", res->key + 2);
  if (snprintf(sub, sizeof sub, "%s/%.2s", cache, res->key) >= (int)sizeof sub ||
      snprintf(res->artifact, sizeof res->artifact, "%s/%s", sub, name) >=
          (int)sizeof res->artifact)
    return kc_error_set(err, ENAMETOOLONG, "%s", cache);
  char two[3] = {res->key[0], res->key[1], 0};
  kc_cleanup_close int sub_fd = kc_safe_subdir(cache_fd, two, sub, err);
  if (sub_fd < 0)
    return kc_error_prefix(err, "cache dir");
  if (!o.no_cache) {
    /* A hit only for a regular file of ours: anything else (a planted link) is built
     * again and replaced. */
    kc_cleanup_close int afd = openat(sub_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (afd >= 0 && fstat(afd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
      res->status = KC_BUILD_CACHED;
      return 0;
    }
  }
  return compile(&o, cc_path, source, src, src_len, sub_fd, name, res, err);
}
