/* The sandbox's file system: a tmpfs root holding only what is bound in.
 *
 * Parent side (kc__fs_plan): resolve every bind source with realpath() on the host
 * view, so nothing in the child depends on symlinks that change meaning once the
 * root moves.  Child side (kc__fs_enter), in its own mount namespace:
 *   / rprivate; tmpfs on /tmp; pivot_root into it with the old root at KC_OLDROOT
 *   (the tmpfs leaves /tmp when it becomes the root, so host /tmp stays bindable);
 *   binds from KC_OLDROOT/<src>; proc mounted while the old root's proc is still
 *   fully visible (mount_too_revealing, reference/environment.md §1.3); then the
 *   old root is detached and the new root made read-only. */
#include "kcage/sandbox_parts.h"
#include "sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kcage/cleanup.h"

#define KC_DEFAULT_TMP_SIZE (64ull << 20)

typedef struct mnt_list {
  kc_mnt *v;
  size_t n, cap;
} mnt_list;

static kc_mnt *push(mnt_list *l, kc_mnt_kind kind, kc_error *err) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    kc_mnt *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      kc_error_set(err, ENOMEM, "mount plan");
      return NULL;
    }
    l->v = v;
    l->cap = cap;
  }
  kc_mnt *m = &l->v[l->n++];
  *m = (kc_mnt){.kind = kind, .src = "", .dst = "", .tree = -1};
  return m;
}

/* src (may be NULL: none) and dst, copied into one allocation the entry owns. */
static int set_paths(kc_mnt *m, const char *src, const char *dst, kc_error *err) {
  if (src && strlen(src) >= PATH_MAX)
    return kc_error_set(err, ENAMETOOLONG, "%s path",
                        m->kind == KC_MNT_SYMLINK ? "symlink target" : "bind source");
  if (!dst || strlen(dst) >= PATH_MAX)
    return kc_error_set(err, ENAMETOOLONG, "mount destination path");
  size_t ls = src ? strlen(src) + 1 : 1, ld = strlen(dst) + 1;
  char *s = malloc(ls + ld);
  if (!s)
    return kc_error_set(err, ENOMEM, "mount plan");
  memcpy(s, src ? src : "", ls);
  memcpy(s + ls, dst, ld);
  m->strs = s;
  m->src = s;
  m->dst = s + ls;
  return 0;
}

static int check_dst(const char *dst, kc_error *err) {
  if (dst[0] != '/' || strstr(dst, "/../") || !strcmp(dst, "/") ||
      (strlen(dst) >= 3 && !strcmp(dst + strlen(dst) - 3, "/..")))
    return kc_error_set(err, EINVAL, "mount destination %s: must be absolute, not / and without ..",
                        dst);
  return 0;
}

/* A bind: source resolved on the host; optional sources that are missing are skipped. */
static int add_bind(mnt_list *l, kc_mnt_kind kind, const char *src, const char *dst, bool optional,
                    kc_error *err) {
  char real[PATH_MAX];
  if (!realpath(src, real)) {
    if (optional && errno == ENOENT)
      return 0;
    return kc_error_set(err, errno, "bind source %s", src);
  }
  struct stat st;
  if (stat(real, &st) < 0)
    return kc_error_set(err, errno, "bind source %s", src);
  kc_mnt *m = push(l, kind, err);
  if (!m)
    return -1;
  m->is_dir = S_ISDIR(st.st_mode);
  if (set_paths(m, real, dst ? dst : src, err) < 0)
    return -1;
  return check_dst(m->dst, err);
}

static int add_simple(mnt_list *l, kc_mnt_kind kind, const char *src, const char *dst,
                      uint64_t size, kc_error *err) {
  kc_mnt *m = push(l, kind, err);
  if (!m)
    return -1;
  if (set_paths(m, src, dst, err) < 0)
    return -1;
  m->size = size;
  return check_dst(m->dst, err);
}

/* The built-in layout: read-only /usr, the top-level merged-usr entries as they are on
 * the host (symlink -> same symlink, directory -> read-only bind), /proc, minimal /dev,
 * a 64 MiB /tmp. */
