/* What /proc tells a sandbox about the host, beyond the files fs.c masks outright.
 *
 * Two channels remain once the host-describing files are masked:
 *
 * - PID 1's own command line and environment.  PID 1 of a `kcage run` sandbox is a
 *   fork of kcage, and every worker is a fork of a zygote whose argv names the host
 *   paths of every bind; /proc/1/cmdline would read them.  kc_sandbox_hide_args()
 *   points the kernel's view of the argument area at a static name and empties the
 *   environment's (PR_SET_MM_MAP, which a process may do to itself without privilege
 *   as long as it keeps its executable).  A zygote, whose memory its workers (and so
 *   the kernels in them) inherit, also zeroes the old argument strings once it no
 *   longer needs them.
 *
 * - Host-wide identifiers and counters: the boot id, the CPU and interrupt counters and
 *   boot time of /proc/stat, the load average, the uptime, disk and VM statistics,
 *   memory use.  A tenant could fingerprint the host with them or watch other tenants'
 *   activity through them.  kc__proc_view() covers each with a per-sandbox file, as
 *   LXCFS and gVisor present them: a fresh random boot id, counters that start at
 *   zero, the sandbox's own CPUs in /proc/stat (glibc's get_nprocs falls back to it),
 *   a boot time that is the sandbox's start, and no disks.  The files are written on
 *   the new root's tmpfs while it is still writable, bound over /proc's, then
 *   unlinked: the binds keep them alive and nothing names them afterwards.
 *
 * What stays out of reach of a file system: sysinfo(2) (host uptime, loads, free
 * memory) and CLOCK_BOOTTIME.  A sandbox's supervisor answers sysinfo itself with
 * kc_sandbox_sysinfo() (seccomp_compile.c: kc_policy_views_sysinfo), and init gives
 * the program a time namespace whose boot and monotonic clocks start at the sandbox's
 * start (kc_sandbox_time_view): for a pool, the zygote's, so its workers' clocks
 * start at the pool's start. */
#include "sandbox_internal.h"

#include "kcage/sandbox_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/prctl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* The fields of /proc/self/stat that describe the memory map (proc(5): 26-28,
 * 45-51), read after the command name, which may hold spaces and parentheses. */
static int read_mm_fields(unsigned long v[52], kc_error *err) {
  char buf[2048];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return kc_error_set(err, errno, "open /proc/self/stat");
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return kc_error_set(err, n < 0 ? errno : EIO, "read /proc/self/stat");
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p)
    return kc_error_set(err, EIO, "/proc/self/stat: no command name");
  p++;
  memset(v, 0, 52 * sizeof v[0]);
  for (int field = 3; field <= 51; field++) {
    while (*p == ' ')
      p++;
    if (!*p)
      return kc_error_set(err, EIO, "/proc/self/stat: %d fields", field - 1);
    v[field] = strtoul(p, NULL, 10); /* 0 for the state letter, field 3 */
    while (*p && *p != ' ')
      p++;
  }
  return 0;
}

int kc_sandbox_hide_args(const char *name, char **old_args, size_t *old_len, kc_error *err) {
  unsigned long v[52];
  if (read_mm_fields(v, err) < 0)
    return -1;
  struct prctl_mm_map m;
  memset(&m, 0, sizeof m);
  m.start_code = v[26];
  m.end_code = v[27];
  m.start_stack = v[28];
  m.start_data = v[45];
  m.end_data = v[46];
  m.start_brk = v[47];
  m.brk = (unsigned long)syscall(SYS_brk, 0);
  /* The view points at a copy of the name on a page of its own, not into the argument
   * area: nothing there is overwritten, so argv pointers the caller still holds stay
   * valid.  Anonymous memory, because /proc reads the arguments only from such. */
  size_t len = strlen(name) + 1;
  if (len > 4096)
    return kc_error_set(err, EINVAL, "hide arguments: a name of %zu bytes", len);
  char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED)
    return kc_error_set(err, errno, "hide arguments: mmap");
  memcpy(page, name, len);
  m.arg_start = (unsigned long)page;
  m.arg_end = (unsigned long)page + len;
  m.env_start = v[50];
  m.env_end = v[50]; /* an empty environment, as far as /proc can tell */
  m.exe_fd = (uint32_t)-1;
  if (prctl(PR_SET_MM, PR_SET_MM_MAP, &m, sizeof m, 0) < 0) {
    int e = errno;
    munmap(page, 4096);
    return kc_error_set(err, e, "hide arguments: PR_SET_MM_MAP");
  }
  if (old_args && old_len) {
    *old_args = (char *)v[48];
    *old_len = v[49] > v[48] ? v[49] - v[48] : 0;
  }
  return 0;
}

