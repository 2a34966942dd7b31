/* The measuring process as the parent observes it from outside, by its host pid, with
 * no cooperation from it: stop and continue it, read the kernel's account of its CPU
 * time, and read its memory while it is stopped.  These are what the verdict and the
 * clock may rest on (README, threat model): nothing the process says about itself. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kcage/cleanup.h"
#include "measure_internal.h"

/* The state letter of /proc/PID/stat: after the last ')' (the name may hold any byte). */
static char proc_state(pid_t pid) {
  char buf[512];
  if (kc_read_proc(pid, "stat", buf, sizeof buf) < 0)
    return 0;
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : 0;
}

/* Each thread of the process, by its tid (/proc/PID/task): fn(pid, tid, arg) until it
 * returns non-zero, which is returned; -1 when the list cannot be read. */
static int each_thread(pid_t pid, int (*fn)(pid_t, pid_t, void *), void *arg) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d)
    return -1;
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d)))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
      rc = fn(pid, (pid_t)atoi(e->d_name), arg);
  closedir(d);
  return rc;
}

static int thread_running(pid_t pid, pid_t tid, void *arg) {
  (void)arg;
  char name[48];
  snprintf(name, sizeof name, "task/%d/stat", (int)tid);
  char buf[512];
  if (kc_read_proc(pid, name, buf, sizeof buf) < 0)
    return 0; /* gone meanwhile */
  char *p = strrchr(buf, ')');
  char st = p && p[1] == ' ' ? p[2] : 0;
  return st != 'T' && st != 't' && st != 'Z' && st != 'X';
}

/* A group stop reaches each thread on its own: the leader may show stopped while a
 * pool thread still runs the kernel.  Stopped means every thread stopped. */
int kc_observe_stop(pid_t pid) {
  if (pid <= 0 || kill(pid, SIGSTOP) < 0)
    return -1;
  /* SIGSTOP is asynchronous: the process may run on another CPU until the signal is
   * taken.  Wait (yielding) until the kernel says it is stopped, or gone. */
  double until = kc_now_s() + 5;
  for (unsigned i = 0;; i++) {
    char st = proc_state(pid);
    if ((st == 'T' || st == 't') && each_thread(pid, thread_running, NULL) == 0)
      return 0;
    if (st == 0 || st == 'Z' || st == 'X')
      return -1;
    if (i % 64 == 63 && kc_now_s() > until)
      return -1;
    sched_yield();
  }
}

void kc_observe_cont(pid_t pid) {
  if (pid > 0)
    kill(pid, SIGCONT);
}

/* /proc/PID/schedstat: ns on a CPU, ns waiting on a run queue, times it got a CPU. */
static int schedstat(pid_t pid, long long v[3]) {
  char buf[128];
  if (kc_read_proc(pid, "schedstat", buf, sizeof buf) < 0)
    return -1;
  return sscanf(buf, "%lld %lld %lld", &v[0], &v[1], &v[2]) == 3 ? 0 : -1;
}

void kc_observe_arrival_base(pid_t pid, kc_arrival *a) {
  a->pid = pid;
  a->known = schedstat(pid, a->base) == 0;
}

double kc_observe_cont_arrived(const kc_arrival *base, const cpu_set_t *leave, double *cont_s) {
  pid_t pid = base->pid;
  *cont_s = kc_now_s();
  kc_observe_cont(pid);
  if (leave)
    sched_setaffinity(0, sizeof *leave, leave);
  if (!base->known)
    return 0;
  /* The scheduler counts each arrival on a CPU and the time the process waited for it:
   * the first arrival after SIGCONT ends its wake-up, during which it ran nothing. */
  const long long *a = base->base;
  long long b[3];
  double until = kc_now_s() + 0.005;
  for (;;) {
    if (schedstat(pid, b) < 0)
      return 0;
    if (b[2] > a[2])
      return b[1] > a[1] ? (double)(b[1] - a[1]) * 1e-9 : 0;
    if (kc_now_s() > until)
      return 0;
    sched_yield();
  }
}

static int add_thread_cpu(pid_t pid, pid_t tid, void *arg) {
  int64_t *sum = arg;
  char name[48], buf[128];
  long long ns;
  snprintf(name, sizeof name, "task/%d/schedstat", (int)tid);
  if (kc_read_proc(pid, name, buf, sizeof buf) < 0)
    return 0; /* gone meanwhile: its time is in no one's account any more */
  if (sscanf(buf, "%lld", &ns) != 1 || ns < 0)
    return 1;
  *sum += ns;
  return 0;
}