static int default_layout(mnt_list *l, kc_error *err) {
  if (add_bind(l, KC_MNT_RO, "/usr", "/usr", false, err) < 0)
    return -1;
  static const char *const tops[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
  for (size_t i = 0; i < sizeof tops / sizeof tops[0]; i++) {
    struct stat st;
    if (lstat(tops[i], &st) < 0)
      continue;
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(tops[i], target, sizeof target - 1);
      if (n <= 0)
        continue;
      target[n] = '\0';
      if (add_simple(l, KC_MNT_SYMLINK, target, tops[i], 0, err) < 0)
        return -1;
    } else if (S_ISDIR(st.st_mode)) {
      if (add_bind(l, KC_MNT_RO, tops[i], tops[i], true, err) < 0)
        return -1;
    }
  }
  if (add_simple(l, KC_MNT_PROC, NULL, "/proc", 0, err) < 0 ||
      add_simple(l, KC_MNT_DEV, NULL, "/dev", 0, err) < 0 ||
      add_simple(l, KC_MNT_TMPFS, NULL, "/tmp", KC_DEFAULT_TMP_SIZE, err) < 0)
    return -1;
  return 0;
}

int kc__fs_plan(const kc_policy_spec *spec, const kc_mount *extra, size_t n_extra, kc_mnt **out,
                size_t *n_out, kc_error *err) {
  mnt_list l = {0};
  int rc = 0;
  if (!spec || spec->n_mounts == 0) {
    rc = default_layout(&l, err);
  } else {
    for (size_t i = 0; rc == 0 && i < spec->n_mounts; i++) {
      const kc_policy_mount *pm = &spec->mounts[i];
      switch (pm->kind) {
      case KC_POLICY_MOUNT_RO:
      case KC_POLICY_MOUNT_RW:
        rc = add_bind(&l, pm->kind == KC_POLICY_MOUNT_RO ? KC_MNT_RO : KC_MNT_RW, pm->src,
                      pm->dst ? pm->dst : pm->src, pm->optional, err);
        break;
      case KC_POLICY_MOUNT_TMPFS:
        rc = add_simple(&l, KC_MNT_TMPFS, NULL, pm->dst, pm->size, err);
        break;
      case KC_POLICY_MOUNT_PROC:
        rc = add_simple(&l, KC_MNT_PROC, NULL, pm->dst ? pm->dst : "/proc", 0, err);
        break;
      case KC_POLICY_MOUNT_DEV:
        rc = add_simple(&l, KC_MNT_DEV, NULL, pm->dst ? pm->dst : "/dev", 0, err);
        break;
      case KC_POLICY_MOUNT_SYMLINK:
        rc = add_simple(&l, KC_MNT_SYMLINK, pm->src, pm->dst, 0, err);
        break;
      }
    }
  }
  for (size_t i = 0; rc == 0 && i < n_extra; i++) {
    const kc_mount *m = &extra[i];
    if (m->kind == KC_MOUNT_TMPFS)
      rc = add_simple(&l, KC_MNT_TMPFS, NULL, m->dst, m->size, err);
    else
      rc = add_bind(&l, m->kind == KC_MOUNT_RO_BIND ? KC_MNT_RO : KC_MNT_RW, m->src,
                    m->dst ? m->dst : m->src, false, err);
  }
  if (rc < 0) {
    kc__fs_free(l.v, l.n);
    return -1;
  }
  *out = l.v;
  *n_out = l.n;
  return 0;
}

/* The sandbox's root is not host root, so a source below a directory only root can
 * traverse (a 0700 mktemp -d) is out of the child's reach by path.  This process
 * resolves it instead (as bwrap and crun do as root) and hands the child a detached
 * clone; the files' own modes still decide what the sandbox may do inside.  Where
 * open_tree is not allowed (an unprivileged caller, an old kernel) the child binds by
 * path as before: then the caller's own access is the sandbox's anyway. */
void kc__fs_open_trees(kc_mnt *mnts, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kc_mnt *m = &mnts[i];
    if (m->kind != KC_MNT_RO && m->kind != KC_MNT_RW)
      continue;
    int fd = open_tree(AT_FDCWD, m->src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (fd < 0)
      return; /* not allowed here: every bind goes by path */
    struct mount_attr a = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                       (m->kind == KC_MNT_RO ? MOUNT_ATTR_RDONLY : 0)};
    if (mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0) {
      close(fd);
      continue;
    }
    m->tree = fd;
  }
}

void kc__fs_close_trees(kc_mnt *mnts, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (mnts[i].tree >= 0) {
      close(mnts[i].tree);
      mnts[i].tree = -1;
    }
}

