/* Parent side of the zygote: start it (exec kcage-worker), ask it for workers. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env_path.h"
#include "install_dirs.h"
#include "kcage/cgroup.h"
#include "kcage/cleanup.h"
#include "kcage/sandbox.h"
#include "kcage/seccomp.h"
#include "worker_internal.h"

static char worker_path[PATH_MAX];

static void find_worker(void) {
  char dir[PATH_MAX - 16];
  if (kc_install_dir_get(KC_DIR_WORKER, dir, sizeof dir) == 0)
    snprintf(worker_path, sizeof worker_path, "%s/kcage-worker", dir);
}

int kc_worker_binary(const kc_worker_opts *o, const char **out, kc_error *err) {
  if (o && o->worker_path) {
    *out = o->worker_path;
    return 0;
  }
  /* every sandbox runs this binary: only from a place nobody else can write */
  if (kc_env_path("KCAGE_WORKER", KC_ENV_FILE, out, err) < 0)
    return -1;
  if (*out)
    return 0;
  /* Next to this binary or library (install_dirs.c); found once, never changes. */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, find_worker);
  *out = worker_path[0] ? worker_path : "kcage-worker (not found next to kcage)";
  return 0;
}

/* One empty network namespace with loopback up per process, joined by every zygote: a
 * netns costs ~0.25 ms to make and more to tear down (in a kernel worker, contending
 * with everything else), and a process's pools belong to one user.  The first
 * sandboxed zygote makes it (a fresh exec'd process, not a fork of a possibly threaded
 * caller) and we keep a reference to it.  -1 until then. */
static pthread_mutex_t g_netns_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_netns = -1;

static int shared_netns(void) {
  pthread_mutex_lock(&g_netns_mu);
  int r = g_netns;
  pthread_mutex_unlock(&g_netns_mu);
  return r;
}

static void keep_netns(pid_t zygote) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", (int)zygote);
  pthread_mutex_lock(&g_netns_mu);
  if (g_netns < 0)
    g_netns = open(path, O_RDONLY | O_CLOEXEC);
  pthread_mutex_unlock(&g_netns_mu);
}

/* What the parent must know of the pool's policy before the zygote reads it: whether
 * it leaves out the net namespace (the pool then shares the caller's network,
 * python-net: the namespaces are made first), and whether its workers' filter hands
 * sysinfo to the listener (their parent's relay must answer it, sysinfo_relay.c).
 * policy: a resolved path or a name (kc_worker_policy_path). */
static int policy_facts(const char *policy, bool *host_net, bool *relay_sysinfo, kc_error *err) {
  *host_net = *relay_sysinfo = false;
  if (!policy || !*policy)
    return 0;
  kc_policy *p = NULL;
  if (kc_policy_load(policy, &p, err) < 0)
    return -1;
  *host_net = !kc_policy_get_spec(p)->ns.net;
  *relay_sysinfo = kc_seccomp_worker_notifies_sysinfo(p);
  kc_policy_free(p);
  return 0;
}

/* kcage-worker zygote 3 [--ns [--netns|--hostnet]] [--policy P] [--fs] [--lo] [mounts]
 * [--python LIB BOOT], built before the spawn into argv (MAXARG + 1 slots) and margs
 * (one string per mount). */
enum { ZYG_MAX_MOUNTS = 64, ZYG_MAXARG = 13 + 2 * ZYG_MAX_MOUNTS };

int kc_worker_policy_path(const kc_worker_opts *o, const char *name, char *buf, size_t len,
                          const char **out, kc_error *err) {
  *out = name;
  if (!name || !o->settings.policy_dir || kc_policy_is_path(name))
    return 0;
  if (kc_policy_resolve_in(&o->settings, name, buf, len, err) < 0)
    return -1;
  *out = buf;
  return 0;
}

