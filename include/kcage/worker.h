/* Worker: TVM's PopenWorker over a shared-memory ring, with the timeout enforced by the
 * parent and every worker locked in a sandbox (docs/architecture.md).
 *
 * Life of a worker (all of it inside the pool's sandbox):
 *   1. cloned from the pool's zygote (one exec'd kcage-worker per pool, in its own
 *      user namespace (root = host ids of the pool's own), mount/ipc/uts namespaces, the
 *      sandbox layer's pivoted read-only root, joined to the process's one netns with
 *      only loopback) through the slot's own zygote, which lives in the slot's
 *      long-lived cgroup, with CLONE_PARENT|CLONE_NEWPID: born in that cgroup, in its
 *      own pid namespace, a child of the kcage parent (which reaps it and gets its
 *      exact end);
 *   2. lockdown, in this order: rlimits, capability drop, no_new_privs, then the
 *      seccomp filter of the policy (opts.policy, default "measure").  The filter is
 *      installed BEFORE any initializer, handler or user code runs: nothing user-
 *      controlled ever runs unfiltered.  Violations are reported by the parent from
 *      the seccomp listener (status `syscall` with the syscall's name);
 *   3. maps its own ring (one memfd, shared only with the parent), runs the
 *      initializer once ("lib.so:symbol", dlopen'd under the filter), then serves
 *      calls until it is killed, recycled or the parent dies (PDEATHSIG + cgroup).
 *
 * Loading code under `measure`: the measure policy allows the syscalls dlopen needs
 * (openat/read/fstat/mmap/mprotect with PROT_EXEC, close) so a handler can dlopen a
 * kernel while handling a call.  Once its code is loaded, a handler calls
 * kc_runtime_seal_exec(): that stacks a second filter which forbids any later
 * mmap/mprotect/pkey_mprotect with PROT_EXEC, execve/execveat, fork/vfork/clone/clone3
 * (no threads, no processes), reported as a child error with status `syscall`.  The
 * seal covers only what the base policy lets through (seccomp runs the strictest
 * action of all filters, so a seal rule would hide the listener's named report): under
 * `measure` that is a file-backed PROT_EXEC mmap, trapped (SIGSYS) and named by the
 * worker's handler (the worker's word); everything else - threads, processes, exec,
 * anonymous executable memory, mprotect(PROT_EXEC) - stays a violation of the base
 * filter, named by the parent from the seccomp listener.  Sealing is one-way for the life of the
 * worker; a worker that must load another kernel is recycled (maximum_uses, or kc_worker_kill) - a
 * fork from the zygote costs well under 1 ms.
 *
 * Everything a worker writes into shared memory is hostile input: the parent copies
 * each completion out and validates every length, offset and count; a worker that
 * scribbles over its ring gets a child error, never a parent crash. */
#ifndef KCAGE_WORKER_H
#define KCAGE_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/error.h"
#include "kcage/sandbox.h"
#include "kcage/settings.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

/* ---------------------------------------------------------------------------------
 * Handlers (run inside the worker).
 *
 * A call names a handler and carries an argument blob (the C counterpart of
 * cloudpickle-by-reference).  Names:
 *   "echo"      built-in: the result is the argument, byte for byte;
 *   "exec"      built-in: arg = argv as NUL-terminated strings back to back; runs the
 *               program (needs a policy that allows fork+exec, e.g. "exec"), result =
 *               its wait status as an int32 (little-endian);
 *   "python"    built-in: the embedded interpreter (kc_worker_opts.python_lib) calls
 *               kcage._child.call(arg) and the bytes it returns are the result;
 *   "measure"   built-in of the kcage-worker program: kcage bench's measure
 *               handler (kc_handler_measure, kcage/measure.h);
 *   "lib.so:symbol"  a user handler: lib.so is dlopen'd inside the worker (path as
 *               seen INSIDE the sandbox: bind it in with opts.mounts) once per worker,
 *               symbol is looked up with dlsym and must have type kc_handler_fn.
 * ------------------------------------------------------------------------------- */

/* One call as the handler sees it.  arg points into a private copy of the request
 * (never the shared ring).  out points at the result slot of the completion ring;
 * the handler writes at most out_cap bytes there and sets out_len. */
typedef struct kc_call {
  const void *arg;
  size_t arg_len;
  void *out;
  size_t out_cap;
  size_t out_len; /* set by the handler; 0 by default */
  char *error;    /* exception message buffer (NUL-terminated), error_cap bytes */
  size_t error_cap;
  uint64_t seq;        /* sequence number of this request in this worker's life */
  uint32_t generation; /* changes at every worker restart */
  uint32_t uses;       /* calls served by this worker before this one */
} kc_call;

