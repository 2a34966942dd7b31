/* Root-safe directories for the build cache and scratch space, and the check of a file
 * kcage would run or load from a place it was told about (an environment variable).
 *
 * kcage bench runs as root and hands files to sandboxes whose host uid is not root.
 * A directory someone else can write is one where a symbolic link can appear between
 * a check and a use, so root refuses such a directory outright, walks every path from
 * "/" with O_NOFOLLOW checking each step, and below a checked directory uses only
 * *at() calls on its fd. */
#include "safe_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"

static int check_dir(int fd, const char *shown, bool last, kc_dir_use use, kc_error *err) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return kc_error_set(err, errno, "%s", shown);
  if (!S_ISDIR(st.st_mode))
    return kc_error_set(err, ENOTDIR, "%s", shown);
  uid_t me = geteuid();
  bool own = last && use == KC_DIR_OWN, strict = own || (last && use == KC_DIR_TRUSTED);
  if (own ? st.st_uid != me : st.st_uid != me && st.st_uid != 0)
    return kc_error_set(err, 0, "%s: owned by uid %u, not by uid %u: refusing to use it", shown,
                        (unsigned)st.st_uid, (unsigned)me);
  if ((st.st_mode & 022) && (strict || !(st.st_mode & S_ISVTX)))
    return kc_error_set(err, 0, "%s: writable by others (mode %04o): refusing to use it", shown,
                        (unsigned)(st.st_mode & 07777));
  return 0;
}

/* One step down: NAME in DIRFD as an O_PATH fd, never through a symbolic link. */
static int step(int dirfd, const char *name, const char *shown, bool create, kc_error *err) {
  int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
      return kc_error_set(err, errno, "mkdir %s", shown);
    fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
    return kc_error_set(err, 0, "%s: a symbolic link or not a directory: refusing it", shown);
  if (fd < 0)
    return kc_error_set(err, errno, "%s", shown);
  return fd;
}

/* The absolute form of PATH with the symbolic links of its existing part resolved
 * (the walk then checks every step of exactly that path). */
static int normalise(const char *path, char *out, size_t len, kc_error *err) {
  char abs[PATH_MAX], cwd[PATH_MAX];
  int n = path[0] == '/'
              ? snprintf(abs, sizeof abs, "%s", path)
              : snprintf(abs, sizeof abs, "%s/%s", getcwd(cwd, sizeof cwd) ? cwd : "/", path);
  if (n < 0 || (size_t)n >= sizeof abs)
    return kc_error_set(err, ENAMETOOLONG, "%s", path);
  size_t cut = strlen(abs);
  char real[PATH_MAX];
  for (;;) {
    char save = abs[cut];
    abs[cut] = 0;
    bool ok = realpath(cut ? abs : "/", real) != NULL;
    int e = errno;
    abs[cut] = save;
    if (ok)
      break;
    if (e != ENOENT)
      return kc_error_set(err, e, "%s", path);
    while (cut > 0 && abs[cut - 1] == '/')
      cut--;
    while (cut > 0 && abs[cut - 1] != '/')
      cut--;
  }
  /* The walk skips repeated slashes; the name it shows is rebuilt from the parts. */
  n = snprintf(out, len, "%s/%s", real, abs + cut);
  if (n < 0 || (size_t)n >= len)
    return kc_error_set(err, ENAMETOOLONG, "%s", path);
  return 0;
}

int kc_safe_dir_open(const char *path, kc_dir_use use, bool create, char *resolved, size_t rlen,
                     kc_error *err) {
  char norm[PATH_MAX];
  if (!path || !*path)
    return kc_error_set(err, EINVAL, "empty directory name");
  if (normalise(path, norm, sizeof norm, err) < 0)
    return -1;
  kc_cleanup_close int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return kc_error_set(err, errno, "/");
  char shown[PATH_MAX] = "/";
  char *p = norm;
  while (*p == '/')
    p++;
  if (check_dir(fd, "/", !*p, use, err) < 0)
    return -1;
  while (*p) {
    size_t l = strcspn(p, "/");
    char name[NAME_MAX + 1];
    if (l > NAME_MAX)
      return kc_error_set(err, ENAMETOOLONG, "%s", path);
    memcpy(name, p, l);
    name[l] = 0;
    p += l;
    while (*p == '/')
      p++;
    if (!strcmp(name, "..") || !strcmp(name, "."))
      return kc_error_set(err, EINVAL, "%s: no . or .. please", path);
    size_t sl = strlen(shown);
    snprintf(shown + sl, sizeof shown - sl, "%s%s", sl > 1 ? "/" : "", name);
    int next = step(fd, name, shown, create, err);
    if (next < 0)
      return -1;
    close(fd);
    fd = next;
    if (check_dir(fd, shown, !*p, use, err) < 0)
      return -1;
  }
  if (resolved && snprintf(resolved, rlen, "%s", shown) >= (int)rlen)
    return kc_error_set(err, ENAMETOOLONG, "%s", shown);
  return kc_steal_fd(fd);
}