static int zygote_argv(const kc_worker_opts *o, bool sandboxed, bool own_netns, bool host_net,
                       char **argv, char (*margs)[1024], kc_error *err) {
  if (o->n_mounts > ZYG_MAX_MOUNTS)
    return kc_error_set(err, E2BIG, "zygote: more than %d mounts", ZYG_MAX_MOUNTS);
  int ac = 0;
  argv[ac++] = "kcage-worker";
  argv[ac++] = "zygote";
  argv[ac++] = "3";
  if (sandboxed)
    argv[ac++] = "--ns"; /* its namespaces: handshake on fd 4 (zygote.c) */
  if (sandboxed && host_net)
    argv[ac++] = "--hostnet"; /* the policy has no net namespace */
  else if (sandboxed && !own_netns)
    argv[ac++] = "--netns"; /* the process's netns to join, on fd 5 */
  if (o->policy) {
    argv[ac++] = "--policy";
    argv[ac++] = (char *)o->policy;
  }
  if (sandboxed)
    argv[ac++] = "--fs";
  if (sandboxed && own_netns && !host_net)
    argv[ac++] = "--lo"; /* its own new netns: bring loopback up there */
  for (size_t i = 0; sandboxed && i < o->n_mounts; i++) {
    const kc_mount *m = &o->mounts[i];
    if (m->kind == KC_MOUNT_TMPFS) {
      argv[ac++] = "--tmpfs";
      snprintf(margs[i], sizeof margs[i], "%s:%llu", m->dst, (unsigned long long)m->size);
    } else {
      argv[ac++] = m->kind == KC_MOUNT_RO_BIND ? "--ro-bind" : "--bind";
      snprintf(margs[i], sizeof margs[i], "%s:%s", m->src, m->dst ? m->dst : m->src);
    }
    argv[ac++] = margs[i];
  }
  if (o->python_lib) {
    argv[ac++] = "--python";
    argv[ac++] = (char *)o->python_lib;
    argv[ac++] = (char *)(o->python_boot ? o->python_boot : "pass");
  }
  argv[ac] = NULL;
  return 0;
}

/* kcage-worker spawned with its socket at 3 and, when it makes the pool's namespaces,
 * its handshake socket at 4 and the netns to join at 5.  A spawn (vfork and exec)
 * copies nothing of the caller's memory: a fork of a caller of a few dozen MB cost a
 * new pool milliseconds (page tables copied, then torn down at the exec, and every
 * page the caller wrote meanwhile a copy-on-write fault).  So the namespaces are made
 * by the zygote itself after the exec (zygote.c: enter_pool_namespaces). */
static int spawn_zygote(const char *bin, char **argv, const int src[3], pid_t *pid) {
  /* sources moved above the targets first, so no dup2 can clobber one */
  int hi[3] = {-1, -1, -1}, rc = 0;
  for (int i = 0; i < 3 && rc == 0; i++)
    if (src[i] >= 0 && (hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16)) < 0)
      rc = errno;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (int i = 0; i < 3 && rc == 0; i++)
    if (hi[i] >= 0)
      rc = posix_spawn_file_actions_adddup2(&fa, hi[i], 3 + i);
  /* nothing else of ours: every fd above the ones it was given is closed */
  int top = 3;
  while (top < 6 && hi[top - 3] >= 0)
    top++;
  if (rc == 0)
    rc = posix_spawn_file_actions_addclosefrom_np(&fa, top);
  if (rc == 0)
    rc = posix_spawn(pid, bin, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  for (int i = 0; i < 3; i++)
    if (hi[i] >= 0)
      close(hi[i]);
  return rc;
}

/* The maps are written by us (root on the host) so that the namespace's root can be an
 * unprivileged host uid, which the child could not map itself: the pool's own host ids
 * (as a non-root caller, ourselves, after denying setgroups). */
static bool write_zygote_maps(pid_t pid, const kc_sandbox_ids *ids, int hs) {
  char c = 0, path[64], map[2][64];
  bool ok = read(hs, &c, 1) == 1 && c == 'u';
  snprintf(map[0], sizeof map[0], "0 %u 1\n", (unsigned)ids->uid);
  snprintf(map[1], sizeof map[1], "0 %u 1\n", (unsigned)ids->gid);
  static const char *files[3] = {"setgroups", "uid_map", "gid_map"};
  for (int i = geteuid() == 0 ? 1 : 0; ok && i < 3; i++) {
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
    const char *text = i == 0 ? "deny" : map[i - 1];
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0)
      close(fd);
  }
  c = 'm';
  return ok && write(hs, &c, 1) == 1;
}

