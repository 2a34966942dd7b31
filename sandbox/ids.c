/* Host ids for sandboxes run by root: one uid/gid pair of its own per live sandbox.
 *
 * Root inside a sandbox is some host id.  If that id is nobody (65534), every sandbox
 * and every host daemon running as nobody share it: one can signal, ptrace-check or
 * write the files of another.  So, like isolate's per-box uids, each sandbox takes a
 * pair of a reserved range that no account uses, held by an flock on
 * /run/kcage/ids/<uid> (root's own directory) for as long as the sandbox lives; the
 * lock goes with the holder, so a killed kcage frees its pair.  The lock is named by
 * the id itself, not by its place in the range: two kcage processes given different,
 * overlapping ranges still never hand one id to two sandboxes.
 *
 * The range is the tenant's own choice (kc_settings: kcage's --sandbox-ids), never an
 * environment variable or process-wide state: one set for a daemon (kcage agent) would
 * choose the host ids of every tenant's sandbox. */
#include "kcage/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"

#define KC_IDS_DIR "/run/kcage"

static bool overlaps(uint64_t a, uint64_t an, uint64_t b, uint64_t bn) {
  return a < b + bn && b < a + an;
}

/* passwd/group: the id is the third field. */
static int check_accounts(const char *path, uint32_t base, uint32_t count, kc_error *err) {
  kc_cleanup_fclose FILE *f = fopen(path, "re");
  if (!f)
    return errno == ENOENT ? 0 : kc_error_set(err, errno, "%s", path);
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    /* name:password:id:... (an empty field is still a field) */
    char *name = line, *pw = strchr(name, ':'), *id = pw ? strchr(pw + 1, ':') : NULL;
    if (!id || name[0] == '#')
      continue;
    *pw = 0;
    id++;
    char *end;
    unsigned long long v = strtoull(id, &end, 10);
    if (end != id && *end == ':' && overlaps(v, 1, base, count))
      return kc_error_set(err, 0,
                          "sandbox ids %" PRIu32 "-%" PRIu64 ": %s uses %llu (%s): "
                          "choose another range (--sandbox-ids BASE:COUNT)",
                          base, (uint64_t)base + count - 1, path, v, name);
  }
  return 0;
}

/* subuid/subgid: name:start:count. */
static int check_subids(const char *path, uint32_t base, uint32_t count, kc_error *err) {
  kc_cleanup_fclose FILE *f = fopen(path, "re");
  if (!f)
    return errno == ENOENT ? 0 : kc_error_set(err, errno, "%s", path);
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    char name[256];
    unsigned long long start, n;
    if (sscanf(line, "%255[^:]:%llu:%llu", name, &start, &n) == 3 &&
        overlaps(start, n, base, count))
      return kc_error_set(err, 0,
                          "sandbox ids %" PRIu32 "-%" PRIu64 ": %s gives %llu-%llu to %s: "
                          "choose another range (--sandbox-ids BASE:COUNT)",
                          base, (uint64_t)base + count - 1, path, start, start + n - 1, name);
  }
  return 0;
}

int kc_sandbox_ids_check(uint32_t base, uint32_t count, const char *passwd, const char *group,
                         const char *subuid, const char *subgid, kc_error *err) {
  if (count == 0 || base == 0 || (uint64_t)base + count > 0xfffffffeull ||
      overlaps(base, count, 65534, 1))
    return kc_error_set(err, 0, "sandbox ids %" PRIu32 ":%" PRIu32 ": not a usable range", base,
                        count);
  if (check_accounts(passwd ? passwd : "/etc/passwd", base, count, err) < 0 ||
      check_accounts(group ? group : "/etc/group", base, count, err) < 0 ||
      check_subids(subuid ? subuid : "/etc/subuid", base, count, err) < 0 ||
      check_subids(subgid ? subgid : "/etc/subgid", base, count, err) < 0)
    return -1;
  return 0;
}

int kc_sandbox_ids_range(const kc_settings *s, uint32_t *base, uint32_t *count, kc_error *err) {
  bool dflt = !s || (!s->ids_base && !s->ids_count);
  *base = dflt ? KC_SANDBOX_IDS_BASE : s->ids_base;
  *count = dflt ? KC_SANDBOX_IDS_COUNT : s->ids_count;
  return kc_sandbox_ids_check(*base, *count, NULL, NULL, NULL, NULL, err);
}

/* /run/kcage/ids, root's and nobody else's (a lock file others could replace would
 * hand two sandboxes one id). */
static int lock_dir(kc_error *err) {
  /* A host without /run (an initramfs, a minimal container) gets one, root's: only
   * root takes ids from the range. */
  if (mkdir("/run", 0755) < 0 && errno != EEXIST)
    return kc_error_set(err, errno, "mkdir /run");
  if (mkdir(KC_IDS_DIR, 0700) < 0 && errno != EEXIST)
    return kc_error_set(err, errno, "mkdir %s", KC_IDS_DIR);
  kc_cleanup_close int top = open(KC_IDS_DIR, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0)
    return kc_error_set(err, errno, "%s", KC_IDS_DIR);
  if (mkdirat(top, "ids", 0700) < 0 && errno != EEXIST)
    return kc_error_set(err, errno, "mkdir %s/ids", KC_IDS_DIR);
  int fd = openat(top, "ids", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st, tst;
  if (fd < 0 || fstat(fd, &st) < 0 || fstat(top, &tst) < 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return kc_error_set(err, e, "%s/ids", KC_IDS_DIR);
  }
  if (st.st_uid != 0 || tst.st_uid != 0 || (st.st_mode & 022) || (tst.st_mode & 022)) {
    close(fd);
    return kc_error_set(err, EPERM, "%s/ids: not root's own directory: refusing it", KC_IDS_DIR);
  }
  return fd;
}

int kc_sandbox_ids_acquire(kc_sandbox_ids *ids, const kc_settings *s, kc_error *err) {
  ids->lock_fd = -1;
  if (geteuid() != 0) {
    ids->uid = geteuid();
    ids->gid = getegid();
    return 0;
  }
  uint32_t base, count;
  if (kc_sandbox_ids_range(s, &base, &count, err) < 0)
    return -1;
  kc_cleanup_close int dir = lock_dir(err);
  if (dir < 0)
    return -1;
  for (uint32_t slot = 0; slot < count; slot++) {
    char name[16];
    snprintf(name, sizeof name, "%" PRIu32, base + slot);
    int fd = openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return kc_error_set(err, errno, "%s/ids/%s", KC_IDS_DIR, name);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ids->uid = (uid_t)(base + slot);
      ids->gid = (gid_t)(base + slot);
      ids->lock_fd = fd;
      return 0;
    }
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK)
      return kc_error_set(err, e, "lock %s/ids/%s", KC_IDS_DIR, name);
  }
  return kc_error_set(err, EAGAIN, "all %" PRIu32 " sandbox ids are in use", count);
}

void kc_sandbox_ids_release(kc_sandbox_ids *ids) {
  if (ids && ids->lock_fd >= 0) {
    close(ids->lock_fd);
    ids->lock_fd = -1;
  }
}
