/* One TVM RPC session (tvm_session.h): the agent reads the client's kInitServer without
 * consuming it, applies what a kcage.sandbox constructor asks for under the operator's
 * caps, and starts TVM's own server loop in a fresh sandbox with the socket as its fd 0;
 * the sandbox's verdict is what the client hears when the session ends any other way
 * than by its own shutdown. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "fdio.h"
#include "kcage/cgroup.h"
#include "kcage/cleanup.h"
#include "kcage/escape.h"
#include "kcage/log.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"
#include "kcage/sandbox_parts.h"
#include "kcage/units.h"
#include "tvm_hub.h"
#include "tvm_server_py.h"
#include "tvm_session.h"
#include "tvm_wire.h"

#define SANDBOX_DIR "/session"
#define LOG_CAP (16u << 20) /* the server loop's own output: TVM logs each load */
#define TAIL 600

int kc_tvm_peek(int fd, void *buf, size_t n, double deadline, kc_error *err) {
  for (;;) {
    ssize_t got = recv(fd, buf, n, MSG_PEEK | MSG_DONTWAIT);
    if (got == (ssize_t)n)
      return 0;
    if (got == 0)
      return kc_error_set(err, ECONNRESET, "the client left");
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return kc_error_set(err, errno, "recv");
    double left = deadline - kc_now_s();
    if (left <= 0)
      return kc_error_set(err, ETIMEDOUT, "the client sent no first request in time");
    /* Some bytes but not all: wait a little rather than spin on the same readable state. */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (got > 0) {
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    } else {
      poll(&p, 1, (int)fmin(left * 1000 + 1, 1000));
    }
  }
}

void kc_tvm_refuse(int fd, const char *msg) {
  char buf[4096];
  size_t n = kc_tvm_exception_encode(msg, buf, sizeof buf);
  if (n && send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
  }
  /* Our FIN after the exception; what the client still sends is read and dropped for a
   * moment, so that closing with unread bytes does not reset the connection before the
   * client has read the exception. */
  shutdown(fd, SHUT_WR);
  double deadline = kc_now_s() + 1;
  char sink[4096];
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    double left = deadline - kc_now_s();
    if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0)
      break;
    if (recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0)
      break;
  }
  close(fd);
}

/* ---- what the session runs under --------------------------------------------------- */

typedef struct session_limits {
  uint64_t memory_bytes;
  uint32_t pids;
  double cpus, session_s;
  const char *policy;
} session_limits;

/* kcage.sandbox's arguments: "memory=SIZE", "pids=N", "cpus=X", "timeout=SEC",
 * "policy=NAME", each at most once in effect (the last wins). */
static int parse_ask(const kc_tvm_init *in, const kc_tvm_serve_opts *o, session_limits *ask,
                     kc_error *err) {
  for (size_t i = 1; i < in->nargs; i++) {
    const char *a = in->args[i], *eq = strchr(a, '=');
    const char *v = eq ? eq + 1 : "";
    size_t kl = eq ? (size_t)(eq - a) : strlen(a);
    double d;
    uint64_t u;
    if (kl == 6 && !strncmp(a, "memory", 6) && kc_parse_size(v, &u) == 0 && u >= (16u << 20))
      ask->memory_bytes = u;
    else if (kl == 4 && !strncmp(a, "pids", 4) && kc_parse_size(v, &u) == 0 && u >= 1 &&
             u <= 1u << 22)
      ask->pids = (uint32_t)u;
    else if (kl == 4 && !strncmp(a, "cpus", 4) && kc_parse_decimal(v, &d) == 0 && d > 0 &&
             d <= 4096)
      ask->cpus = d;
    else if (kl == 7 && !strncmp(a, "timeout", 7) && kc_parse_decimal(v, &d) == 0 && d > 0)
      ask->session_s = d;
    else if (kl == 6 && !strncmp(a, "policy", 6)) {
      ask->policy = NULL;
      for (size_t k = 0; k < o->npolicies; k++)
        if (!strcmp(v, o->policies[k]))
          ask->policy = o->policies[k];
      if (!ask->policy)
        return kc_error_set(err, 0, "kcage.sandbox: policy %s is not one this agent offers", v);
    } else {
      char shown[256];
      return kc_error_set(err, 0,
                          "kcage.sandbox: cannot use \"%s\" (want memory=SIZE of 16M or more, "
                          "pids=N, cpus=X, timeout=SEC or policy=NAME)",
                          kc_escape(a, shown, sizeof shown));
    }
  }
  return 0;
}

