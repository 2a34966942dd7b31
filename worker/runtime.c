/* Inside a worker: lockdown, then serve requests from the submission ring until the
 * parent kills us.  Nothing here trusts the handler: it runs on our stack, but its
 * result goes straight into the completion slot with a length we bound. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "kcage/policy.h"
#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "worker_internal.h"

static kc_ring g_ring;
static const kc_policy *g_pol; /* the worker's base policy; NULL = no filter */
static uint64_t g_spin_once;   /* kc_runtime_spin_next: the next wait only */

void kc_runtime_spin_next(uint64_t ns) {
  g_spin_once = ns;
}

static void sigsys_handler(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (g_ring.ctl)
    atomic_store(&g_ring.ctl->trapped_syscall, (uint32_t)si->si_syscall);
  signal(sig, SIG_DFL);
  /* We may be pid 1 of our namespace, where a self-sent signal is ignored: SIGKILL from
   * the kernel via exit_group is the reliable end.  Exit code 159 = 128+SIGSYS marks it. */
  syscall(SYS_exit_group, 128 + SIGSYS);
}

/* The seal stacks a second filter, and seccomp runs the strictest action of all of a
 * process's filters (KILL > TRAP > ERRNO > USER_NOTIF > ALLOW).  A seal rule that also
 * covers a call the base policy already sends to the listener would turn a violation
 * the parent names from the kernel's report into a SIGSYS of ours - and glibc blocks
 * signals while it creates a thread, so the kernel then kills us with no handler run
 * and no name at all.  So the seal covers only what the base policy lets through:
 * under `measure` that is a file-backed PROT_EXEC mmap (the ring's memfd mapped
 * executable, say); clone/clone3/fork/vfork/exec*, mprotect(PROT_EXEC), anonymous
 * executable memory and the rest stay violations of the base filter, named by the
 * parent through the listener, which the program cannot fake.
 *
 * The seal's own action stays TRAP (it cannot notify: a second listener is refused,
 * EBUSY, and a USER_NOTIF of a filter without one fails with ENOSYS): the handler
 * stores the number in the ring and exits 159; the parent prints that name as the
 * worker's word.  With no base policy (no filter) the seal covers everything, as a TRAP
 * too. */
static bool base_always_reports(int nr) {
  return g_pol && kc_policy_always_reports(g_pol, nr);
}

static bool base_reports(int nr, uint64_t a2, uint64_t a3) {
  const uint64_t args[6] = {0, 0, a2, a3, 0, 0};
  return g_pol && kc_policy_reports_syscall(g_pol, nr, args);
}

/* glibc's pthread_create clone flags: what measure-threads lets through. */
#define KC_THREAD_CLONE_FLAGS                                                                      \
  (CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |              \
   CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID)

bool kc_runtime_threads_allowed(void) {
  const uint64_t args[6] = {KC_THREAD_CLONE_FLAGS, 0, 0, 0, 0, 0};
  return !g_pol || !kc_policy_reports_syscall(g_pol, SCMP_SYS(clone), args);
}

/* Every thread of the process (TSYNC), so that a pool thread running the kernel's code
 * is held by the same rules as the thread that loaded it. */
static int load_on_all_threads(scmp_filter_ctx ctx) {
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
  if (!rc)
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
  if (!rc)
    rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc) {
    errno = rc < 0 ? -rc : EINVAL;
    return -1;
  }
  return 0;
}

static int answer_sigsys(void) {
  struct sigaction sa = {.sa_sigaction = sigsys_handler, .sa_flags = SA_SIGINFO};
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGSYS, &sa, NULL);
}

/* An empty filter to add traps to, with SIGSYS answered by sigsys_handler; NULL and
 * errno when either cannot be had. */
static scmp_filter_ctx trap_filter(void) {
  if (answer_sigsys() < 0)
    return NULL;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx)
    errno = ENOMEM;
  return ctx;
}

