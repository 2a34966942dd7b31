/* Parent side of the start: the plan, the cgroup, clone3 into every namespace (and
 * straight into the v2 cgroup), id maps, then "go". */
#include "clock.h"
#include "fdio.h"
#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "sandbox_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "kcage/cleanup.h"

const kc_policy_namespaces kc__all_namespaces = {.user = true,
                                                 .pid = true,
                                                 .mount = true,
                                                 .ipc = true,
                                                 .uts = true,
                                                 .cgroup = true,
                                                 .net = true};

static char *const default_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                    "LANG=C.UTF-8", NULL};

void kc_sandbox_config_init(kc_sandbox_config *c) {
  memset(c, 0, sizeof *c);
  c->stdin_fd = c->stdout_fd = c->stderr_fd = c->netns_fd = c->cancel_fd = -1;
}

static int write_file(const char *path, const char *s, kc_error *err) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return kc_error_set(err, errno, "open %s", path);
  size_t len = strlen(s);
  ssize_t n = write(fd, s, len);
  int e = errno;
  close(fd);
  if (n != (ssize_t)len)
    return kc_error_set(err, n < 0 ? e : EIO, "write %s", path);
  return 0;
}

/* Inside 0 -> the sandbox's own host ids as root (never host root, never an id that
 * anything else uses); as a user, the only choice is the caller's. */
static int write_id_maps(pid_t pid, const kc_sandbox_ids *ids, kc_error *err) {
  char path[64], map[64];
  if (geteuid() != 0) {
    snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
    if (write_file(path, "deny", err) < 0)
      return -1;
  }
  snprintf(map, sizeof map, "0 %u 1\n", (unsigned)ids->uid);
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
  if (write_file(path, map, err) < 0)
    return -1;
  snprintf(map, sizeof map, "0 %u 1\n", (unsigned)ids->gid);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
  return write_file(path, map, err);
}

static int sync_send(int fd, char c, bool *gone, kc_error *err) {
  ssize_t n;
  do
    n = send(fd, &c, 1, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n == 1)
    return 0;
  if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
    *gone = true;
    return 0;
  }
  return kc_error_set(err, n < 0 ? errno : EIO, "signal the child");
}

static bool child_exited(int pidfd) {
  struct pollfd p = {pidfd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

/* Bring the child's lo up from here, while the child builds its file system (it is off
 * the child's critical path that way): step into its network namespace through the
 * pidfd and back.  false: not possible (e.g. not root); the child does it itself. */
static bool lo_up_from_outside(int pidfd) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0)
    return false;
  if (setns(pidfd, CLONE_NEWNET) < 0) {
    close(self);
    return false;
  }
  kc_error e;
  bool ok = kc_sandbox_lo_up(&e) == 0;
  if (setns(self, CLONE_NEWNET) < 0)
    abort(); /* staying in the sandbox's netns is not an option for this process */
  close(self);
  return ok;
}

static uint64_t pick_u64(uint64_t a, uint64_t b) {
  return a ? a : b;
}
static double pick_d(double a, double b) {
  return a > 0 ? a : b;
}

static const char *env_path(char *const *envp) {
  for (size_t i = 0; envp && envp[i]; i++)
    if (!strncmp(envp[i], "PATH=", 5))
      return envp[i] + 5;
  return NULL;
}

void kc_sandbox_free(kc_sandbox *sb) {
  if (!sb)
    return;
  if (sb->pidfd >= 0 && !sb->reaped) {
    kc_sandbox_kill(sb);
    siginfo_t si;
    waitid(P_PIDFD, sb->pidfd, &si, WEXITED);
  }
  if (sb->cg)
    kc_cgroup_destroy(sb->cg);
  kc_close_fd(&sb->pidfd);
  kc_close_fd(&sb->sync_wr);
  kc_close_fd(&sb->report_rd);
  kc_close_fd(&sb->status_rd);
  kc_close_fd(&sb->sock_rd);
  kc_close_fd(&sb->listener);
  kc_close_fd(&sb->out_rd);
  kc_close_fd(&sb->err_rd);
  kc_close_fd(&sb->in_wr);
  /* Only now, with every process of the sandbox gone, may another take its ids. */
  kc_sandbox_ids_release(&sb->ids);
  free(sb);
}