/* The lower of a tenant's ask and the operator's cap (0 = none); an ask above the cap
 * is lowered and said so in clamped. */
static double clamp1(json_t *clamped, const char *name, double ask, double cap) {
  if (cap > 0 && (ask <= 0 || ask > cap)) {
    if (ask > cap)
      json_object_set_new(clamped, name, json_pack("{s:f, s:f}", "asked", ask, "cap", cap));
    return cap;
  }
  return ask;
}

static void apply_caps(const kc_tvm_serve_opts *o, const session_limits *ask, session_limits *l,
                       json_t *clamped) {
  l->memory_bytes = (uint64_t)clamp1(clamped, "memory_bytes", (double)ask->memory_bytes,
                                     (double)o->caps.max_memory_bytes);
  l->pids = (uint32_t)clamp1(clamped, "pids", ask->pids, o->caps.max_pids);
  l->cpus = clamp1(clamped, "cpus", ask->cpus, o->caps.max_cpus);
  l->session_s = clamp1(clamped, "session_s", ask->session_s, o->timeout_s);
  if (o->asked_timeout_s > 0 && o->timeout_s < o->asked_timeout_s)
    json_object_set_new(clamped, "session_timeout_s",
                        json_pack("{s:f, s:f}", "asked", o->asked_timeout_s, "cap", o->timeout_s));
  l->policy = ask->policy ? ask->policy : o->policies[0];
}

/* The limits in effect, with the policy's defaults where nothing was asked or capped. */
static json_t *limits_json(const session_limits *l, const kc_policy *pol) {
  const kc_policy_spec *s = kc_policy_get_spec(pol);
  uint64_t mem = l->memory_bytes ? l->memory_bytes : s->memory_bytes;
  uint32_t pids = l->pids ? l->pids : s->pids;
  double cpus = l->cpus ? l->cpus : s->cpus;
  return json_pack("{s:I, s:I, s:f, s:f}", "memory_bytes", (json_int_t)mem, "pids",
                   (json_int_t)pids, "cpus", cpus, "session_s", l->session_s);
}

/* ---- the sandbox ------------------------------------------------------------------ */

typedef struct session_run {
  const kc_tvm_serve_opts *o;
  session_limits lim;
  kc_policy *pol;
  int log_fd;
  char *env_json;
  kc_sandbox_ids ids;
} session_run;

/* What kcage.sandbox.info answers: the limits in effect, what was asked and clamped. */
static json_t *session_info(const session_run *r, const kc_tvm_init *in, json_t *clamped) {
  json_t *info = json_pack("{s:s, s:s, s:o, s:O}", "constructor",
                           in->nargs ? in->args[0] : "rpc.LocalSession", "policy", r->lim.policy,
                           "limits", limits_json(&r->lim, r->pol), "clamped", clamped);
  json_t *asked = json_array();
  for (size_t i = 1; i < in->nargs; i++)
    json_array_append_new(asked, json_string(in->args[i]));
  json_object_set_new(info, "asked", asked);
  return json_pack("{s:s, s:o}", "work", SANDBOX_DIR, "session", info);
}