/* No thread or process after this: clone, clone3, fork and vfork trap (those the base
 * policy already reports stay the listener's, see above). */
int kc_runtime_seal_threads(void) {
  scmp_filter_ctx ctx = trap_filter();
  if (!ctx)
    return -1;
  const int nrs[] = {SCMP_SYS(clone), SCMP_SYS(clone3), SCMP_SYS(fork), SCMP_SYS(vfork)};
  int rc = 0;
  for (size_t i = 0; i < sizeof nrs / sizeof nrs[0] && !rc; i++)
    if (!base_always_reports(nrs[i]))
      rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, nrs[i], 0);
  if (rc) {
    seccomp_release(ctx);
    errno = -rc;
    return -1;
  }
  return load_on_all_threads(ctx);
}

int kc_runtime_seal_exec(void) {
  scmp_filter_ctx ctx = trap_filter();
  if (!ctx)
    return -1;
  /* no_new_privs is already set by the worker's lockdown, and `measure` forbids the
   * prctl that libseccomp would make to set it again (load_on_all_threads) */
  int rc = 0;
  const int plain[] = {
      SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(fork),   SCMP_SYS(vfork),
      SCMP_SYS(clone),  SCMP_SYS(clone3),   SCMP_SYS(ptrace), SCMP_SYS(process_vm_writev)};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0] && !rc; i++)
    if (!base_always_reports(plain[i]))
      rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, plain[i], 0);
  /* PROT_EXEC mappings: the base policy may report some (measure: anonymous ones) and
   * allow others (file-backed); probe it with a representative call of each kind. */
  const uint64_t rx = PROT_READ | PROT_EXEC;
  bool anon = base_reports(SCMP_SYS(mmap), rx, MAP_PRIVATE | MAP_ANONYMOUS);
  bool file = base_reports(SCMP_SYS(mmap), rx, MAP_PRIVATE);
  if (!rc && !file && anon)
    rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(mmap), 2,
                          SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC),
                          SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS, 0));
  else if (!rc && !file)
    rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(mmap), 1,
                          SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  else if (!rc && !anon)
    rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(mmap), 2,
                          SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC),
                          SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS, MAP_ANONYMOUS));
  const int prot[] = {SCMP_SYS(mprotect), SCMP_SYS(pkey_mprotect)};
  for (size_t i = 0; i < 2 && !rc; i++)
    if (!base_reports(prot[i], rx, 0))
      rc = seccomp_rule_add(ctx, SCMP_ACT_TRAP, prot[i], 1,
                            SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  if (rc) {
    seccomp_release(ctx);
    errno = -rc;
    return -1;
  }
  return load_on_all_threads(ctx);
}

static void send_ready(int sock, int status, const char *msg) {
  kc_worker_ready r = {.magic = KC_ZYGOTE_MAGIC, .status = status};
  /* a longer message is cut: the ready record has a fixed size */
  size_t n = msg ? strnlen(msg, sizeof r.msg - 1) : 0;
  memcpy(r.msg, msg ? msg : "", n);
  r.msg[n] = '\0';
  kc_send_fds(sock, &r, sizeof r, NULL, 0);
}

/* The sandbox layer's one lockdown (rlimits, capabilities, no_new_privs, not
 * dumpable: the pool's workers share a uid, so no ptrace or /proc/PID access between
 * them), then the filter last.  Success is the one message the policy layer's hand-off
 * sends ('L' + listener, or 'N'), so a spawn costs the parent one wake-up; we keep no
 * copy of the listener.  Nothing user-controlled has run yet. */
static int lockdown(const kc_worker_boot *b, kc_error *err) {
  if (b->prog || !b->pol)
    return kc_sandbox_lockdown_prog(b->pol, 0, b->prog, b->sock, err);
  int listener = -1;
  return kc_sandbox_lockdown(b->pol, 0, b->sock, &listener, err);
}

