/* The agent's TVM zygote (tvm_session.h): a process of the agent's that holds a worker
 * zygote in which the operator's Python imported TVM once, and runs each TVM session
 * as one worker forked from it.  A fork costs milliseconds where a sandbox that
 * imports TVM costs seconds, and the worker is a sandbox of its own all the same: its
 * own pid namespace and cgroup (the session's limits), its own mount, IPC and network
 * namespaces with the work directory and /tmp fresh and empty (kc_sandbox_fresh_scratch),
 * the policy's filter, killed with everything in it when the session ends.
 *
 * Sessions come one at a time from the agent's session processes: a request with the
 * session's limits and description, the client's socket and a reply socket.  The
 * worker is handed the client's socket (kc_worker_pass_fds) and serves TVM's loop as
 * its one call, timed out at the session's wall limit; the hub then answers the
 * session's verdict on the reply socket.  A session process that dies (the agent
 * killed it) closes the reply socket: the hub kills the worker.
 *
 * Sessions under the operator's default limits alternate between two workers, each
 * with a cgroup of its own that outlives its processes: while one serves, the other's
 * next process is forked (from a zygote that lives in that cgroup, so no attach), locked
 * down and warmed, and the one that served gets its next process asked for once its
 * session's processes are dead.  A session that asks for limits of its own gets a worker
 * made for it. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fdio.h"
#include "kcage/cleanup.h"
#include "kcage/escape.h"
#include "kcage/log.h"
#include "kcage/worker.h"
#include "tvm_hub.h"
#include "tvm_server_py.h"

#define OUT_CAP (16u << 20) /* the server loop's output: TVM logs each load */
#define SESSION_DIR "/session"
#define WARM_S 60.0 /* a worker's first call, ours (a loaded host: seconds) */

/* A worker and the pipe its processes' stdout and stderr go to. */
typedef struct hub_worker {
  kc_worker *w;
  int out_r, out_w;
  bool warm; /* its live process had its first call */
} hub_worker;

#define NO_WORKER ((hub_worker){.out_r = -1, .out_w = -1})

typedef struct hub {
  const kc_tvm_serve_opts *o;
  kc_zygote *z;
  kc_worker_opts wo;
  kc_mount mounts[KC_TVM_MAX_BINDS + 1];
  char *boot;
  kc_tvm_hub_limits dflt; /* what a session that asks for nothing runs under */
  hub_worker pair[2];     /* under dflt, in turn */
  unsigned next;          /* the one the next such session takes */
} hub;

static void worker_drop(hub_worker *hw) {
  kc_worker_free(hw->w);
  hw->w = NULL;
  hw->warm = false;
  kc_close_fd(&hw->out_r);
  kc_close_fd(&hw->out_w);
}

/* The worker's first call, ours: the interpreter's after-fork work and the first
 * pages its session will touch, done before a client waits for them. */
static int warm(hub_worker *hw, kc_error *err) {
  kc_call_result res;
  kc_call_result_init(&res);
  int rc = kc_worker_send(hw->w, "python", "warm", 4, WARM_S, err);
  if (rc == 0)
    rc = kc_worker_recv(hw->w, &res, err);
  if (rc == 0 && res.status != KC_CALL_COMPLETE)
    rc = kc_error_set(err, 0, "its first call: %s: %s", kc_call_status_name(res.status),
                      res.status == KC_CALL_CHILD_ERROR ? res.verdict.message : res.message);
  kc_call_result_clear(&res);
  char sink[4096];
  while (read(hw->out_r, sink, sizeof sink) > 0) {
  }
  return rc;
}

/* A worker of the zygote under lim (its process not started yet). */
static int worker_new(hub *h, const kc_tvm_hub_limits *lim, hub_worker *hw, kc_error *err) {
  int p[2];
  *hw = NO_WORKER;
  if (pipe2(p, O_CLOEXEC) < 0)
    return kc_error_set(err, errno, "pipe");
  hw->out_r = p[0];
  hw->out_w = p[1];
  fcntl(hw->out_r, F_SETFL, O_NONBLOCK);
  kc_worker_opts wo = h->wo;
  wo.stdout_ = wo.stderr_ = (kc_stdio){.mode = KC_STDIO_FD, .fd = hw->out_w};
  wo.limits.memory_bytes = lim->memory_bytes;
  wo.limits.pids = lim->pids;
  wo.limits.cpus = lim->cpus;
  if (kc_worker_new_on(&wo, h->z, &hw->w, err) < 0) {
    worker_drop(hw);
    return -1;
  }
  kc_worker_set_extra(hw->w, KC_WORKER_SCRATCH | KC_WORKER_PASS_FDS);
  return 0;
}

/* The worker's process started (or its start collected), locked down and warmed: what
 * a client would otherwise wait for. */