pid_t kc_sandbox_pid(const kc_sandbox *sb) {
  return sb ? sb->pid : -1;
}
void kc_sandbox_start_wall(kc_sandbox *sb, double wall_s) {
  sb->t0 = kc_now_s();
  sb->lim.wall_s = wall_s;
}
kc_cgroup *kc_sandbox_cgroup(const kc_sandbox *sb) {
  return sb ? sb->cg : NULL;
}

int kc_sandbox_kill(kc_sandbox *sb) {
  if (!sb || sb->reaped)
    return 0;
  int rc = 0;
  /* SIGKILL to our PID 1 takes the whole pid namespace down at once; the cgroup kill
   * also covers anything that is not (yet) in it. */
  if (sb->pidfd >= 0 && syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0 &&
      errno != ESRCH)
    rc = -1;
  if (sb->cg) {
    kc_error e;
    if (kc_cgroup_kill(sb->cg, &e) < 0)
      rc = -1;
  }
  return rc;
}

static atomic_uint run_counter;

static void kc_seccomp_prog_freep(kc_seccomp_prog **p) {
  kc_seccomp_prog_free(*p);
}

/* The limits in force: the caller's, else the policy's. */
static void effective_limits(const kc_sandbox_config *c, const kc_policy_spec *spec, kc_limits *l) {
  *l = c->limits;
  if (!spec)
    return;
  l->memory_bytes = pick_u64(l->memory_bytes, spec->memory_bytes);
  l->cpu_s = pick_d(l->cpu_s, spec->cpu_s);
  l->wall_s = pick_d(l->wall_s, spec->wall_s);
  l->pids = l->pids ? l->pids : spec->pids;
  l->cpus = pick_d(l->cpus, spec->cpus);
  l->output_bytes = pick_u64(l->output_bytes, spec->output_bytes);
}

/* What the child will do (kc__child_main), minus the fds. */
static int make_plan(const kc_sandbox_config *c, const kc_policy_spec *spec, const kc_limits *l,
                     kc_plan *plan, kc_error *err) {
  memset(plan, 0, sizeof *plan);
  plan->policy = c->policy;
  plan->ns = spec ? spec->ns : kc__all_namespaces;
  /* The user namespace is what makes every other one (and no host root) possible. */
  plan->ns.user = true;
  plan->argv = c->argv;
  plan->envp = c->envp ? c->envp : default_env;
  plan->path_env = env_path(plan->envp);
  snprintf(plan->exe, sizeof plan->exe, "%s", c->argv[0]);
  const char *cwd = c->cwd ? c->cwd : (spec && spec->cwd ? spec->cwd : "/");
  snprintf(plan->cwd, sizeof plan->cwd, "%s", cwd);
  plan->cpu_s = l->cpu_s;
  plan->new_net = plan->ns.net && c->netns_fd < 0;
  if (plan->ns.mount &&
      kc__fs_plan(spec, c->mounts, c->n_mounts, &plan->mnts, &plan->n_mnts, err) < 0)
    return kc_error_prefix(err, "mounts");
  return 0;
}

/* A cgroup only when something needs one: a limit it enforces or counts (CPU time of a
 * whole tree), or no pid namespace to take the tree down with our init.  A plain run
 * saves the cgroup round trips (mkdir/attach/rmdir in every hierarchy, the slowest part
 * of a start on a busy v1 host); its tree still dies with our PID 1, and cpu_s / peak
 * memory then come from init's rusage. */
