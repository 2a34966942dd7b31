/* The in-worker half of `kcage bench`: load one kernel, map the inputs read-only, then
 * run `number` calls per request with outputs poisoned before each call.  Nothing here
 * reads a clock: the parent times each request from outside (docs/contracts.md). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/worker.h"

#include "measure_internal.h"
#include "measure_kernel.h"
#include "tvmffi.h"

typedef int (*kc_kernel_fn)(DLTensor *args, int32_t num_args);

struct kc_mstate {
  kc_args_spec spec;
  uint32_t n_sets;
  uint64_t in_region, out_region;
  unsigned char *in; /* n_sets * in_region, PROT_READ, shared file mapping */
  size_t in_len;
  unsigned char *out; /* n_sets * out_region, private: runs without the area only,
                         mapped by the first of them */
  size_t out_len;
  /* Every call gets the same `args` array and the same shapes, at the same place,
   * rewritten before the call: where its arguments lie names no set and no call (only
   * the data pointers differ, and the slot they name holds other data in every piece). */
  DLTensor *pristine;  /* n_sets * n: each set's tensors */
  DLTensor *live;      /* n: what the kernel gets */
  int64_t *shapes;     /* n * KC_ARGS_MAX_NDIM */
  unsigned char *area; /* PREPARE: one output region per call of a round */
  size_t area_len;
  uint64_t area_calls;
  void *dl;
  kc_kernel_abi abi;
  kc_kernel_fn fn;     /* dlpack */
  kc_tvmffi_fn ffi_fn; /* tvm-ffi */
  kc_tvmffi_any ffi_args[KC_ARGS_MAX_TENSORS];
};

/* Set by the plain-process runner, in the forked child that runs kernels unsandboxed:
 * seal with our own filter (the pool's worker runtime is not around to report
 * violations).  Each such child is its own process; nothing here is shared. */
static bool kc_mhandler_plain;
static int kc_mhandler_report_fd = -1;
static uint64_t kc_mhandler_as_limit;

void kc_mhandler_become_plain(int report_fd, uint64_t as_limit) {
  kc_mhandler_plain = true;
  kc_mhandler_report_fd = report_fd;
  kc_mhandler_as_limit = as_limit;
}

static void errf(char *buf, size_t cap, const char *fmt, ...) {
  if (!buf || !cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
}

/* ---- faults: a write into a read-only input is a cheat, named as such ---------- */
static sigjmp_buf fault_env;
static volatile sig_atomic_t fault_armed;
static unsigned char *fault_lo, *fault_hi;
static volatile uintptr_t fault_addr;

static uint64_t as_base; /* address space in use once the kernel was loaded */

/* Async-signal-safe: plain syscalls and digits. */
static uint64_t vm_size(void) {
  char buf[64];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0)
    close(fd);
  uint64_t pages = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
    pages = pages * 10 + (uint64_t)(buf[i] - '0');
  return pages * 4096u;
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  unsigned char *a = si->si_addr;
  /* only on the thread that armed it: a pool thread cannot jump onto its stack (the
   * fault then ends the worker, a crash) */
  if (fault_armed && a >= fault_lo && a < fault_hi && gettid() == getpid()) {
    fault_armed = 0;
    fault_addr = (uintptr_t)a;
    siglongjmp(fault_env, 1);
  }
  /* Plain runner only (no cgroup to name an OOM): a fault with the address space
   * more than half used is taken as a kernel that ran out of memory (a large malloc
   * returned NULL and was used).  A heuristic: the pool's workers get the cgroup's word. */
  if (kc_mhandler_plain && kc_mhandler_report_fd >= 0 && kc_mhandler_as_limit) {
    uint64_t used = vm_size();
    if (used > as_base && used - as_base > (kc_mhandler_as_limit - as_base) / 2) {
      uint32_t frame[3] = {8, 3, 0};
      ssize_t w = write(kc_mhandler_report_fd, frame, sizeof frame);
      (void)w;
      _exit(128 + sig);
    }
  }
  signal(sig, SIG_DFL); /* anything else: die of it, the parent names the signal */
}