static int worker_ready(hub_worker *hw, kc_error *err) {
  if (hw->warm && kc_worker_is_alive(hw->w))
    return 0;
  hw->warm = false;
  if (kc_worker_start_now(hw->w, err) < 0 || warm(hw, err) < 0)
    return -1;
  hw->warm = true;
  return 0;
}

/* The worker's processes killed (the session's with them); its next one asked for
 * when it is one of the pair, else the worker and its cgroup removed. */
static void worker_done(hub_worker *hw, bool keep) {
  kc_worker_kill(hw->w);
  hw->warm = false;
  kc_error e = {0};
  if (!keep)
    worker_drop(hw);
  else if (kc_worker_prestart(hw->w, &e) < 0)
    kc_log(KC_LOG_WARN, "kcage agent", "TVM zygote: a worker's next process: %s", e.msg);
}

/* The zygote's interpreter: the venv's site-packages read as python itself would, and
 * tvm_server.py run as boot code (TVM imported, the server's globals registered).  The
 * zygote must stay one thread: a library that starts a pool at import (numpy's
 * OpenBLAS) leaves its fork handlers waiting for threads a forked worker does not
 * have, and the session's first fork() hangs.  Hence one thread for each such pool;
 * TVM's own pool starts in the session, on TVM_NUM_THREADS. */
static char *boot_source(const kc_tvm_python *py) {
  char *src = NULL;
  /* sys_path is jansson's JSON list of strings: a Python literal as it stands */
  if (asprintf(&src,
               "import os, site, sys\n"
               "os.environ.clear()\n"
               "os.environ.update(PATH='/usr/local/bin:/usr/bin:/bin', HOME='" SESSION_DIR "',"
               " TMPDIR='/tmp', LANG='C.UTF-8', OPENBLAS_NUM_THREADS='1',"
               " OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')\n"
               "sys.path[:] = %s\n"
               "for p in list(sys.path):\n"
               "    if p.endswith('-packages'):\n"
               "        site.addsitedir(p)\n"
               "KCAGE_TVM_ZYGOTE = True\n"
               "%s",
               py->sys_path, kc_tvm_server_py) < 0)
    src = NULL;
  return src;
}

static int hub_start(hub *h, const kc_tvm_serve_opts *o, kc_error *err) {
  const kc_tvm_python *py = o->python;
  size_t nm = 0;
  for (size_t i = 0; i < py->nbinds; i++)
    h->mounts[nm++] =
        (kc_mount){.kind = KC_MOUNT_RO_BIND, .src = py->binds[i], .dst = py->binds[i]};
  /* each worker mounts its own over it: 1 GiB at most, its pages the session's memory
   * (its cgroup's) */
  h->mounts[nm++] = (kc_mount){.kind = KC_MOUNT_TMPFS, .dst = SESSION_DIR, .size = 1ull << 30};
  h->boot = boot_source(py);
  if (!h->boot)
    return kc_error_set(err, ENOMEM, "boot code");
  kc_worker_opts_init(&h->wo);
  h->wo.policy = o->policies[0];
  h->wo.mounts = h->mounts;
  h->wo.n_mounts = nm;
  h->wo.python_lib = py->libpython;
  h->wo.python_boot = h->boot;
  h->wo.settings = o->settings;
  h->wo.max_arg_bytes = 4096;
  h->wo.max_result_bytes = 4096;
  h->wo.stdout_ = h->wo.stderr_ = (kc_stdio){.mode = KC_STDIO_INHERIT};
  return kc_zygote_new(&h->wo, &h->z, err);
}

/* ---- one session -------------------------------------------------------------------- */

typedef struct tail {
  char buf[KC_TVM_TAIL];
  size_t len;
  uint64_t total;
} tail;

/* Drain what the worker wrote: the last KC_TVM_TAIL bytes kept, the total counted. */
static void drain(int fd, tail *t) {
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    t->total += (uint64_t)n;
    if ((size_t)n >= sizeof t->buf) {
      memcpy(t->buf, buf + n - sizeof t->buf, sizeof t->buf);
      t->len = sizeof t->buf;
      continue;
    }
    size_t keep = t->len + (size_t)n > sizeof t->buf ? sizeof t->buf - (size_t)n : t->len;
    memmove(t->buf, t->buf + t->len - keep, keep);
    memcpy(t->buf + keep, buf, (size_t)n);
    t->len = keep + (size_t)n;
  }
}

