/* A worker process from the zygote (or the slot's zygote, inside the slot's cgroup):
 * the cgroup, the ring, the request, the answer, the hand-off after the worker's
 * lockdown, and dropping what a process held. */
#include "worker_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "kcage/cleanup.h"

static uint32_t g_gen_counter;

static int collect_pid(kc_worker *w, kc_error *err);
static int collect_worker(kc_worker *w, kc_error *err);

void kc__worker_drop_process(kc_worker *w) {
  if (w->spawning) {
    /* never leave the requested process behind: learn its pid, then kill it */
    kc_error e = {0};
    if (collect_pid(w, &e) == 0) {
      siginfo_t si;
      kc__worker_kill_and_reap(w, &si);
    }
  }
  kc_close_fd(&w->handoff);
  kc_close_fd(&w->fdsock);
  kc_close_fd(&w->pidfd);
  kc_close_fd(&w->evfd);
  kc_close_fd(&w->listener);
  kc_ring_destroy(&w->ring);
  w->pid = 0;
}

/* wait for the worker's ready message: lockdown done, listener fd attached */
static int wait_ready(kc_worker *w, int sock, kc_error *err) {
  struct pollfd p[2] = {{.fd = sock, .events = POLLIN}, {.fd = w->pidfd, .events = POLLIN}};
  int n;
  do
    n = poll(p, 2, 5000);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return kc_error_set(err, ETIMEDOUT, "worker did not start");
  if (!(p[0].revents & POLLIN))
    return kc_error_set(err, ECHILD, "worker died while starting");
  /* One message: a kc_worker_ready on failure, else the policy layer's hand-off
   * byte ('L' with the listener attached, 'N' without). */
  kc_worker_ready rd;
  int fd = -1, nfd = 1;
  ssize_t r = kc_recv_fds(sock, &rd, sizeof rd, &fd, &nfd);
  if (r == 1) {
    char byte = ((char *)&rd)[0];
    if ((byte == 'L') != (nfd == 1) || (byte != 'L' && byte != 'N')) {
      if (nfd)
        close(fd);
      return kc_error_set(err, EPROTO, "worker: bad hand-off message");
    }
    w->listener = nfd ? fd : -1;
    w->relayed = nfd && w->zyg && w->zyg->relay_sysinfo;
    if (w->relayed && (w->listener = kc__sysinfo_relay_add(fd, err)) < 0)
      return kc_error_prefix(err, "worker");
    return 0;
  }
  if (nfd)
    close(fd);
  if (r != (ssize_t)sizeof rd || rd.magic != KC_ZYGOTE_MAGIC)
    return kc_error_set(err, EPROTO, "worker: bad ready message");
  rd.msg[sizeof rd.msg - 1] = 0;
  return kc_error_set(err, 0, "worker lockdown failed: %s", rd.msg);
}

/* The slot's cgroup.  Without one a worker is still killed with its pid namespace,
 * but a limit it was given must hold: a limit that cannot be enforced is refused
 * (kc_cgroup_refusal says why), never dropped. */
static int ensure_cgroup(kc_worker *w, kc_error *err) {
  if (w->cg_tried || w->o.isolation == KC_ISOLATION_NONE)
    return 0;
  static _Atomic unsigned slot;
  char name[64];
  snprintf(name, sizeof name, "worker-%d-%u", (int)getpid(), atomic_fetch_add(&slot, 1));
  kc_cgroup_limits lim = {
      .memory_bytes = w->o.limits.memory_bytes, .pids = w->o.limits.pids, .cpus = w->o.limits.cpus};
  if (lim.pids && w->o.isolation == KC_ISOLATION_SANDBOX)
    lim.pids++; /* the slot's zygote */
  kc_error e = {0};
  if (kc_cgroup_create(name, &lim, &w->o.settings, &w->cg, &e) < 0) {
    w->cg = NULL;
    if (lim.memory_bytes || lim.pids || lim.cpus > 0)
      return kc_error_set(err, e.code, "worker: %s", e.msg); /* tried again next spawn */
  }
  w->cg_tried = true;
  return 0;
}

/* A spawn in two halves, so that a replacement can be on its way while the caller
 * still handles the failure (or recycle) that made it necessary:
 *   kc__worker_spawn_start: ring, eventfd, socket, and the request to the zygote (no
 *                           wait);
 *   kc__worker_spawn_finish: the zygote's answer (pid), pidfd, cgroup attach, the
 *                            worker's hand-off (lockdown done).
 * The initializer, which needs a call and its wait, is worker.c's. */