static void on_sigsys(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  /* Plain runner only: tell the parent which syscall, then die.  A kernel could write
   * the same frame itself; it would only get its own kernel marked `syscall`. */
  if (kc_mhandler_report_fd >= 0) {
    uint32_t frame[3] = {8, 2, (uint32_t)si->si_syscall};
    ssize_t w = write(kc_mhandler_report_fd, frame, sizeof frame);
    (void)w;
  }
  _exit(128 + SIGSYS);
}

static int install_fault_handlers(void) {
  static char altstack[64 * 1024];
  stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
  sigaltstack(&ss, NULL);
  struct sigaction sa = {0};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, NULL) < 0 || sigaction(SIGBUS, &sa, NULL) < 0)
    return -1;
  if (kc_mhandler_plain) {
    sa.sa_sigaction = on_sigsys;
    sigaction(SIGSYS, &sa, NULL);
  }
  return 0;
}

/* ---- the plain runner's own lockdown (the pool's workers use the measure policy and
 * kc_runtime_seal_exec instead) -------------------------------------------------- */
static int seal_plain(bool after_load) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx)
    return -1;
  int rc = 0;
  if (!after_load) {
    static const char *const forbidden[] = {"fork",
                                            "vfork",
                                            "clone",
                                            "clone3",
                                            "execve",
                                            "execveat",
                                            "socket",
                                            "socketpair",
                                            "connect",
                                            "bind",
                                            "listen",
                                            "accept",
                                            "accept4",
                                            "ptrace",
                                            "process_vm_writev",
                                            "process_vm_readv",
                                            "setsid",
                                            "unshare",
                                            "setns",
                                            "io_uring_setup"};
    for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++) {
      int nr = seccomp_syscall_resolve_name(forbidden[i]);
      if (nr != __NR_SCMP_ERROR)
        rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, nr, 0);
    }
    /* Signals only to itself. */
    rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(kill), 1,
                           SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)getpid()));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(tgkill), 1,
                           SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)getpid()));
  } else {
    rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(mmap), 1,
                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(mprotect), 1,
                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
    rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(pkey_mprotect), 1,
                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
    /* The SIGSYS handler must stay ours. */
    rc |= seccomp_rule_add(ctx, SCMP_ACT_TRAP, SCMP_SYS(rt_sigaction), 1,
                           SCMP_A0(SCMP_CMP_EQ, SIGSYS));
  }
  if (rc == 0)
    rc = seccomp_load(ctx);
  seccomp_release(ctx);
  return rc ? -1 : 0;
}

/* Pages populated now, so that no input faults inside a round.  Shared + read-only
 * descriptor: mprotect can never make it writable. */
static int map_file(kc_mstate *s, int fd) {
  unsigned char *base = mmap(NULL, s->in_len ? s->in_len : 1, PROT_READ,
                             s->in_len ? MAP_SHARED | MAP_POPULATE : MAP_PRIVATE | MAP_ANONYMOUS,
                             s->in_len ? fd : -1, 0);
  if (base == MAP_FAILED)
    return -1;
  s->in = base;
  return 0;
}

void kc_mstate_free(kc_mstate *s) {
  if (!s)
    return;
  fault_armed = 0;
  /* The kernel's library stays loaded: its destructors are untrusted code too. */
  if (s->in)
    munmap(s->in, s->in_len ? s->in_len : 1);
  if (s->out)
    munmap(s->out, s->out_len);
  if (s->area)
    munmap(s->area, s->area_len);
  free(s->pristine);
  free(s->live);
  free(s->shapes);
  free(s);
}

/* Every page of the inputs present before the first call: a page fault inside a timed
 * call would be timed.  (The parent rewrites the inputs through its own mapping of the
 * same file, so these pages stay mapped; the output area is faulted in by PREPARE.) */