/* The session's verdict from its call's outcome. */
static void verdict(const kc_call_result *res, double wall_s, kc_tvm_hub_reply *rep) {
  rep->status = KC_STATUS_OK;
  switch (res->status) {
  case KC_CALL_COMPLETE:
    break;
  case KC_CALL_EXCEPTION:
    rep->status = KC_STATUS_EXITED;
    snprintf(rep->message, sizeof rep->message, "TVM's server loop raised: %.400s", res->message);
    break;
  case KC_CALL_TIMEOUT:
    rep->status = KC_STATUS_TIMEOUT;
    snprintf(rep->limit, sizeof rep->limit, "wall");
    snprintf(rep->message, sizeof rep->message, "the session's wall limit of %g s passed", wall_s);
    break;
  case KC_CALL_CHILD_ERROR:
    rep->status = res->verdict.status;
    snprintf(rep->limit, sizeof rep->limit, "%s", res->verdict.limit ? res->verdict.limit : "");
    snprintf(rep->message, sizeof rep->message, "%s", res->verdict.message);
    break;
  }
}

/* Wait for the session's call, draining its output; a reply socket that closes (the
 * agent ended the session) or output past the cap kills the worker. */
static void await_session(hub_worker *hw, int reply, double wall_s, kc_tvm_hub_reply *rep) {
  tail t = {0};
  kc_call_result res;
  kc_call_result_init(&res);
  kc_error e = {0};
  int got = 0;
  while (got == 0) {
    got = kc_worker_recv_timed(hw->w, &res, 0.05, &e);
    drain(hw->out_r, &t);
    struct pollfd p = {.fd = reply, .events = POLLIN};
    bool gone = poll(&p, 1, 0) > 0;
    if (got == 0 && (gone || t.total > OUT_CAP)) {
      kc_worker_kill(hw->w);
      got = kc_worker_recv(hw->w, &res, &e) == 0 ? 1 : -1;
      if (t.total > OUT_CAP) {
        kc_call_result_clear(&res);
        res.status = KC_CALL_CHILD_ERROR;
        res.verdict.status = KC_STATUS_OUTPUT;
        snprintf(res.verdict.message, sizeof res.verdict.message,
                 "the session wrote over %u MiB of output", OUT_CAP >> 20);
      }
    }
  }
  bool oom, pids;
  kc_worker_limit_hits(hw->w, &oom, &pids);
  if (got > 0 && (oom || pids) && res.status != KC_CALL_CHILD_ERROR) {
    /* the limit the session ran into comes first, as in every sandbox's verdict */
    kc_call_result_clear(&res);
    res.status = KC_CALL_CHILD_ERROR;
    res.verdict.status = oom ? KC_STATUS_MEMORY : KC_STATUS_PIDS;
    snprintf(res.verdict.message, sizeof res.verdict.message,
             oom ? "the session was killed at its memory limit"
                 : "the session was refused a process at its pids limit");
  }
  if (got < 0) {
    rep->status = KC_STATUS_SETUP_ERROR;
    snprintf(rep->message, sizeof rep->message, "%.*s", (int)sizeof rep->message - 1, e.msg);
  } else {
    verdict(&res, wall_s, rep);
  }
  kc_call_result_clear(&res);
  memcpy(rep->tail, t.buf, t.len);
  rep->tail_len = (uint32_t)t.len;
}

/* What a session that asks for nothing runs under: the operator's caps (the policy's
 * limits where there is none), as kc_tvm_hub_serve computes them. */
static kc_tvm_hub_limits default_limits(const kc_tvm_serve_opts *o) {
  return (kc_tvm_hub_limits){
      .memory_bytes = o->caps.max_memory_bytes, .pids = o->caps.max_pids, .cpus = o->caps.max_cpus};
}

static bool same_limits(const kc_tvm_hub_limits *a, const kc_tvm_hub_limits *b) {
  return a->memory_bytes == b->memory_bytes && a->pids == b->pids && a->cpus == b->cpus;
}

static void send_reply(int reply, kc_tvm_hub_reply *rep, uint32_t phase) {
  rep->magic = KC_TVM_HUB_MAGIC;
  rep->phase = phase;
  if (send(reply, rep, sizeof *rep, MSG_NOSIGNAL) < 0) {
  }
}

/* The worker for a session under lim, ready: one of the pair, or one made for it (own). */
static hub_worker *take_worker(hub *h, const kc_tvm_hub_limits *lim, hub_worker *own,
                               kc_error *err) {
  hub_worker *hw = own;
  if (same_limits(lim, &h->dflt)) {
    hw = &h->pair[h->next];
    h->next ^= 1;
  } else if (worker_new(h, lim, own, err) < 0) {
    return NULL;
  }
  if (worker_ready(hw, err) == 0)
    return hw;
  worker_done(hw, hw != own);
  return NULL;
}

