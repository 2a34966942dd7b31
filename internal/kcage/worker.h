/* The worker program's own entry and the parent's sleeping wait, for the layers above.  Not
 * installed: it extends the public include/kcage/worker.h, which it includes first; in-tree code
 * that includes "kcage/worker.h" gets both (internal/ comes first on its include path). */
#ifndef KCAGE_INTERNAL_WORKER_H
#define KCAGE_INTERNAL_WORKER_H

#include_next <kcage/worker.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Start the worker's process now (its first call would), without waiting for it; an
 * error is left for that first call to meet again. */
int kc_worker_prestart(kc_worker *w, kc_error *err);
/* Start the worker's process when it has none and wait until it is ready for its first
 * call: the zygote's fork, the cgroup attach and the lockdown all done now, off the
 * path of a call that must start at once. */
int kc_worker_start_now(kc_worker *w, kc_error *err);

/* Workers that each serve one tenant's session (the agent's TVM sessions), set before
 * the worker's first spawn.  KC_WORKER_SCRATCH: mount and IPC namespaces of its
 * own, every tmpfs of the pool's layout mounted anew (kc_sandbox_fresh_scratch).
 * KC_WORKER_PASS_FDS: the worker keeps its socket to us (fd 5 in the worker), on which
 * kc_worker_pass_fds hands it, once, a message and descriptors. */
enum { KC_WORKER_SCRATCH = 1u << 0, KC_WORKER_PASS_FDS = 1u << 1 };
void kc_worker_set_extra(kc_worker *w, unsigned extra);
/* Start the worker when it is not (kc_worker_prestart), wait for its ready, and send
 * msg with fds on its socket, which is then closed on our side. */
int kc_worker_pass_fds(kc_worker *w, const void *msg, size_t len, const int *fds, int nfds,
                       kc_error *err);

/* Did the worker's cgroup kill for memory, or refuse a process for its pids limit, since
 * its process started?  What the sandbox's verdict puts first, whatever the call's end
 * (a fork bomb that runs into the wall limit was refused processes first). */
void kc_worker_limit_hits(kc_worker *w, bool *oom, bool *pids);

/* A handler built into the worker program, found by name before "lib.so:symbol". */
typedef struct kc_builtin {
  const char *name;
  kc_handler_fn fn;
} kc_builtin;

/* The body of the kcage-worker program (argv as the library starts it), with the
 * program's own built-ins (an array ended by {0}).  The layers above link their
 * handlers into the program this way; the worker layer knows none of them. */
int kc_worker_program_main(int argc, char **argv, const kc_builtin *builtins);

/* Inside a worker only: after this call's completion, wait for the next request
 * spinning for up to ns (instead of the usual 50 us) before sleeping on the futex.
 * For a handler that knows a latency-critical request follows (the measure handler's
 * wake-up before a timed round).  One-shot. */
void kc_runtime_spin_next(uint64_t ns);

/* Inside a worker only: does the worker's base policy let glibc's thread clone through
 * (measure-threads, or no filter)?  Then trusted code may start threads, and must call
 * kc_runtime_seal_threads before any untrusted code runs. */
bool kc_runtime_threads_allowed(void);
/* Inside a worker only: from now on no thread or process of this one may be created
 * (a violation); stacked on every thread.  0, or -1 with errno. */
int kc_runtime_seal_threads(void);

/* kc_worker_recv_timed that never spins: it sleeps at once.  For a caller on the
 * worker's own CPU, where every pause of its spin would keep the worker off that CPU
 * (the measure parent, which waits there for a timed round). */
int kc_worker_recv_asleep(kc_worker *w, kc_call_result *res, double wait_s, kc_error *err);

#ifdef __cplusplus
}
#endif
#endif