static void prefault_inputs(kc_mstate *s) {
  volatile unsigned char sink = 0;
  for (size_t i = 0; i < s->in_len; i += 4096)
    sink ^= s->in[i];
  (void)sink;
}

/* The inputs file, checked for its size and mapped read-only. */
static int map_inputs(kc_mstate *s, const char *inputs, char *errbuf, size_t errcap) {
  int fd = open(inputs, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errf(errbuf, errcap, "error: open inputs %s: %s", inputs, strerror(errno));
    return -1;
  }
  struct stat st;
  s->in_len = (size_t)(s->in_region * s->n_sets);
  if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != s->in_len) {
    close(fd);
    errf(errbuf, errcap, "error: inputs file has the wrong size");
    return -1;
  }
  /* Shared + read-only descriptor: mprotect can never make it writable. */
  if (map_file(s, fd) < 0) {
    close(fd);
    errf(errbuf, errcap, "error: map inputs: %s", strerror(errno));
    return -1;
  }
  close(fd);
  return 0;
}

/* The DLTensors of every input set, pristine copies of what each call gets. */
static int make_tensors(kc_mstate *s, char *errbuf, size_t errcap) {
  uint32_t n = s->spec.n, n_sets = s->n_sets;
  s->pristine = calloc((size_t)n_sets * n, sizeof(DLTensor));
  s->live = calloc(n ? n : 1, sizeof(DLTensor));
  s->shapes = calloc((size_t)(n ? n : 1) * KC_ARGS_MAX_NDIM, sizeof(int64_t));
  if (!s->pristine || !s->live || !s->shapes) {
    errf(errbuf, errcap, "error: out of memory");
    return -1;
  }
  for (uint32_t k = 0; k < n_sets; k++)
    for (uint32_t i = 0; i < n; i++) {
      const kc_tensor_spec *t = &s->spec.t[i];
      DLTensor *d = &s->pristine[k * n + i];
      int64_t *shape = &s->shapes[(size_t)i * KC_ARGS_MAX_NDIM];
      /* an output's data is set per call: its region in the area, or in out */
      d->data = t->out ? NULL : s->in + k * s->in_region + kc_args_offset(&s->spec, i);
      d->device = (DLDevice){kDLCPU, 0};
      d->ndim = t->ndim;
      d->dtype = t->dtype;
      d->shape = shape;
      d->strides = NULL;
      d->byte_offset = 0;
    }
  return 0;
}

/* The entry point, as the ABI names it; 0, or -1 with errbuf. */
static int resolve_entry(kc_mstate *s, const char *entry, char *errbuf, size_t errcap) {
  if (s->abi == KC_ABI_DLPACK) {
    s->fn = (kc_kernel_fn)(uintptr_t)dlsym(s->dl, entry);
    if (!s->fn) {
      errf(errbuf, errcap, "error: the kernel has no symbol '%s' (the entry point; see --entry)",
           entry);
      return -1;
    }
    return 0;
  }
  if (s->abi != KC_ABI_TVM_FFI) {
    errf(errbuf, errcap, "error: unknown kernel ABI %d", (int)s->abi);
    return -1;
  }
  char sym[256];
  if (snprintf(sym, sizeof sym, KC_TVMFFI_SYMBOL_PREFIX "%s", entry) >= (int)sizeof sym) {
    errf(errbuf, errcap, "error: --entry is too long");
    return -1;
  }
  s->ffi_fn = (kc_tvmffi_fn)(uintptr_t)dlsym(s->dl, sym);
  if (!s->ffi_fn) {
    errf(errbuf, errcap,
         "error: the module has no TVM-FFI function '%s' (no symbol '%s'; see --entry)", entry,
         sym);
    return -1;
  }
  return kc_tvmffi_bind(s->dl, errbuf, errcap);
}