int kc_trusted_file_check(const char *path, kc_error *err) {
  char real[PATH_MAX];
  if (!path || !*path)
    return kc_error_set(err, EINVAL, "empty file name");
  if (!realpath(path, real))
    return kc_error_set(err, errno, "%s", path);
  char *slash = strrchr(real, '/');
  *slash = '\0';
  kc_cleanup_close int dir =
      kc_safe_dir_open(real[0] ? real : "/", KC_DIR_TRUSTED, false, NULL, 0, err);
  *slash = '/';
  if (dir < 0)
    return -1;
  kc_cleanup_close int fd = openat(dir, slash + 1, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return kc_error_set(err, errno, "%s", real);
  if (!S_ISREG(st.st_mode))
    return kc_error_set(err, 0, "%s: not a regular file: refusing it", real);
  if (st.st_uid != 0 && st.st_uid != geteuid())
    return kc_error_set(err, 0, "%s: owned by uid %u, not by root or uid %u: refusing it", real,
                        (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & 022)
    return kc_error_set(err, 0, "%s: writable by others (mode %04o): refusing it", real,
                        (unsigned)(st.st_mode & 07777));
  return 0;
}

int kc_safe_subdir(int dirfd, const char *name, const char *shown, kc_error *err) {
  kc_cleanup_close int fd = step(dirfd, name, shown, true, err);
  if (fd < 0 || check_dir(fd, shown, true, KC_DIR_OWN, err) < 0)
    return -1;
  return kc_steal_fd(fd);
}

int kc_make_temp_dir(int dirfd, const char *prefix, char *name, kc_error *err) {
  for (int tries = 0; tries < 100; tries++) {
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
      return kc_error_set(err, errno, "getrandom");
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char suf[7];
    for (int i = 0; i < 6; i++)
      suf[i] = al[r[i] % (sizeof al - 1)];
    suf[6] = 0;
    snprintf(name, 32, "%.16s.%s", prefix, suf);
    if (mkdirat(dirfd, name, 0700) == 0) {
      kc_cleanup_close int fd =
          openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 || fchmod(fd, 0755) < 0)
        return kc_error_set(err, errno, "%s", name);
      return kc_steal_fd(fd);
    }
    if (errno != EEXIST)
      return kc_error_set(err, errno, "mkdir %s", name);
  }
  return kc_error_set(err, EEXIST, "no free name for %s", prefix);
}

static void rm_contents(int dfd, int depth) {
  int rd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rd < 0)
    return;
  kc_cleanup_closedir DIR *d = fdopendir(rd);
  if (!d) {
    close(rd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    if (unlinkat(dfd, e->d_name, 0) == 0 || (errno != EISDIR && errno != EPERM))
      continue;
    if (depth < 64)
      kc_rm_rf_at(dfd, e->d_name);
  }
}

void kc_rm_rf_at(int dirfd, const char *name) {
  int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    rm_contents(fd, 0);
    close(fd);
  }
  if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
    unlinkat(dirfd, name, 0);
}

void kc_sweep_dead_pid_dirs(const char *dir, const char *prefix, char tail) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  size_t lp = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, lp))
      continue;
    char *end;
    long pid = strtol(e->d_name + lp, &end, 10);
    struct stat st;
    if (pid <= 0 || end == e->d_name + lp || *end != tail ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
      kc_rm_rf_at(dirfd(d), e->d_name);
  }
  closedir(d);
}

int kc_store_fd(int from, off_t size, int dirfd, const char *name, mode_t mode, kc_error *err) {
  char tmp[NAME_MAX + 1];
  if (snprintf(tmp, sizeof tmp, ".%.200s.%d.tmp", name, (int)gettid()) >= (int)sizeof tmp)
    return kc_error_set(err, ENAMETOOLONG, "%s", name);
  unlinkat(dirfd, tmp, 0); /* a leftover of a killed run with the same thread id */
  kc_cleanup_close int to =
      openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (to < 0)
    return kc_error_set(err, errno, "create %s", tmp);
  char buf[65536];
  off_t off = 0;
  while (off < size) {
    size_t want = (size_t)(size - off) < sizeof buf ? (size_t)(size - off) : sizeof buf;
    ssize_t r = pread(from, buf, want, off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      unlinkat(dirfd, tmp, 0);
      return kc_error_set(err, r < 0 ? errno : EIO, "read the artifact");
    }
    for (ssize_t w = 0; w < r;) {
      ssize_t n = write(to, buf + w, (size_t)(r - w));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        unlinkat(dirfd, tmp, 0);
        return kc_error_set(err, errno, "write %s", tmp);
      }
      w += n;
    }
    off += r;
  }
  if (renameat(dirfd, tmp, dirfd, name) < 0) {
    int e = errno;
    unlinkat(dirfd, tmp, 0);
    return kc_error_set(err, e, "store %s", name);
  }
  return 0;
}