/* A per-sandbox /proc/stat: one line per CPU the sandbox may use, every counter 0, and
 * the sandbox's start as the boot time. */
static int stat_text(char *out, size_t cap) {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) < 0)
    CPU_ZERO(&cpus);
  size_t n = (size_t)snprintf(out, cap, "cpu  0 0 0 0 0 0 0 0 0 0\n");
  for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
    if (CPU_ISSET(c, &cpus))
      n += (size_t)snprintf(out + n, cap - n, "cpu%d 0 0 0 0 0 0 0 0 0 0\n", c);
  if (n < cap)
    n += (size_t)snprintf(out + n, cap - n,
                          "intr 0\nctxt 0\nbtime %lld\nprocesses 0\nprocs_running 1\n"
                          "procs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n",
                          (long long)time(NULL));
  return n < cap ? 0 : -1;
}

/* A fresh random boot id in the kernel's format (a version-4 UUID). */
static int boot_id_text(char *out, size_t cap) {
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
    return -1;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, cap, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
  return 0;
}

/* Memory as a machine of the host's size that nobody else uses: the total is not a
 * secret, the free, shared and buffer counters would be a window on the other tenants.
 * No swap, no load, one process, up since the sandbox started: what sysinfo(2) answers
 * inside a sandbox (its supervisor writes this) and what meminfo shows. */
void kc_sandbox_sysinfo(struct sysinfo *out, double uptime_s) {
  struct sysinfo host;
  if (sysinfo(&host) < 0)
    memset(&host, 0, sizeof host);
  memset(out, 0, sizeof *out);
  out->totalram = host.totalram;
  out->mem_unit = host.mem_unit ? host.mem_unit : 1;
  out->freeram = out->totalram;
  out->uptime = uptime_s > 0 ? (long)uptime_s : 0;
  out->procs = 1;
}

static int meminfo_text(char *out, size_t cap) {
  struct sysinfo si;
  kc_sandbox_sysinfo(&si, 0);
  unsigned long long kb = (unsigned long long)si.totalram * si.mem_unit / 1024;
  snprintf(out, cap,
           "MemTotal:       %llu kB\nMemFree:        %llu kB\nMemAvailable:   %llu kB\n"
           "Buffers:               0 kB\nCached:                0 kB\n"
           "SwapTotal:             0 kB\nSwapFree:              0 kB\n",
           kb, kb, kb);
  return 0;
}

/* Write text to a new file at src and bind it over dst; a dst this kernel lacks is
 * skipped.  src is unlinked either way: the bind keeps the file alive. */
static int cover(const char *src, const char *dst, const char *text, kc_error *err) {
  int fd = open(src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
  if (fd < 0)
    return kc_error_set(err, errno, "proc view: create %s", src);
  size_t len = strlen(text);
  ssize_t w = write(fd, text, len);
  int werr = errno;
  close(fd);
  if (w != (ssize_t)len) {
    unlink(src);
    return kc_error_set(err, w < 0 ? werr : EIO, "proc view: write %s", src);
  }
  int rc = mount(src, dst, NULL, MS_BIND, NULL);
  int merr = errno;
  unlink(src);
  if (rc < 0 && merr != ENOENT)
    return kc_error_set(err, merr, "proc view: bind over %s", dst);
  if (rc == 0 &&
      mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            NULL) < 0)
    return kc_error_set(err, errno, "proc view: read-only %s", dst);
  return 0;
}

