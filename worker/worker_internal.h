/* Private to worker/: the zygote protocol and the in-worker runtime. */
#ifndef KCAGE_WORKER_INTERNAL_H
#define KCAGE_WORKER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kc_seccomp_prog;

#include "fdio.h"
#include "kcage/error.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"
#include "kcage/worker.h"
#include "ring.h"

#define KC_ZYGOTE_MAGIC 0x6b637a67u /* "kczg" */

enum { KC_ZOP_SPAWN = 1, KC_ZOP_EXIT = 2, KC_ZOP_SLOT = 3 };

/* Zygote policy flags. */
enum {
  KC_ZF_NEWPID = 1u << 0,    /* worker in its own pid namespace */
  KC_ZF_CGROUP_FD = 1u << 1, /* a v2 cgroup fd follows: CLONE_INTO_CGROUP */
  KC_ZF_LOCKDOWN = 1u << 2,  /* caps drop + no_new_privs + policy seccomp + rlimits */
  KC_ZF_SCRATCH = 1u << 3,   /* kc_sandbox_fresh_scratch before the lockdown */
  KC_ZF_KEEP_SOCK = 1u << 4, /* the worker keeps its socket (fd 5) after the ready */
};

/* parent -> zygote, with SCM_RIGHTS fds: ring memfd, eventfd, worker socket, stdout,
 * stderr, [v2 cgroup dir]. */
typedef struct kc_zygote_req {
  uint32_t magic, op, flags, generation;
  char policy[512];   /* policy name/path ("" = none) */
  uint64_t rlimit_as; /* reserved */
} kc_zygote_req;

/* zygote -> parent */
typedef struct kc_zygote_rep {
  uint32_t magic;
  int32_t pid;         /* > 0, or -errno */
  uint32_t generation; /* of the request: several may be in flight (a pool) */
  char msg[256];
} kc_zygote_rep;

/* worker -> parent over its own socket once locked down (with the seccomp listener fd
 * attached when the policy has one). */
typedef struct kc_worker_ready {
  uint32_t magic;
  int32_t status; /* 0 = ready, else errno of the failed step */
  char msg[256];
} kc_worker_ready;

/* fd numbers the worker finds after the zygote's fork */
typedef struct kc_worker_boot {
  int memfd, evfd, sock;
  int parent_pidfd; /* closed after the PDEATHSIG race check */
  uint32_t flags;
  const kc_policy *pol;               /* parsed once by the zygote; NULL = no filter */
  const struct kc_seccomp_prog *prog; /* its filter, compiled once by the zygote */
  int64_t clock_shift_ns;             /* how far our monotonic clock reads behind the parent's */
} kc_worker_boot;

/* kcage-worker entry points */
typedef struct kc_zygote_args {
  int ctl;
  const char *policy;     /* preloaded (and compiled) before the root is pivoted */
  bool setup_fs;          /* enter the sandbox's read-only file system */
  bool lo_up;             /* bring loopback up (in a netns of its own) */
  const kc_mount *mounts; /* extra mounts (kc_worker_opts.mounts) */
  size_t n_mounts;
  const char *python_lib, *python_boot; /* kc_worker_opts: an embedded interpreter */
  bool userns;                          /* make the pool's namespaces first (handshake on fd 4) */
  bool join_netns;                      /* the process's netns is on fd 5 */
  bool host_net; /* the policy has no net namespace: the pool stays in the caller's */
  char **argv;   /* our own, to exec again inside the namespaces (a non-root caller) */
} kc_zygote_args;
int kc_zygote_main(const kc_zygote_args *a);
/* The worker process after fork: lockdown, ready, serve.  Never returns. */
__attribute__((noreturn)) void kc_runtime_run(const kc_worker_boot *b);

/* runtime.c, for handlers: the current call's task begins now (after its load); the
 * worker's pid as the parent sees it (0 before the first call) */
void kc_runtime_task_began(void);
int kc_runtime_host_pid(void);

/* python_embed.c: start the interpreter in the zygote; the "python" handler */
int kc_python_boot(const char *lib_path, const char *boot, kc_error *err);
int kc_handler_python(kc_call *c);

/* handlers.c */
kc_handler_fn kc_handlers_resolve(const char *name, size_t len, char *error, size_t cap);
void kc_handlers_set_builtins(const kc_builtin *builtins);

/* The seal filter's trap writes the syscall number here for the parent to read. */
#define KC_SEAL_TRAP_UNSET 0xffffffffu

#endif

/* Parent side of the zygote (zygote_client.c). */
typedef struct kc_zygote_early {
  uint32_t generation;
  int32_t pid;
  char msg[128];
} kc_zygote_early;

