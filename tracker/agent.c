/* The device agent: registers with a tracker the way TVM's rpc_server does
 * (reference/tvm.md §2.4: UPDATE_INFO, then PUT of key:<random>, GET_PENDING_MATCHKEYS
 * every 2 s, a fresh matchkey when a taken one goes unused), answers TVM's handshake
 * (§2.5) and serves one kcage session at a time in its own process.  Unlike TVM's it
 * never gives up on the tracker (backoff capped at a few seconds), notices a lost
 * tracker at once (EOF on the idle connection), and kills a session at its deadline. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_internal.h"
#include "fnum.h"
#include "kcage/cleanup.h"
#include "kcage/escape.h"
#include "kcage/log.h"
#include "kcage/policy.h"
#include "kcage/tracker.h"
#include "metrics.h"
#include "netio.h"
#include "safe_fs.h"
#include "tvm_session.h"
#include "tvm_wire.h"

void kc_inputs_sweep(void); /* measure/inputs_file.c */

void kc_agent_opts_init(kc_agent_opts *o) {
  memset(o, 0, sizeof *o);
  o->tracker_port = KC_TRACKER_DEFAULT_PORT;
  o->port = 9090;
  o->port_end = 9199;
}

void kc__agent_log(kc_agent *a, const char *fmt, ...) {
  if (!a->o.verbose)
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kc_log(KC_LOG_INFO, "kcage agent", "%s", msg);
}

/* Every dropped peer is logged and counted, with the reason. */
static void drop_peer(const char *why) {
  kc_metrics_conn_closed(why);
  kc_log(KC_LOG_WARN, "kcage agent", "dropped a client: %s", why);
}

void kc__agent_new_matchkey(kc_agent *a) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, 0) != sizeof r)
    r = (uint64_t)getpid() ^ (uint64_t)(kc_now_s() * 1e9);
  /* Python's key + ":" + str(random.random()) */
  snprintf(a->matchkey, sizeof a->matchkey, "%s:0.%016llu", a->o.key,
           (unsigned long long)(r % 10000000000000000ull));
  a->put_pending = true;
}

static int bind_listen(kc_agent *a, kc_error *err) {
  unsigned end = a->o.port_end > a->o.port ? a->o.port_end : a->o.port + 1u;
  return kc_listen_first_free(a->o.host ? a->o.host : "0.0.0.0", a->o.port, end, 0, &a->lfd,
                              &a->port, err);
}

int kc__agent_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(p);
  return 0;
}

/* A directory (not a link) of ours that nobody else can write: a scratch dir left by a
 * dead agent of ours with this pid (kc_sweep_dead_pid_dirs keeps those of live processes). */
static bool own_dir(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         !(st.st_mode & 022) && chmod(path, 0711) == 0;
}

static const char *const default_policies[] = {"tvm"};

/* The interpreter for TVM RPC sessions, found once: without one the agent still serves
 * kcage sessions, and tells TVM clients why it serves them none. */
static void probe_python(kc_agent *a) {
  if (!a->o.tvm_policies || !a->o.n_tvm_policies) {
    a->o.tvm_policies = default_policies;
    a->o.n_tvm_policies = 1;
  }
  kc_error e = {0};
  for (size_t i = 0; i < a->o.n_tvm_policies; i++) {
    kc_policy *p = NULL;
    if (kc_policy_load_in(&a->o.settings, a->o.tvm_policies[i], &p, &e) < 0) {
      snprintf(a->python_why, sizeof a->python_why, "%s", e.msg);
      kc_log(KC_LOG_WARN, "kcage agent", "no TVM RPC sessions: %s", a->python_why);
      return;
    }
    if (i == 0)
      a->tvm_first = p;
    else
      kc_policy_free(p);
  }
  a->python = calloc(1, sizeof *a->python);
  if (!a->python || kc_tvm_python_probe(a->o.tvm_python, a->python, &e) < 0) {
    free(a->python);
    a->python = NULL;
    snprintf(a->python_why, sizeof a->python_why, "%s", e.msg[0] ? e.msg : "out of memory");
    kc_log(KC_LOG_WARN, "kcage agent", "no TVM RPC sessions: %s", a->python_why);
  }
}

