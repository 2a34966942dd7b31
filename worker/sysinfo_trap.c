/* sysinfo(2) in a pool worker.  It tells the host's loads, free memory and process
 * count (other tenants' activity) and, without a time namespace, its uptime; no file
 * system can mask it.  A sandbox's supervisor answers it through the seccomp listener,
 * but a pool's parent reads the listener only while it waits for a call, and a worker
 * whose call it is not waiting for would hang there.  So the worker's filter traps it
 * (kc_seccomp_prog_compile_worker) and the SIGSYS handler answers here, in the worker:
 * a trapped call never reaches the kernel, so a program that replaces the handler
 * learns nothing of the host either, it only loses the answer. */
#include <errno.h>
#include <linux/audit.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "kcage/sandbox_parts.h"
#include "worker_internal.h"

static unsigned long g_totalram;
static unsigned g_mem_unit;

void kc_runtime_sysinfo_prepare(void) {
  struct sysinfo host;
  if (sysinfo(&host) == 0) {
    g_totalram = host.totalram;
    g_mem_unit = host.mem_unit;
  }
}

/* Whether the caller may write len bytes at dst, asked of the kernel: it writes a
 * timespec and fails with EFAULT, raising no signal, where it may not (as the kernel's
 * own sysinfo fails).  Write permission is per page and len is under a page, so the
 * buffer lies on at most two pages and a probe at each end covers both.  The end goes
 * first, so that a buffer running into a page it may not write is left as it was.  The
 * answer written next overwrites the probes' bytes. */
_Static_assert(sizeof(struct sysinfo) >= sizeof(struct timespec) && sizeof(struct sysinfo) < 4096,
               "sysinfo's buffer: longer than a probe, shorter than a page");
static bool writable(char *dst, size_t len) {
  return syscall(SYS_clock_gettime, CLOCK_BOOTTIME, dst + len - sizeof(struct timespec)) == 0 &&
         syscall(SYS_clock_gettime, CLOCK_BOOTTIME, dst) == 0;
}

bool kc_runtime_answer_sysinfo(const siginfo_t *si, void *uc) {
  ucontext_t *u = uc;
#if defined(__x86_64__)
  if (si->si_syscall != SYS_sysinfo || si->si_arch != AUDIT_ARCH_X86_64)
    return false;
  greg_t *ret = &u->uc_mcontext.gregs[REG_RAX];
  char *dst = (char *)u->uc_mcontext.gregs[REG_RDI];
#elif defined(__aarch64__)
  if (si->si_syscall != SYS_sysinfo || si->si_arch != AUDIT_ARCH_AARCH64)
    return false;
  __u64 *ret = &u->uc_mcontext.regs[0];
  char *dst = (char *)u->uc_mcontext.regs[0];
#else
  (void)si;
  (void)u;
  return false;
#endif
#if defined(__x86_64__) || defined(__aarch64__)
  int saved = errno;
  struct timespec up = {0};
  clock_gettime(CLOCK_BOOTTIME, &up); /* the pool's own (kc_sandbox_time_view) */
  struct sysinfo s;
  kc_sandbox_sysinfo_answer(&s, g_totalram, g_mem_unit, (double)up.tv_sec);
  if (writable(dst, sizeof s)) {
    memcpy(dst, &s, sizeof s);
    *ret = 0;
  } else {
    *ret = (typeof(*ret))-EFAULT;
  }
  errno = saved;
  return true;
#endif
}