static kc_spin g_spin;
static uint64_t g_head;          /* the call being served */
static int64_t g_clock_shift_ns; /* kc_worker_boot's */

void kc_runtime_task_began(void) {
  if (!g_ring.ctl)
    return;
  /* in the parent's clock: ours may start at the pool's start (a time namespace) */
  atomic_store_explicit(&g_ring.ctl->began_ns, kc_now_ns() + (uint64_t)g_clock_shift_ns,
                        memory_order_relaxed);
  atomic_store_explicit(&g_ring.ctl->began_seq, g_head + 1, memory_order_release);
}

int kc_runtime_host_pid(void) {
  return g_ring.ctl ? atomic_load_explicit(&g_ring.ctl->host_pid, memory_order_acquire) : 0;
}

static void wait_for_request(kc_ring_ctl *c, uint64_t head) {
  if (atomic_load_explicit(&c->sq_tail, memory_order_acquire) > head)
    return;
  kc_spinner sp;
  uint64_t limit = atomic_load_explicit(&c->worker_spin_ns, memory_order_relaxed);
  kc_spin_begin(&sp, &g_spin, limit, limit ? g_spin_once : 0);
  g_spin_once = 0;
  for (;;) {
    if (atomic_load_explicit(&c->sq_tail, memory_order_acquire) > head) {
      kc_spin_end(&sp, true);
      return;
    }
    if (!kc_spin_step(&sp, &c->worker_cpu, &c->parent_cpu, UINT64_MAX))
      break;
  }
  kc_spin_end(&sp, false);
  for (;;) {
    atomic_store_explicit(&c->sq_waiters, 1, memory_order_seq_cst);
    uint32_t key = atomic_load_explicit(&c->sq_epoch, memory_order_seq_cst);
    if (atomic_load_explicit(&c->sq_tail, memory_order_seq_cst) > head)
      break;
    kc_futex_wait(&c->sq_epoch, key, -1);
    if (atomic_load_explicit(&c->sq_tail, memory_order_acquire) > head)
      break;
  }
  atomic_store_explicit(&c->sq_waiters, 0, memory_order_relaxed);
  /* where the wake put us: the parent's next wait reads it */
  kc_ring_share_cpu(&c->worker_cpu, &c->parent_cpu);
}

static void post_completion(kc_ring *r, int evfd, uint64_t seq, uint32_t status, size_t len) {
  uint8_t *slot = r->base + r->cq_off + (seq & r->mask) * r->cq_slot_size;
  kc_cqe h = {.seq = seq, .generation = r->generation, .status = status, .len = len};
  memcpy(slot, &h, sizeof h);
  atomic_store_explicit(&r->ctl->cq_tail, seq + 1, memory_order_seq_cst);
  uint32_t waiter = atomic_load_explicit(&r->ctl->cq_waiters, memory_order_seq_cst);
  if (waiter == KC_CQ_NAP) {
    atomic_fetch_add_explicit(&r->ctl->cq_epoch, 1, memory_order_seq_cst);
    kc_futex_wake(&r->ctl->cq_epoch, 1);
  } else if (waiter != KC_CQ_AWAKE) {
    uint64_t one = 1;
    ssize_t w = write(evfd, &one, sizeof one);
    (void)w;
  }
}

/* Small cache so a hot handler name costs one memcmp. */
typedef struct handler_cache {
  char name[KC_RING_FN_MAX + 1];
  size_t len;
  kc_handler_fn fn;
} handler_cache;

/* The handler named fn (len bytes), from the cache or resolved and cached; NULL with
 * error set when there is none. */
static kc_handler_fn lookup_handler(handler_cache *cache, size_t *ncache, const char *fn,
                                    size_t len, char *error, size_t cap) {
  for (size_t i = 0; i < *ncache; i++)
    if (cache[i].len == len && !memcmp(cache[i].name, fn, len))
      return cache[i].fn;
  kc_handler_fn f = kc_handlers_resolve(fn, len, error, cap);
  if (f) {
    handler_cache *e = &cache[*ncache < 16 ? (*ncache)++ : 15];
    memcpy(e->name, fn, len);
    e->len = len;
    e->fn = f;
  }
  return f;
}