int kc_agent_new(const kc_agent_opts *o, kc_agent **out, kc_error *err) {
  if (!o->key || !*o->key || strlen(o->key) > KC_TRACKER_MAX_KEY || strchr(o->key, ':') ||
      strchr(o->key, ' ')) {
    kc_error_set(err, 0, "key must be 1-%d characters without ':' or spaces", KC_TRACKER_MAX_KEY);
    if (err)
      err->code = EINVAL;
    return -1;
  }
  if (!o->tracker_host)
    return kc_error_set(err, EINVAL, "no tracker address");
  kc_agent *a = calloc(1, sizeof *a);
  if (!a)
    return kc_error_set(err, ENOMEM, "agent");
  a->o = *o;
  if (a->o.check_s <= 0)
    a->o.check_s = 2;
  if (a->o.reput_s <= 0)
    a->o.reput_s = 6;
  if (a->o.max_backoff_s <= 0)
    a->o.max_backoff_s = 5;
  a->lfd = -1;
  a->child_pidfd = -1;
  a->standby_ctl = -1;
  a->standby_backoff = 1;
  a->hub_ctl = -1;
  a->hub_backoff = 1;
  a->standby_ahead = true;
  a->hub_off = o->tvm_no_zygote; /* the operator's choice: every session a standby */
  a->missing_since = -1;
  a->stop_pipe[0] = a->stop_pipe[1] = -1;
  if (pipe2(a->stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || bind_listen(a, err) < 0) {
    if (err && !err->msg[0])
      kc_error_set(err, errno, "pipe");
    kc_agent_free(a);
    return -1;
  }
  char hn[256] = "localhost";
  gethostname(hn, sizeof hn - 1);
  snprintf(a->device, sizeof a->device, "%s@%s", o->key, o->custom_addr ? o->custom_addr : hn);
  /* Where the agent's scratch dirs go: the operator's choice, not the tenants'. */
  const char *td = secure_getenv("TMPDIR");
  if (!td || !*td || strlen(td) > 200)
    td = "/tmp";
  /* A SIGKILLed agent cannot clean up after its sessions: the next one to start
   * removes the scratch trees, and the batches' inputs in memory, of agents gone. */
  kc_sweep_dead_pid_dirs(td, "kcage-agent-", '\0');
  kc_inputs_sweep();
  snprintf(a->base_dir, sizeof a->base_dir, "%s/kcage-agent-%ld", td, (long)getpid());
  /* 0711: the sandboxes of a session (each with host ids of its own from the reserved
   * range) must traverse into its scratch dir, which is also the session's $TMPDIR;
   * none of them may list it. */
  int e = mkdir(a->base_dir, 0711) < 0 ? errno : 0;
  /* One that was there already is taken only when it is our own: in a shared /tmp
   * anyone could have made it, and then read every session's kernels. */
  if (e && (e != EEXIST || !own_dir(a->base_dir))) {
    kc_error_set(err, e, "mkdir %s%s", a->base_dir,
                 e == EEXIST ? ": there already, and not this agent's own" : "");
    a->base_dir[0] = '\0'; /* not ours to remove */
    kc_agent_free(a);
    return -1;
  }
  probe_python(a);
  kc__agent_new_matchkey(a);
  *out = a;
  return 0;
}

uint16_t kc_agent_port(const kc_agent *a) {
  return a->port;
}

int kc__agent_chld_fd = -1;
static void on_sigchld(int sig) {
  (void)sig;
  int e = errno;
  char c = 'c';
  if (kc__agent_chld_fd >= 0 && write(kc__agent_chld_fd, &c, 1) < 0) {
  }
  errno = e;
}

void kc_agent_stop(kc_agent *a) {
  char c = 's';
  ssize_t n = write(a->stop_pipe[1], &c, 1);
  (void)n;
}

/* ---- the tracker side ------------------------------------------------------------ */

static void drop_tracker(kc_agent *a, const char *why) {
  if (a->trk)
    kc__agent_log(a, "lost the tracker: %s", why);
  kc_tracker_close(a->trk);
  a->trk = NULL;
  a->next_connect = kc_now_s() + a->backoff;
  a->backoff = kc_fmin(a->backoff * 2, a->o.max_backoff_s);
}

static int call0(kc_agent *a, json_t *msg, kc_error *err) {
  json_t *r = NULL;
  int rc = kc_tracker_call(a->trk, msg, 5, &r, err);
  json_decref(msg);
  if (rc < 0)
    return -1;
  rc = json_is_integer(r) && json_integer_value(r) == KC_TRK_SUCCESS ? 0 : -1;
  if (rc < 0)
    kc_error_set(err, EPROTO, "tracker refused");
  json_decref(r);
  return rc;
}

static json_t *custom_addr(kc_agent *a) {
  return a->o.custom_addr ? json_string(a->o.custom_addr) : json_null();
}

static int do_put(kc_agent *a, kc_error *err) {
  if (call0(a,
            json_pack("[i, s, [i, s], o]", KC_TRK_PUT, a->o.key, (int)a->port, a->matchkey,
                      custom_addr(a)),
            err) < 0)
    return -1;
  a->put_pending = false;
  a->missing_since = -1;
  a->next_check = kc_now_s() + a->o.check_s;
  kc__agent_log(a, "registered %s with the tracker", a->matchkey);
  return 0;
}

/* Back in the tracker's pool with a fresh matchkey, after a session. */
void kc__agent_back_in_pool(kc_agent *a) {
  kc__agent_new_matchkey(a);
  if (a->trk) {
    kc_error err = {0};
    if (do_put(a, &err) < 0)
      drop_tracker(a, err.msg);
  }
}

static void connect_tracker(kc_agent *a) {
  kc_error err = {0};
  if (kc_tracker_connect(a->o.tracker_host, a->o.tracker_port, 3, &a->trk, &err) < 0) {
    a->trk = NULL;
    drop_tracker(a, err.msg);
    return;
  }
  kc_tcp_keepalive(kc_tracker_fd(a->trk), 15);
  char sk[KC_TRACKER_MAX_KEY + 16];
  snprintf(sk, sizeof sk, "server:%s", a->o.key);
  if (call0(a,
            json_pack("[i, {s:s, s:[o, i]}]", KC_TRK_UPDATE_INFO, "key", sk, "addr", custom_addr(a),
                      (int)a->port),
            &err) < 0) {
    drop_tracker(a, err.msg);
    return;
  }
  kc__agent_log(a, "connected to tracker %s:%u", a->o.tracker_host, a->o.tracker_port);
  a->backoff = 0.05;
  a->put_pending = true; /* a new tracker knows nothing of our old matchkey */
  if (a->child > 0)
    return; /* PUT again when the session ends */
  if (do_put(a, &err) < 0)
    drop_tracker(a, err.msg);
}

static void check_pending(kc_agent *a) {
  kc_error err = {0};
  json_t *msg = json_pack("[i]", KC_TRK_GET_PENDING_MATCHKEYS), *r = NULL;
  int rc = kc_tracker_call(a->trk, msg, 5, &r, &err);
  json_decref(msg);
  a->next_check = kc_now_s() + a->o.check_s;
  if (rc < 0 || !json_is_array(r)) {
    json_decref(r);
    drop_tracker(a, rc < 0 ? err.msg : "bad GET_PENDING_MATCHKEYS reply");
    return;
  }
  bool found = false;
  size_t i;
  json_t *v;
  json_array_foreach(r, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), a->matchkey))
      found = true;
  json_decref(r);
  if (found) {
    a->missing_since = -1;
    return;
  }
  /* Handed to a client that never came (TVM: ~8 s): take the device back. */
  double now = kc_now_s();
  if (a->missing_since < 0)
    a->missing_since = now;
  else if (now - a->missing_since >= a->o.reput_s) {
    kc__agent_log(a, "matchkey %s was taken but not used; re-registering", a->matchkey);
    kc__agent_new_matchkey(a);
    if (do_put(a, &err) < 0)
      drop_tracker(a, err.msg);
  }
}

