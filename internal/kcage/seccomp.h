/* The seccomp filter of a policy, compiled once and loaded by children, and the
 * supervisor's side of its user-notification listener: the building blocks that the
 * sandbox's wait loop and the worker pool share.
 *
 * Why a listener at all: a seccomp KILL only shows up as SIGSYS in the wait status,
 * which the program could also raise itself, and the kernel does not say which
 * syscall it was.  kc_policy_install_seccomp() therefore compiles "kill" rules (and a
 * "kill" default) to SCMP_ACT_NOTIFY: the offending task blocks inside the syscall
 * and the kernel hands (syscall nr, arch, args, pid) to whoever holds the listener
 * fd.  The untrusted program cannot forge that: only the kernel writes notifications,
 * and the child closed its copy of the listener before running untrusted code.
 *
 * The supervisor's loop:
 *   poll(listener, POLLIN) (together with the child's pidfd);
 *   kc_seccomp_notify_receive(listener, &ev)      -> ENOENT: the task died meanwhile,
 *                                                    just poll again;
 *   kc_policy_notify_kind(policy, &ev):
 *     KC_NOTIFY_VIOLATION -> record ev.name as the verdict's syscall, kill the cgroup
 *                            (the syscall never runs: SIGKILL ends the blocked task),
 *                            then answer with kc_seccomp_notify_errno(EPERM) or just
 *                            close the listener after the tree is dead;
 *     KC_NOTIFY_ASK       -> a "notify" rule (execve/execveat under `measure`): the
 *                            supervisor decides, e.g. kc_seccomp_notify_continue() for
 *                            the first exec of `kcage run`, a violation afterwards.
 *
 * The listener MUST stay open in the supervisor while the child lives: once every
 * copy of the fd is closed, the kernel fails each notifying syscall with ENOSYS
 * instead of blocking it, i.e. "kill" rules silently degrade to errno ENOSYS.  That is
 * why the parent keeps it until the whole tree is dead (PDEATHSIG + cgroup kill cover
 * the parent's own death).
 *
 * Only one listener may exist per filter chain: a second filter with NOTIFY actions
 * fails with EBUSY.  Filters stacked later (e.g. a worker's "seal") must use other
 * actions (ERRNO, KILL_PROCESS); seccomp takes the most severe action of all filters
 * (KILL_PROCESS > KILL_THREAD > TRAP > ERRNO > USER_NOTIF > TRACE > LOG > ALLOW).
 *
 * CONTINUE is only safe for decisions that do not read user memory: the task can
 * change a pointed-to path between our check and the kernel's use.  Decisions here are
 * made on the syscall number, arch and register arguments only. */
#ifndef KCAGE_SECCOMP_H
#define KCAGE_SECCOMP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kcage/error.h"
#include "kcage/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- handing the listener to the supervisor ----------------------------------
 * The listener only exists once the filter is loaded, so the child must pass it on
 * while already filtered.  Under a policy that forbids sendmsg (measure) a plain
 * SCM_RIGHTS send would notify a supervisor that does not hold the listener yet:
 * a deadlock.  kc_seccomp_install_and_send() therefore compiles one extra rule,
 * "allow sendmsg arg0 == sock", into the filter.  That is harmless: sock is closed
 * right after, and a policy that forbids sendmsg also forbids creating sockets, so the
 * number can never again name a socket.  (The alternative, pidfd_getfd() from the
 * parent, needs ptrace rights over the child and a write+read the policy must allow.)
 *
 * Child:  prctl(PR_SET_NO_NEW_PRIVS) (libseccomp also sets it), then
 *         kc_seccomp_install_and_send(policy, sock) - after it returns the child holds
 *         no listener; it must not run untrusted code before this returned 0.
 * Parent: kc_seccomp_recv_listener(sock, timeout_ms, &listener); listener is -1 when
 *         the policy has no kill/notify action (nothing to supervise).
 * Exactly one message is always sent (with or without an fd), so the parent never
 * waits for nothing; a child that died before sending gives EOF (ECONNRESET/EPIPE). */
int kc_seccomp_install_and_send(const kc_policy *p, int sock, kc_error *err);
int kc_seccomp_recv_listener(int sock, int timeout_ms, int *listener, kc_error *err);
/* Precompiled: the parent compiles once (libseccomp allocates and costs ~100s of µs),
 * the forked child only loads (one seccomp() call, no allocation, safe after fork
 * in a multi-threaded parent).  handoff: the fd number the child will send the
 * listener on (-1: none).  The loader sets no_new_privs and filters the calling
 * thread only (no TSYNC: a forked child has one thread).  Child functions return -1
 * with errno rather than a kc_error. */
typedef struct kc_seccomp_prog kc_seccomp_prog;
int kc_seccomp_prog_compile(const kc_policy *p, int handoff, kc_seccomp_prog **out, kc_error *err);
/* The same for a sandbox (kc_sandbox_spawn), whose supervisor answers sysinfo(2)
 * itself: where the policy allows sysinfo unconditionally, the filter hands it to the
 * listener instead (kc_policy_views_sysinfo), and the supervisor replies with
 * kc_seccomp_notify_sysinfo(). */
int kc_seccomp_prog_compile_sandbox(const kc_policy *p, int handoff, kc_seccomp_prog **out,
                                    kc_error *err);