int kc__proc_view(const char *proc, kc_error *err) {
  static const char dir[] = "/.kcage-proc";
  char stat[8192], boot[64], mem[512];
  if (stat_text(stat, sizeof stat) < 0 || boot_id_text(boot, sizeof boot) < 0)
    return kc_error_set(err, EIO, "proc view: per-sandbox counters");
  meminfo_text(mem, sizeof mem);
  const struct {
    const char *name;
    const char *text;
  } files[] = {
      {"stat", stat},   {"uptime", "0.00 0.00\n"},           {"loadavg", "0.00 0.00 0.00 1/1 1\n"},
      {"meminfo", mem}, {"sys/kernel/random/boot_id", boot},
  };
  if (mkdir(dir, 0700) < 0)
    return kc_error_set(err, errno, "proc view: mkdir %s", dir);
  int rc = 0;
  for (size_t i = 0; i < sizeof files / sizeof files[0] && rc == 0; i++) {
    char src[64], dst[PATH_MAX];
    snprintf(src, sizeof src, "%s/%zu", dir, i);
    snprintf(dst, sizeof dst, "%s/%s", proc, files[i].name);
    rc = cover(src, dst, files[i].text, err);
  }
  if (rmdir(dir) < 0 && rc == 0)
    rc = kc_error_set(err, errno, "proc view: rmdir %s", dir);
  return rc;
}

/* /proc/self/timens_offsets, opened while our /proc shows us.  A credential change made
 * us not dumpable, which gives our /proc files to the host's root: we are dumpable for
 * the open only. */
int kc_sandbox_time_offsets_open(void) {
  int was = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (was != 1 && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
    return -1;
  int fd = open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
  int e = errno;
  if (was != 1) /* 2 (suid_dumpable) cannot be set back: 0 is the stricter */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  errno = e;
  return fd;
}

/* The boot and monotonic clocks (CLOCK_BOOTTIME, CLOCK_MONOTONIC, the uptime of
 * sysinfo(2)) of what we start from now on begin at this moment instead of the host's
 * boot: a time namespace for our children, with offsets set before any process enters
 * it.  We stay in the host's namespace: only what we fork (and what a vfork'd child
 * execs) enters the new one, and we may no longer make threads (the kernel refuses a
 * thread in another time namespace than its process).  A kernel without time
 * namespaces (before 5.6, or built without them) keeps the host's clocks, as does a
 * host that forbids one more namespace; docs/threat-model.md says so. */
int kc_sandbox_time_view(int offsets_fd, int64_t *shift_ns, kc_error *err) {
  if (shift_ns)
    *shift_ns = 0;
  if (unshare(CLONE_NEWTIME) < 0)
    return 0;
  struct timespec mono, boot;
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_BOOTTIME, &boot);
  char text[96];
  int len = snprintf(text, sizeof text, "monotonic %lld 0\nboottime %lld 0\n",
                     -(long long)mono.tv_sec, -(long long)boot.tv_sec);
  int fd = offsets_fd >= 0 ? offsets_fd : kc_sandbox_time_offsets_open();
  if (fd < 0)
    return kc_error_set(err, errno, "time namespace: open timens_offsets");
  ssize_t w = write(fd, text, (size_t)len);
  int e = errno;
  if (fd != offsets_fd)
    close(fd);
  if (w != len)
    return kc_error_set(err, w < 0 ? e : EIO, "time namespace: set the offsets");
  if (shift_ns)
    *shift_ns = (int64_t)mono.tv_sec * 1000000000;
  return 0;
}
