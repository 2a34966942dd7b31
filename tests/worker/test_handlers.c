/* Handlers for the worker tests, loaded inside real workers as "lib.so:symbol".  Built
 * without sanitizers: they run inside the sandbox, and some are hostile on purpose. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "kcage/worker.h"
#include "ring.h"

int raise_value_error(kc_call *c) {
  snprintf(c->error, c->error_cap, "ValueError: bad input %.*s", (int)c->arg_len,
           (const char *)c->arg);
  return 1;
}

int segfault(kc_call *c) {
  (void)c;
  volatile uintptr_t addr = 8; /* opaque to the compiler: a real fault */
  *(volatile int *)addr = 1;
  return 0;
}

int busy_loop(kc_call *c) {
  (void)c;
  for (volatile unsigned long i = 0;; i++)
    ;
  return 0;
}

int sleeper(kc_call *c) {
  (void)c;
  for (;;)
    sleep(100);
  return 0;
}

/* Touch memory until the cgroup's memory limit kills us. */
int hog_memory(kc_call *c) {
  (void)c;
  for (;;) {
    char *p = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      continue;
    memset(p, 1, 16 << 20);
  }
  return 0;
}

/* Seal, then try to map executable memory: the seal filter kills the worker. */
int seal_then_exec_map(kc_call *c) {
  (void)c;
  if (kc_runtime_seal_exec() < 0) {
    snprintf(c->error, c->error_cap, "seal failed");
    return 1;
  }
  void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  (void)p;
  snprintf(c->error, c->error_cap, "mmap PROT_EXEC was allowed after seal");
  return 1;
}

static void *idle_thread(void *arg) {
  return arg;
}

/* Seal, then start a thread: glibc blocks signals around clone3, so a seal TRAP would
 * end the worker with no name; the base policy's kill rule must name the call. */
int seal_then_thread(kc_call *c) {
  if (kc_runtime_seal_exec() < 0) {
    snprintf(c->error, c->error_cap, "seal failed");
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, idle_thread, NULL) == 0)
    pthread_join(t, NULL);
  snprintf(c->error, c->error_cap, "thread creation was allowed after seal");
  return 1;
}

/* Seal, then map a file (our own library) executable: measure allows that before the
 * seal, so this one is the seal filter's own rule. */
int seal_then_file_exec_map(kc_call *c) {
  Dl_info info;
  int fd = dladdr((void *)seal_then_file_exec_map, &info) ? open(info.dli_fname, O_RDONLY) : -1;
  if (fd < 0) {
    snprintf(c->error, c->error_cap, "cannot open our own library");
    return 1;
  }
  if (kc_runtime_seal_exec() < 0) {
    snprintf(c->error, c->error_cap, "seal failed");
    return 1;
  }
  void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
  (void)p;
  snprintf(c->error, c->error_cap, "file-backed mmap PROT_EXEC was allowed after seal");
  return 1;
}

/* Hostile: find the ring's control page (magic at a page start below our result slot)
 * and write garbage the parent must reject. */
static kc_ring_ctl *find_ctl(kc_call *c) {
  uintptr_t p = ((uintptr_t)c->out) & ~(uintptr_t)4095;
  for (int i = 0; i < 1 << 16; i++, p -= 4096)
    if (((kc_ring_ctl *)p)->magic == KC_RING_MAGIC)
      return (kc_ring_ctl *)p;
  return NULL;
}

int corrupt_tail(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  if (ctl)
    atomic_store(&ctl->cq_tail, (uint64_t)1 << 40);
  for (;;)
    pause();
  return 0;
}

int forge_completion(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  kc_cqe *h = (kc_cqe *)((char *)c->out - sizeof(kc_cqe));
  h->seq = c->seq;
  h->generation = c->generation ^ 0x5a5a;
  h->status = KC_CQE_COMPLETE;
  h->len = (uint64_t)1 << 50;
  if (ctl)
    atomic_store(&ctl->cq_tail, c->seq + 1);
  for (;;)
    pause();
  return 0;
}

/* Hostile: wake the parent's nap (ring.h) over and over, with nothing to take, and
 * scribble on the parent's sleep flag; then answer "ok". */
int spurious_wakes(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  if (!ctl)
    return 1;
  for (int i = 0; i < 20000; i++) {
    atomic_fetch_add(&ctl->cq_epoch, 1);
    atomic_store(&ctl->cq_waiters, (uint32_t)i);
    syscall(SYS_futex, &ctl->cq_epoch, FUTEX_WAKE, 1, NULL, NULL, 0);
    if (i % 64 == 0)
      usleep(10);
  }
  memcpy(c->out, "ok", 2);
  c->out_len = 2;
  return 0;
}