/* envp[0..6]: the session's description (env, taken) and a clean environment. */
static int build_env(session_run *r, json_t *env, char **envp, char tvm_threads[64],
                     kc_error *err) {
  char *text = json_dumps(env, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(env);
  if (!text || asprintf(&r->env_json, "KCAGE_TVM_SESSION=%s", text) < 0) {
    free(text);
    r->env_json = NULL;
    return kc_error_set(err, ENOMEM, "session environment");
  }
  free(text);
  size_t n = 0;
  envp[n++] = r->env_json;
  envp[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
  envp[n++] = "HOME=" SANDBOX_DIR;
  envp[n++] = "TMPDIR=/tmp";
  envp[n++] = "LANG=C.UTF-8";
  if (r->lim.cpus > 0) {
    /* TVM's thread pool: one thread per CPU the sandbox has, not per host core */
    snprintf(tvm_threads, 64, "TVM_NUM_THREADS=%d", (int)ceil(r->lim.cpus));
    envp[n++] = tvm_threads;
  }
  envp[n] = NULL;
  return 0;
}

/* The wall limit: the session's, ending no later than the agent's own end of the
 * session, so the client hears the verdict rather than a closed connection. */
static double wall_limit(const session_run *r) {
  double wall = r->lim.session_s;
  if (r->o->session_deadline >= 0) {
    double left = fmax(r->o->session_deadline - kc_now_s(), 0.001);
    wall = wall > 0 ? fmin(wall, left) : left;
  }
  return wall;
}

static int spawn_session(session_run *r, int in_fd, char **envp, double wall, kc_sandbox **out,
                         kc_error *err) {
  const kc_tvm_serve_opts *o = r->o;
  kc_mount mounts[KC_TVM_MAX_BINDS + 1];
  size_t nm = 0;
  for (size_t i = 0; i < o->python->nbinds; i++)
    mounts[nm++] = (kc_mount){
        .kind = KC_MOUNT_RO_BIND, .src = o->python->binds[i], .dst = o->python->binds[i]};
  mounts[nm++] = (kc_mount){.kind = KC_MOUNT_BIND, .src = o->dir, .dst = SANDBOX_DIR};
  char *argv[] = {(char *)o->python->path, "-I", "-c", (char *)kc_tvm_server_py, NULL};
  if (kc_sandbox_ids_acquire(&r->ids, &o->settings, err) < 0)
    return -1;
  /* The sandbox's own ids own the work directory: uploads land there, nothing else. */
  if (chown(o->dir, r->ids.uid, r->ids.gid) < 0 && geteuid() == 0)
    return kc_error_set(err, errno, "chown %s", o->dir);
  kc_sandbox_config c;
  kc_sandbox_config_init(&c);
  c.policy = r->pol;
  c.limits = (kc_limits){.memory_bytes = r->lim.memory_bytes,
                         .pids = r->lim.pids,
                         .cpus = r->lim.cpus,
                         .wall_s = wall,
                         .output_bytes = LOG_CAP};
  c.mounts = mounts;
  c.n_mounts = nm;
  c.cwd = SANDBOX_DIR;
  c.argv = argv;
  c.envp = envp;
  c.stdin_fd = in_fd;
  c.stdout_fd = r->log_fd;
  c.stderr_fd = r->log_fd;
  c.always_cgroup = true;
  c.ids = &r->ids;
  c.settings = o->settings;
  /* A standby is started ahead and waited for only once its session comes: its
   * process idles over it until then (kc_tvm_standby_idle), answering the sysinfo that
   * Python calls while it imports TVM.  Sessions from the TVM zygote are pool workers,
   * whose sysinfo the zygote's process answers through its relay thread
   * (worker/sysinfo_relay.c). */
  return kc_sandbox_spawn_ahead(&c, out, err);
}

/* The last lines the server loop wrote (a Python traceback, TVM's check failure). */
static void log_tail(int fd, char *out, size_t cap) {
  out[0] = '\0';
  off_t end = lseek(fd, 0, SEEK_END);
  if (end <= 0)
    return;
  char raw[TAIL + 1];
  off_t from = end > TAIL ? end - TAIL : 0;
  ssize_t n = pread(fd, raw, (size_t)(end - from), from);
  if (n <= 0)
    return;
  raw[n] = '\0';
  kc_escape_n(raw, (size_t)n, out, cap);
}

/* What the client hears when the sandbox ended by anything but a clean exit; tail: its
 * last output, escaped. */
static void say_verdict(int fd, double session_s, const kc_result *res, const char *tail) {
  char msg[TAIL * 4 + 1024];
  if (res->status == KC_STATUS_TIMEOUT && res->limit && !strcmp(res->limit, "wall"))
    snprintf(msg, sizeof msg,
             "RPCSessionTimeoutError: Your %gs session has expired, try to increase the "
             "\"session_timeout\" value. (kcage verdict: timeout: %s)",
             session_s, res->message);
  else
    snprintf(msg, sizeof msg, "kcage verdict: %s: the session's sandbox ended: %s%s%s",
             kc_status_name(res->status), res->message, tail[0] ? "; its last output: " : "", tail);
  kc_tvm_refuse(fd, msg);
}

static void report_verdict(int fd, const session_run *r, const kc_result *res) {
  char tail[TAIL * 4 + 1];
  log_tail(r->log_fd, tail, sizeof tail);
  say_verdict(fd, r->lim.session_s, res, tail);
}

/* ---- the session ------------------------------------------------------------------ */

static int read_init(int fd, double deadline, kc_tvm_init *in, kc_error *err) {
  unsigned char head[8];
  if (kc_tvm_peek(fd, head, sizeof head, deadline, err) < 0)
    return -1;
  size_t size = kc_tvm_init_size(head);
  if (!size)
    return kc_error_set(err, EPROTO, "TVM RPC: the first packet is not a kInitServer");
  kc_cleanup_free unsigned char *pkt = malloc(size);
  if (!pkt)
    return kc_error_set(err, ENOMEM, "kInitServer");
  if (kc_tvm_peek(fd, pkt, size, deadline, err) < 0)
    return -1;
  return kc_tvm_init_parse(pkt, size, in, err);
}

static void run_free(session_run *r) {
  kc_policy_free(r->pol);
  r->pol = NULL;
  if (r->log_fd >= 0)
    close(r->log_fd);
  r->log_fd = -1;
  free(r->env_json);
  r->env_json = NULL;
  kc_sandbox_ids_release(&r->ids);
}

/* The session's verdict to the operator's log. */
static void log_end(const kc_tvm_init *in, const kc_result *res) {
  char ctor[KC_TVM_MAX_ARG * 4];
  kc_escape(in->nargs ? in->args[0] : "rpc.LocalSession", ctor, sizeof ctor);
  kc_log(KC_LOG_INFO, "kcage agent", "TVM RPC session (%s) ended: %s%s%s", ctor,
         kc_status_name(res->status), res->message[0] ? ": " : "", res->message);
}

/* The limits and policy of the session, and its log file. */
static int prepare(session_run *r, const kc_tvm_init *in, json_t **clamped, kc_error *err) {
  const kc_tvm_serve_opts *o = r->o;
  session_limits ask = {0};
  bool ours = in->nargs && !strcmp(in->args[0], "kcage.sandbox");
  if (ours && parse_ask(in, o, &ask, err) < 0)
    return -1;
  *clamped = json_object();
  apply_caps(o, &ask, &r->lim, *clamped);
  if (kc_policy_load_in(&r->o->settings, r->lim.policy, &r->pol, err) < 0)
    return -1;
  /* the server loop's output, kept out of the tenant's directory, for the verdict */
  char base[PATH_MAX];
  snprintf(base, sizeof base, "%s", o->dir);
  char *slash = strrchr(base, '/');
  if (slash && slash != base)
    *slash = '\0';
  r->log_fd = open(base, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (r->log_fd < 0)
    return kc_error_set(err, errno, "log file in %s", base);
  return 0;
}

/* Wait for the session's sandbox and tell the client how it ended. */
static int finish(session_run *r, kc_sandbox *sb, int fd, const kc_tvm_init *in, kc_error *err) {
  kc_result res;
  kc_result_init(&res);
  int rc = kc_sandbox_wait(sb, &res, err);
  kc_sandbox_free(sb);
  if (rc < 0) {
    char msg[KC_ERROR_MSG_MAX + 64];
    snprintf(msg, sizeof msg, "kcage agent: %s", err->msg);
    kc_tvm_refuse(fd, msg);
    return -1;
  }
  log_end(in, &res);
  if (res.status != KC_STATUS_OK)
    report_verdict(fd, r, &res);
  else
    close(fd);
  return 0;
}

static int refuse_unserved(int fd, const kc_tvm_serve_opts *o, kc_error *err) {
  char msg[512];
  snprintf(msg, sizeof msg, "kcage agent: this agent serves no TVM RPC sessions: %s",
           o->unavailable ? o->unavailable : "no TVM");
  kc_tvm_refuse(fd, msg);
  return kc_error_set(err, 0, "%s", msg);
}

/* The client's kInitServer, read without consuming it; a client refused (fd closed)
 * when it cannot be read or the agent has no TVM. */
static int begin(int fd, const kc_tvm_serve_opts *o, kc_tvm_init *in, kc_error *err) {
  if (read_init(fd, o->deadline, in, err) < 0) {
    kc_tvm_refuse(fd, err->msg);
    return -1;
  }
  return o->python ? 0 : refuse_unserved(fd, o, err);
}

int kc_tvm_session_serve(int fd, const kc_tvm_serve_opts *o, kc_error *err) {
  kc_tvm_init in;
  if (begin(fd, o, &in, err) < 0)
    return -1;
  session_run r = {.o = o, .log_fd = -1, .ids = {0, 0, -1}};
  json_t *clamped = NULL;
  char *envp[8], threads[64];
  kc_sandbox *sb = NULL;
  int rc = prepare(&r, &in, &clamped, err);
  if (rc == 0)
    rc = build_env(&r, session_info(&r, &in, clamped), envp, threads, err);
  json_decref(clamped);
  if (rc == 0)
    rc = spawn_session(&r, fd, envp, wall_limit(&r), &sb, err);
  if (rc == 0) {
    /* beside the next session's standby in kcage/, which only gets what this leaves */
    kc_cgroup_set_cpu_idle(kc_sandbox_cgroup(sb), false, NULL);
    rc = finish(&r, sb, fd, &in, err);
  } else {
    char msg[KC_ERROR_MSG_MAX + 64];
    snprintf(msg, sizeof msg, "kcage agent: %s", err->msg);
    kc_tvm_refuse(fd, msg);
  }
  run_free(&r);
  return rc;
}

/* ---- a sandbox started ahead of its session ---------------------------------------- */

struct kc_tvm_standby {
  session_run r;
  kc_sandbox *sb;
  int ctl; /* our end of the socketpair that is the sandbox's fd 0 */
};

void kc_tvm_standby_drop(kc_tvm_standby *s) {
  if (!s)
    return;
  if (s->sb) {
    kc_result res;
    kc_sandbox_kill(s->sb);
    kc_sandbox_wait(s->sb, &res, NULL);
    kc_sandbox_free(s->sb);
  }
  if (s->ctl >= 0)
    close(s->ctl);
  run_free(&s->r);
  free(s);
}

int kc_tvm_standby_pid(const kc_tvm_standby *s) {
  return kc_sandbox_pid(s->sb);
}

int kc_tvm_standby_idle(kc_tvm_standby *s, int fd) {
  kc_error e = {0};
  return kc_sandbox_idle(s->sb, fd, &e);
}

int kc_tvm_standby_start(const kc_tvm_serve_opts *o, kc_tvm_standby **out, kc_error *err) {
  kc_tvm_standby *s = calloc(1, sizeof *s);
  if (!s)
    return kc_error_set(err, ENOMEM, "standby");
  *s = (kc_tvm_standby){.r = {.o = o, .log_fd = -1, .ids = {0, 0, -1}}, .ctl = -1};
  kc_tvm_init none = {0};
  json_t *clamped = NULL;
  char *envp[8], threads[64];
  int sv[2] = {-1, -1};
  int rc = prepare(&s->r, &none, &clamped, err);
  json_t *env = rc == 0 ? session_info(&s->r, &none, clamped) : NULL;
  json_decref(clamped);
  if (env)
    json_object_set_new(env, "standby", json_true());
  if (rc == 0)
    rc = build_env(&s->r, env, envp, threads, err);
  if (rc == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    rc = kc_error_set(err, errno, "socketpair");
  if (rc == 0)
    rc = spawn_session(&s->r, sv[1], envp, 0, &s->sb, err);
  /* TVM's import (seconds of CPU) only on what the running session leaves: started
   * while a session runs, a standby that cannot be made idle is not started at all. */
  kc_error idle_err = {0};
  if (rc == 0 && kc_cgroup_set_cpu_idle(kc_sandbox_cgroup(s->sb), true, &idle_err) < 0 && o->ahead)
    rc = kc_error_set(err, ENOTSUP, "a standby beside a running session must run idle: %s",
                      idle_err.msg);
  if (sv[1] >= 0)
    close(sv[1]);
  s->ctl = sv[0];
  s->r.o = NULL; /* the session brings its own options */
  if (rc < 0) {
    kc_tvm_standby_drop(s);
    return -1;
  }
  *out = s;
  return 0;
}

/* The session's description and socket to the waiting server loop. */
static int hand_over(kc_tvm_standby *s, int fd, json_t *env, kc_error *err) {
  char *text = json_dumps(env, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(env);
  if (!text)
    return kc_error_set(err, ENOMEM, "session");
  int rc = kc_send_fds(s->ctl, text, strlen(text), &fd, 1);
  int e = errno;
  free(text);
  return rc == 0 ? 0 : kc_error_set(err, e ? e : EIO, "hand-over");
}

int kc_tvm_standby_serve(kc_tvm_standby *s, int fd, const kc_tvm_serve_opts *o, kc_error *err) {
  kc_tvm_init in;
  if (read_init(fd, o->deadline, &in, err) < 0) {
    kc_tvm_standby_drop(s);
    kc_tvm_refuse(fd, err->msg);
    return -1;
  }
  /* A tenant that asks for limits or a policy of its own gets a sandbox made for them. */
  if (in.nargs > 1 && !strcmp(in.args[0], "kcage.sandbox")) {
    kc_tvm_standby_drop(s);
    return kc_tvm_session_serve(fd, o, err);
  }
  /* Its ordinary CPU share back before the tenant's first call; a standby that cannot
   * have it is dropped for a sandbox made now. */
  kc_error prio = {0};
  if (kc_cgroup_set_cpu_idle(kc_sandbox_cgroup(s->sb), false, &prio) < 0 && prio.code != ENOTSUP) {
    kc_tvm_standby_drop(s);
    return kc_tvm_session_serve(fd, o, err);
  }
  s->r.o = o;
  session_limits none = {0};
  json_t *clamped = json_object();
  apply_caps(o, &none, &s->r.lim, clamped);
  json_t *env = session_info(&s->r, &in, clamped);
  json_decref(clamped);
  int rc = hand_over(s, fd, env, err);
  if (rc == 0) {
    kc_sandbox_start_wall(s->sb, wall_limit(&s->r));
    rc = finish(&s->r, s->sb, fd, &in, err);
    s->sb = NULL;
  } else {
    char msg[KC_ERROR_MSG_MAX + 64];
    snprintf(msg, sizeof msg, "kcage agent: %s", err->msg);
    kc_tvm_refuse(fd, msg);
  }
  kc_tvm_standby_drop(s);
  return rc;
}

/* ---- a session through the agent's TVM zygote -------------------------------------- */

/* The session's description as the worker's run() reads it: the work directory, what
 * kcage.sandbox.info answers, TVM's thread count. */
static char *hub_text(session_run *r, const kc_tvm_init *in, json_t *clamped) {
  json_t *info = session_info(r, in, clamped);
  if (r->lim.cpus > 0)
    json_object_set_new(info, "threads", json_integer((json_int_t)ceil(r->lim.cpus)));
  char *text = json_dumps(info, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(info);
  return text;
}

static int hub_wait(int reply, kc_tvm_hub_reply *rep, uint32_t phase) {
  for (;;) {
    ssize_t n = recv(reply, rep, sizeof *rep, 0);
    if (n < 0 && errno == EINTR)
      continue;
    return n == (ssize_t)sizeof *rep && rep->magic == KC_TVM_HUB_MAGIC && rep->phase == phase ? 0
                                                                                              : -1;
  }
}

/* The request to the hub with the client's socket; its answer when it took it, else 1. */
static int hub_ask(int hub_ctl, int fd, const session_run *r, const char *text,
                   kc_tvm_hub_reply *rep) {
  size_t tl = strlen(text);
  kc_tvm_hub_request q = {.magic = KC_TVM_HUB_MAGIC,
                          .lim = {r->lim.memory_bytes, r->lim.pids, r->lim.cpus},
                          .wall_s = wall_limit(r)};
  kc_cleanup_free char *buf = tl <= KC_TVM_HUB_TEXT_MAX ? malloc(sizeof q + tl) : NULL;
  int sv[2];
  if (!buf || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
    return 1;
  memcpy(buf, &q, sizeof q);
  memcpy(buf + sizeof q, text, tl);
  int fds[2] = {fd, sv[1]};
  int sent = kc_send_fds(hub_ctl, buf, sizeof q + tl, fds, 2);
  close(sv[1]);
  if (sent < 0 || hub_wait(sv[0], rep, KC_TVM_HUB_TAKEN) < 0) {
    close(sv[0]);
    return 1;
  }
  int ended = hub_wait(sv[0], rep, KC_TVM_HUB_ENDED);
  close(sv[0]);
  if (ended < 0) {
    rep->status = KC_STATUS_SETUP_ERROR;
    snprintf(rep->message, sizeof rep->message, "the agent's TVM zygote ended during the session");
    rep->limit[0] = '\0';
    rep->tail_len = 0;
  }
  return 0;
}

/* How the session ended, to the operator's log and, unless the client ended it, to it. */
static void hub_report(int fd, const session_run *r, const kc_tvm_init *in,
                       const kc_tvm_hub_reply *rep) {
  kc_result res;
  kc_result_init(&res);
  res.status = rep->status;
  res.limit = !strcmp(rep->limit, "wall") ? "wall" : !strcmp(rep->limit, "cpu") ? "cpu" : NULL;
  snprintf(res.message, sizeof res.message, "%.*s", (int)sizeof rep->message, rep->message);
  log_end(in, &res);
  if (res.status == KC_STATUS_OK) {
    close(fd);
    return;
  }
  char tail[TAIL * 4 + 1];
  kc_escape_n(rep->tail, rep->tail_len < sizeof rep->tail ? rep->tail_len : sizeof rep->tail, tail,
              sizeof tail);
  say_verdict(fd, r->lim.session_s, &res, tail);
}

int kc_tvm_hub_serve(int hub_ctl, int fd, const kc_tvm_serve_opts *o, kc_error *err) {
  kc_tvm_init in;
  if (begin(fd, o, &in, err) < 0)
    return -1;
  session_run r = {.o = o, .log_fd = -1, .ids = {0, 0, -1}};
  session_limits ask = {0};
  int rc = 0;
  if (in.nargs && !strcmp(in.args[0], "kcage.sandbox"))
    rc = parse_ask(&in, o, &ask, err);
  json_t *clamped = json_object();
  apply_caps(o, &ask, &r.lim, clamped);
  if (rc == 0 && strcmp(r.lim.policy, o->policies[0])) {
    json_decref(clamped); /* another policy than the zygote's: a sandbox of its own */
    return 1;
  }
  if (rc == 0 && !o->first)
    rc = kc_policy_load_in(&o->settings, r.lim.policy, &r.pol, err);
  const kc_policy *own = r.pol;
  if (o->first)
    r.pol = (kc_policy *)o->first; /* read only, for the limits' defaults */
  kc_cleanup_free char *text = rc == 0 ? hub_text(&r, &in, clamped) : NULL;
  r.pol = (kc_policy *)own;
  json_decref(clamped);
  if (rc < 0 || !text) {
    char msg[KC_ERROR_MSG_MAX + 64];
    snprintf(msg, sizeof msg, "kcage agent: %s", rc < 0 ? err->msg : "out of memory");
    kc_tvm_refuse(fd, msg);
    run_free(&r);
    return -1;
  }
  kc_tvm_hub_reply rep;
  rc = hub_ask(hub_ctl, fd, &r, text, &rep);
  if (rc == 0)
    hub_report(fd, &r, &in, &rep);
  run_free(&r);
  return rc;
}