int64_t kc_observe_cpu_ns(pid_t pid) {
  /* First field of schedstat: nanoseconds on a CPU, kept by the scheduler, for each
   * thread. */
  int64_t sum = 0;
  return each_thread(pid, add_thread_cpu, &sum) != 0 ? -1 : sum;
}

static int count_thread(pid_t pid, pid_t tid, void *arg) {
  (void)pid;
  (void)tid;
  ++*(unsigned *)arg;
  return 0;
}

unsigned kc_observe_threads(pid_t pid) {
  unsigned n = 0;
  return each_thread(pid, count_thread, &n) != 0 ? 0 : n;
}

int kc_observe_read(pid_t pid, uint64_t addr, void *buf, size_t len, kc_error *err) {
  unsigned char *p = buf;
  while (len) {
    struct iovec l = {p, len}, r = {(void *)(uintptr_t)addr, len};
    ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return kc_error_set(err, n < 0 ? errno : EFAULT,
                          "read %zu bytes of the worker's memory at %#llx", len,
                          (unsigned long long)addr);
    p += n;
    addr += (uint64_t)n;
    len -= (size_t)n;
  }
  return 0;
}

int kc_observe_poison(pid_t pid, uint64_t addr, uint64_t len, uint64_t word, kc_error *err) {
  /* One pattern page written over and over: the local side of each write is the same
   * 64 KiB, so filling gigabytes costs no memory here. */
  enum { PAT = 64 << 10, IOVS = 256 };
  /* No bigger than the write: a piece poisons each call's region on its own, right
   * before the piece, and a 64 KiB pattern filled for every 4 KiB region would push
   * the inputs just written for the piece out of this CPU's L1. */
  size_t plen = len < PAT ? (size_t)(len + 7) / 8 * 8 : PAT;
  kc_cleanup_free uint64_t *pat = malloc(plen);
  if (!pat)
    return kc_error_set(err, ENOMEM, "poison");
  for (size_t i = 0; i < plen / 8; i++)
    pat[i] = word;
  struct iovec l[IOVS];
  for (unsigned i = 0; i < IOVS; i++)
    l[i] = (struct iovec){pat, plen};
  while (len) {
    uint64_t want = len < (uint64_t)plen * IOVS ? len : (uint64_t)plen * IOVS;
    unsigned n = (unsigned)((want + plen - 1) / plen);
    l[n - 1].iov_len = want - (uint64_t)(n - 1) * plen;
    struct iovec r = {(void *)(uintptr_t)addr, (size_t)want};
    ssize_t got = process_vm_writev(pid, l, n, &r, 1, 0);
    l[n - 1].iov_len = plen;
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return kc_error_set(err, got < 0 ? errno : EFAULT,
                          "write %llu bytes of the worker's memory at %#llx",
                          (unsigned long long)want, (unsigned long long)addr);
    /* a partial write ends on a byte the pattern does not restart at: go on from an
     * 8-byte boundary, rewriting at most 7 bytes */
    uint64_t done = (uint64_t)got & ~7ull;
    if (!done)
      done = (uint64_t)got == want ? want : 0;
    if (!done)
      return kc_error_set(err, EFAULT, "write the worker's memory at %#llx",
                          (unsigned long long)addr);
    addr += done;
    len -= done;
  }
  return 0;
}

/* Field 39 of /proc/PID/stat (processor): the 37th after the name; -1 when unknown. */
int kc_observe_last_cpu(pid_t pid) {
  char buf[1024];
  if (kc_read_proc(pid, "stat", buf, sizeof buf) < 0)
    return -1;
  char *p = strrchr(buf, ')');
  for (int f = 0; f < 37 && p; f++)
    p = strchr(p + 1, ' ');
  return p ? atoi(p + 1) : -1;
}

bool kc_observe_move_to(int cpu, const cpu_set_t *home) {
  if (cpu < 0 || cpu >= CPU_SETSIZE || !home || !CPU_ISSET(cpu, home) || CPU_COUNT(home) == 1)
    return false;
  cpu_set_t there;
  CPU_ZERO(&there);
  CPU_SET(cpu, &there);
  return sched_setaffinity(0, sizeof there, &there) == 0;
}

int kc_observe_pin(pid_t pid, int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(pid, sizeof one, &one);
}