static void hs_drop(kc_agent *a, size_t i) {
  if (a->hs[i].fd >= 0)
    close(a->hs[i].fd);
  a->hs[i] = a->hs[--a->nhs];
}

/* A connection: its handshake starts; when every slot is taken the oldest gives way. */
static void on_connection(kc_agent *a) {
  int fd = accept4(a->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return;
  kc_metrics_conn_opened();
  kc_tcp_keepalive(fd, 30); /* a vanished client does not hold the device forever */
  if (a->nhs == MAX_HANDSHAKES) {
    size_t oldest = 0;
    for (size_t i = 1; i < a->nhs; i++)
      if (a->hs[i].deadline < a->hs[oldest].deadline)
        oldest = i;
    drop_peer("handshake_overflow");
    hs_drop(a, oldest);
  }
  struct handshake *h = &a->hs[a->nhs++];
  h->fd = fd;
  h->deadline = kc_now_s() + HANDSHAKE_S;
  h->got = 0;
}

/* The server's answer: one small write into an empty socket buffer. */
static bool hs_reply(int fd, uint32_t code, const char *key) {
  char reply[8 + KC_TRACKER_MAX_KEY + 16];
  uint32_t c = htole32(code), l = htole32((uint32_t)(key ? strlen(key) : 0));
  size_t n = key ? 8 + strlen(key) : 4;
  memcpy(reply, &c, 4);
  memcpy(reply + 4, &l, 4);
  if (key)
    memcpy(reply + 8, key, strlen(key));
  return send(fd, reply, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n;
}

/* A complete "client:<matchkey>[ -timeout=N]": the session starts, or MISMATCH. */
static void hs_done(kc_agent *a, int fd, char *key) {
  double timeout_s = 0;
  bool match = a->child <= 0 && !a->put_pending && kc_rpc_client_key(key, a->matchkey, &timeout_s);
  if (!match) {
    hs_reply(fd, KC_RPC_CODE_MISMATCH, NULL);
    drop_peer("mismatch");
    close(fd);
    return;
  }
  char sk[KC_TRACKER_MAX_KEY + 16];
  snprintf(sk, sizeof sk, "server:%s", a->o.key);
  if (!hs_reply(fd, KC_RPC_CODE_SUCCESS, sk)) {
    close(fd);
    return;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  kc__agent_start_session(a, fd, timeout_s);
}

/* Read what has arrived of handshake i; false when it is over (done or dropped). */
static bool hs_step(kc_agent *a, size_t i) {
  struct handshake *h = &a->hs[i];
  for (;;) {
    uint32_t len = 0;
    if (h->got >= 8) {
      memcpy(&len, h->buf + 4, 4);
      len = le32toh(len);
    }
    size_t need = h->got < 8 ? 8 : 8 + (size_t)len;
    uint32_t magic = 0;
    memcpy(&magic, h->buf, 4);
    if ((h->got >= 4 && le32toh(magic) != KC_RPC_MAGIC) || len > HANDSHAKE_MAX_KEY) {
      drop_peer("bad_handshake"); /* TVM: silent close */
      return false;
    }
    if (h->got == need && h->got >= 8) {
      h->buf[need] = '\0';
      int fd = h->fd;
      h->fd = -1; /* handed on */
      hs_done(a, fd, h->buf + 8);
      return false;
    }
    ssize_t n = recv(h->fd, h->buf + h->got, need - h->got, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    h->got += (size_t)n;
  }
}

static void expire_handshakes(kc_agent *a) {
  double now = kc_now_s();
  for (size_t i = a->nhs; i-- > 0;)
    if (now >= a->hs[i].deadline) {
      drop_peer("handshake_timeout");
      hs_drop(a, i);
    }
}

/* The handshakes polled as p[0..n): those with something to read make progress.  A
 * finished or expired one is swapped out of the table, so match them by fd. */
static void serve_handshakes(kc_agent *a, const struct pollfd *p, size_t n) {
  for (size_t j = 0; j < n; j++) {
    if (!p[j].revents)
      continue;
    for (size_t i = 0; i < a->nhs; i++)
      if (a->hs[i].fd == p[j].fd) {
        if (!hs_step(a, i))
          hs_drop(a, i);
        break;
      }
  }
}

int kc_agent_run(kc_agent *a, kc_error *err) {
  (void)err;
  a->backoff = 0.05;
  a->next_connect = 0;
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  kc__agent_chld_fd = a->stop_pipe[1];
  struct sigaction sa = {.sa_handler = on_sigchld, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
  sigaction(SIGCHLD, &sa, NULL);
  bool stop = false;
  while (!stop) {
    double now = kc_now_s();
    if (!a->trk && now >= a->next_connect)
      connect_tracker(a);
    if (a->trk && a->child <= 0 && a->put_pending) {
      kc_error e = {0};
      if (do_put(a, &e) < 0)
        drop_tracker(a, e.msg);
    }
    if (a->trk && a->child <= 0 && kc_now_s() >= a->next_check)
      check_pending(a);
    kc__agent_start_hub(a);
    kc__agent_start_standby(a);
    if (a->child > 0 && a->child_deadline >= 0 && kc_now_s() > a->child_deadline + 2) {
      kc__agent_log(a, "session past its deadline; killing it");
      kc__agent_end_session(a);
    }

    now = kc_now_s();
    double wake = now + 3600;
    if (!a->trk)
      wake = kc_fmin(wake, a->next_connect);
    else if (a->child <= 0)
      wake = kc_fmin(wake, a->next_check);
    if (a->child > 0 && a->child_deadline >= 0)
      wake = kc_fmin(wake, a->child_deadline + 2.01);
    if (kc__agent_standby_due(a))
      wake = kc_fmin(wake, a->standby_next);
    if (a->hub <= 0 && !a->hub_off && a->python)
      wake = kc_fmin(wake, a->hub_next);
    for (size_t i = 0; i < a->nhs; i++)
      wake = kc_fmin(wake, a->hs[i].deadline);
    struct pollfd p[4 + MAX_HANDSHAKES] = {
        {.fd = a->stop_pipe[0], .events = POLLIN},
        {.fd = a->lfd, .events = POLLIN},
        {.fd = a->trk ? kc_tracker_fd(a->trk) : -1, .events = POLLIN},
        {.fd = a->child_pidfd, .events = POLLIN}};
    size_t nhs = a->nhs;
    for (size_t i = 0; i < nhs; i++)
      p[4 + i] = (struct pollfd){.fd = a->hs[i].fd, .events = POLLIN};
    int ms = wake <= now ? 0 : (int)kc_fmin((wake - now) * 1000 + 1, 3600e3);
    int metrics_ms = kc_metrics_poll_ms(); /* /healthz watches the loop turn */
    if (metrics_ms >= 0 && ms > metrics_ms)
      ms = metrics_ms;
    kc_metrics_heartbeat();
    int n = poll(p, 4 + nhs, ms);
    expire_handshakes(a);
    if (n < 0 && errno != EINTR)
      return kc_error_set(err, errno, "poll");
    if (n <= 0)
      continue;
    if (p[0].revents) {
      char buf[64];
      ssize_t r = read(a->stop_pipe[0], buf, sizeof buf);
      for (ssize_t i = 0; i < r; i++)
        if (buf[i] == 's')
          stop = true;
      if (stop)
        break;
    }
    kc__agent_reap(a);
    if (p[3].revents || (a->child > 0 && a->child_reaped))
      kc__agent_end_session(a);
    if (p[2].revents && a->trk) {
      /* The tracker never speaks first: readable means it closed or reset. */
      char b[64];
      ssize_t r = recv(kc_tracker_fd(a->trk), b, sizeof b, MSG_DONTWAIT);
      if (r <= 0)
        drop_tracker(a, "connection closed");
    }
    serve_handshakes(a, p + 4, nhs);
    if (p[1].revents)
      on_connection(a);
  }
  kc__agent_end_session(a);
  kc__agent_kill_standby(a);
  kc__agent_kill_hub(a);
  return 0;
}

void kc_agent_free(kc_agent *a) {
  if (!a)
    return;
  if (a->child > 0) {
    kill(-a->child, SIGKILL);
    if (!a->child_reaped) {
      kill(a->child, SIGKILL);
      waitpid(a->child, NULL, 0);
    }
    kc__agent_reap(a);
    if (a->child_dir[0])
      nftw(a->child_dir, kc__agent_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  }
  if (a->child_pidfd >= 0)
    close(a->child_pidfd);
  kc__agent_kill_standby(a);
  kc__agent_kill_hub(a);
  while (a->nhs)
    hs_drop(a, 0);
  if (a->base_dir[0])
    rmdir(a->base_dir);
  free(a->python);
  kc_policy_free(a->tvm_first);
  kc_tracker_close(a->trk);
  if (a->lfd >= 0)
    close(a->lfd);
  if (a->stop_pipe[0] >= 0)
    close(a->stop_pipe[0]);
  if (a->stop_pipe[1] >= 0)
    close(a->stop_pipe[1]);
  free(a);
}