void kc__fs_free(kc_mnt *mnts, size_t n) {
  kc__fs_close_trees(mnts, n);
  for (size_t i = 0; i < n; i++)
    free(mnts[i].strs);
  free(mnts);
}

/* ---- child side ---------------------------------------------------------------- */

static int mkdir_p(const char *path, mode_t mode) {
  char buf[PATH_MAX];
  size_t len = strlen(path);
  if (len >= sizeof buf)
    return -1;
  memcpy(buf, path, len + 1);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
      return -1;
    *p = '/';
  }
  if (mkdir(buf, mode) < 0 && errno != EEXIST)
    return -1;
  return 0;
}

static int parent_dirs(const char *path) {
  char buf[PATH_MAX];
  size_t len = strnlen(path, sizeof buf);
  if (len == sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, len + 1);
  char *slash = strrchr(buf, '/');
  if (!slash || slash == buf)
    return 0;
  *slash = '\0';
  return mkdir_p(buf, 0755);
}

/* An empty file to bind a file onto; its directory exists. */
static int file_point(const char *dst) {
  int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return errno == EEXIST ? 0 : -1;
  close(fd);
  return 0;
}

static int mount_point(const char *dst, bool dir) {
  if (parent_dirs(dst) < 0)
    return -1;
  return dir ? mkdir_p(dst, 0755) : file_point(dst);
}

