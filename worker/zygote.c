/* The zygote: one exec'd kcage-worker per pool that forks workers on request.  A fork
 * from it costs one clone, not a new sandbox (docs/architecture.md).
 *
 * Workers are cloned with CLONE_PARENT, so they are children of the kcage parent, not
 * of the zygote: the parent reaps them itself (waitid on a pidfd gives the exact exit
 * status or signal), their PDEATHSIG fires when the parent dies, and the zygote never
 * has to report deaths. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "worker_internal.h"

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

static void close_from(int lo) {
  syscall(SYS_close_range, (unsigned)lo, ~0U, 0);
}

/* Policies parsed once per zygote: a fork inherits the parsed form. */
typedef struct zpolicy {
  char name[512];
  kc_policy *pol;
  kc_seccomp_prog *prog; /* compiled once: ~0.5 ms of libseccomp saved per worker */
} zpolicy;

static zpolicy g_pols[8];

/* How far our workers' monotonic clock reads behind ours (start_up's time namespace). */
static int64_t g_clock_shift_ns;

/* The pool's extra mounts (their tmpfs are what a worker's fresh scratch remounts). */
static const kc_mount *g_mounts;
static size_t g_n_mounts;

/* The filter of a policy loaded without one.  uncached: touch no file (root's cache of
 * compiled programs), for a compile that runs while our root moves. */
static int policy_compile(zpolicy *z, bool uncached, kc_error *err) {
  if (z->prog)
    return 0;
  /* the worker's socket is always fd 5 (become_worker): the hand-off rule names it */
  int rc = kc_seccomp_prog_compile_worker(z->pol, 5, !uncached, &z->prog, err);
  if (rc < 0) {
    kc_policy_free(z->pol);
    memset(z, 0, sizeof *z);
  }
  return rc;
}

/* The policy named name, loaded once (compile: with its filter, else policy_compile
 * must follow before any worker uses it). */
static int policy_for(const char *name, bool compile, zpolicy **out, kc_error *err) {
  *out = NULL;
  if (!name[0])
    return 0;
  size_t i;
  for (i = 0; i < 8 && g_pols[i].pol; i++)
    if (!strcmp(g_pols[i].name, name)) {
      *out = &g_pols[i];
      return 0;
    }
  if (i == 8) { /* full: drop the oldest */
    kc_policy_free(g_pols[0].pol);
    kc_seccomp_prog_free(g_pols[0].prog);
    memmove(&g_pols[0], &g_pols[1], sizeof g_pols[0] * 7);
    i = 7;
  }
  zpolicy *z = &g_pols[i];
  memset(z, 0, sizeof *z);
  if (kc_policy_load(name, &z->pol, err) < 0)
    return -1;
  snprintf(z->name, sizeof z->name, "%s", name);
  if (compile && policy_compile(z, false, err) < 0)
    return -1;
  *out = z;
  return 0;
}