/* A sealed worker whose policy lets a thread clone through (measure-threads): a
 * TVM-FFI module's pool, one thread per CPU the sandbox has (TVM's runtime sizes its
 * own the same way), started now, before the kernel exists; then no more threads, for
 * any ABI, before the kernel's first instruction (its constructors included). */
static int start_pool_then_seal(const kc_mstate *s, char *errbuf, size_t errcap) {
  if (!kc_runtime_threads_allowed())
    return 0;
  cpu_set_t cpus;
  if (s->abi == KC_ABI_TVM_FFI && sched_getaffinity(0, sizeof cpus, &cpus) == 0 &&
      kc_tvmffi_pool_start(CPU_COUNT(&cpus)) < 0) {
    errf(errbuf, errcap, "error: cannot start the worker's %d threads", CPU_COUNT(&cpus));
    return -1;
  }
  if (kc_runtime_seal_threads() < 0) {
    errf(errbuf, errcap, "error: cannot seal the worker's threads: %s", strerror(errno));
    return -1;
  }
  return 0;
}

/* The kernel loaded and its entry found, between the two halves of the seal when
 * seal: the plain child's filter (or the worker's thread seal) before any of the
 * kernel's code runs, the worker's seal after. */
static int load_kernel(kc_mstate *s, const char *artifact, const char *entry, bool seal,
                       char *errbuf, size_t errcap) {
  if (seal && kc_mhandler_plain && seal_plain(false) < 0) {
    errf(errbuf, errcap, "error: cannot install the seccomp filter");
    return -1;
  }
  if (seal && !kc_mhandler_plain && start_pool_then_seal(s, errbuf, errcap) < 0)
    return -1;
  s->dl = dlopen(artifact, RTLD_NOW | RTLD_LOCAL);
  if (!s->dl) {
    const char *e = dlerror();
    errf(errbuf, errcap, "error: cannot load the kernel: %s", e ? e : "?");
    return -1;
  }
  if (resolve_entry(s, entry, errbuf, errcap) < 0)
    return -1;
  as_base = vm_size();
  if (as_base > kc_mhandler_as_limit)
    as_base = kc_mhandler_as_limit;
  if (seal && (kc_mhandler_plain ? seal_plain(true) : kc_runtime_seal_exec()) < 0) {
    errf(errbuf, errcap, "error: cannot seal the worker: %s", strerror(errno));
    return -1;
  }
  return 0;
}

int kc_mstate_load(kc_mstate **out, const char *artifact, kc_kernel_abi abi, const char *entry,
                   const char *inputs, const char *args, uint32_t n_sets, bool seal, char *errbuf,
                   size_t errcap) {
  *out = NULL;
  kc_mstate *s = calloc(1, sizeof *s);
  if (!s) {
    errf(errbuf, errcap, "error: out of memory");
    return -1;
  }
  kc_error err;
  s->abi = abi;
  if (kc_args_parse(args, &s->spec, &err) < 0) {
    errf(errbuf, errcap, "error: --args: %s", err.msg);
    goto fail;
  }
  if (n_sets == 0 || n_sets > KC_MPROTO_MAX_SETS) {
    errf(errbuf, errcap, "error: bad number of input sets %u", n_sets);
    goto fail;
  }
  s->n_sets = n_sets;
  s->in_region = kc_args_region_bytes(&s->spec, false);
  s->out_region = kc_args_region_bytes(&s->spec, true);
  if (map_inputs(s, inputs, errbuf, errcap) < 0 || make_tensors(s, errbuf, errcap) < 0)
    goto fail;
  prefault_inputs(s);
  install_fault_handlers();
  if (load_kernel(s, artifact, entry, seal, errbuf, errcap) < 0)
    goto fail;
  *out = s;
  return 0;
fail:
  kc_mstate_free(s);
  return -1;
}