/* The same for a pool worker, whose supervisor reads the listener only while it waits
 * for a call: sysinfo goes to the listener as in a sandbox, and the worker's parent
 * hands that listener to its relay thread, which answers sysinfo at once
 * (worker/sysinfo_relay.c).  cached false: without root's cache of compiled programs,
 * touching no file, for a caller whose root may move meanwhile (the zygote compiles
 * while its file system is built). */
int kc_seccomp_prog_compile_worker(const kc_policy *p, int handoff, bool cached,
                                   kc_seccomp_prog **out, kc_error *err);
/* Whether kc_seccomp_prog_compile_worker hands sysinfo(2) to the listener under p (so
 * that the worker's parent must answer it). */
bool kc_seccomp_worker_notifies_sysinfo(const kc_policy *p);
void kc_seccomp_prog_free(kc_seccomp_prog *prog);
size_t kc_seccomp_prog_len(const kc_seccomp_prog *prog); /* BPF instructions */
int kc_seccomp_prog_load(const kc_seccomp_prog *prog, int *listener);
int kc_seccomp_prog_load_and_send(const kc_seccomp_prog *prog, int sock);

/* kc_policy_install_seccomp() with the hand-off rule for fd `handoff`
 * (KC_HANDOFF_NONE: no extra rule; KC_HANDOFF_ANY: sendmsg on any fd, which is what
 * kc_policy_install_seccomp() uses). */
#define KC_HANDOFF_NONE (-1)
#define KC_HANDOFF_ANY (-2)
int kc_seccomp_install(const kc_policy *p, int handoff, int *listener_fd, kc_error *err);

typedef struct kc_seccomp_event {
  uint64_t id;   /* the kernel's cookie for this notification */
  pid_t pid;     /* the task, in the supervisor's pid namespace (0 if not visible) */
  int nr;        /* syscall number for `arch` */
  uint32_t arch; /* AUDIT_ARCH_* */
  uint64_t ip;
  uint64_t args[6];
  char name[48]; /* "socket"; "i386:socket" for a foreign arch; "#123" when unknown */
} kc_seccomp_event;

/* Receive one notification.  Call after poll() reported POLLIN.  Returns 0, or -1 with
 * err->code ENOENT when the notifying task died before it could be read (not an
 * error: poll again), other codes on real failures. */
int kc_seccomp_notify_receive(int listener, kc_seccomp_event *ev, kc_error *err);

/* Is the notification still pending (the task has not died or been interrupted)?
 * Check it after reading anything of the task's (e.g. /proc/PID/...) and before
 * acting on it, so a recycled pid cannot be confused with the notifying task. */
bool kc_seccomp_notify_id_valid(int listener, uint64_t id);

/* Let the syscall run as if no filter had matched (SECCOMP_USER_NOTIF_FLAG_CONTINUE). */
int kc_seccomp_notify_continue(int listener, const kc_seccomp_event *ev, kc_error *err);
/* Fail the syscall with errnum (> 0) without running it. */
int kc_seccomp_notify_errno(int listener, const kc_seccomp_event *ev, int errnum, kc_error *err);

typedef enum kc_notify_kind {
  KC_NOTIFY_VIOLATION, /* a "kill" rule, the kill default, or a foreign arch */
  KC_NOTIFY_ASK,       /* a "notify" rule of the policy matched */
} kc_notify_kind;

/* Does the policy allow sysinfo(2) unconditionally, so that a sandbox's filter hands
 * it to the supervisor?  And is this notification such a call? */
bool kc_policy_views_sysinfo(const kc_policy *p);
bool kc_seccomp_is_sysinfo_view(const kc_policy *p, const kc_seccomp_event *ev);
/* Answer a sysinfo(2) call with *si: written into the caller's buffer through
 * /proc/PID/mem (checked still pending after the open, so a recycled pid is never
 * written), then the call returns 0; EFAULT when the buffer is not writable. */
struct sysinfo;
int kc_seccomp_notify_sysinfo(int listener, const kc_seccomp_event *ev, const struct sysinfo *si,
                              kc_error *err);

/* Which rule sent this notification (userspace mirror of the compiled filter). */
kc_notify_kind kc_policy_notify_kind(const kc_policy *p, const kc_seccomp_event *ev);

/* Does the policy's filter hand this native-arch syscall, with these arguments, to the
 * supervisor (a kill or notify rule, or a kill/notify default)?  A stacked filter asks
 * this to leave such calls alone: seccomp runs the strictest action of all filters, so
 * a stacked TRAP/KILL would win over the listener and the violation would lose its
 * name (kc_runtime_seal_exec).  Conservative: true only when every rule that matches
 * is kill/notify, or none matches and the default is. */
bool kc_policy_reports_syscall(const kc_policy *p, int nr, const uint64_t args[6]);
/* The same for every possible argument: no allow/errno rule names NR, and an
 * unconditional kill/notify rule does or the default is kill/notify. */
bool kc_policy_always_reports(const kc_policy *p, int nr);

/* Name of a syscall of any arch libseccomp knows (AUDIT_ARCH_* value); "" if unknown. */
const char *kc_syscall_name_arch(uint32_t arch, int nr, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
