/* sysinfo(2) in pool workers.  It tells the host's loads, free memory and process
 * count (other tenants' activity), which no file system can mask, so the worker's
 * filter hands it to the seccomp listener (kc_seccomp_prog_compile_worker) wherever the
 * policy allows it unconditionally.  Not a trap answered by the worker's own SIGSYS
 * handler: a program the worker exec'd has no handler (ld calls sysinfo), and a thread
 * that blocks SIGSYS would be killed by the kernel.  But the parent reads a worker's
 * listener only while it waits for one of the worker's calls, and a worker between
 * calls, or a Python function whose caller has not asked for its result yet, would
 * stall at its first sysinfo.
 *
 * So the listener goes to this process's relay: one thread, started with the first
 * worker, that answers sysinfo at once with the sandbox's figures (no load, one
 * process, no memory used by anyone else, the task's own boot clock as its uptime)
 * and passes every other notification on, whole, to a socket that the worker's owner
 * polls and reads instead of the listener.  Those are violations, which the owner
 * names and ends as before: the relay never answers one, so the task stays blocked in
 * the call until it is killed.  A listener leaves the relay when no task is left behind
 * its filter (the kernel reports POLLHUP) or when the owner closes its end of the
 * socket.  A process that forks keeps its relay in the parent; a child that makes
 * workers of its own starts its own thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "kcage/sandbox_parts.h"
#include "kcage/seccomp.h"
#include "worker_internal.h"

typedef struct relay_entry {
  int listener; /* the worker's, ours alone */
  int out;      /* our end of the owner's socket */
} relay_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static relay_entry *g_tab;
static size_t g_n, g_cap;
static int g_wake = -1; /* eventfd: an entry was added */
static pid_t g_pid;     /* non-zero once this process's thread runs */

/* The task's boot clock: the host's, moved by its time namespace's offset (the pool's
 * own, kc_sandbox_time_view); the host's where it has none. */
static double task_uptime_s(pid_t pid) {
  struct timespec boot;
  clock_gettime(CLOCK_BOOTTIME, &boot);
  double up = (double)boot.tv_sec + (double)boot.tv_nsec * 1e-9;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/timens_offsets", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0)
    close(fd);
  buf[n > 0 ? n : 0] = 0;
  const char *line = strstr(buf, "boottime");
  long long sec, nsec;
  if (line && sscanf(line, "boottime %lld %lld", &sec, &nsec) == 2)
    up += (double)sec + (double)nsec * 1e-9;
  return up;
}

static void answer_sysinfo(int listener, const kc_seccomp_event *ev) {
  struct sysinfo si;
  kc_sandbox_sysinfo(&si, task_uptime_s(ev->pid));
  kc_error e = {0};
  kc_seccomp_notify_sysinfo(listener, ev, &si, &e); /* failing: the task is gone */
}

/* One notification: sysinfo answered, anything else passed on.  -1: the entry is done
 * (its listener broken, or its owner gone). */
static int serve(const relay_entry *r) {
  kc_seccomp_event ev;
  kc_error e = {0};
  if (kc_seccomp_notify_receive(r->listener, &ev, &e) < 0)
    return e.code == ENOENT ? 0 : -1; /* ENOENT: the task died meanwhile */
  if (ev.nr == SYS_sysinfo && ev.arch == seccomp_arch_native()) {
    answer_sysinfo(r->listener, &ev);
    return 0;
  }
  ssize_t s = send(r->out, &ev, sizeof ev, MSG_NOSIGNAL | MSG_DONTWAIT);
  /* A full socket (an owner that stopped reading) loses this one: its task stays
   * blocked until its call's deadline. */
  return s == (ssize_t)sizeof ev || (s < 0 && errno == EAGAIN) ? 0 : -1;
}

static void drop(size_t i) {
  close(g_tab[i].listener);
  close(g_tab[i].out);
  g_tab[i] = g_tab[--g_n];
}

/* The entries' events after one poll over the first n of them (p[1 + 2i]: the
 * listener, p[2 + 2i]: the owner's socket).  Entries are added behind these by other
 * threads and removed only here, from the back, so indexes below n hold. */