static int maybe_cgroup(kc_sandbox *sb, const kc_sandbox_config *c, kc_plan *plan, kc_error *err) {
  const kc_limits *l = &sb->lim;
  bool need_cg = l->memory_bytes || l->pids || l->cpus > 0 || l->cpu_s > 0 || !plan->ns.pid ||
                 c->always_cgroup;
  bool limits = l->memory_bytes || l->pids || l->cpus;
  if (!need_cg || (kc_cgroup_mode_for(&c->settings) == KC_CGROUP_NONE && !limits))
    return 0;
  kc_cgroup_limits cl = {.memory_bytes = l->memory_bytes, .pids = l->pids, .cpus = l->cpus};
  char name[64];
  snprintf(name, sizeof name, "run-%d-%u", (int)getpid(), atomic_fetch_add(&run_counter, 1));
  if (kc_cgroup_create(name, &cl, &c->settings, &sb->cg, err) < 0)
    return err && err->code != ENOTSUP ? kc_error_prefix(err, "cgroup") : -1;
  if (kc_cgroup_read(sb->cg, &sb->base, err) < 0)
    return kc_error_prefix(err, "cgroup counters");
  plan->cgroup_cpu = sb->base.cpu_usec >= 0;
  return 0;
}

/* The fds between parent and child while the sandbox starts; what the parent keeps is
 * stolen into the kc_sandbox, everything else is closed on the way out. */
typedef struct spawn_fds {
  int sync[2], rep[2], st[2], sock[2], out[2], err[2], in[2];
  int devnull, self_net;
} spawn_fds;

static void spawn_fds_close(spawn_fds *f) {
  int *all[] = {&f->sync[0], &f->sync[1], &f->rep[0],  &f->rep[1],  &f->st[0],  &f->st[1],
                &f->sock[0], &f->sock[1], &f->out[0],  &f->out[1],  &f->err[0], &f->err[1],
                &f->in[0],   &f->in[1],   &f->devnull, &f->self_net};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    kc_close_fd(all[i]);
}

/* A terminal stays on this side: the program reads it through a pipe, so it can
 * neither write to the caller's terminal past --output nor change its settings. */
static int pipe_terminal(kc_sandbox *sb, int tty, spawn_fds *f, kc_plan *plan, kc_error *err) {
  if (pipe2(f->in, O_CLOEXEC) < 0)
    return kc_error_set(err, errno, "pipes");
  plan->stdin_fd = f->in[0];
  /* Reading our controlling terminal from the background would stop us (SIGTTIN):
   * then the program gets end of file, as a background job gets no input. */
  pid_t fg = tcgetpgrp(tty);
  if (fg < 0 || fg == getpgrp())
    sb->in_src = tty;
  else
    kc_close_fd(&f->in[1]);
  return 0;
}