/* Hostile: claim to be dead (the death notice's FUTEX_OWNER_DIED) while alive, then
 * answer "ok" a while later. */
int forge_death(kc_call *c) {
  kc_ring_ctl *ctl = find_ctl(c);
  if (!ctl)
    return 1;
  atomic_store(&ctl->worker_tid, FUTEX_OWNER_DIED | 1u);
  usleep(20000);
  memcpy(c->out, "ok", 2);
  c->out_len = 2;
  return 0;
}

/* Hostile: withdraw the death notice (an empty robust list), then wait to be killed. */
int hide_death(kc_call *c) {
  (void)c;
  static struct robust_list_head empty = {.list = {&empty.list}};
  syscall(SYS_set_robust_list, &empty, sizeof empty);
  for (;;) /* not pause(): the measure policy forbids it */
    usleep(100000);
  return 0;
}

static int counter;
int count_calls(kc_call *c) {
  counter++;
  memcpy(c->out, &counter, sizeof counter);
  c->out_len = sizeof counter;
  return 0;
}

/* initializer: sets the counter from initargs ("fail" makes it raise) */
int init_counter(const void *a, size_t n, char *error, size_t cap) {
  if (n == 4 && !memcmp(a, "fail", 4)) {
    snprintf(error, cap, "RuntimeError: init refused");
    return 1;
  }
  if (n == sizeof counter)
    memcpy(&counter, a, sizeof counter);
  return 0;
}

static int echo_copy(kc_call *c) {
  memcpy(c->out, c->arg, c->arg_len);
  c->out_len = c->arg_len;
  return 0;
}

/* One handler, many outcomes (for pool maps): arg[0] picks what happens. */
int mixed(kc_call *c) {
  const char *a = c->arg;
  switch (c->arg_len ? a[0] : 'e') {
  case 'x':
    snprintf(c->error, c->error_cap, "KeyError: %.*s", (int)c->arg_len, a);
    return 1;
  case 'h':
    return busy_loop(c);
  case 's':
    return segfault(c);
  case 'n': { /* a syscall the measure policy forbids */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    snprintf(c->error, c->error_cap, "socket() returned %d", fd);
    return 1;
  }
  default:
    return echo_copy(c);
  }
}

/* The readable run of pages around p, probed by reading one byte of each page with a
 * SIGSEGV/SIGBUS handler armed (mincore is not in every policy), so the scan below
 * never faults; capped at 64 MiB each way. */
static sigjmp_buf probe_jmp;
static void probe_fault(int sig) {
  (void)sig;
  siglongjmp(probe_jmp, 1);
}

static int readable(uintptr_t page) {
  if (sigsetjmp(probe_jmp, 1))
    return 0;
  (void)*(volatile const char *)page;
  return 1;
}

static void mapped_run(const void *p, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  struct sigaction sa = {.sa_handler = probe_fault}, old_segv, old_bus;
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
  uintptr_t a = (uintptr_t)p & ~(pg - 1), b = a + pg;
  while (a > pg && (uintptr_t)p - (a - pg) < (64u << 20) && readable(a - pg))
    a -= pg;
  while (b - (uintptr_t)p < (64u << 20) && readable(b))
    b += pg;
  sigaction(SIGSEGV, &old_segv, NULL);
  sigaction(SIGBUS, &old_bus, NULL);
  *lo = a;
  *hi = b;
}

/* A byte loop, not memchr/memcmp: under ASan those are checked against the heap's
 * redzones, which a scan of the whole mapping crosses by design. */
__attribute__((no_sanitize("address"))) static int
find_in(uintptr_t lo, uintptr_t hi, const char *s, size_t n, const void *skip, size_t skip_len) {
  for (uintptr_t at = lo; at + n <= hi; at++) {
    const volatile char *p = (const volatile char *)at;
    size_t k = 0;
    while (k < n && p[k] == s[k])
      k++;
    if (k == n && (at < (uintptr_t)skip || at >= (uintptr_t)skip + skip_len))
      return 1;
  }
  return 0;
}

/* What a kernel in this worker can learn of the host's command line: PID 1's cmdline
 * and environ as /proc shows them, and whether a marker that names a host path bound
 * into the pool (on the zygote's command line) is in the worker's stack (where argv
 * and the environment live) or heap (where the zygote kept copies of the binds).  The
 * argument is the marker reversed, so the request itself does not hold it.  The
 * environment's PATH=, next to argv on the stack, is the control: the scan must find
 * it.  Replies "cmdline|environ|marker|control". */
