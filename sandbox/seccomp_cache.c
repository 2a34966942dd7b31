/* Compiled seccomp filters kept between runs (policy_internal.h: kc__bpf_cache_*).
 *
 * Compiling a policy with libseccomp costs a `kcage run` ~0.2 ms and a few dozen page
 * faults of heap; loading the result costs nothing of that.  So root keeps each
 * program it compiled in /run/kcage/bpf, under the whole description of what the
 * compile read (policy_internal.h: the key), and takes it from there the next time.
 *
 * What makes a cached program as trustworthy as a fresh one:
 * - only root uses the cache, in a root-owned directory no one else may write (checked
 *   on every use, as for /run/kcage/ids); a sandbox never sees /run/kcage, and runs as
 *   a host id of the reserved range, not root;
 * - a file is used only if root owns it, it is readable by root alone, and it holds
 *   the complete key, compared byte for byte (the name is only a hash of it, nettle's
 *   SHA-256: a collision or a stale file is a miss, and the fresh compile replaces it);
 * - files are written under a temporary name and renamed, so a reader never sees half
 *   a program.
 * Any failure is a miss: the caller compiles as it would without a cache. */
#include "policy_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"

#define KC_BPF_CACHE_TOP "/run/kcage"
#define KC_BPF_MAGIC "KCBPF\0\0\1"

/* Root's own directory, or -1: the cache is not used. */
static int cache_dir(bool create) {
  if (geteuid() != 0)
    return -1;
  if (create && mkdir(KC_BPF_CACHE_TOP, 0700) < 0 && errno != EEXIST)
    return -1;
  kc_cleanup_close int top = open(KC_BPF_CACHE_TOP, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0 || (create && mkdirat(top, "bpf", 0700) < 0 && errno != EEXIST))
    return -1;
  int fd = openat(top, "bpf", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st, tst;
  if (fd < 0 || fstat(fd, &st) < 0 || fstat(top, &tst) < 0 || st.st_uid != 0 || tst.st_uid != 0 ||
      (st.st_mode & 022) || (tst.st_mode & 022)) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

/* A file's name: the first 16 bytes of its key's SHA-256, in hex. */
enum { KC_BPF_NAME = 16 * 2 + 1 };
static void file_name(const void *key, size_t klen, char name[KC_BPF_NAME]) {
  struct sha256_ctx h;
  uint8_t d[16];
  sha256_init(&h);
  sha256_update(&h, klen, key);
  sha256_digest(&h, sizeof d, d);
  base16_encode_update(name, sizeof d, d);
  name[2 * sizeof d] = 0;
}

/* The file: magic, key length, key, instruction count, instructions. */
static size_t header_len(size_t klen) {
  return 8 + sizeof(uint64_t) + klen + sizeof(uint32_t);
}

int kc__bpf_cache_get(const void *key, size_t klen, struct sock_filter **insns,
                      unsigned short *len) {
  kc_cleanup_close int dir = cache_dir(false);
  if (dir < 0)
    return -1;
  char name[KC_BPF_NAME];
  file_name(key, klen, name);
  kc_cleanup_close int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077))
    return -1;
  size_t hl = header_len(klen);
  size_t size = (size_t)st.st_size;
  if (size <= hl || (size - hl) % sizeof(struct sock_filter) ||
      (size - hl) / sizeof(struct sock_filter) > BPF_MAXINSNS)
    return -1;
  kc_cleanup_free unsigned char *buf = malloc(size);
  if (!buf || pread(fd, buf, size, 0) != (ssize_t)size)
    return -1;
  uint64_t kl;
  uint32_t n;
  memcpy(&kl, buf + 8, sizeof kl);
  memcpy(&n, buf + hl - sizeof n, sizeof n);
  if (memcmp(buf, KC_BPF_MAGIC, 8) || kl != klen || memcmp(buf + 16, key, klen) ||
      n != (size - hl) / sizeof(struct sock_filter))
    return -1;
  struct sock_filter *f = malloc(size - hl);
  if (!f)
    return -1;
  memcpy(f, buf + hl, size - hl);
  *insns = f;
  *len = (unsigned short)n;
  return 0;
}

void kc__bpf_cache_put(const void *key, size_t klen, const struct sock_filter *insns,
                       unsigned short len) {
  kc_cleanup_close int dir = cache_dir(true);
  if (dir < 0 || !len)
    return;
  size_t hl = header_len(klen), size = hl + (size_t)len * sizeof *insns;
  kc_cleanup_free unsigned char *buf = malloc(size);
  if (!buf)
    return;
  uint64_t kl = klen;
  uint32_t n = len;
  memcpy(buf, KC_BPF_MAGIC, 8);
  memcpy(buf + 8, &kl, sizeof kl);
  memcpy(buf + 16, key, klen);
  memcpy(buf + hl - sizeof n, &n, sizeof n);
  memcpy(buf + hl, insns, (size_t)len * sizeof *insns);
  char name[KC_BPF_NAME], tmp[64];
  file_name(key, klen, name);
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", name, (int)getpid());
  int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return;
  bool ok = write(fd, buf, size) == (ssize_t)size;
  ok = close(fd) == 0 && ok;
  if (!ok || renameat(dir, tmp, dir, name) < 0)
    unlinkat(dir, tmp, 0);
}