/* In the new worker: become the worker (never returns). */
__attribute__((noreturn)) static void become_worker(int parent_pidfd, const kc_zygote_req *q,
                                                    const zpolicy *zp, int fds[6]) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* PDEATHSIG is armed only now: if the parent died between clone and here, nobody
   * would kill us.  Its pidfd answers that without a race (getppid() is 0 in a new pid
   * namespace). */
  struct pollfd p = {.fd = parent_pidfd, .events = POLLIN};
  if (poll(&p, 1, 0) != 0)
    _exit(1);
  /* fds: memfd, evfd, sock, out, err [, cgroup] -> 3,4,5 and stdout/stderr */
  if (dup2(fds[3], 1) < 0 || dup2(fds[4], 2) < 0)
    _exit(125);
  int want[3] = {fds[0], fds[1], fds[2]};
  for (int i = 0; i < 3; i++) {
    /* move into a high range first so the dup2 below cannot clobber a source */
    int t = fcntl(want[i], F_DUPFD_CLOEXEC, 100);
    if (t < 0)
      _exit(125);
    want[i] = t;
  }
  for (int i = 0; i < 3; i++)
    if (dup3(want[i], 3 + i, 0) < 0)
      _exit(125);
  close_from(6);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0 && devnull != 0) {
    dup2(devnull, 0);
    close(devnull);
  }
  signal(SIGPIPE, SIG_IGN);
  if (q->flags & KC_ZF_SCRATCH) {
    /* before the lockdown: the namespaces are made with the pool's capabilities */
    kc_error e = {0};
    const kc_policy_spec *s = zp ? kc_policy_get_spec(zp->pol) : NULL;
    if (kc_sandbox_fresh_scratch(zp ? zp->pol : NULL, g_mounts, g_n_mounts, s ? s->cwd : NULL, &e) <
        0) {
      fprintf(stderr, "kcage-worker: %s\n", e.msg);
      _exit(125);
    }
  }
  kc_worker_boot b = {.memfd = 3,
                      .evfd = 4,
                      .sock = 5,
                      .parent_pidfd = -1,
                      .flags = q->flags,
                      .pol = zp ? zp->pol : NULL,
                      .prog = zp ? zp->prog : NULL,
                      .clock_shift_ns = g_clock_shift_ns};
  kc_runtime_run(&b);
}

static pid_t spawn_one(int parent_pidfd, const kc_zygote_req *q, const zpolicy *pol, int *fds,
                       int nfds) {
  struct clone_args a;
  memset(&a, 0, sizeof a);
  a.flags = CLONE_PARENT;
  if (q->flags & KC_ZF_NEWPID)
    a.flags |= CLONE_NEWPID;
  if ((q->flags & KC_ZF_CGROUP_FD) && nfds > 5) {
    a.flags |= CLONE_INTO_CGROUP;
    a.cgroup = (uint64_t)fds[5];
  }
  /* exit_signal must be 0 with CLONE_PARENT: the zygote's own (SIGCHLD) is used. */
  long pid = syscall(SYS_clone3, &a, sizeof a);
  if (pid == 0)
    become_worker(parent_pidfd, q, pol, fds);
  return pid < 0 ? -errno : (pid_t)pid;
}

/* The sandbox's file system for the whole pool, set up by a helper in a new pid
 * namespace: mounting a fresh /proc needs a pid namespace owned by our user namespace,
 * and the zygote itself must stay in the parent's (workers are cloned with
 * CLONE_PARENT, which pid 1 of a namespace may not use).  The helper shares our mount
 * namespace, so its pivot_root moves our root too.  plan: take_from_host's. */
static int enter_fs(const kc_zygote_args *a, zpolicy *zp, const kc_fs_plan *plan, kc_error *err) {
  const kc_policy *pol = zp ? zp->pol : NULL;
  struct clone_args ca;
  memset(&ca, 0, sizeof ca);
  ca.flags = CLONE_NEWPID;
  ca.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &ca, sizeof ca);
  if (pid < 0)
    return kc_error_set(err, errno, "zygote: clone the file-system helper");
  if (pid == 0) {
    kc_error e = {0};
    if (kc_sandbox_fs_enter(plan, "/", &e) < 0) {
      fprintf(stderr, "kcage-worker: %s\n", e.msg);
      _exit(125);
    }
    _exit(0);
  }
  /* The helper builds the file system while we compile the policy's filter (about as
   * long as each other on two CPUs); the compile reads no file, so our root moving
   * meanwhile changes nothing for it. */
  kc_error ce = {0};
  int crc = zp ? policy_compile(zp, true, &ce) : 0;
  int st;
  while (waitpid((pid_t)pid, &st, 0) < 0)
    if (errno != EINTR)
      return kc_error_set(err, errno, "zygote: wait for the file-system helper");
  if (crc < 0) {
    *err = ce;
    return kc_error_prefix(err, "zygote: policy");
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st))
    return kc_error_set(err, 0, "zygote: the sandbox file system could not be set up");
  const kc_policy_spec *s = pol ? kc_policy_get_spec(pol) : NULL;
  if (chdir(s && s->cwd ? s->cwd : "/") < 0 && chdir("/") < 0)
    return kc_error_set(err, errno, "zygote: chdir");
  if (a->lo_up && kc_sandbox_lo_up(err) < 0)
    return -1;
  return 0;
}

