/* Where a batch's inputs file lives: in memory (a directory of its own on the /dev/shm
 * tmpfs) where it can, else in the session's view on TMPDIR.
 *
 * Why memory: the parent rewrites every input set each round through a shared mapping.
 * On a disk filesystem that is dirty page cache of a disk file: a 16M-element vector
 * add whose inputs file sat on ext4 read 15.5 and 7.0 ms per call in alternate rounds,
 * every round of a run (which part of the filesystem's work does it was not pinned
 * down); the same inputs on tmpfs read 7.1 ms in every round.  A run of large tensors
 * also wrote gigabytes to the disk for nothing.
 *
 * The space is taken up front (fallocate): a tmpfs that fills up would otherwise kill
 * the parent with SIGBUS on its next write into the mapping.  Without swap nothing takes
 * it back while the batch runs, so a file larger than half of the memory available now
 * goes to TMPDIR instead, as does one the tmpfs cannot hold.  A run killed with SIGKILL
 * cannot remove its directory: the next run removes those of processes that are gone
 * (the pid is in the name).
 *
 * A sandbox's /dev is its own and read-only, so the directory is bound at SESSION/in
 * (made inside the sandbox), and SESSION/in is a symbolic link to it on the host. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "measure_internal.h"
#include "safe_fs.h"

#define SHM "/dev/shm"
#define PREFIX "kcage-inputs-"

void kc_inputs_sweep(void) {
  kc_sweep_dead_pid_dirs(SHM, PREFIX, '.');
}

/* Bytes of memory available now without swapping: MemAvailable, which counts the page
 * cache that can be dropped (a long-running host's free memory is mostly that), else
 * the free pages alone. */
static size_t available_bytes(void) {
  unsigned long long kb = 0;
  FILE *f = fopen("/proc/meminfo", "re");
  char line[128];
  while (f && !kb && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) != 1)
      kb = 0;
  if (f)
    fclose(f);
  if (kb)
    return (size_t)kb * 1024;
  long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

/* The file in a fresh directory under /dev/shm: its fd, or -1 (nothing left behind). */
static int in_memory(size_t len, char *dir, size_t dircap, char *path, size_t cap) {
  struct statfs fs;
  if (statfs(SHM, &fs) < 0 || fs.f_type != TMPFS_MAGIC)
    return -1;
  /* Memory that no swap may take back: at most half of what is available now. */
  if (len > available_bytes() / 2)
    return -1;
  kc_inputs_sweep();
  snprintf(dir, dircap, SHM "/" PREFIX "%d.XXXXXX", (int)getpid());
  if (!mkdtemp(dir))
    return -1;
  chmod(dir, 0711); /* the workers' ids reach the file but cannot list the directory */
  snprintf(path, cap, "%s/inputs.bin", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd >= 0 && fallocate(fd, 0, 0, (off_t)len) == 0)
    return fd;
  if (fd >= 0)
    close(fd);
  kc_rm_rf(dir);
  dir[0] = 0;
  return -1;
}

int kc_inputs_file(size_t len, const char *session, const char *view, char *dir, size_t dircap,
                   char *path, size_t cap, kc_error *err) {
  len = len ? len : 1;
  char at[PATH_MAX + 8];
  snprintf(at, sizeof at, "%s/in", session);
  int fd = in_memory(len, dir, dircap, path, cap);
  if (fd >= 0 && symlink(dir, at) == 0) {
    /* One path for the parent, a plain worker and a sandboxed one (where the directory
     * is bound at `at` instead of this link). */
    snprintf(path, cap, "%s/inputs.bin", at);
    return fd;
  }
  if (fd >= 0) {
    close(fd);
    kc_rm_rf(dir);
  }
  dir[0] = 0;
  snprintf(path, cap, "%s/inputs.bin", view);
  fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0)
    return kc_error_set(err, errno, "create %s", path);
  if (ftruncate(fd, (off_t)len) < 0) {
    int e = errno;
    close(fd);
    return kc_error_set(err, e, "size %s", path);
  }
  return fd;
}