/* The read-only-input fault, as the kernel's status.  Called after siglongjmp. */
static void input_fault_message(kc_mstate *s, char *errbuf, size_t errcap) {
  uint64_t off = (uint64_t)(fault_addr - (uintptr_t)s->in) % s->in_region;
  int which = -1;
  for (uint32_t i = 0; i < s->spec.n; i++)
    if (!s->spec.t[i].out && off >= kc_args_offset(&s->spec, i) &&
        off < kc_args_offset(&s->spec, i) + s->spec.t[i].nbytes)
      which = (int)i;
  errf(errbuf, errcap, "suspicious: the kernel wrote to its read-only input tensor %d", which);
}

/* One call of the kernel with these tensors: its return value, and (non-zero) what it
 * said in errbuf.  A TVM-FFI call gets every tensor as a DLTensor pointer, the argument
 * array rebuilt each call (the callee could have written it) and an empty result. */
static int call_kernel(kc_mstate *s, DLTensor *args, char *errbuf, size_t errcap) {
  uint32_t n = s->spec.n;
  int rc;
  if (s->abi == KC_ABI_DLPACK) {
    rc = s->fn(args, (int32_t)n);
    if (rc != 0)
      errf(errbuf, errcap, "error: the kernel returned %d", rc);
    return rc;
  }
  for (uint32_t t = 0; t < n; t++)
    s->ffi_args[t] = (kc_tvmffi_any){.type_index = KC_TVMFFI_DLTENSOR_PTR, .v_ptr = &args[t]};
  kc_tvmffi_any result = {.type_index = KC_TVMFFI_NONE};
  rc = s->ffi_fn(NULL, s->ffi_args, (int32_t)n, &result);
  if (rc != 0) {
    const char *why = kc_tvmffi_take_error();
    errf(errbuf, errcap, "error: the kernel returned %d%s%s", rc, *why ? ": " : "", why);
  }
  return rc;
}

/* The per-set output regions of runs without the area (the timed rounds never use
 * them: a problem whose outputs fill the memory limit is not mapped twice). */
static int map_out(kc_mstate *s, char *errbuf, size_t errcap) {
  s->out_len = (size_t)(s->out_region * s->n_sets);
  s->out = mmap(NULL, s->out_len ? s->out_len : 1, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s->out == MAP_FAILED) {
    s->out = NULL;
    s->out_len = 0;
    errf(errbuf, errcap, "error: map outputs: %s", strerror(errno));
    return -1;
  }
  return 0;
}