int proc_view(kc_call *c) {
  static char marker[128];
  size_t ml = c->arg_len < 127 ? c->arg_len : 127;
  for (size_t i = 0; i < ml; i++)
    marker[i] = ((const char *)c->arg)[ml - 1 - i];
  marker[ml] = 0;
  char cmd[512] = "", env[512] = "";
  const char *paths[2] = {"/proc/1/cmdline", "/proc/1/environ"};
  char *outs[2] = {cmd, env};
  for (int i = 0; i < 2; i++) {
    int fd = open(paths[i], O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, outs[i], 511) : -1;
    if (fd >= 0)
      close(fd);
    for (ssize_t k = 0; k < n; k++)
      if (!outs[i][k])
        outs[i][k] = ' ';
    outs[i][n > 0 ? n : 0] = 0;
  }
  extern char **environ;
  uintptr_t lo[2], hi[2];
  char *heap = malloc(16);
  mapped_run(environ && environ[0] ? environ[0] : (char *)&ml, &lo[0], &hi[0]);
  mapped_run(heap, &lo[1], &hi[1]);
  free(heap);
  int found[2] = {0, 0};
  const char *what[2] = {marker, "PATH="};
  for (int w = 0; w < 2; w++)
    for (int r = 0; r < 2; r++)
      found[w] |= find_in(lo[r], hi[r], what[w], strlen(what[w]), marker, sizeof marker);
  snprintf(c->error, c->error_cap, "%s|%s|%d|%d", cmd, env, found[0], found[1]);
  return 1; /* the reply travels as the exception's message */
}

/* What a kernel in this worker learns of the host's clocks and counters through
 * sysinfo(2) and CLOCK_BOOTTIME, and how sysinfo treats buffers it may not write (into
 * code, into a read-only page, and across a writable page's end into a read-only one:
 * each must fail with EFAULT and change nothing, as the kernel's own does).  Replies
 * "boot uptime load0 load1 load2 procs free_is_total efaults unchanged". */
int host_clocks(kc_call *c) {
  struct timespec boot;
  clock_gettime(CLOCK_BOOTTIME, &boot);
  struct sysinfo si;
  memset(&si, 0xa5, sizeof si);
  if (sysinfo(&si) < 0) {
    snprintf(c->error, c->error_cap, "sysinfo: %s", strerror(errno));
    return 1;
  }
  long pg = sysconf(_SC_PAGESIZE);
  unsigned char *two =
      mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (two == MAP_FAILED || mprotect(two + pg, pg, PROT_READ) < 0) {
    snprintf(c->error, c->error_cap, "mmap: %s", strerror(errno));
    return 1;
  }
  void *const bad[] = {(void *)(uintptr_t)host_clocks, two + pg, two + pg - 8};
  int efaults = 0;
  for (int i = 0; i < 3; i++) {
    errno = 0;
    efaults += sysinfo(bad[i]) < 0 && errno == EFAULT;
  }
  int unchanged = 1;
  for (long i = pg - 8; i < 2 * pg; i++)
    unchanged &= two[i] == 0;
  munmap(two, 2 * pg);
  snprintf(c->error, c->error_cap, "%lld %ld %lu %lu %lu %u %d %d %d", (long long)boot.tv_sec,
           si.uptime, si.loads[0], si.loads[1], si.loads[2], (unsigned)si.procs,
           si.freeram == si.totalram && si.totalram > 0, efaults, unchanged);
  return 1; /* the reply travels as the exception's message */
}

/* sysinfo(2) from a thread that blocks SIGSYS, as a program may (glibc blocks every
 * signal while it creates a thread): a trap could not be delivered to it, and the kernel
 * would kill the worker instead.  Replies "load0 procs free_is_total" as the exception's
 * message. */
int sysinfo_sigsys_blocked(kc_call *c) {
  sigset_t sys, old;
  sigemptyset(&sys);
  sigaddset(&sys, SIGSYS);
  pthread_sigmask(SIG_BLOCK, &sys, &old);
  struct sysinfo si;
  int rc = sysinfo(&si);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc < 0)
    snprintf(c->error, c->error_cap, "sysinfo: %s", strerror(e));
  else
    snprintf(c->error, c->error_cap, "%lu %u %d", si.loads[0], (unsigned)si.procs,
             si.freeram == si.totalram && si.totalram > 0);
  return 1;
}
