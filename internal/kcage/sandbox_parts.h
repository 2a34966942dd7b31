/* Child-side building blocks of the sandbox, for code that sets up its own processes
 * (the worker's zygote and its forked workers).  Each call acts on the calling process
 * and is safe in a freshly forked child of a single-threaded parent.  The usual order:
 *
 *   (in new user+mount namespaces, still holding the namespace's capabilities)
 *   kc_sandbox_setup_fs()       tmpfs root, binds, /proc, /dev, /tmp, pivot_root
 *   kc_sandbox_lo_up()          in a new network namespace only
 *   kc_sandbox_lockdown()       rlimits, capabilities (incl. bounding + ambient) dropped,
 *                               no_new_privs, then the policy's seccomp filter
 *
 * After lockdown nothing can be undone: run untrusted code only after it. */
#ifndef KCAGE_SANDBOX_PARTS_H
#define KCAGE_SANDBOX_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Build and enter the sandbox's file system: the policy's mounts (or the built-in
 * layout when the policy has none: ro /usr + merged-usr symlinks, /proc, minimal
 * /dev, 64 MiB /tmp), then the extra mounts, then pivot_root with the old root
 * detached and the root made read-only; chdir to cwd (NULL = "/").  The caller must
 * already be in its own mount namespace (and pid namespace, for a fresh /proc). */
int kc_sandbox_setup_fs(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                        const char *cwd, kc_error *err);

/* The same in two steps, for a process that gives up its host ids in between (a pool's
 * zygote).  kc_sandbox_fs_prepare runs with the caller's ids, before any namespace:
 * it resolves every bind source and, where the kernel and our privileges allow, opens
 * each as a detached mount, so that the sandbox's own ids never walk the host path (a
 * source below a directory only the caller may enter: /root, a mktemp -d).
 * kc_sandbox_fs_enter builds the file system from that plan, as kc_sandbox_setup_fs
 * does; kc_sandbox_fs_release closes what is left, wipes the host paths from memory
 * and frees the plan (NULL: nothing). */
typedef struct kc_fs_plan kc_fs_plan;
int kc_sandbox_fs_prepare(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                          kc_fs_plan **out, kc_error *err);
int kc_sandbox_fs_enter(const kc_fs_plan *plan, const char *cwd, kc_error *err);
void kc_sandbox_fs_release(kc_fs_plan *plan);

/* In a forked process of a pool, before its lockdown: mount and IPC namespaces of its
 * own, every tmpfs of the pool's layout (the policy's, then the extra mounts') mounted
 * anew, empty, and chdir to cwd (NULL = "/").  Nothing another process of the pool
 * wrote there is seen, and what this one writes goes with it.  The network namespace
 * stays the pool's (only its loopback): processes of the pool that run at the same
 * time share its abstract unix sockets. */
int kc_sandbox_fresh_scratch(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                             const char *cwd, kc_error *err);

/* Bring up "lo" in the caller's (new) network namespace (SIOCSIFFLAGS; no allocation). */
int kc_sandbox_lo_up(kc_error *err);

/* Drop every capability: bounding set, ambient set, inheritable, permitted, effective. */
int kc_sandbox_drop_caps(kc_error *err);

/* The policy's rlimits, RLIMIT_CORE 0, and RLIMIT_CPU = cpu_s (rounded up; 0 = leave). */
int kc_sandbox_set_rlimits(const kc_policy *policy, double cpu_s, kc_error *err);

/* rlimits + kc_sandbox_drop_caps + no_new_privs + dumpable off + the policy's seccomp
 * filter (policy may be NULL: no filter).  With handoff_sock >= 0 the seccomp listener
 * goes to the supervisor over that unix socket (kc_seccomp_install_and_send; the
 * supervisor takes it with kc_seccomp_recv_listener) and *listener_fd is -1; with
 * handoff_sock < 0, *listener_fd gets it (-1 when the policy notifies nothing): hand
 * it over and close it before untrusted code runs (see kcage/seccomp.h). */
int kc_sandbox_lockdown(const kc_policy *policy, double cpu_s, int handoff_sock, int *listener_fd,
                        kc_error *err);

/* The same lockdown with a filter compiled once beforehand (kc_seccomp_prog_compile,
 * kcage/seccomp.h): the child allocates nothing, so it is safe right after a clone3 or
 * fork from a process that has other threads.  The listener goes over sock, the fd
 * number the filter was compiled for; prog NULL = no filter.  The one lockdown of
 * `kcage run`'s child and of every pool worker. */