static int bind(const kc_mnt *m, kc_error *err) {
  const char *src = m->src, *dst = m->dst;
  bool ro = m->kind == KC_MNT_RO;
  char from[PATH_MAX + sizeof KC_OLDROOT];
  snprintf(from, sizeof from, "%s%s", KC_OLDROOT, src);
  if (mount_point(dst, m->is_dir) < 0)
    return kc_error_set(err, errno, "mount point %s", dst);
  if (m->tree >= 0) { /* opened and flagged by the parent */
    if (move_mount(m->tree, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return kc_error_set(err, errno, "bind %s on %s", src, dst);
    return 0;
  }
  if (mount(from, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
    return kc_error_set(err, errno, "bind %s on %s", src, dst);
  unsigned long fl = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (ro ? MS_RDONLY : 0);
  if (mount(NULL, dst, NULL, fl, NULL) < 0)
    return kc_error_set(err, errno, "remount %s%s", dst, ro ? " read-only" : "");
  return 0;
}

int kc__fs_tmpfs(const char *dst, uint64_t size, kc_error *err) {
  char opts[64];
  snprintf(opts, sizeof opts, "size=%llu,mode=1777",
           (unsigned long long)(size ? size : KC_DEFAULT_TMP_SIZE));
  if (mkdir_p(dst, 0755) < 0)
    return kc_error_set(err, errno, "mount point %s", dst);
  if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
    return kc_error_set(err, errno, "tmpfs on %s", dst);
  return 0;
}

static int dev(const char *dst, kc_error *err) {
  if (mkdir_p(dst, 0755) < 0)
    return kc_error_set(err, errno, "mount point %s", dst);
  if (mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") < 0)
    return kc_error_set(err, errno, "tmpfs on %s", dst);
  static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  char src[64], to[PATH_MAX + 16];
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
    snprintf(src, sizeof src, "%s/dev/%s", KC_OLDROOT, nodes[i]);
    snprintf(to, sizeof to, "%s/%s", dst, nodes[i]);
    if (file_point(to) < 0) /* in the tmpfs just mounted: no parent to make */
      return kc_error_set(err, errno, "mount point %s", to);
    if (mount(src, to, NULL, MS_BIND, NULL) < 0)
      return kc_error_set(err, errno, "bind /dev/%s", nodes[i]);
  }
  static const char *const links[][2] = {{"/proc/self/fd", "fd"},
                                         {"/proc/self/fd/0", "stdin"},
                                         {"/proc/self/fd/1", "stdout"},
                                         {"/proc/self/fd/2", "stderr"}};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    snprintf(to, sizeof to, "%s/%s", dst, links[i][1]);
    if (symlink(links[i][0], to) < 0 && errno != EEXIST)
      return kc_error_set(err, errno, "symlink %s", to);
  }
  snprintf(to, sizeof to, "%s/shm", dst);
  if (mkdir(to, 01777) < 0 && errno != EEXIST)
    return kc_error_set(err, errno, "mkdir %s", to);
  if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
    return kc_error_set(err, errno, "remount %s read-only", dst);
  return 0;
}

/* What container runtimes hide of /proc (runc's maskedPaths and readonlyPaths, plus
 * the host's boot command line and kernel build, which a build error would echo to a
 * remote tenant, and the host-wide counters LXCFS virtualises: disks, VM, scheduler,
 * softirqs, open files; and the host's counts of cgroups, AIO contexts and terminals,
 * which move with other tenants' work): files and directories that describe the host,
 * not the sandbox.  The counters a program may need to read (stat, uptime, loadavg,
 * meminfo, the boot id) get per-sandbox files instead (proc_view.c).  A file is covered
 * with /dev/null, a directory with an empty read-only tmpfs; what the kernel does not
 * have is skipped.  The sandbox never holds the capability to undo it. */
static const struct {
  const char *name;
  bool dir; /* what procfs has there; mask_one copes with a kernel that differs */
} proc_masked[] = {{"acpi", true},
                   {"asound", true},
                   {"bootconfig", false},
                   {"cmdline", false},
                   {"config.gz", false},
                   {"interrupts", false},
                   {"iomem", false},
                   {"ioports", false},
                   {"kallsyms", false},
                   {"kcore", false},
                   {"keys", false},
                   {"key-users", false},
                   {"latency_stats", false},
                   {"modules", false},
                   {"sched_debug", false},
                   {"scsi", true},
                   {"timer_list", false},
                   {"timer_stats", false},
                   {"vmallocinfo", false},
                   {"driver", true},
                   {"dynamic_debug", true},
                   {"mtrr", false},
                   {"pressure", true},
                   {"diskstats", false},
                   {"partitions", false},
                   {"swaps", false},
                   {"vmstat", false},
                   {"zoneinfo", false},
                   {"buddyinfo", false},
                   {"pagetypeinfo", false},
                   {"softirqs", false},
                   {"schedstat", false},
                   {"slabinfo", false},
                   {"locks", false},
                   {"sys/fs/dentry-state", false},
                   {"sys/fs/inode-nr", false},
                   {"sys/fs/inode-state", false},
                   {"sys/fs/file-nr", false},
                   {"sys/fs/aio-nr", false},
                   {"sys/kernel/pty/nr", false},
                   {"sys/kernel/random/entropy_avail", false},
                   {"cgroups", false}};
static const char *const proc_readonly[] = {"bus", "fs", "irq", "sys", "sysrq-trigger"};

/* A file is covered with /dev/null.  Directories share one empty read-only tmpfs: the
 * first is mounted, the others are binds of it (the same flags and the same read-only
 * superblock, one superblock to set up and tear down instead of one each). */
static int mask_as(const char *path, bool dir, char *first_dir, size_t cap) {
  if (!dir)
    return mount(KC_OLDROOT "/dev/null", path, NULL, MS_BIND, NULL);
  int rc = first_dir[0]
               ? mount(first_dir, path, NULL, MS_BIND, NULL)
               : mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       "size=4k,nr_inodes=1,mode=0555");
  if (rc == 0 && !first_dir[0])
    snprintf(first_dir, cap, "%s", path);
  return rc;
}

/* One entry of proc_masked, masked as the kind procfs has there, with no lstat: the
 * mount itself says ENOENT for an entry this kernel lacks, and ENOTDIR when the kind
 * differs (then the other kind is used).  The kind is known rather than probed by a
 * failing bind because a bind that fails ENOTDIR has already cloned its mount, and
 * undoing that waits for an expedited RCU grace period (~15-100 us, with IPIs to
 * every CPU). */
static int mask_one(const char *path, bool dir, char *first_dir, size_t cap, kc_error *err) {
  if (mask_as(path, dir, first_dir, cap) == 0 || errno == ENOENT)
    return 0;
  if (errno == ENOTDIR && mask_as(path, !dir, first_dir, cap) == 0)
    return 0;
  return kc_error_set(err, errno, "mask %s", path);
}

static int mask_proc(const char *dst, kc_error *err) {
  char path[PATH_MAX + 32], first_dir[PATH_MAX + 32] = "";
  for (size_t i = 0; i < sizeof proc_masked / sizeof proc_masked[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dst, proc_masked[i].name);
    if (mask_one(path, proc_masked[i].dir, first_dir, sizeof first_dir, err) < 0)
      return -1;
  }
  for (size_t i = 0; i < sizeof proc_readonly / sizeof proc_readonly[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dst, proc_readonly[i]);
    if (access(path, F_OK) < 0)
      continue;
    if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0 ||
        mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0)
      return kc_error_set(err, errno, "read-only %s", path);
  }
  return 0;
}

int kc__fs_enter(const kc_mnt *mnts, size_t n, const char *cwd, kc_error *err) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    return kc_error_set(err, errno, "make / private");
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") < 0)
    return kc_error_set(err, errno, "root tmpfs");
  if (mkdir("/tmp" KC_OLDROOT, 0700) < 0)
    return kc_error_set(err, errno, "mkdir old root");
  if (syscall(SYS_pivot_root, "/tmp", "/tmp" KC_OLDROOT) < 0)
    return kc_error_set(err, errno, "pivot_root");
  if (chdir("/") < 0)
    return kc_error_set(err, errno, "chdir /");
  for (size_t i = 0; i < n; i++) {
    const kc_mnt *m = &mnts[i];
    int rc = 0;
    switch (m->kind) {
    case KC_MNT_RO:
    case KC_MNT_RW:
      rc = bind(m, err);
      break;
    case KC_MNT_TMPFS:
      rc = kc__fs_tmpfs(m->dst, m->size, err);
      break;
    case KC_MNT_PROC:
      if (mkdir_p(m->dst, 0555) < 0)
        rc = kc_error_set(err, errno, "mount point %s", m->dst);
      else if (mount("proc", m->dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        rc = kc_error_set(err, errno, "mount proc on %s", m->dst);
      else if ((rc = mask_proc(m->dst, err)) == 0)
        rc = kc__proc_view(m->dst, err);
      break;
    case KC_MNT_DEV:
      rc = dev(m->dst, err);
      break;
    case KC_MNT_SYMLINK:
      if (parent_dirs(m->dst) < 0 || (symlink(m->src, m->dst) < 0 && errno != EEXIST))
        rc = kc_error_set(err, errno, "symlink %s", m->dst);
      break;
    }
    if (rc < 0)
      return -1;
  }
  if (umount2(KC_OLDROOT, MNT_DETACH) < 0)
    return kc_error_set(err, errno, "detach old root");
  if (rmdir(KC_OLDROOT) < 0)
    return kc_error_set(err, errno, "rmdir old root");
  if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
    return kc_error_set(err, errno, "remount / read-only");
  if (chdir(cwd && *cwd ? cwd : "/") < 0)
    return kc_error_set(err, errno, "chdir %s", cwd);
  return 0;
}

struct kc_fs_plan {
  kc_mnt *mnts;
  size_t n;
};

int kc_sandbox_fs_prepare(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                          kc_fs_plan **out, kc_error *err) {
  const kc_policy_spec *spec = policy ? kc_policy_get_spec(policy) : NULL;
  kc_fs_plan *p = calloc(1, sizeof *p);
  if (!p)
    return kc_error_set(err, ENOMEM, "mount plan");
  if (kc__fs_plan(spec, extra, n_extra, &p->mnts, &p->n, err) < 0) {
    free(p);
    return -1;
  }
  kc__fs_open_trees(p->mnts, p->n);
  *out = p;
  return 0;
}

int kc_sandbox_fs_enter(const kc_fs_plan *plan, const char *cwd, kc_error *err) {
  return kc__fs_enter(plan->mnts, plan->n, cwd, err);
}

void kc_sandbox_fs_release(kc_fs_plan *plan) {
  if (!plan)
    return;
  /* a zygote's workers are its forks: the binds' host paths must not stay readable */
  for (size_t i = 0; i < plan->n; i++)
    if (plan->mnts[i].strs)
      explicit_bzero(plan->mnts[i].strs,
                     strlen(plan->mnts[i].src) + 1 + strlen(plan->mnts[i].dst) + 1);
  kc__fs_free(plan->mnts, plan->n);
  free(plan);
}

int kc_sandbox_setup_fs(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                        const char *cwd, kc_error *err) {
  kc_fs_plan *plan = NULL;
  if (kc_sandbox_fs_prepare(policy, extra, n_extra, &plan, err) < 0)
    return -1;
  const kc_policy_spec *spec = policy ? kc_policy_get_spec(policy) : NULL;
  if (!cwd && spec && spec->cwd)
    cwd = spec->cwd;
  int rc = kc_sandbox_fs_enter(plan, cwd, err);
  kc_sandbox_fs_release(plan);
  return rc;
}