/* What the pool's sandbox needs from the host, taken with the ids we were started with
 * (the caller's), before enter_pool_namespaces gives them up: the namespace's root is
 * an unprivileged host id, which cannot pass a directory only the caller may enter
 * (a checkout in /root, a mktemp -d).  The policy is parsed here, its includes too, and
 * every bind source is opened as a detached mount that the helper moves into place. */
static int take_from_host(const kc_zygote_args *a, zpolicy **zp, kc_fs_plan **plan, kc_error *err) {
  if (a->policy && policy_for(a->policy, false, zp, err) < 0)
    return kc_error_prefix(err, "zygote: policy");
  if (a->setup_fs &&
      kc_sandbox_fs_prepare(*zp ? (*zp)->pol : NULL, a->mounts, a->n_mounts, plan, err) < 0)
    return kc_error_prefix(err, "zygote: file system");
  return 0;
}

static int serve(int ctl, int parent_pidfd);

enum { ZYG_REEXEC_MAXARG = 160 }; /* zygote_client.c's argv: 13 + 2 * 64 mounts */

/* The pool's namespaces, made first thing after the exec (the parent spawns us without
 * a fork: zygote_client.c): a user namespace whose root is the sandbox layer's host id
 * (the parent writes the maps between "u" and "m" on the handshake socket, fd 4), the
 * process's one empty network namespace (fd 5; a new one when there is none or it
 * cannot be joined), private mounts, ipc and uts.  Each worker adds its own pid
 * namespace. */
static int enter_pool_namespaces(bool join_netns, bool host_net, char **argv) {
  bool as_root = geteuid() == 0;
  int nsflags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
  /* host_net: a policy without a net namespace (python-net).  The user namespace made
   * here does not own the host's network namespace, so the pool holds no capability
   * over it: no privileged ports, no interface or route changes, no raw sockets. */
  if (!host_net && (!join_netns || setns(5, CLONE_NEWNET) < 0))
    nsflags |= CLONE_NEWNET;
  char c = 'u';
  if (unshare(nsflags) < 0 || write(4, &c, 1) != 1 || read(4, &c, 1) != 1 || c != 'm')
    return -1;
  /* become the namespace's root: full capabilities in the pool's namespaces, none
   * outside them, and no supplementary groups (setgroups is denied to a non-root
   * caller's namespace; inside, everyone is root by now, so our euid from before the
   * unshare decides) */
  if (setresgid(0, 0, 0) < 0 || (setgroups(0, NULL) < 0 && (as_root || errno != EPERM)) ||
      setresuid(0, 0, 0) < 0)
    return -1;
  mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
  close(4);
  if (join_netns)
    close(5);
  /* A process's memory belongs to the user namespace it exec'd in: ours, and our
   * workers' (forks), to the caller's.  A root caller may read a worker's mappings
   * anyway (CAP_SYS_PTRACE there); a non-root one only in a namespace it owns, so for
   * it we exec again, in the pool's (the namespaces are made: no --ns). */
  if (as_root)
    return 0;
  char *args[ZYG_REEXEC_MAXARG];
  int n = 0;
  for (int i = 0; argv[i] && n < ZYG_REEXEC_MAXARG - 1; i++)
    if (strcmp(argv[i], "--ns") && strcmp(argv[i], "--netns"))
      args[n++] = argv[i];
  args[n] = NULL;
  execv("/proc/self/exe", args);
  return -1;
}

/* take_from_host's frames held the binds' host paths (realpath's buffers, the plan's
 * scratch): every worker is a fork of us, so they go before the first one. */