static uint32_t next_gen(void) {
  uint32_t g =
      atomic_fetch_add((_Atomic uint32_t *)&g_gen_counter, 1) * 2654435761u + (uint32_t)getpid();
  return g ? g : 1; /* 0 is the zygote's hello */
}

/* The slot's own zygote, inside the slot's cgroup: asked of the zygote right after a
 * spawn request (the first worker, or one after the slot died, comes from the zygote
 * itself and is attached by pid), collected and attached by settle_slot while that
 * worker locks itself down.  Workers spawned after it are born in the cgroup. */
static void ask_slot(kc_worker *w) {
  if (w->slot && !kc_zygote_alive(w->slot)) {
    kc_zygote_stop(w->slot);
    w->slot = NULL;
  }
  /* Under the rlimit fallback each worker gets its limits itself: a slot's zygote
   * holding RLIMIT_NPROC could not fork the worker (the kernel counts the processes
   * of the pool's whole user namespace). */
  if (w->slot || w->slot_sock >= 0 || !w->cg || w->o.isolation != KC_ISOLATION_SANDBOX ||
      kc_cgroup_uses_rlimits(w->cg))
    return;
  w->slot_gen = next_gen();
  kc_error e = {0};
  if (kc_zygote_slot_request(w->zyg, w->slot_gen, &w->slot_sock, &e) < 0)
    w->slot_sock = -1; /* workers are then attached one by one */
}

static void settle_slot(kc_worker *w) {
  if (w->slot_sock < 0)
    return;
  int sock = w->slot_sock;
  w->slot_sock = -1;
  kc_error e = {0};
  if (!w->zyg) { /* gone with the failed spawn: the slot ends when its socket closes */
    close(sock);
    return;
  }
  if (kc_zygote_slot_collect(w->zyg, w->slot_gen, sock, &w->slot, &e) < 0) {
    w->slot = NULL;
    return;
  }
  /* The OOM killer should pick the worker, not the slot's zygote: it does anyway by
   * size (a few hundred KiB against the worker's allocation), and where we may (with
   * CAP_SYS_RESOURCE, which this CI machine does not give) the zygote is exempted.
   * Were it killed, the next spawn starts a new one. */
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/oom_score_adj", (int)w->slot->pid);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = write(fd, "-1000", 5);
    (void)n;
    close(fd);
  }
  if (!w->cg || kc_cgroup_attach(w->cg, w->slot->pid, &e) < 0) {
    kc_zygote_stop(w->slot);
    w->slot = NULL;
  }
}

/* Ring, eventfd, socket, and the request to the slot (or the zygote). */
static int request_spawn(kc_worker *w, kc_error *err) {
  if (w->slot && !kc_zygote_alive(w->slot)) {
    kc_zygote_stop(w->slot);
    w->slot = NULL;
  }
  uint32_t gen = next_gen();
  kc_ring_params rp = {KC_DEFAULT_DEPTH, (uint32_t)w->o.max_arg_bytes,
                       (uint32_t)w->o.max_result_bytes};
  if (kc_ring_create(&w->ring, &rp, gen, err) < 0)
    return kc_error_prefix(err, "worker");
  atomic_store(&w->ring.ctl->worker_spin_ns, w->worker_spin_ns);
  w->gen = gen;
  int sv[2] = {-1, -1};
  w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->evfd < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    kc_error_set(err, errno, "worker: eventfd/socketpair");
    kc__worker_drop_process(w);
    return -1;
  }
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  int outfd = w->o.stdout_.mode == KC_STDIO_FD        ? w->o.stdout_.fd
              : w->o.stdout_.mode == KC_STDIO_DISCARD ? devnull
                                                      : 1;
  int errfd = w->o.stderr_.mode == KC_STDIO_FD        ? w->o.stderr_.fd
              : w->o.stderr_.mode == KC_STDIO_DISCARD ? devnull
                                                      : 2;
  int fds[5] = {w->ring.memfd, w->evfd, sv[1], outfd, errfd};
  uint32_t flags = 0;
  if (w->o.isolation == KC_ISOLATION_SANDBOX)
    flags |= KC_ZF_NEWPID | KC_ZF_LOCKDOWN;
  if (w->extra & KC_WORKER_SCRATCH)
    flags |= KC_ZF_SCRATCH;
  if (w->extra & KC_WORKER_PASS_FDS)
    flags |= KC_ZF_KEEP_SOCK;
  /* Not CLONE_INTO_CGROUP: on this kernel (6.18) a child cloned into a v2 cgroup that
   * was ever cgroup.kill'ed is SIGKILLed at birth (the fork path compares the kill
   * sequence of the wrong cgroup), and slots are long-lived and killed on every
   * timeout.  The parent attaches by pid instead (every hierarchy), before the worker
   * is sent anything: until then it runs only our own lockdown code. */
  int rc = kc_zygote_request(w->slot ? w->slot : w->zyg, flags, w->policy, gen, fds, 5, err);
  close(sv[1]);
  if (devnull >= 0)
    close(devnull);
  w->handoff = sv[0];
  if (rc < 0) {
    kc__worker_drop_process(w);
    return kc_error_prefix(err, "worker");
  }
  w->spawning = true;
  return 0;
}