int kc_mstate_run(kc_mstate *s, const kc_mreq_run *req, void *out, size_t out_cap, size_t *out_len,
                  char *errbuf, size_t errcap) {
  *out_len = 0;
  uint32_t n_sets = req->n_sets ? req->n_sets : s->n_sets;
  bool area = req->flags & KC_MRUN_AREA;
  if (req->number == 0 || n_sets > s->n_sets || req->first_set >= n_sets ||
      req->n_checks > KC_MPROTO_MAX_CHECKS ||
      (area &&
       (req->first_call > s->area_calls || req->number > s->area_calls - req->first_call))) {
    errf(errbuf, errcap, "error: bad run request");
    return -1;
  }
  for (uint32_t c = 0; c < req->n_checks; c++)
    if (req->checks[c] >= req->number || (c && req->checks[c] <= req->checks[c - 1])) {
      errf(errbuf, errcap, "error: bad run request");
      return -1;
    }
  size_t need = sizeof(kc_mreply_run) + (size_t)req->n_checks * s->out_region;
  if (out_cap < need) {
    errf(errbuf, errcap, "error: result buffer too small");
    return -1;
  }
  if (!area && !s->out && map_out(s, errbuf, errcap) < 0)
    return -1;
  uint32_t n = s->spec.n;
  unsigned char *dst = (unsigned char *)out + sizeof(kc_mreply_run);
  uint32_t ci = 0;
  fault_lo = s->in;
  fault_hi = s->in + s->in_len;
  /* The mask is not saved: that is a syscall in every request, inside the clock of a
   * timed one.  on_fault runs with SA_NODEFER and adds nothing to the mask, so a jump
   * out of it leaves the mask as the fault found it. */
  if (sigsetjmp(fault_env, 0)) {
    input_fault_message(s, errbuf, errcap);
    return -1;
  }
  fault_armed = 1;
  uint32_t set = req->first_set;
  DLTensor *args = s->live;
  for (uint64_t i = 0; i < req->number; i++) {
    unsigned char *o;
    memcpy(args, &s->pristine[set * n], n * sizeof(DLTensor));
    for (uint32_t t = 0; t < n; t++) /* the kernel may have written them */
      memcpy(&s->shapes[(size_t)t * KC_ARGS_MAX_NDIM], s->spec.t[t].shape,
             sizeof s->spec.t[t].shape);
    if (area) { /* already poisoned, outside the clock */
      o = s->area + (req->first_call + i) * s->out_region;
    } else {
      o = s->out + set * s->out_region;
      kc_poison_fill(o, s->out_region, kc_poison_word(req->poison_seed, i));
    }
    for (uint32_t t = 0; t < n; t++)
      if (s->spec.t[t].out)
        args[t].data = o + kc_args_offset(&s->spec, t);
    if (call_kernel(s, args, errbuf, errcap) != 0) {
      fault_armed = 0;
      return -1;
    }
    if (ci < req->n_checks && req->checks[ci] == i) {
      memcpy(dst + (size_t)ci * s->out_region, o, s->out_region);
      ci++;
    }
    if (++set == n_sets)
      set = 0;
  }
  fault_armed = 0;
  kc_mreply_run rep = {KC_MPROTO_MAGIC, req->n_checks};
  memcpy(out, &rep, sizeof rep);
  *out_len = need;
  return 0;
}

int kc_mstate_prepare(kc_mstate *s, const kc_mreq_prepare *req, kc_mreply_prepare *rep,
                      char *errbuf, size_t errcap) {
  if (req->number == 0 || req->number > (1ull << 32) ||
      req->number > (uint64_t)SIZE_MAX / (s->out_region ? s->out_region : 1)) {
    errf(errbuf, errcap, "error: bad prepare request");
    return -1;
  }
  size_t need = (size_t)(req->number * s->out_region);
  if (need > s->area_len) {
    /* Kept between rounds so that its pages stay mapped: growing happens here, never
     * inside a timed request. */
    if (s->area)
      munmap(s->area, s->area_len);
    s->area_len = 0;
    s->area_calls = 0;
    s->area = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->area == MAP_FAILED) {
      s->area = NULL;
      errf(errbuf, errcap, "error: the outputs of %llu calls (%zu bytes) do not fit",
           (unsigned long long)req->number, need);
      return -1;
    }
    s->area_len = need;
  }
  s->area_calls = s->out_region ? s->area_len / s->out_region : 0;
  for (uint64_t i = 0; i < req->number; i++)
    kc_poison_fill(s->area + i * s->out_region, (size_t)s->out_region,
                   kc_poison_word(req->poison_seed, i));
  *rep = (kc_mreply_prepare){
      .magic = KC_MPROTO_MAGIC, .base = (uint64_t)(uintptr_t)s->area, .region = s->out_region};
  return 0;
}

void kc_mstate_flush(kc_mstate *s) {
#if defined(__x86_64__) || defined(__i386__)
  for (size_t i = 0; i < s->in_len; i += 64)
    __builtin_ia32_clflush(s->in + i);
  for (size_t i = 0; i < s->out_len; i += 64)
    __builtin_ia32_clflush(s->out + i);
  for (size_t i = 0; i < s->area_len; i += 64)
    __builtin_ia32_clflush(s->area + i);
  __builtin_ia32_mfence();
#else
  /* Elsewhere: push the tensors out by streaming through a buffer larger than the LLC. */
  static unsigned char *junk;
  size_t len = 64u << 20;
  if (!junk)
    junk = malloc(len);
  if (junk)
    for (size_t i = 0; i < len; i += 64)
      ((volatile unsigned char *)junk)[i]++;
#endif
}