__attribute__((noinline)) static void wipe_stack_below(void) {
  char buf[64 << 10];
  explicit_bzero(buf, sizeof buf);
  __asm__ volatile("" : : "r"(buf) : "memory");
}

/* Start-up, in the pool's namespaces: hide our argv, enter the sandbox's file system,
 * boot the interpreter, give our workers clocks of the pool's own; the first failure is
 * said in the hello.  pre: take_from_host's outcome (its error in err). */
static void start_up(const kc_zygote_args *a, int pre, zpolicy *zp, kc_fs_plan *plan,
                     kc_zygote_rep *hello, kc_error *err) {
  /* Every worker is a fork of us and PID 1 of its own namespace: /proc/1/cmdline would
   * read our argv, the host paths of every bind.  Done while the host's /proc is still
   * ours to read (the sandbox's shows another pid namespace), as is the opening of the
   * time namespace's offsets. */
  char *old_args = NULL;
  size_t old_len = 0;
  kc_error e = {0};
  int tfd = a->userns ? kc_sandbox_time_offsets_open() : -1;
  if (kc_sandbox_hide_args("kcage-worker", &old_args, &old_len, &e) < 0) {
    *err = e;
    kc_error_prefix(err, "zygote");
  } else if (pre < 0) {
    /* err holds take_from_host's reason */
  } else if (!a->setup_fs && zp && policy_compile(zp, false, err) < 0) {
    kc_error_prefix(err, "zygote: policy");
  } else if (a->setup_fs && enter_fs(a, zp, plan, err) < 0) {
    /* err says it */
  } else if (a->python_lib && kc_python_boot(a->python_lib, a->python_boot, err) < 0) {
    /* err says it */
  } else if (tfd >= 0 && kc_sandbox_time_view(tfd, &g_clock_shift_ns, err) < 0) {
    /* Last: after it we may make no thread, and the interpreter's boot might.  Workers
     * would read the host's uptime in CLOCK_BOOTTIME and sysinfo(2). */
    kc_error_prefix(err, "zygote");
  } else {
    err->code = 0;
    err->msg[0] = 0;
  }
  if (tfd >= 0)
    close(tfd);
  if (err->msg[0]) {
    hello->pid = -(err->code ? err->code : EINVAL);
    snprintf(hello->msg, sizeof hello->msg, "%.250s", err->msg);
  }
  /* Nothing points into argv after start-up (the mounts are copies, the policy is
   * parsed, the Python boot code has run): what our workers, and the kernels in them,
   * could read of it there goes, and so do the copies of the binds' host paths. */
  if (old_args)
    explicit_bzero(old_args, old_len);
  for (size_t i = 0; i < a->n_mounts; i++)
    if (a->mounts[i].src) /* program.c's copies */
      explicit_bzero((char *)a->mounts[i].src, strlen(a->mounts[i].src));
}

int kc_zygote_main(const kc_zygote_args *a) {
  int ctl = a->ctl;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  kc_sched_slice(0); /* workers must not inherit the supervisor's short slice */
  kc_error err = {0};
  zpolicy *zp = NULL;
  kc_fs_plan *plan = NULL;
  /* A caller that is not root has us exec again inside the namespaces (as itself, so
   * its own files stay in reach): that exec takes from the host. */
  int pre = a->userns && geteuid() != 0 ? 0 : take_from_host(a, &zp, &plan, &err);
  wipe_stack_below();
  if (a->userns && enter_pool_namespaces(a->join_netns, a->host_net, a->argv) < 0)
    return 125;
  int parent_pidfd = (int)syscall(SYS_pidfd_open, getppid(), 0);
  if (parent_pidfd < 0 || getppid() == 1)
    return 1;
  struct pollfd p = {.fd = parent_pidfd, .events = POLLIN};
  if (poll(&p, 1, 0) != 0)
    return 1;
  signal(SIGPIPE, SIG_IGN);
  kc_zygote_rep hello = {.magic = KC_ZYGOTE_MAGIC, .generation = 0, .pid = 0};
  start_up(a, pre, zp, plan, &hello, &err);
  g_mounts = a->mounts;
  g_n_mounts = a->n_mounts;
  kc_sandbox_fs_release(plan);
  if (kc_send_fds(ctl, &hello, sizeof hello, NULL, 0) < 0 || hello.pid < 0)
    return 1;
  return serve(ctl, parent_pidfd);
}