static void handle(const struct pollfd *p, size_t n) {
  const short bad = POLLHUP | POLLERR | POLLNVAL;
  for (size_t i = n; i-- > 0;) {
    short lr = p[1 + 2 * i].revents, orv = p[2 + 2 * i].revents;
    bool done = orv & bad;
    if (!done && (lr & POLLIN))
      done = serve(&g_tab[i]) < 0;
    else if (!done && (lr & bad))
      done = true; /* no task left behind the filter */
    if (done)
      drop(i);
  }
}

static void *relay_main(void *arg) {
  (void)arg;
  struct pollfd *p = NULL;
  size_t pcap = 0;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    size_t n = g_n;
    if (1 + 2 * n > pcap) {
      struct pollfd *np = realloc(p, (1 + 2 * n) * sizeof *p);
      if (np) {
        p = np;
        pcap = 1 + 2 * n;
      } else {
        n = pcap ? (pcap - 1) / 2 : 0; /* the rest waits for memory */
      }
    }
    if (p) {
      p[0] = (struct pollfd){.fd = g_wake, .events = POLLIN};
      for (size_t i = 0; i < n; i++) {
        p[1 + 2 * i] = (struct pollfd){.fd = g_tab[i].listener, .events = POLLIN};
        p[2 + 2 * i] = (struct pollfd){.fd = g_tab[i].out, .events = 0};
      }
    }
    pthread_mutex_unlock(&g_mu);
    struct pollfd only = {.fd = g_wake, .events = POLLIN};
    int r = poll(p ? p : &only, p ? 1 + 2 * n : 1, -1);
    if (r <= 0)
      continue; /* EINTR */
    if ((p ? p : &only)[0].revents & POLLIN) {
      uint64_t v;
      ssize_t rd = read(g_wake, &v, sizeof v);
      (void)rd;
    }
    pthread_mutex_lock(&g_mu);
    if (p)
      handle(p, n);
    pthread_mutex_unlock(&g_mu);
  }
  return NULL;
}

/* A fork copies g_mu as it is, perhaps held by the thread, which the child does not
 * get: the fork waits for it, and the child forgets the parent's entries (their fds
 * are close-on-exec) and starts a thread of its own with its first worker. */
static void fork_prepare(void) {
  pthread_mutex_lock(&g_mu);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&g_mu);
}

static void fork_child(void) {
  g_n = 0;
  g_pid = 0;
  g_wake = -1;
  pthread_mutex_unlock(&g_mu);
}

static void register_fork(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* The thread, once per process (under g_mu). */
static int ensure_thread(kc_error *err) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (g_pid)
    return 0;
  pthread_once(&once, register_fork);
  g_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g_wake < 0)
    return kc_error_set(err, errno, "sysinfo relay: eventfd");
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  /* No signal for this thread: the process's handlers run on its own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &a, relay_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&a);
  if (rc != 0) {
    close(g_wake);
    g_wake = -1;
    return kc_error_set(err, rc, "sysinfo relay: thread");
  }
  g_pid = getpid();
  return 0;
}

int kc__sysinfo_relay_add(int listener, kc_error *err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    int e = errno;
    close(listener);
    return kc_error_set(err, e, "sysinfo relay: socketpair");
  }
  pthread_mutex_lock(&g_mu);
  int rc = ensure_thread(err);
  if (rc == 0 && g_n == g_cap) {
    size_t cap = g_cap ? 2 * g_cap : 8;
    relay_entry *t = realloc(g_tab, cap * sizeof *t);
    if (t) {
      g_tab = t;
      g_cap = cap;
    } else {
      rc = kc_error_set(err, ENOMEM, "sysinfo relay");
    }
  }
  if (rc == 0) {
    g_tab[g_n++] = (relay_entry){.listener = listener, .out = sv[1]};
    uint64_t one = 1;
    ssize_t w = write(g_wake, &one, sizeof one);
    (void)w;
  }
  pthread_mutex_unlock(&g_mu);
  if (rc < 0) {
    close(listener);
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  return sv[0];
}

int kc__sysinfo_relay_read(int fd, kc_seccomp_event *ev) {
  ssize_t n;
  do
    n = recv(fd, ev, sizeof *ev, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof *ev ? 1 : 0;
}