/* A zygote of our own is started here, and everything that does not need it running
 * (cgroup, ring, the requests, queued on its socket) is done while it starts. */
int kc__worker_spawn_start(kc_worker *w, kc_error *err) {
  bool fresh = !w->zyg;
  if (fresh && kc_zygote_begin(&w->o, &w->zyg, err) < 0)
    return kc_error_prefix(err, "worker");
  int rc = ensure_cgroup(w, err);
  bool request_failed = false;
  if (rc == 0 && (rc = request_spawn(w, err)) < 0)
    request_failed = true;
  else if (rc == 0)
    ask_slot(w);
  kc_error ze = {0};
  if (fresh && kc_zygote_await(&w->o, w->zyg, &ze) < 0) {
    kc__worker_drop_process(w); /* its answer never comes: the zygote is dead */
    kc_zygote_stop(w->zyg);
    w->zyg = NULL;
    if (err) /* a zygote that did not start explains anything else that failed */
      *err = ze;
    return kc_error_prefix(err, "worker");
  }
  if (request_failed && w->own_zyg) {
    kc_zygote_stop(w->zyg); /* a dead zygote is replaced at the next try */
    w->zyg = NULL;
  }
  return rc;
}

int kc_worker_prestart(kc_worker *w, kc_error *err) {
  if (w->pid || w->spawning)
    return 0;
  return kc__worker_spawn_start(w, err);
}

/* The spawn in flight, and the slot asked for with it, whatever became of the spawn. */
static int collect_pid(kc_worker *w, kc_error *err) {
  int rc = collect_worker(w, err);
  settle_slot(w);
  return rc;
}

/* The zygote's answer for the spawn in flight: pid, pidfd, cgroup attach. */
static int collect_worker(kc_worker *w, kc_error *err) {
  w->spawning = false;
  pid_t pid = 0;
  if (kc_zygote_collect(w->slot ? w->slot : w->zyg, w->gen, &pid, err) < 0) {
    kc__worker_drop_process(w);
    if (w->slot) { /* replaced at the next spawn */
      kc_zygote_stop(w->slot);
      w->slot = NULL;
    } else if (w->own_zyg) {
      kc_zygote_stop(w->zyg);
      w->zyg = NULL;
    }
    return kc_error_prefix(err, "worker");
  }
  w->pid = pid;
  atomic_store_explicit(&w->ring.ctl->host_pid, pid, memory_order_release);
  w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  w->violation[0] = 0;
  if (w->pidfd < 0) {
    int e = errno;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    w->pid = 0;
    kc__worker_drop_process(w);
    return kc_error_set(err, e, "worker: pidfd_open");
  }
  /* v1 hierarchies by pid, and rlimits where they stand in for the cgroup: a worker
   * that cannot be held to its limits does not run. */
  if (w->cg && !w->slot && kc_cgroup_attach(w->cg, pid, err) < 0) {
    siginfo_t si;
    kc__worker_kill_and_reap(w, &si);
    kc__worker_drop_process(w);
    return kc_error_prefix(err, "worker");
  }
  kc_cgroup_counters c = {-1, -1, -1, -1};
  if (w->cg)
    kc_cgroup_read(w->cg, &c, NULL);
  w->oom_base = c.oom_kills;
  w->pids_base = c.pids_max_hits;
  return 0;
}

/* The spawn in flight, handed over: the zygote's answer, the worker's lockdown done;
 * its uses and the head call's start begin now. */
int kc__worker_spawn_finish(kc_worker *w, kc_error *err) {
  if (w->spawning && collect_pid(w, err) < 0)
    return -1;
  int rc = wait_ready(w, w->handoff, err);
  if (rc == 0 && (w->extra & KC_WORKER_PASS_FDS))
    w->fdsock = kc_steal_fd(w->handoff);
  kc_close_fd(&w->handoff);
  if (rc < 0) {
    siginfo_t si;
    kc__worker_kill_and_reap(w, &si);
    kc__worker_drop_process(w);
    return kc_error_prefix(err, "worker");
  }
  w->uses_left = w->o.maximum_uses;
  w->head_start_ns = kc_now_ns();
  return 0;
}