static int open_fds(kc_sandbox *sb, const kc_sandbox_config *c, spawn_fds *f, kc_plan *plan,
                    kc_error *err) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->sync) < 0 ||
      pipe2(f->rep, O_CLOEXEC) < 0 || pipe2(f->st, O_CLOEXEC) < 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->sock) < 0 ||
      pipe2(f->out, O_CLOEXEC) < 0 || pipe2(f->err, O_CLOEXEC) < 0)
    return kc_error_set(err, errno, "pipes");
  if (c->stdin_fd < 0 && (f->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
    return kc_error_set(err, errno, "open /dev/null");
  plan->sync_rd = f->sync[0];
  plan->report_wr = f->rep[1];
  plan->status_wr = f->st[1];
  plan->sock_wr = f->sock[1];
  plan->stdin_fd = c->stdin_fd >= 0 ? c->stdin_fd : f->devnull;
  plan->out_wr = f->out[1];
  plan->err_wr = f->err[1];
  if (c->stdin_fd >= 0 && isatty(c->stdin_fd))
    return pipe_terminal(sb, c->stdin_fd, f, plan, err);
  return 0;
}

static uint64_t clone_flags(const kc_plan *plan, int cgfd) {
  uint64_t flags = CLONE_PIDFD | CLONE_NEWUSER;
  if (plan->ns.pid)
    flags |= CLONE_NEWPID;
  if (plan->ns.mount)
    flags |= CLONE_NEWNS;
  if (plan->ns.ipc)
    flags |= CLONE_NEWIPC;
  if (plan->ns.uts)
    flags |= CLONE_NEWUTS;
  if (plan->ns.cgroup)
    flags |= CLONE_NEWCGROUP;
  if (plan->new_net)
    flags |= CLONE_NEWNET;
  if (cgfd >= 0)
    flags |= CLONE_INTO_CGROUP;
  return flags;
}

/* clone3 into every namespace (and straight into the v2 cgroup).  Joining a given
 * netns: the parent steps into it for the clone (setns is per thread), since the
 * child, in its new user namespace, may not. */
static int clone_child(kc_sandbox *sb, const kc_sandbox_config *c, kc_plan *plan, spawn_fds *f,
                       kc_error *err) {
  if (c->netns_fd >= 0) {
    f->self_net = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (f->self_net < 0 || setns(c->netns_fd, CLONE_NEWNET) < 0)
      return kc_error_set(err, errno, "join network namespace");
  }
  int cgfd = sb->cg ? kc_cgroup_v2_fd(sb->cg) : -1;
  int pidfd = -1;
  struct clone_args ca;
  memset(&ca, 0, sizeof ca);
  ca.flags = clone_flags(plan, cgfd);
  ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
  ca.exit_signal = SIGCHLD;
  ca.cgroup = cgfd >= 0 ? (uint64_t)cgfd : 0;
  long pid = syscall(SYS_clone3, &ca, sizeof ca);
  int clone_errno = errno;
  if (pid == 0)
    kc__child_main(plan); /* never returns */
  /* Cannot fail short of a kernel bug; staying in the sandbox's netns is not an option
   * for the rest of this process. */
  if (f->self_net >= 0 && setns(f->self_net, CLONE_NEWNET) < 0)
    abort();
  if (pid < 0)
    return kc_error_set(err, clone_errno, "clone3");
  sb->pid = (pid_t)pid;
  sb->pid_ns = plan->ns.pid;
  sb->pidfd = pidfd;
  return 0;
}

/* Maps first, so the child builds its file system while we attach it to the v1
 * hierarchies (a cgroup.procs write can take milliseconds here), then "go".  A child
 * that failed its setup is gone early: not an error here, the wait reads its report
 * (and kcage must not die of SIGPIPE on the way). */
static int start_child(kc_sandbox *sb, const kc_plan *plan, int sync_wr, kc_error *err) {
  bool gone = false;
  if (write_id_maps(sb->pid, &sb->ids, err) < 0 || sync_send(sync_wr, 'm', &gone, err) < 0)
    return kc_error_prefix(err, "start sandbox");
  if (!gone && sb->cg && kc_cgroup_attach(sb->cg, sb->pid, err) < 0) {
    if (!child_exited(sb->pidfd))
      return kc_error_prefix(err, "start sandbox");
    gone = true;
  }
  if (!gone) {
    char go = plan->new_net && !lo_up_from_outside(sb->pidfd) ? 'G' : 'g';
    if (sync_send(sync_wr, go, &gone, err) < 0)
      return kc_error_prefix(err, "start sandbox");
  }
  return 0;
}

/* The parent's ends, kept for the wait loop (non-blocking where it polls them). */
static void keep_fds(kc_sandbox *sb, spawn_fds *f) {
  sb->sync_wr = kc_steal_fd(f->sync[1]);
  sb->report_rd = kc_steal_fd(f->rep[0]);
  sb->status_rd = kc_steal_fd(f->st[0]);
  sb->sock_rd = kc_steal_fd(f->sock[0]);
  sb->out_rd = kc_steal_fd(f->out[0]);
  sb->err_rd = kc_steal_fd(f->err[0]);
  sb->in_wr = kc_steal_fd(f->in[1]);
  int nonblocking[] = {sb->in_wr, sb->out_rd, sb->err_rd, sb->status_rd, sb->report_rd};
  for (size_t i = 0; i < sizeof nonblocking / sizeof nonblocking[0]; i++)
    if (nonblocking[i] >= 0)
      fcntl(nonblocking[i], F_SETFL, O_NONBLOCK);
}

/* A sandbox with its own host ids: the caller's, or a slot of the reserved range held
 * until kc_sandbox_free (every process of the sandbox gone). */
static kc_sandbox *sandbox_new(const kc_sandbox_config *c, kc_error *err) {
  kc_sandbox *sb = calloc(1, sizeof *sb);
  if (!sb) {
    kc_error_set(err, ENOMEM, "sandbox");
    return NULL;
  }
  sb->sync_wr = sb->pidfd = sb->report_rd = sb->status_rd = sb->sock_rd = sb->listener = -1;
  sb->out_rd = sb->err_rd = sb->in_src = sb->in_wr = -1;
  sb->ids.lock_fd = -1;
  if (c->ids) {
    sb->ids = *c->ids;
    sb->ids.lock_fd = -1; /* the caller's to release */
  } else if (kc_sandbox_ids_acquire(&sb->ids, &c->settings, err) < 0) {
    free(sb);
    return NULL;
  }
  sb->fwd_out = c->stdout_fd;
  sb->fwd_err = c->stderr_fd;
  sb->cancel_fd = c->cancel_fd;
  sb->policy = c->policy;
  return sb;
}

static void plan_free(kc_plan *plan) {
  kc__fs_free(plan->mnts, plan->n_mnts);
}

static void sandbox_freep(kc_sandbox **sb) {
  kc_sandbox_free(*sb);
}

/* The plan and the cgroup first, then the fds, the filter compiled here (libseccomp
 * allocates and takes 100s of µs; the child only loads it), clone3, and the start. */
static int spawn(const kc_sandbox_config *c, bool view_sysinfo, kc_sandbox **out, kc_error *err) {
  *out = NULL;
  if (!c->argv || !c->argv[0] || !c->argv[0][0])
    return kc_error_set(err, EINVAL, "no program to run");
  const kc_policy_spec *spec = c->policy ? kc_policy_get_spec(c->policy) : NULL;
  __attribute__((cleanup(sandbox_freep))) kc_sandbox *sb = sandbox_new(c, err);
  if (!sb)
    return -1;
  effective_limits(c, spec, &sb->lim);
  __attribute__((cleanup(plan_free))) kc_plan plan;
  if (make_plan(c, spec, &sb->lim, &plan, err) < 0 || maybe_cgroup(sb, c, &plan, err) < 0)
    return -1;
  __attribute__((cleanup(spawn_fds_close)))
  spawn_fds f = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, -1, -1};
  if (open_fds(sb, c, &f, &plan, err) < 0)
    return -1;
  kc__fs_open_trees(plan.mnts, plan.n_mnts);
  kc__caps_prepare();
  __attribute__((cleanup(kc_seccomp_prog_freep))) kc_seccomp_prog *prog = NULL;
  if (c->policy &&
      (view_sysinfo ? kc_seccomp_prog_compile_sandbox(c->policy, KC_CHILD_SOCK_FD, &prog, err)
                    : kc_seccomp_prog_compile(c->policy, KC_CHILD_SOCK_FD, &prog, err)) < 0)
    return kc_error_prefix(err, "seccomp");
  plan.prog = prog;
  if (clone_child(sb, c, &plan, &f, err) < 0)
    return -1;
  kc_close_fd(&f.sync[0]);
  if (start_child(sb, &plan, f.sync[1], err) < 0)
    return -1;
  sb->t0 = kc_now_s();
  sb->view_sysinfo = view_sysinfo;
  keep_fds(sb, &f);
  *out = kc_steal_ptr(sb);
  return 0;
}

int kc_sandbox_spawn(const kc_sandbox_config *c, kc_sandbox **out, kc_error *err) {
  return spawn(c, true, out, err);
}

int kc_sandbox_spawn_ahead(const kc_sandbox_config *c, kc_sandbox **out, kc_error *err) {
  return spawn(c, true, out, err);
}