/* Return 0: the call completed and out[0..out_len) is its value.
 * Return non-zero: the call raised; call->error holds the message (when left empty,
 * the worker writes "handler returned <rc>").  The worker stays alive after an
 * exception, like TVM's.  A handler that crashes, exceeds the memory limit or makes a
 * forbidden syscall kills its worker: the caller gets KC_CALL_CHILD_ERROR with the
 * sandbox's verdict. */
typedef int (*kc_handler_fn)(kc_call *call);

/* Initializer ("lib.so:symbol"), run once in each new worker before its first call,
 * under the seccomp filter.  Non-zero return = the initializer raised: its message
 * (error buffer) comes back from kc_worker_send as an error. */
typedef int (*kc_initializer_fn)(const void *initargs, size_t initargs_len, char *error,
                                 size_t error_cap);

/* Inside a worker only: forbid loading further code and creating threads/processes
 * for the rest of this worker's life (see top of file).  Returns 0, or -1 with errno. */
int kc_runtime_seal_exec(void);

/* ---------------------------------------------------------------------------------
 * Parent side.
 * ------------------------------------------------------------------------------- */

typedef enum kc_stdio_mode {
  KC_STDIO_INHERIT = 0, /* the parent's own stdout/stderr */
  KC_STDIO_DISCARD,     /* /dev/null */
  KC_STDIO_FD,          /* fd below (duplicated; the caller keeps its copy) */
} kc_stdio_mode;

typedef struct kc_stdio {
  kc_stdio_mode mode;
  int fd;
} kc_stdio;

typedef enum kc_isolation {
  KC_ISOLATION_SANDBOX = 0, /* zygote in namespaces + cgroup + seccomp (default) */
  KC_ISOLATION_NONE,        /* plain fork of kcage-worker, no sandbox: for comparison
                               benchmarks and hosts without namespaces; never for
                               untrusted code */
} kc_isolation;

typedef struct kc_worker_opts {
  const char *initializer; /* "lib.so:symbol" or NULL */
  const void *initargs;    /* copied */
  size_t initargs_len;
  uint32_t maximum_uses; /* recycle after N calls; 0 = never (TVM: None/0) */
  kc_stdio stdout_;      /* default inherit */
  kc_stdio stderr_;
  const char *policy;     /* policy name or file; NULL = "measure"; loaded by the
                             zygote before its root moves */
  kc_limits limits;       /* memory, pids, cpus per worker (cgroup); 0 = policy's */
  const kc_mount *mounts; /* extra mounts (e.g. ro-bind of the dir with lib.so), after
                             the policy's; paths of handlers are paths inside */
  size_t n_mounts;
  size_t max_arg_bytes;    /* largest request payload; 0 = 1 MiB */
  size_t max_result_bytes; /* largest result payload; 0 = 1 MiB */
  kc_isolation isolation;
  const char *worker_path; /* kcage-worker binary; NULL = $KCAGE_WORKER (refused
                              unless only root and the caller can change it), then
                              the one next to kcage (<libexecdir>/kcage, relative to
                              the installed binary or library; the build dir for a
                              binary that runs from it) */
  /* An embedded CPython for the "python" handler (the Python package's workers):
   * python_lib is libpython's shared object and python_boot the source the zygote runs
   * once, after it entered the sandbox's file system and before it forks any worker,
   * so every worker starts as a fork of an interpreter that already imported what the
   * boot code imports.  The boot code is the caller's own (trusted) code; call
   * payloads run only in workers, under the filter.  NULL = no interpreter. */
  const char *python_lib;
  const char *python_boot;
  /* The tenant's cgroup mode, limits fallback, id range and policy directory (all zero
   * = the defaults).  policy_dir is read when the worker starts, not kept. */
  kc_settings settings;
  /* A handler that loads what it runs before running it (the python handler: the
   * function's unpickling and its module's import) may say when its task began; the
   * call's timeout then counts from there, as TVM's does, and the load may take up to
   * load_s on top of the timeout.  The worker's word is clamped to that window, so a
   * worker gains at most load_s.  0 = the timeout counts from the send. */
  double load_s;
} kc_worker_opts;

void kc_worker_opts_init(kc_worker_opts *o); /* zero, fds -1, defaults above */

/* The four outcomes (numbered like TVM's StatusKind). */
typedef enum kc_call_status {
  KC_CALL_COMPLETE = 1,
  KC_CALL_EXCEPTION = 2,   /* handler returned non-zero: message = its error text */
  KC_CALL_TIMEOUT = 3,     /* parent's deadline passed; the worker was killed */
  KC_CALL_CHILD_ERROR = 4, /* worker died or broke the ring protocol: see verdict */
} kc_call_status;

