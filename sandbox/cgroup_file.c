/* Reading and writing cgroup files relative to a directory fd (no path rebuilding on
 * the hot path), and removing a cgroup subtree. */
#include "cgroup_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kcage/cleanup.h"

int kc_cgroup_write(int dirfd, const char *file, const char *val, kc_error *err) {
  kc_cleanup_close int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return kc_error_set(err, errno, "open %s", file);
  size_t len = strlen(val);
  ssize_t n = write(fd, val, len);
  if (n < 0)
    return kc_error_set(err, errno, "write '%s' to %s", val, file);
  if ((size_t)n != len)
    return kc_error_set(err, EIO, "short write to %s", file);
  return 0;
}

int kc_cgroup_writef(int dirfd, const char *file, kc_error *err, const char *fmt, ...) {
  char buf[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return kc_cgroup_write(dirfd, file, buf, err);
}

ssize_t kc_cgroup_read_file(int dirfd, const char *file, char *buf, size_t size) {
  kc_cleanup_close int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t off = 0;
  while (off + 1 < size) {
    ssize_t n = read(fd, buf + off, size - 1 - off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (n == 0)
      break;
    off += (size_t)n;
  }
  buf[off] = '\0';
  return (ssize_t)off;
}

int64_t kc_cgroup_read_key(int dirfd, const char *file, const char *key) {
  char buf[4096];
  if (dirfd < 0 || kc_cgroup_read_file(dirfd, file, buf, sizeof buf) < 0)
    return -1;
  size_t kl = strlen(key);
  for (char *line = buf; line && *line;) {
    char *nl = strchr(line, '\n');
    if (!strncmp(line, key, kl) && line[kl] == ' ')
      return strtoll(line + kl + 1, NULL, 10);
    line = nl ? nl + 1 : NULL;
  }
  return -1;
}

int64_t kc_cgroup_read_u64(int dirfd, const char *file) {
  char buf[64];
  if (dirfd < 0 || kc_cgroup_read_file(dirfd, file, buf, sizeof buf) <= 0)
    return -1;
  if (!strncmp(buf, "max", 3))
    return INT64_MAX;
  return strtoll(buf, NULL, 10);
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

int kc_cgroup_rmdir_tree(int parent_fd, const char *name) {
  int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -1;
  kc_cleanup_closedir DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_DIR || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    kc_cgroup_rmdir_tree(dirfd(d), e->d_name);
  }
  /* A killed task leaves its cgroup a moment after it is reaped; v1 also keeps
   * dying css for a while.  Retry for up to ~1 s. */
  for (int i = 0; i < 1000; i++) {
    if (unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
      return 0;
    if (errno != EBUSY)
      return -1;
    sleep_us(i < 10 ? 100 : 1000);
  }
  return -1;
}

bool kc_cgroup_empty(int dfd, bool v2) {
  char buf[256];
  if (v2) {
    int64_t p = kc_cgroup_read_key(dfd, "cgroup.events", "populated");
    if (p >= 0)
      return p == 0;
  }
  /* v1 (or a v2 without cgroup.events): no pid here nor in any child cgroup. */
  if (kc_cgroup_read_file(dfd, "cgroup.procs", buf, sizeof buf) < 0)
    return errno == ENOENT;
  if (buf[0])
    return false;
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return true;
  kc_cleanup_closedir DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return true;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_DIR || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    kc_cleanup_close int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sub >= 0 && !kc_cgroup_empty(sub, v2))
      return false;
  }
  return true;
}