/* A call that gave no result: its error text in the result slot out. */
static void post_exception(kc_ring *r, int evfd, uint64_t head, uint8_t *out, const char *error) {
  size_t n = strnlen(error, KC_RING_MSG_MAX);
  memmove(out, error, n);
  post_completion(r, evfd, head, KC_CQE_EXCEPTION, n);
}

/* Attached to the ring and locked down, with the parent told so; exits when it cannot. */
static void start_runtime(const kc_worker_boot *b) {
  kc_error err = {0};
  g_clock_shift_ns = b->clock_shift_ns;
  int attached = kc_ring_attach(&g_ring, b->memfd, &err);
  if (attached == 0)
    kc_ring_arm_death_notice(&g_ring);
  if (attached < 0 || lockdown(b, &err) < 0) {
    send_ready(b->sock, err.code ? err.code : EINVAL, err.msg);
    _exit(125);
  }
  if (!b->prog && !b->pol) {
    char byte = 'N';
    if (write(b->sock, &byte, 1) != 1)
      _exit(125);
  }
  /* kept: the parent passes this worker what it serves (a session's socket) later */
  if (!(b->flags & KC_ZF_KEEP_SOCK))
    close(b->sock);
  g_pol = b->pol;
}

__attribute__((noreturn)) void kc_runtime_run(const kc_worker_boot *b) {
  start_runtime(b);
  kc_ring *r = &g_ring;
  char *arg = malloc(r->max_arg ? r->max_arg : 1);
  char error[KC_RING_MSG_MAX + 1];
  handler_cache cache[16];
  size_t ncache = 0;
  uint64_t head = 0;
  uint32_t uses = 0;
  if (!arg)
    _exit(125);
  for (;; head++) {
    wait_for_request(r->ctl, head);
    uint8_t *slot = r->base + r->sq_off + (head & r->mask) * r->sq_slot_size;
    kc_sqe h;
    memcpy(&h, slot, sizeof h);
    if (h.seq != head || h.fn_len > KC_RING_FN_MAX || h.arg_len > r->max_arg)
      _exit(125); /* the parent is trusted: a broken request means memory corruption */
    const char *fn = (const char *)slot + sizeof h;
    memcpy(arg, slot + sizeof h + h.fn_len, h.arg_len);
    atomic_store_explicit(&r->ctl->sq_head, head + 1, memory_order_relaxed);
    g_head = head;

    error[0] = 0;
    kc_handler_fn f = lookup_handler(cache, &ncache, fn, h.fn_len, error, sizeof error);
    uint8_t *out = r->base + r->cq_off + (head & r->mask) * r->cq_slot_size + sizeof(kc_cqe);
    if (!f) {
      post_exception(r, b->evfd, head, out, error);
      continue;
    }
    kc_call call = {.arg = arg,
                    .arg_len = h.arg_len,
                    .out = out,
                    .out_cap = r->max_result,
                    .error = error,
                    .error_cap = sizeof error,
                    .seq = head,
                    .generation = r->generation,
                    .uses = uses};
    int rc = f(&call);
    uses++;
    if (rc == 0 && call.out_len <= r->max_result) {
      post_completion(r, b->evfd, head, KC_CQE_COMPLETE, call.out_len);
      continue;
    }
    error[sizeof error - 1] = 0;
    if (rc == 0)
      snprintf(error, sizeof error, "handler result of %zu bytes over the limit of %u",
               call.out_len, r->max_result);
    else if (!error[0])
      snprintf(error, sizeof error, "handler returned %d", rc);
    post_exception(r, b->evfd, head, out, error);
  }
}
