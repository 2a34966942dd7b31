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

#include <stddef.h>

#include "kcage/error.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

/* Build and enter the sandbox's file system: the policy's mounts (or the built-in
 * layout when the policy has none: ro /usr + merged-usr symlinks, /proc, minimal
 * /dev, 64 MiB /tmp), then the extra mounts, then pivot_root with the old root
 * detached and the root made read-only; chdir to cwd (NULL = "/").  The caller must
 * already be in its own mount namespace (and pid namespace, for a fresh /proc). */
int kc_sandbox_setup_fs(const kc_policy *policy, const kc_mount *extra, size_t n_extra,
                        const char *cwd, kc_error *err);

/* Bring up "lo" in the caller's (new) network namespace, with libnl-route-3. */
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
int kc_sandbox_lockdown(const kc_policy *policy, double cpu_s, int handoff_sock,
                        int *listener_fd, kc_error *err);

/* The same lockdown with a filter compiled once beforehand (kc_seccomp_prog_compile,
 * kcage/seccomp.h): the child allocates nothing, so it is safe right after a clone3 or
 * fork from a process that has other threads.  The listener goes over sock, the fd
 * number the filter was compiled for; prog NULL = no filter.  The one lockdown of
 * `kcage run`'s child and of every pool worker. */
typedef struct kc_seccomp_prog kc_seccomp_prog;
int kc_sandbox_lockdown_prog(const kc_policy *policy, double cpu_s, const kc_seccomp_prog *prog,
                             int sock, kc_error *err);

KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