typedef struct kc_seccomp_prog kc_seccomp_prog;
int kc_sandbox_lockdown_prog(const kc_policy *policy, double cpu_s, const kc_seccomp_prog *prog,
                             int sock, kc_error *err);

/* kc_sandbox_spawn for a sandbox started ahead of its wait (a TVM session's standby).
 * Its program's sysinfo(2) goes to its supervisor as kc_sandbox_spawn's does, and
 * blocks until answered: the supervisor waits for it, or idles over it
 * (kc_sandbox_idle) until then. */
int kc_sandbox_spawn_ahead(const kc_sandbox_config *c, kc_sandbox **out, kc_error *err);
/* Until fd is readable or the sandbox's init has ended (0), answer its program's
 * sysinfo(2) calls; 1 as soon as it makes any other call the filter hands to us (a
 * violation, kept for kc_sandbox_wait, whose verdict names it), -1 with err on a
 * failed poll.  Nothing else is watched: output pipes fill, limits wait for the wait. */
int kc_sandbox_idle(kc_sandbox *sb, int fd, kc_error *err);

/* ---------------------------------------------------------------------------------
 * The one verdict decider, for every supervisor of a sandboxed process.
 * ------------------------------------------------------------------------------- */
typedef enum kc_kill_cause {
  KC_KILLED_NONE,
  KC_KILLED_SYSCALL, /* a seccomp violation the parent saw (named) */
  KC_KILLED_CPU,     /* the CPU-time limit, by the parent's polling */
  KC_KILLED_WALL,    /* the wall-clock limit or the call's deadline */
  KC_KILLED_CANCEL,  /* the caller cancelled the run */
  KC_KILLED_OUTPUT,  /* the output cap */
} kc_kill_cause;

/* What the parent observed of the end, from outside the sandbox. */
typedef struct kc_verdict_facts {
  int exit_code;             /* the program's exit status; ignored when signal != 0 */
  int signal;                /* the signal that ended it, 0 when it exited */
  kc_kill_cause killed;      /* why the parent killed it, if it did */
  const char *syscall;       /* KC_KILLED_SYSCALL: the call's name */
  bool oom;                  /* the memory limit ended it (cgroup OOM kill, rlimit) */
  bool pids_hit;             /* the process limit was hit during this run */
  const kc_limits *lim;      /* the run's limits, for the CPU backstop and messages */
  const char *memory_detail; /* a message for `memory` instead of the generic one */
} kc_verdict_facts;

/* Fill res's status, exit_code, signal, syscall, limit and message by the one
 * priority: memory, pids, syscall, CPU time, wall clock,
 * cancel, output, then the program's own end (SIGSYS = syscall).  res->cpu_s must
 * already hold the run's CPU time. */
void kc_verdict_decide(const kc_verdict_facts *f, kc_result *res);

/* Make /proc/self/cmdline read `name` and /proc/self/environ nothing (proc_view.c):
 * for PID 1 of a sandbox, a fork of a host process whose argv names host paths.  Needs
 * /proc/self, no privilege, and maps one page for the name.  The original argument
 * strings stay where they are (argv pointers the caller holds stay valid); with
 * old_args, *old_args and *old_len say where, for a process whose memory untrusted code
 * will share to zero once nothing points there any more. */
int kc_sandbox_hide_args(const char *name, char **old_args, size_t *old_len, kc_error *err);

/* A time namespace for the caller's children from now on, whose boot and monotonic
 * clocks start now (proc_view.c); the caller may make no thread afterwards.
 * offsets_fd: kc_sandbox_time_offsets_open()'s, for a caller whose /proc no longer
 * shows it, else -1.  *shift_ns (may be NULL): how far the children's monotonic clock
 * reads behind ours.  0 also where the kernel has no time namespaces (shift 0). */
int kc_sandbox_time_offsets_open(void);
int kc_sandbox_time_view(int offsets_fd, int64_t *shift_ns, kc_error *err);

/* What sysinfo(2) answers inside a sandbox or a pool worker (proc_view.c): a machine of
 * the host's memory size (not a secret) that nobody else uses, no load, one process,
 * up for uptime_s.  Its supervisor writes this into the caller's buffer. */
struct sysinfo;
void kc_sandbox_sysinfo(struct sysinfo *out, double uptime_s);

#ifdef __cplusplus
}
#endif
#endif