typedef struct kc_zygote {
  pid_t pid;
  int pidfd;
  int ctl;
  bool sandboxed;
  bool relay_sysinfo; /* its workers' filter hands sysinfo to the listener */
  int answer_ms;      /* bound on one answer; 0 = 2 s (an interpreter's boot needs more) */
  /* kc_zygote_new: workers of several threads share it, one request+answer at a time
   * (recursive: a slot request collects its own answer) */
  bool shared;
  pthread_mutex_t mu;
  kc_sandbox_ids ids; /* the host ids of the pool's root, held while the zygote lives */
  bool made_netns;    /* it made the process's shared netns: kept after its hello */
  int hs;             /* its namespaces' handshake until the maps are written, else -1 */
  /* answers read while waiting for another one (several spawns in flight) */
  kc_zygote_early early[64];
  unsigned n_early;
} kc_zygote;

int kc_zygote_start(const kc_worker_opts *o, kc_zygote **out, kc_error *err);
/* The same in two halves, so that requests can be queued while it starts: begin (fork,
 * exec, namespaces), await (its hello; on failure the zygote is killed, not freed). */
int kc_zygote_begin(const kc_worker_opts *o, kc_zygote **out, kc_error *err);
int kc_zygote_await(const kc_worker_opts *o, kc_zygote *z, kc_error *err);
/* fds: memfd, evfd, worker sock, stdout, stderr [, v2 cgroup dir] */
int kc_zygote_spawn(kc_zygote *z, uint32_t flags, const char *policy, uint32_t generation,
                    const int *fds, int nfds, pid_t *pid, kc_error *err);
/* The same in two halves: send the request now, collect its pid later. */
int kc_zygote_request(kc_zygote *z, uint32_t flags, const char *policy, uint32_t generation,
                      const int *fds, int nfds, kc_error *err);
int kc_zygote_collect(kc_zygote *z, uint32_t generation, pid_t *pid, kc_error *err);
void kc_zygote_stop(kc_zygote *z);
/* A slot zygote forked from z (see zygote.c): a kc_zygote of its own.  Asked for
 * (*sock: its socket, ours until collected) and collected in two halves. */
int kc_zygote_slot_request(kc_zygote *z, uint32_t generation, int *sock, kc_error *err);
int kc_zygote_slot_collect(kc_zygote *z, uint32_t generation, int sock, kc_zygote **out,
                           kc_error *err);
/* The kcage-worker to exec: o->worker_path, a checked $KCAGE_WORKER, or the one next to
 * kcage; -1 when $KCAGE_WORKER names a file others could change. */
int kc_worker_binary(const kc_worker_opts *o, const char **out, kc_error *err);
/* The policy the zygote is given for NAME: NAME itself, or the file found in the
 * tenant's policy directory (o->settings.policy_dir), in buf. */
int kc_worker_policy_path(const kc_worker_opts *o, const char *name, char *buf, size_t len,
                          const char **out, kc_error *err);

/* worker*.c (worker_impl.h says which): used by the pool, which shares one zygote between its
 * workers */
int kc_worker_new_shared(const kc_worker_opts *opts, kc_zygote *zyg, kc_worker **out,
                         kc_error *err);
/* The sysinfo relay (sysinfo_relay.c): hand a worker's seccomp listener (taken, closed
 * on failure too) to this process's relay thread, which answers the worker's sysinfo(2)
 * calls; returns the caller's end of a socket (SOCK_SEQPACKET, one kc_seccomp_event a
 * message, EOF once the listener is gone) that carries every other notification, or
 * -1 with err.  _read: the next one without blocking, 1 read, 0 none. */
struct kc_seccomp_event;
int kc__sysinfo_relay_add(int listener, kc_error *err);
int kc__sysinfo_relay_read(int fd, struct kc_seccomp_event *ev);
/* fds the parent must poll for this worker: eventfd, pidfd, listener (-1 when none) */
int kc_worker_pollfds(kc_worker *w, int fds[3]);
/* Parent's cq_waiters flag: set before sleeping, cleared after */
void kc_worker_set_waiting(kc_worker *w, bool on);
/* Reap a completion or a death without blocking (1 = res filled). */
int kc_worker_try(kc_worker *w, kc_call_result *res, kc_error *err);
/* Deadline of the oldest call (ns, CLOCK_MONOTONIC), UINT64_MAX when none. */
uint64_t kc_worker_deadline(kc_worker *w);
uint64_t kc_worker_outstanding(kc_worker *w);
/* Calls that were queued behind a failed call and never ran: the pool takes them back
 * (and sends them again) instead of failing them. */
uint64_t kc_worker_take_orphans(kc_worker *w);
/* The most each side spins before it sleeps (default KC_PARENT_SPIN_NS and
 * KC_WORKER_SPIN_NS); 0 and 0 make the futex-only ring bench_worker compares with. */
void kc_worker_set_spin(kc_worker *w, uint32_t parent_ns, uint32_t worker_ns);
/* The pool replaces a dead zygote for all its workers. */
void kc_worker_set_zygote(kc_worker *w, kc_zygote *z);
bool kc_zygote_alive(const kc_zygote *z);
uint32_t kc_worker_depth(kc_worker *w);
/* Would a send be taken now (room in the ring, maximum_uses not spent while busy)? */
bool kc_worker_can_take(kc_worker *w);
void kc_sched_short_slice(void);
void kc_sched_slice(uint64_t ns);
