/* The one verdict decider: what the parent observed of a sandboxed process's end, in
 * one priority for every caller (kcage run, pool workers, the measure runner), so the
 * same end gets the same status wherever it happens. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "kcage/sandbox_parts.h"
#include "signame.h"

static void human_size(uint64_t b, char *buf, size_t len) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0)
    snprintf(buf, len, "%llu GiB", (unsigned long long)(b >> 30));
  else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
    snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
  else
    snprintf(buf, len, "%llu bytes", (unsigned long long)b);
}

/* The limits first (a limit is why the program failed, whatever signal ended it), then
 * what the parent killed it for, then the program's own end. */
static kc_status decide(const kc_verdict_facts *f, bool cpu_hit) {
  if (f->oom)
    return KC_STATUS_MEMORY;
  /* a fork or thread of the tree was refused, even if the program coped and exited 0
   * (as an OOM-killed child is memory) */
  if (f->pids_hit)
    return KC_STATUS_PIDS;
  if (f->killed == KC_KILLED_SYSCALL)
    return KC_STATUS_SYSCALL;
  if (cpu_hit)
    return KC_STATUS_TIMEOUT;
  if (f->killed == KC_KILLED_WALL)
    return KC_STATUS_TIMEOUT;
  if (f->killed == KC_KILLED_CANCEL)
    return KC_STATUS_SIGNALED;
  if (f->killed == KC_KILLED_OUTPUT)
    return KC_STATUS_OUTPUT;
  if (f->signal == SIGSYS) /* a filter's own kill: no notification named it */
    return KC_STATUS_SYSCALL;
  if (f->signal)
    return KC_STATUS_SIGNALED;
  return f->exit_code == 0 ? KC_STATUS_OK : KC_STATUS_EXITED;
}

static void describe(const kc_verdict_facts *f, kc_result *res) {
  char sz[48];
  const kc_limits *l = f->lim;
  char *m = res->message;
  size_t n = sizeof res->message;
  switch (res->status) {
  case KC_STATUS_MEMORY:
    if (f->memory_detail) {
      snprintf(m, n, "%s", f->memory_detail);
    } else {
      human_size(l ? l->memory_bytes : 0, sz, sizeof sz);
      snprintf(m, n, "memory limit of %s exceeded (OOM kill)", sz);
    }
    return;
  case KC_STATUS_PIDS:
    snprintf(m, n, "process limit of %u reached", l ? l->pids : 0);
    return;
  case KC_STATUS_SYSCALL:
    if (res->syscall[0])
      snprintf(m, n, "forbidden system call %s", res->syscall);
    else
      snprintf(m, n, "killed by SIGSYS (a forbidden system call)");
    return;
  case KC_STATUS_TIMEOUT:
    if (!strcmp(res->limit, "cpu"))
      snprintf(m, n, "CPU time limit of %g s exceeded", l ? l->cpu_s : 0);
    else
      snprintf(m, n, "wall-clock limit of %g s exceeded", l ? l->wall_s : 0);
    return;
  case KC_STATUS_OUTPUT:
    human_size(l ? l->output_bytes : 0, sz, sizeof sz);
    snprintf(m, n, "output limit of %s exceeded", sz);
    return;
  case KC_STATUS_SIGNALED:
    if (f->killed == KC_KILLED_CANCEL) {
      snprintf(m, n, "killed by kcage: the run was cancelled");
    } else {
      snprintf(m, n, "killed by signal %d (%s)", res->signal, kc_signal_name(res->signal));
    }
    return;
  case KC_STATUS_OK:
    snprintf(m, n, "exited normally");
    return;
  default:
    snprintf(m, n, "exited with status %d", res->exit_code);
    return;
  }
}

void kc_verdict_decide(const kc_verdict_facts *f, kc_result *res) {
  res->exit_code = f->signal ? -1 : f->exit_code;
  res->signal = f->signal;
  const kc_limits *l = f->lim;
  /* RLIMIT_CPU is the backstop behind the parent's polling: its SIGXCPU, or a SIGKILL
   * past the limit, is the CPU limit too */
  bool cpu_hit = f->killed == KC_KILLED_CPU ||
                 (l && l->cpu_s > 0 &&
                  (f->signal == SIGXCPU || (f->signal == SIGKILL && res->cpu_s >= l->cpu_s)));
  res->status = decide(f, cpu_hit);
  res->syscall[0] = '\0';
  if (res->status == KC_STATUS_SYSCALL && f->syscall)
    snprintf(res->syscall, sizeof res->syscall, "%s", f->syscall);
  res->limit = NULL;
  if (res->status == KC_STATUS_TIMEOUT)
    res->limit = cpu_hit ? "cpu" : "wall";
  if (f->killed == KC_KILLED_CANCEL) {
    res->exit_code = -1;
    res->signal = SIGKILL;
  }
  describe(f, res);
}