static void kill_child(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void close_pair(int (*p)[2]) {
  kc_closep(&(*p)[0]);
  kc_closep(&(*p)[1]);
}

/* Its first workers (and their slots) are attached to their cgroups right after the
 * zygote's hello: take the attach lock's grace period now, while the zygote execs and
 * builds its file system (we would only wait for its hello meanwhile), and keep the
 * lock ready with a cheap repeat every 2 ms until the hello comes (a ready lock goes
 * idle one grace period after its last use).  Bounded: a slow start (an interpreter's
 * boot) stops the repeats and pays the wait at the attach, as before. */
static void warm_attach_until_hello(const kc_zygote *z) {
  kc_cgroup_warm_attach(z->pid);
  for (int i = 0; i < 50; i++) {
    struct pollfd p = {.fd = z->ctl, .events = POLLIN};
    if (poll(&p, 1, 2) != 0)
      return;
    kc_cgroup_warm_attach(z->pid);
  }
}

/* How a zygote that never said hello ended, for the error: "exited with status 1". */
static void describe_end(const kc_zygote *z, char *buf, size_t len) {
  struct pollfd p = {.fd = z->pidfd, .events = POLLIN};
  siginfo_t si = {0};
  if (z->pidfd < 0 || poll(&p, 1, 200) <= 0 ||
      waitid(P_PIDFD, (id_t)z->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
    snprintf(buf, len, "it is still running");
  else if (si.si_code == CLD_EXITED)
    snprintf(buf, len, "it exited with status %d", si.si_status);
  else
    snprintf(buf, len, "it was killed by signal %d (%s)", si.si_status, strsignal(si.si_status));
}

/* Whether it has ended (within 200 ms), without reaping it. */
static bool zygote_ended(const kc_zygote *z) {
  struct pollfd p = {.fd = z->pidfd, .events = POLLIN};
  return z->pidfd >= 0 && poll(&p, 1, 200) > 0;
}

/* Killed and reaped, but still a kc_zygote: a request in flight fails at once. */
static void kill_zygote(kc_zygote *z) {
  if (z->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, z->pidfd, SIGKILL, NULL, 0);
  else
    kill(z->pid, SIGKILL);
  waitpid(z->pid, NULL, 0);
}

/* The zygote's first answer did not come.  An answer that is not the worker protocol
 * (EPROTO), or none before it ended (EPIPE), means the binary is not a kcage worker (a
 * wrong $KCAGE_WORKER) or died before it could say why: the error names the binary. */
static int no_hello(kc_zygote *z, const char *bin, const kc_error *e, kc_error *err) {
  char how[96] = "";
  if (e->code == EPROTO || e->code == EPIPE)
    describe_end(z, how, sizeof how);
  kill_zygote(z);
  if (!how[0]) {
    kc_error_set(err, 0, "zygote did not start (%s): %s", bin, e->msg);
  } else {
    kc_error_set(err, 0,
                 "zygote did not start: %s is not a kcage worker, or died before its first "
                 "answer (%s; %s)",
                 bin, e->code == EPROTO ? "it sent something else" : "it sent nothing", how);
  }
  if (err)
    err->code = e->code;
  return -1;
}

int kc_zygote_begin(const kc_worker_opts *o, kc_zygote **out, kc_error *err) {
  /* Cgroups a SIGKILLed kcage left behind are removed at the next start. */
  static _Atomic int reaped;
  if (!atomic_exchange(&reaped, 1))
    kc_cgroup_reap_stale(NULL);
  const char *bin;
  if (kc_worker_binary(o, &bin, err) < 0)
    return kc_error_prefix(err, "zygote");
  bool sandboxed = o->isolation == KC_ISOLATION_SANDBOX;
  char *argv[ZYG_MAXARG + 1];
  char margs[ZYG_MAX_MOUNTS][1024];
  /* The tenant's policy directory is searched here, in the caller: the zygote gets
   * the file's path and never looks anywhere itself. */
  char polbuf[4096];
  kc_worker_opts ro = *o;
  if (kc_worker_policy_path(o, o->policy, polbuf, sizeof polbuf, &ro.policy, err) < 0)
    return kc_error_prefix(err, "zygote");
  bool host_net = false, relay_sysinfo = false;
  if (sandboxed && policy_facts(ro.policy, &host_net, &relay_sysinfo, err) < 0)
    return kc_error_prefix(err, "zygote");
  int netns = sandboxed && !host_net ? shared_netns() : -1;
  if (zygote_argv(&ro, sandboxed, netns < 0, host_net, argv, margs, err) < 0)
    return -1;
  __attribute__((cleanup(kc_sandbox_ids_release))) kc_sandbox_ids ids = {0, 0, -1};
  /* sv: the zygote's socket; hs: its namespaces' handshake ("made" / "maps written") */
  __attribute__((cleanup(close_pair))) int sv[2] = {-1, -1}, hs[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
      (sandboxed && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hs) < 0))
    return kc_error_set(err, errno, "zygote: socketpair");
  pid_t pid;
  int rc = spawn_zygote(bin, argv, (int[3]){sv[1], hs[1], netns}, &pid);
  if (rc)
    return kc_error_set(err, rc, "zygote: spawn %s", bin);
  close(kc_steal_fd(sv[1]));
  if (hs[1] >= 0)
    close(kc_steal_fd(hs[1]));
  /* The pool's own host ids (never nobody, never another sandbox's), held until the
   * zygote and every worker it forked are gone.  Chosen while the zygote execs: it
   * waits for its maps, which name them, before anything else. */
  if (sandboxed && kc_sandbox_ids_acquire(&ids, &o->settings, err) < 0) {
    kill_child(pid);
    return kc_error_prefix(err, "zygote");
  }
  kc_zygote *z = calloc(1, sizeof *z);
  if (!z) {
    kill_child(pid);
    return kc_error_set(err, ENOMEM, "zygote");
  }
  z->pid = pid;
  z->ctl = kc_steal_fd(sv[0]);
  z->hs = sandboxed ? kc_steal_fd(hs[0]) : -1;
  z->sandboxed = sandboxed;
  z->relay_sysinfo = relay_sysinfo;
  z->ids = ids;
  ids.lock_fd = -1; /* the zygote's now */
  z->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  /* Only an empty namespace of its own becomes the one later pools join: a pool in
   * the caller's network (host_net) must never hand that to them. */
  z->made_netns = sandboxed && !host_net && netns < 0;
  *out = z;
  return 0;
}

int kc_zygote_await(const kc_worker_opts *o, kc_zygote *z, kc_error *err) {
  const char *bin;
  if (kc_worker_binary(o, &bin, err) < 0)
    return kc_error_prefix(err, "zygote");
  if (z->hs >= 0) {
    bool ok = write_zygote_maps(z->pid, &z->ids, z->hs);
    int e = errno;
    close(kc_steal_fd(z->hs));
    if (!ok) {
      /* no "u": it never got as far as its namespaces (not a kcage worker, say) */
      kc_error he = {.code = EPIPE};
      snprintf(he.msg, sizeof he.msg, "zygote: user namespace: %s", strerror(e));
      if (zygote_ended(z))
        return no_hello(z, bin, &he, err);
      kill_zygote(z);
      return kc_error_set(err, e, "zygote: user namespace");
    }
  }
  if (z->sandboxed && kc_cgroup_mode_for(&o->settings) != KC_CGROUP_NONE)
    warm_attach_until_hello(z);
  /* its hello (generation 0): policy loaded, file system entered, or why not; an
   * interpreter's boot imports what the caller named (TVM: seconds when loaded) */
  pid_t dummy;
  kc_error e = {0};
  z->answer_ms = o->python_lib ? 300000 : 0;
  int hello = kc_zygote_collect(z, 0, &dummy, &e);
  z->answer_ms = 0;
  if (hello < 0)
    return no_hello(z, bin, &e, err);
  if (z->made_netns)
    keep_netns(z->pid);
  return 0;
}

int kc_zygote_start(const kc_worker_opts *o, kc_zygote **out, kc_error *err) {
  kc_zygote *z;
  if (kc_zygote_begin(o, &z, err) < 0)
    return -1;
  if (kc_zygote_await(o, z, err) < 0) {
    kc_zygote_stop(z);
    return -1;
  }
  *out = z;
  return 0;
}

static kc_zygote *zlock(kc_zygote *z) {
  if (z->shared)
    pthread_mutex_lock(&z->mu);
  return z;
}

static void zunlock(kc_zygote **z) {
  if ((*z)->shared)
    pthread_mutex_unlock(&(*z)->mu);
}

#define KC_ZLOCK(z) __attribute__((cleanup(zunlock), unused)) kc_zygote *zl_ = zlock(z)

int kc_zygote_request(kc_zygote *z, uint32_t flags, const char *policy, uint32_t generation,
                      const int *fds, int nfds, kc_error *err) {
  KC_ZLOCK(z);
  kc_zygote_req q;
  memset(&q, 0, sizeof q);
  q.magic = KC_ZYGOTE_MAGIC;
  q.op = KC_ZOP_SPAWN;
  q.flags = flags;
  q.generation = generation;
  snprintf(q.policy, sizeof q.policy, "%s", policy ? policy : "");
  if (kc_send_fds(z->ctl, &q, sizeof q, fds, nfds) < 0)
    return kc_error_set(err, errno, "zygote: send");
  return 0;
}

static int answer(const kc_zygote_early *a, pid_t *pid, kc_error *err) {
  if (a->pid == 0 && a->generation == 0) /* the zygote's hello: started */
    return 0;
  if (a->pid <= 0) { /* the message already names its errno */
    kc_error_set(err, 0, "%s", a->msg);
    if (err)
      err->code = -a->pid;
    return -1;
  }
  *pid = a->pid;
  return 0;
}

int kc_zygote_collect(kc_zygote *z, uint32_t generation, pid_t *pid, kc_error *err) {
  KC_ZLOCK(z);
  for (unsigned i = 0; i < z->n_early; i++)
    if (z->early[i].generation == generation) {
      kc_zygote_early a = z->early[i];
      z->early[i] = z->early[--z->n_early];
      return answer(&a, pid, err);
    }
  for (;;) {
    /* The zygote is our own code, but it is inside the sandbox: bound the wait. */
    struct pollfd p[2] = {{.fd = z->ctl, .events = POLLIN}, {.fd = z->pidfd, .events = POLLIN}};
    int n;
    do
      n = poll(p, z->pidfd >= 0 ? 2 : 1, z->answer_ms ? z->answer_ms : 2000);
    while (n < 0 && errno == EINTR);
    if (n <= 0 || !(p[0].revents & POLLIN))
      return kc_error_set(err, n == 0 ? ETIMEDOUT : EPIPE, "zygote: no answer");
    kc_zygote_rep rep;
    ssize_t r = kc_recv_fds(z->ctl, &rep, sizeof rep, NULL, NULL);
    /* A zygote that ended with requests of ours unread resets the connection, and the
     * reset is reported before what it said last, which is still queued: its reason. */
    if (r < 0 && errno == ECONNRESET)
      r = kc_recv_fds(z->ctl, &rep, sizeof rep, NULL, NULL);
    if (r == 0)
      return kc_error_set(err, EPIPE, "zygote: closed its socket without an answer");
    if (r != (ssize_t)sizeof rep || rep.magic != KC_ZYGOTE_MAGIC)
      return kc_error_set(err, EPROTO, "zygote: bad answer");
    kc_zygote_early a = {.generation = rep.generation, .pid = rep.pid};
    rep.msg[sizeof rep.msg - 1] = 0;
    snprintf(a.msg, sizeof a.msg, "%.120s", rep.msg);
    if (rep.generation == generation)
      return answer(&a, pid, err);
    if (z->n_early < sizeof z->early / sizeof z->early[0])
      z->early[z->n_early++] = a;
  }
}

int kc_zygote_spawn(kc_zygote *z, uint32_t flags, const char *policy, uint32_t generation,
                    const int *fds, int nfds, pid_t *pid, kc_error *err) {
  if (kc_zygote_request(z, flags, policy, generation, fds, nfds, err) < 0)
    return -1;
  return kc_zygote_collect(z, generation, pid, err);
}

int kc_zygote_slot_request(kc_zygote *z, uint32_t generation, int *sock, kc_error *err) {
  KC_ZLOCK(z);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return kc_error_set(err, errno, "zygote: socketpair");
  kc_zygote_req q;
  memset(&q, 0, sizeof q);
  q.magic = KC_ZYGOTE_MAGIC;
  q.op = KC_ZOP_SLOT;
  q.generation = generation;
  int rc = kc_send_fds(z->ctl, &q, sizeof q, &sv[1], 1);
  int e = errno;
  close(sv[1]);
  if (rc < 0) {
    close(sv[0]);
    return kc_error_set(err, e, "zygote: send");
  }
  *sock = sv[0];
  return 0;
}

int kc_zygote_slot_collect(kc_zygote *z, uint32_t generation, int sock, kc_zygote **out,
                           kc_error *err) {
  pid_t pid = 0;
  int rc = kc_zygote_collect(z, generation, &pid, err);
  kc_zygote *s = rc < 0 ? NULL : calloc(1, sizeof *s);
  if (!s) {
    close(sock);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    return rc < 0 ? -1 : kc_error_set(err, ENOMEM, "zygote: slot");
  }
  s->pid = pid;
  s->ctl = sock;
  s->hs = -1;
  s->sandboxed = z->sandboxed;
  s->ids = z->ids;
  s->ids.lock_fd = -1; /* held by the zygote it came from */
  s->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  *out = s;
  return 0;
}

bool kc_zygote_alive(const kc_zygote *z) {
  struct pollfd p = {.fd = z->pidfd, .events = POLLIN};
  return z->pidfd >= 0 && poll(&p, 1, 0) == 0;
}

void kc_zygote_stop(kc_zygote *z) {
  if (!z)
    return;
  if (z->ctl >= 0)
    close(z->ctl);
  if (z->hs >= 0)
    close(z->hs);
  if (z->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, z->pidfd, SIGKILL, NULL, 0);
  else
    kill(z->pid, SIGKILL);
  waitpid(z->pid, NULL, 0);
  if (z->pidfd >= 0)
    close(z->pidfd);
  kc_sandbox_ids_release(&z->ids);
  free(z);
}