typedef struct kc_call_result {
  kc_call_status status;
  void *value; /* COMPLETE: malloc'd copy of the result (NULL when empty) */
  size_t value_len;
  char message[1024]; /* EXCEPTION: the handler's message, intact (truncated only past
                         1023 bytes); otherwise one human sentence */
  /* CHILD_ERROR: the sandbox verdict.  verdict.status is signaled / memory (OOM kill)
   * / syscall (verdict.syscall = name) / pids / exited, or setup_error when the worker
   * corrupted its ring or could not start; verdict.signal set when signaled. */
  kc_result verdict;
  pid_t pid; /* host pid of the worker that ran the call */
  uint32_t generation;
  double elapsed_s; /* parent's clock: request published -> completion observed */
} kc_call_result;

void kc_call_result_init(kc_call_result *r);
void kc_call_result_clear(kc_call_result *r);      /* frees value; safe to call twice */
const char *kc_call_status_name(kc_call_status s); /* "complete", "exception", ... */

typedef struct kc_worker kc_worker;

/* Like TVM, no process starts until the first send.  opts and everything it points to
 * are copied. */
int kc_worker_new(const kc_worker_opts *opts, kc_worker **out, kc_error *err);

/* Queue one call.  fn: handler name (see above, at most 255 bytes); timeout_s <= 0 =
 * no timeout.  The clock of a call starts when the worker can start it (when it is
 * sent, or when the previous call of this worker completes).  Recycles first when
 * maximum_uses is reached; (re)starts the worker when none is alive, running the
 * initializer (no timeout; its failure is returned here as -1).  Several calls may be
 * outstanding; kc_worker_recv returns them in FIFO order.  Returns -1 on a parent-side
 * failure (bad arguments, payload too large, spawn failed). */
int kc_worker_send(kc_worker *w, const char *fn, const void *arg, size_t len, double timeout_s,
                   kc_error *err);

/* Wait for the oldest outstanding call and fill *res with one of the four outcomes
 * (0).  Never blocks past that call's deadline.  -1 when no call is outstanding.  A
 * TIMEOUT or CHILD_ERROR kills the worker (its pid namespace and cgroup) and at once
 * asks the zygote for a replacement, which the next send takes over; calls queued
 * behind the failed one come back as CHILD_ERROR "worker replaced" (a pool sends
 * those again instead).  A worker that died between calls is replaced silently when
 * it was idle for over 1 ms; a death within 1 ms of its last call comes back as the
 * next call's CHILD_ERROR, as in TVM.
 * Threads: a kc_worker (and a kc_pool) is used by one thread at a time, and the
 * thread that starts its processes must outlive them (PDEATHSIG follows that thread).
 * kc_worker_new/kc_pool_new give the calling thread a short scheduler slice (EEVDF
 * custom slice, 0.1 ms, Linux >= 6.12) so that its deadline timer preempts a worker
 * spinning on the same CPU; workers and the zygote keep the default. */
int kc_worker_recv(kc_worker *w, kc_call_result *res, kc_error *err);

/* Bounded variant: waits (spins briefly, then sleeps on the ring's eventfd) at most
 * wait_s for the oldest call.  1 when res was filled, 0 when it is still running after
 * wait_s, -1 on error or when nothing is outstanding.  (Added for the measure parent,
 * which sleeps through most of a timed round but must wake at once if it ends early.) */
int kc_worker_recv_timed(kc_worker *w, kc_call_result *res, double wait_s, kc_error *err);

/* Non-blocking variant: 1 when res was filled, 0 when the oldest call is still
 * running (and its deadline has not passed), -1 when nothing is outstanding. */
int kc_worker_poll(kc_worker *w, kc_call_result *res, kc_error *err);

/* Kill the worker's whole cgroup, reap it; outstanding calls come back as
 * CHILD_ERROR "worker killed".  The next send starts a new worker. */
void kc_worker_kill(kc_worker *w);
/* Wait until the worker process has exited (timeout_s < 0 = forever); does not kill. */
int kc_worker_join(kc_worker *w, double timeout_s);
bool kc_worker_is_alive(kc_worker *w);   /* false while a replacement is still starting */
pid_t kc_worker_pid(const kc_worker *w); /* host pid, 0 when none */
/* Kills (when alive) and frees.  Safe with NULL. */
void kc_worker_free(kc_worker *w);

/* A zygote shared by workers that are not one pool (the Python package: a new
 * PopenWorker is one fork from it, not a new sandbox and interpreter).  Its policy,
 * mounts, isolation, worker_path and python_* come from o; the workers' own opts must
 * name the same policy.  Workers of several threads may use it at once.  Start it from
 * a thread that outlives every worker forked from it (PDEATHSIG follows that thread),
 * and free it after them. */
typedef struct kc_zygote kc_zygote;
int kc_zygote_new(const kc_worker_opts *o, kc_zygote **out, kc_error *err);
bool kc_zygote_is_alive(const kc_zygote *z);
void kc_zygote_free(kc_zygote *z); /* kills it; safe with NULL */
/* kc_worker_new whose processes are forked from z instead of a zygote of its own. */
int kc_worker_new_on(const kc_worker_opts *opts, kc_zygote *z, kc_worker **out, kc_error *err);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