/* ---- the built-in "measure" handler of kcage-worker ----------------------------- */
static kc_mstate *g_state;

/* LOAD: the kernel, its entry, the inputs file and the --args text, once per worker. */
static int op_load(kc_call *call) {
  if (g_state) {
    errf(call->error, call->error_cap, "error: a kernel is already loaded in this worker");
    return 1;
  }
  kc_mreq_load req;
  if (call->arg_len < sizeof req + 4) {
    errf(call->error, call->error_cap, "error: short load request");
    return 1;
  }
  memcpy(&req, call->arg, sizeof req);
  const char *p = (const char *)call->arg + sizeof req,
             *end = (const char *)call->arg + call->arg_len;
  const char *str[4];
  for (int i = 0; i < 4; i++) {
    const char *z = memchr(p, 0, (size_t)(end - p));
    if (!z) {
      errf(call->error, call->error_cap, "error: malformed load request");
      return 1;
    }
    str[i] = p;
    p = z + 1;
  }
  if (kc_mstate_load(&g_state, str[0], (kc_kernel_abi)req.abi, str[1], str[2], str[3], req.n_sets,
                     true, call->error, call->error_cap) < 0)
    return 1;
  call->out_len = 0;
  return 0;
}

static int op_run(kc_call *call) {
  kc_mreq_run req;
  if (!g_state || call->arg_len != sizeof req) {
    errf(call->error, call->error_cap, "error: run before load");
    return 1;
  }
  memcpy(&req, call->arg, sizeof req);
  size_t len;
  if (kc_mstate_run(g_state, &req, call->out, call->out_cap, &len, call->error, call->error_cap) <
      0)
    return 1;
  call->out_len = len;
  return 0;
}

static int op_prepare(kc_call *call) {
  kc_mreq_prepare req;
  kc_mreply_prepare rep;
  if (!g_state || call->arg_len != sizeof req || call->out_cap < sizeof rep) {
    errf(call->error, call->error_cap, "error: prepare before load");
    return 1;
  }
  memcpy(&req, call->arg, sizeof req);
  if (kc_mstate_prepare(g_state, &req, &rep, call->error, call->error_cap) < 0)
    return 1;
  memcpy(call->out, &rep, sizeof rep);
  call->out_len = sizeof rep;
  /* the parent stops this process now, then starts the timed request */
  kc_runtime_spin_next(2000000);
  return 0;
}

int kc_handler_measure(kc_call *call) {
  uint32_t hdr[2];
  if (call->arg_len < sizeof hdr) {
    errf(call->error, call->error_cap, "error: short measure request");
    return 1;
  }
  memcpy(hdr, call->arg, sizeof hdr);
  if (hdr[0] != KC_MPROTO_MAGIC) {
    errf(call->error, call->error_cap, "error: bad measure request");
    return 1;
  }
  switch (hdr[1]) {
  case KC_MOP_LOAD:
    return op_load(call);
  case KC_MOP_RUN:
    return op_run(call);
  case KC_MOP_PREPARE:
    return op_prepare(call);
  case KC_MOP_WAKE:
    /* the timed request follows within microseconds unless the parent's vCPU is
     * taken away: stay awake for it (2 ms of spinning at most, once per round) */
    kc_runtime_spin_next(2000000);
    call->out_len = 0;
    return 0;
  case KC_MOP_FLUSH:
    if (!g_state) {
      errf(call->error, call->error_cap, "error: flush before load");
      return 1;
    }
    kc_mstate_flush(g_state);
    call->out_len = 0;
    return 0;
  }
  errf(call->error, call->error_cap, "error: unknown measure operation %u", hdr[1]);
  return 1;
}