/* A slot zygote: a fork of the zygote that lives in one worker slot's cgroup, so the
 * workers it forks are born in that cgroup.  Attaching every new worker by pid costs a
 * write to cgroup.procs in each v1 hierarchy, and each such write waits for an RCU
 * grace period (the cgroup threadgroup rwsem): ~0.1 ms usually, 10-16 ms at times on
 * this machine.  A fork inherits the cgroup for free. */
static pid_t spawn_slot(int parent_pidfd, int sock) {
  struct clone_args a;
  memset(&a, 0, sizeof a);
  a.flags = CLONE_PARENT; /* the kcage parent's child: it reaps it, PDEATHSIG */
  long pid = syscall(SYS_clone3, &a, sizeof a);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct pollfd p = {.fd = parent_pidfd, .events = POLLIN};
    if (poll(&p, 1, 0) != 0)
      _exit(1);
    /* its socket at 3, the parent's pidfd (for the workers' PDEATHSIG check) at 4 */
    int ps = fcntl(sock, F_DUPFD_CLOEXEC, 100), pp = fcntl(parent_pidfd, F_DUPFD_CLOEXEC, 100);
    if (ps < 0 || pp < 0 || dup3(ps, 3, O_CLOEXEC) < 0 || dup3(pp, 4, O_CLOEXEC) < 0)
      _exit(125);
    close_from(5);
    _exit(serve(3, 4));
  }
  return pid < 0 ? -errno : (pid_t)pid;
}

static int serve(int ctl, int parent_pidfd) {
  for (;;) {
    kc_zygote_req q;
    int fds[6] = {-1, -1, -1, -1, -1, -1}, nfds = 6;
    ssize_t n = kc_recv_fds(ctl, &q, sizeof q, fds, &nfds);
    if (n <= 0)
      return 0; /* the parent closed the pool */
    kc_zygote_rep rep = {.magic = KC_ZYGOTE_MAGIC, .generation = q.generation};
    if (n == (ssize_t)sizeof q && q.magic == KC_ZYGOTE_MAGIC && q.op == KC_ZOP_SLOT && nfds == 1) {
      rep.pid = spawn_slot(parent_pidfd, fds[0]);
      if (rep.pid < 0)
        snprintf(rep.msg, sizeof rep.msg, "zygote: slot: %s", strerror(-rep.pid));
    } else if (n != (ssize_t)sizeof q || q.magic != KC_ZYGOTE_MAGIC || q.op != KC_ZOP_SPAWN ||
               nfds < 5) {
      if (n == (ssize_t)sizeof q && q.op == KC_ZOP_EXIT)
        return 0;
      rep.pid = -EINVAL;
      snprintf(rep.msg, sizeof rep.msg, "zygote: malformed request");
    } else {
      q.policy[sizeof q.policy - 1] = 0;
      zpolicy *pol = NULL;
      kc_error err = {0};
      if (policy_for(q.policy, true, &pol, &err) < 0) {
        rep.pid = -(err.code ? err.code : EINVAL);
        snprintf(rep.msg, sizeof rep.msg, "zygote: policy: %.200s", err.msg);
      } else {
        rep.pid = spawn_one(parent_pidfd, &q, pol, fds, nfds);
        if (rep.pid < 0)
          snprintf(rep.msg, sizeof rep.msg, "zygote: clone3: %s", strerror(-rep.pid));
      }
    }
    for (int i = 0; i < nfds; i++)
      close(fds[i]);
    if (kc_send_fds(ctl, &rep, sizeof rep, NULL, 0) < 0)
      return 0;
  }
}