static void serve_one(hub *h, const kc_tvm_hub_request *q, const char *text, size_t len, int client,
                      int reply) {
  kc_tvm_hub_reply rep = {0};
  hub_worker own = NO_WORKER;
  kc_error e = {0};
  hub_worker *hw = take_worker(h, &q->lim, &own, &e);
  if (!hw || kc_worker_pass_fds(hw->w, text, len, &client, 1, &e) < 0) {
    /* nothing of the client's was read: its session process serves it another way */
    kc_log(KC_LOG_WARN, "kcage agent", "TVM zygote: %s", e.msg);
    if (hw)
      worker_done(hw, hw != &own);
    return;
  }
  send_reply(reply, &rep, KC_TVM_HUB_TAKEN);
  if (kc_worker_send(hw->w, "python", "", 0, q->wall_s, &e) < 0) {
    rep.status = KC_STATUS_SETUP_ERROR;
    snprintf(rep.message, sizeof rep.message, "%.*s", (int)sizeof rep.message - 1, e.msg);
  } else {
    /* the other of the pair gets ready for the next session while this one runs */
    kc_error ne = {0};
    if (worker_ready(&h->pair[h->next], &ne) < 0)
      kc_log(KC_LOG_WARN, "kcage agent", "TVM zygote: the next session's worker: %s", ne.msg);
    await_session(hw, reply, q->wall_s, &rep);
  }
  /* the session's processes and scratch end before its verdict goes out */
  kc_worker_kill(hw->w);
  send_reply(reply, &rep, KC_TVM_HUB_ENDED);
  worker_done(hw, hw != &own);
}

/* One request from a session process: the request, its description, two descriptors. */
static int next_request(int ctl, char *buf, size_t cap, size_t *len, int fds[2]) {
  int nfd = 2;
  fds[0] = fds[1] = -1;
  ssize_t n = kc_recv_fds(ctl, buf, cap, fds, &nfd);
  if (n <= 0)
    return -1; /* the agent is gone */
  if ((size_t)n < sizeof(kc_tvm_hub_request) || nfd != 2 ||
      ((kc_tvm_hub_request *)buf)->magic != KC_TVM_HUB_MAGIC) {
    for (int i = 0; i < nfd; i++)
      close(fds[i]);
    return 0;
  }
  *len = (size_t)n;
  return 1;
}

/* The zygote and every session's process inherit our environment: only kcage's own
 * settings (where its worker program and policies are) stay, beside the few the
 * server loop needs, which the boot code sets. */
static void clean_environment(void) {
  extern char **environ;
  size_t n = 0;
  for (char **e = environ; e && *e; e++)
    n++;
  char **keep = calloc(n + 1, sizeof *keep);
  size_t k = 0;
  for (size_t i = 0; keep && i < n; i++)
    if (!strncmp(environ[i], "KCAGE_", 6))
      keep[k++] = strdup(environ[i]);
  clearenv();
  for (size_t i = 0; i < k; i++)
    if (keep[i])
      putenv(keep[i]); /* the string becomes the environment's */
  free(keep);
}

void kc_tvm_hub_main(const kc_tvm_serve_opts *o, int ctl) {
  hub h = {.o = o, .dflt = default_limits(o), .pair = {NO_WORKER, NO_WORKER}};
  kc_error err = {0};
  clean_environment();
  if (hub_start(&h, o, &err) < 0) {
    kc_log(KC_LOG_WARN, "kcage agent",
           "TVM zygote: %s; each TVM session starts its interpreter instead", err.msg);
    _exit(KC_TVM_HUB_EXIT_UNAVAILABLE);
  }
  /* a worker that cannot start may be the host's moment (a warm-up past its deadline
   * under load): the agent starts the hub again, later */
  for (int i = 0; i < 2; i++)
    if (worker_new(&h, &h.dflt, &h.pair[i], &err) < 0 || worker_ready(&h.pair[i], &err) < 0) {
      kc_log(KC_LOG_WARN, "kcage agent", "TVM zygote: a worker: %s", err.msg);
      _exit(1);
    }
  kc_log(KC_LOG_INFO, "kcage agent", "TVM zygote ready: TVM imported once, a fork per session");
  _Alignas(kc_tvm_hub_request) char buf[sizeof(kc_tvm_hub_request) + KC_TVM_HUB_TEXT_MAX];
  for (;;) {
    size_t len = 0;
    int fds[2];
    int r = next_request(ctl, buf, sizeof buf, &len, fds);
    if (r < 0)
      break;
    if (r == 0)
      continue;
    const kc_tvm_hub_request *q = (const kc_tvm_hub_request *)buf;
    serve_one(&h, q, buf + sizeof *q, len - sizeof *q, fds[0], fds[1]);
    close(fds[0]);
    close(fds[1]);
    if (!kc_zygote_is_alive(h.z))
      _exit(1); /* the agent starts another */
  }
  worker_drop(&h.pair[0]);
  worker_drop(&h.pair[1]);
  kc_zygote_free(h.z);
  _exit(0);
}
