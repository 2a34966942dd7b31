/* The kcage session protocol (include/kcage/tracker.h): both sides, and the remote
 * half of `kcage bench --tracker` (kc_bench_remote_run). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#if __has_include("kcage/measure.h")
#include "kcage/measure.h"
#define KC_HAVE_MEASURE 1
#endif

#include "kcage/cleanup.h"
#include "kcage/tracker.h"
#include "netio.h"

#define SESSION_MAX_FRAME (1u << 20)

int kc_session_send(int fd, const json_t *msg, double deadline, kc_error *err) {
  char *t = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
  if (!t)
    return kc_error_set(err, EINVAL, "session: cannot encode message");
  size_t n = strlen(t);
  if (n > SESSION_MAX_FRAME) {
    free(t);
    return kc_error_set(err, EMSGSIZE, "session: message of %zu bytes", n);
  }
  char *buf = malloc(n + 4);
  if (!buf) {
    free(t);
    return kc_error_set(err, ENOMEM, "session");
  }
  uint32_t le = htole32((uint32_t)n);
  memcpy(buf, &le, 4);
  memcpy(buf + 4, t, n);
  free(t);
  int rc = kc_write_all(fd, buf, n + 4, deadline, err);
  free(buf);
  return rc;
}

int kc_session_recv(int fd, double deadline, json_t **msg, kc_error *err) {
  uint32_t n;
  if (kc_read_u32(fd, &n, deadline, err) < 0)
    return -1;
  if (n == 0 || n > SESSION_MAX_FRAME)
    return kc_error_set(err, EPROTO, "session: bad frame length %u", n);
  kc_cleanup_free char *buf = malloc(n);
  if (!buf)
    return kc_error_set(err, ENOMEM, "session");
  if (kc_read_exact(fd, buf, n, deadline, err) < 0)
    return -1;
  json_error_t jerr;
  json_t *v = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &jerr);
  if (!v || !json_is_object(v) || !json_is_string(json_object_get(v, "op"))) {
    json_decref(v);
    return kc_error_set(err, EPROTO, "session: malformed message");
  }
  *msg = v;
  return 0;
}

/* ---- client side ----------------------------------------------------------------- */

struct kc_session {
  int fd;
};

static int lost(kc_error *err) {
  if (err && (err->code == ECONNRESET || err->code == EPIPE))
    return kc_error_set(err, ECONNRESET,
                        "device agent closed the session (agent lost, or the session was killed)");
  return -1;
}

int kc_session_call(kc_session *s, const json_t *msg, double timeout_s, json_t **reply,
                    kc_error *err) {
  double deadline = kc_deadline(timeout_s);
  json_t *r;
  if (kc_session_send(s->fd, msg, deadline, err) < 0 ||
      kc_session_recv(s->fd, deadline, &r, err) < 0)
    return lost(err);
  if (!strcmp(json_string_value(json_object_get(r, "op")), "error")) {
    const char *m = json_string_value(json_object_get(r, "message"));
    const char *code = json_string_value(json_object_get(r, "code"));
    kc_error_set(err, 0, "device agent: %s", m ? m : "error");
    if (err)
      err->code = code && !strcmp(code, "session_timeout") ? ETIMEDOUT : EPROTO;
    json_decref(r);
    return -1;
  }
  *reply = r;
  return 0;
}

int kc_session_open(int fd, double timeout_s, kc_session **out, json_t **hello, kc_error *err) {
  kc_session *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return kc_error_set(err, ENOMEM, "session");
  }
  s->fd = fd;
  json_t *m = json_pack("{s:s, s:i}", "op", "hello", "version", KC_SESSION_VERSION), *r = NULL;
  int rc = kc_session_call(s, m, timeout_s ? timeout_s : 10, &r, err);
  json_decref(m);
  if (rc < 0 || strcmp(json_string_value(json_object_get(r, "op")), "hello")) {
    if (rc == 0)
      kc_error_set(err, EPROTO, "device is not a kcage agent");
    json_decref(r);
    close(fd);
    free(s);
    return -1;
  }
  if (hello)
    *hello = r;
  else
    json_decref(r);
  *out = s;
  return 0;
}

int kc_session_upload(kc_session *s, const char *name, const void *data, size_t len,
                      kc_error *err) {
  if (len > KC_SESSION_MAX_FILE)
    return kc_error_set(err, EFBIG, "%s: %zu bytes is over the %u-byte upload limit", name, len,
                        KC_SESSION_MAX_FILE);
  double deadline = kc_deadline(30 + (double)len / 1e6);
  json_t *m = json_pack("{s:s, s:s, s:I}", "op", "file", "name", name, "size", (json_int_t)len), *r;
  int rc = kc_session_send(s->fd, m, deadline, err);
  json_decref(m);
  if (rc < 0 || kc_write_all(s->fd, data, len, deadline, err) < 0 ||
      kc_session_recv(s->fd, deadline, &r, err) < 0)
    return lost(err);
  const char *op = json_string_value(json_object_get(r, "op"));
  if (strcmp(op, "ok")) {
    const char *msg = json_string_value(json_object_get(r, "message"));
    kc_error_set(err, EPROTO, "device agent: %s", msg ? msg : op);
    json_decref(r);
    return -1;
  }
  json_decref(r);
  return 0;
}

int kc_session_upload_file(kc_session *s, const char *name, const char *path, kc_error *err) {
  kc_cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return kc_error_set(err, errno, "%s", path);
  if ((uint64_t)st.st_size > KC_SESSION_MAX_FILE)
    return kc_error_set(err, EFBIG, "%s: over the upload limit", path);
  kc_cleanup_free char *buf = malloc((size_t)st.st_size + 1);
  if (!buf)
    return kc_error_set(err, ENOMEM, "%s", path);
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n <= 0)
      return kc_error_set(err, n < 0 ? errno : EIO, "read %s", path);
    got += (size_t)n;
  }
  return kc_session_upload(s, name, buf, got, err);
}

int kc_session_fd(const kc_session *s) {
  return s->fd;
}

void kc_session_close(kc_session *s) {
  if (!s)
    return;
  json_t *m = json_pack("{s:s}", "op", "bye");
  kc_session_send(s->fd, m, kc_deadline(1), NULL);
  json_decref(m);
  close(s->fd);
  free(s);
}

/* ---- agent side ------------------------------------------------------------------ */

static volatile sig_atomic_t g_in_io;
static int g_fd = -1;
static char *g_timeout_frame;
static size_t g_timeout_len;

static void on_alarm(int sig) {
  (void)sig;
  /* Past the session's deadline while the batch runs: tell the client and end the
   * session process (its pool dies with it).  During I/O the I/O deadline does it. */
  if (g_in_io)
    return;
  if (g_timeout_frame) {
    ssize_t n = write(g_fd, g_timeout_frame, g_timeout_len);
    (void)n;
  }
  kill(0, SIGKILL); /* the session's process group: this process and its pool */
  _exit(3);
}

static char *timeout_message(double t) {
  char *m = NULL;
  if (asprintf(&m,
               "RPCSessionTimeoutError: Your %gs session has expired, try to increase the "
               "\"session_timeout\" value.",
               t) < 0)
    return NULL;
  return m;
}

static int send_error(int fd, double deadline, const char *code, const char *msg) {
  json_t *m = json_pack("{s:s, s:s}", "op", "error", "message", msg ? msg : "error");
  if (code)
    json_object_set_new(m, "code", json_string(code));
  int rc = kc_session_send(fd, m, deadline, NULL);
  json_decref(m);
  return rc;
}

static bool valid_name(const char *n) {
  size_t l = strlen(n);
  if (l == 0 || l > 128 || n[0] == '.')
    return false;
  for (size_t i = 0; i < l; i++) {
    char c = n[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

struct serve_state {
  int fd;
  const kc_session_serve_opts *o;
  size_t nfiles;
  uint64_t total;
};

static int do_file(struct serve_state *st, json_t *m, kc_error *err) {
  const char *name = json_string_value(json_object_get(m, "name"));
  json_t *sz = json_object_get(m, "size");
  if (!name || !valid_name(name) || !json_is_integer(sz) || json_integer_value(sz) < 0 ||
      json_integer_value(sz) > (json_int_t)KC_SESSION_MAX_FILE)
    return kc_error_set(err, EPROTO, "file: bad name or size");
  uint64_t size = (uint64_t)json_integer_value(sz);
  if (st->nfiles + 1 > KC_SESSION_MAX_FILES || st->total + size > KC_SESSION_MAX_TOTAL)
    return kc_error_set(err, EFBIG, "file: session upload limit reached");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", st->o->dir, name);
  kc_cleanup_close int out =
      open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (out < 0)
    return kc_error_set(err, errno, "file: %s", name);
  char buf[65536];
  uint64_t left = size;
  while (left) {
    size_t chunk = left < sizeof buf ? (size_t)left : sizeof buf;
    g_in_io = 1;
    int rc = kc_read_exact(st->fd, buf, chunk, st->o->deadline, err);
    g_in_io = 0;
    if (rc < 0)
      return -1;
    if (write(out, buf, chunk) != (ssize_t)chunk)
      return kc_error_set(err, errno ? errno : EIO, "file: write %s", name);
    left -= chunk;
  }
  st->nfiles++;
  st->total += size;
  return 0;
}

#ifdef KC_HAVE_MEASURE
/* A config number from the (untrusted) client: absent = def; outside [lo, hi] or not
 * finite = refused (no out-of-range float-to-integer casts). */
static double num(json_t *c, const char *k, double def, double lo, double hi, bool *bad) {
  json_t *v = json_object_get(c, k);
  if (!v || json_is_null(v))
    return def;
  double x = json_is_number(v) ? json_number_value(v) : NAN;
  if (!isfinite(x) || x < lo || x > hi) {
    *bad = true;
    return def;
  }
  return x;
}

static int do_run(struct serve_state *st, json_t *m, json_t **records, kc_error *err) {
  json_t *ks = json_object_get(m, "kernels"), *c = json_object_get(m, "config");
  const char *ref = json_string_value(json_object_get(m, "reference"));
  if (!json_is_array(ks) || json_array_size(ks) == 0 ||
      json_array_size(ks) > KC_SESSION_MAX_FILES || !json_is_object(c) ||
      !json_is_string(json_object_get(c, "args")))
    return kc_error_set(err, EPROTO, "run: expected kernels, config.args");
  size_t n = json_array_size(ks);
  char **paths = calloc(n, sizeof *paths);
  char refpath[4096];
  if (!paths)
    return kc_error_set(err, ENOMEM, "run");
  int rc = -1;
  for (size_t i = 0; i < n; i++) {
    const char *k = json_string_value(json_array_get(ks, i));
    if (!k || !valid_name(k)) {
      kc_error_set(err, EPROTO, "run: bad kernel name");
      goto out;
    }
    if (asprintf(&paths[i], "%s/%s", st->o->dir, k) < 0) {
      paths[i] = NULL;
      goto out;
    }
  }
  kc_bench_config cfg;
  kc_bench_config_init(&cfg);
  cfg.args = json_string_value(json_object_get(c, "args"));
  cfg.seed = (uint64_t)json_integer_value(json_object_get(c, "seed"));
  if (ref) {
    if (!valid_name(ref)) {
      kc_error_set(err, EPROTO, "run: bad reference name");
      goto out;
    }
    snprintf(refpath, sizeof refpath, "%s/%s", st->o->dir, ref);
    cfg.reference = refpath;
  }
  bool bad = false;
  cfg.rtol = num(c, "rtol", cfg.rtol, -1, 1e6, &bad);
  cfg.atol = num(c, "atol", cfg.atol, -1, 1e6, &bad);
  if (json_is_string(json_object_get(c, "entry")))
    cfg.entry = json_string_value(json_object_get(c, "entry"));
  cfg.number = (uint32_t)num(c, "number", cfg.number, 0, 1e9, &bad);
  cfg.repeat = (uint32_t)num(c, "repeat", cfg.repeat, 0, 1e6, &bad);
  cfg.min_repeat_ms = num(c, "min_repeat_ms", cfg.min_repeat_ms, -1, 1e6, &bad);
  cfg.cooldown_ms = num(c, "cooldown_ms", cfg.cooldown_ms, 0, 1e6, &bad);
  cfg.flush_cache = json_is_true(json_object_get(c, "flush_cache"));
  cfg.timeout_s = num(c, "timeout_s", cfg.timeout_s, 0, 86400, &bad);
  cfg.memory_bytes = (uint64_t)num(c, "memory_bytes", (double)cfg.memory_bytes, 0, 1e15, &bad);
  cfg.sets = (uint32_t)num(c, "sets", cfg.sets, 0, 1024, &bad);
  cfg.checks = (uint32_t)num(c, "checks", cfg.checks, 0, 1e6, &bad);
  cfg.budget_s = num(c, "budget_s", cfg.budget_s, -1, 86400, &bad);
  cfg.max_cv = num(c, "max_cv", cfg.max_cv, -1, 1e6, &bad);
  if (bad) {
    kc_error_set(err, EINVAL, "run: a config value is out of range");
    goto out;
  }
  if (st->o->workers)
    cfg.workers = st->o->workers;
  cfg.tracker = NULL; /* run here */
  if (kc_bench_run_batch(&cfg, (const char *const *)paths, n, records, err) < 0)
    goto out;
  size_t i;
  json_t *r;
  json_array_foreach(*records, i, r) {
    json_object_set_new(r, "device", json_string(st->o->device));
    json_object_set_new(r, "kernel", json_incref(json_array_get(ks, i)));
  }
  rc = 0;
out:
  for (size_t i = 0; i < n; i++)
    free(paths[i]);
  free(paths);
  return rc;
}
#else
static int do_run(struct serve_state *st, json_t *m, json_t **records, kc_error *err) {
  (void)st, (void)m, (void)records;
  return kc_error_set(err, ENOSYS, "this agent was built without kernel measurement");
}
#endif

int kc_session_serve(int fd, const kc_session_serve_opts *o, kc_error *err) {
  struct serve_state st = {.fd = fd, .o = o};
  kc_cleanup_free char *tmsg = o->deadline >= 0 ? timeout_message(o->timeout_s) : NULL;
  if (o->deadline >= 0) {
    json_t *m = json_pack("{s:s, s:s, s:s}", "op", "error", "code", "session_timeout", "message",
                          tmsg ? tmsg : "session timeout");
    char *t = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    if (t) {
      g_timeout_len = strlen(t) + 4;
      g_timeout_frame = malloc(g_timeout_len);
      uint32_t le = htole32((uint32_t)strlen(t));
      memcpy(g_timeout_frame, &le, 4);
      memcpy(g_timeout_frame + 4, t, strlen(t));
      free(t);
    }
    g_fd = fd;
    struct sigaction sa = {.sa_handler = on_alarm};
    sigaction(SIGALRM, &sa, NULL);
    double left = o->deadline - kc_now();
    if (left < 0.001)
      left = 0.001;
    struct itimerval it = {.it_value = {(time_t)left, (suseconds_t)((left - floor(left)) * 1e6)}};
    setitimer(ITIMER_REAL, &it, NULL);
  }
  int rc = 0;
  for (;;) {
    json_t *m;
    g_in_io = 1;
    int r = kc_session_recv(fd, o->deadline, &m, err);
    g_in_io = 0;
    if (r < 0) {
      if (err && err->code == ETIMEDOUT) {
        send_error(fd, kc_deadline(1), "session_timeout", tmsg);
        rc = -1;
      } else if (err && err->code == ECONNRESET) {
        rc = 0; /* the client went away */
      } else {
        send_error(fd, kc_deadline(1), NULL, err ? err->msg : "protocol error");
        rc = -1;
      }
      break;
    }
    const char *op = json_string_value(json_object_get(m, "op"));
    json_t *reply = NULL;
    if (!strcmp(op, "hello")) {
      reply = json_pack("{s:s, s:i, s:s, s:i}", "op", "hello", "version", KC_SESSION_VERSION,
                        "device", o->device ? o->device : "", "workers", (int)o->workers);
      if (o->deadline >= 0)
        json_object_set_new(reply, "session_timeout", json_real(o->timeout_s));
    } else if (!strcmp(op, "file")) {
      if (do_file(&st, m, err) == 0)
        reply = json_pack("{s:s}", "op", "ok");
    } else if (!strcmp(op, "run")) {
      json_t *records = NULL;
      if (do_run(&st, m, &records, err) == 0)
        reply = json_pack("{s:s, s:o}", "op", "records", "records", records);
    } else if (!strcmp(op, "bye")) {
      json_decref(m);
      break;
    } else {
      kc_error_set(err, EPROTO, "unknown op %s", op);
    }
    json_decref(m);
    if (!reply) {
      bool timed_out = err && err->code == ETIMEDOUT;
      send_error(fd, kc_deadline(1), timed_out ? "session_timeout" : NULL,
                 timed_out ? tmsg : (err ? err->msg : "error"));
      rc = -1;
      break;
    }
    g_in_io = 1;
    r = kc_session_send(fd, reply, o->deadline, err);
    g_in_io = 0;
    json_decref(reply);
    if (r < 0) {
      rc = -1;
      break;
    }
  }
  struct itimerval off = {0};
  setitimer(ITIMER_REAL, &off, NULL);
  return rc;
}

/* ---- kcage bench --tracker ------------------------------------------------------- */

#ifdef KC_HAVE_MEASURE
static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Upload names: "k<i>-<basename>" with anything outside [A-Za-z0-9._-] replaced. */
static void upload_name(char *out, size_t len, const char *prefix, size_t i, const char *path) {
  int n = snprintf(out, len, "%s%zu-%s", prefix, i, base_name(path));
  for (int j = 0; j < n && (size_t)j < len; j++) {
    char c = out[j];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      out[j] = '_';
  }
  if (strlen(out) > 128)
    out[128] = '\0';
}

struct remote_ctx {
  const kc_bench_config *cfg;
  const char *const *kernels;
  size_t n;
  json_t *records;
};

static int remote_session(int fd, const kc_lease *lease, void *vctx, kc_error *err) {
  (void)lease;
  struct remote_ctx *x = vctx;
  const kc_bench_config *cfg = x->cfg;
  kc_session *s;
  int dup_fd = dup(fd); /* the session owns its fd; request_and_run closes the original */
  if (dup_fd < 0)
    return kc_error_set(err, errno, "dup");
  if (kc_session_open(dup_fd, 30, &s, NULL, err) < 0)
    return -1;
  json_t *names = json_array();
  char name[160], refname[160];
  int rc = -1;
  for (size_t i = 0; i < x->n; i++) {
    upload_name(name, sizeof name, "k", i, x->kernels[i]);
    if (kc_session_upload_file(s, name, x->kernels[i], err) < 0)
      goto out;
    json_array_append_new(names, json_string(name));
  }
  if (cfg->reference) {
    upload_name(refname, sizeof refname, "ref", 0, cfg->reference);
    if (kc_session_upload_file(s, refname, cfg->reference, err) < 0)
      goto out;
  }
  json_t *c =
      json_pack("{s:s, s:I, s:f, s:f, s:i, s:i, s:f, s:f, s:b, s:f, s:I, s:i, s:i}", "args",
                cfg->args ? cfg->args : "", "seed", (json_int_t)cfg->seed, "rtol", cfg->rtol,
                "atol", cfg->atol, "number", (int)cfg->number, "repeat", (int)cfg->repeat,
                "min_repeat_ms", cfg->min_repeat_ms, "cooldown_ms", cfg->cooldown_ms, "flush_cache",
                cfg->flush_cache, "timeout_s", cfg->timeout_s, "memory_bytes",
                (json_int_t)cfg->memory_bytes, "sets", (int)cfg->sets, "checks", (int)cfg->checks);
  if (cfg->entry)
    json_object_set_new(c, "entry", json_string(cfg->entry));
  /* The agent's records carry the same fields as local ones (speed-up included). */
  json_object_set_new(c, "budget_s", json_real(cfg->budget_s));
  json_object_set_new(c, "max_cv", json_real(cfg->max_cv));
  json_t *m = json_pack("{s:s, s:O, s:o}", "op", "run", "kernels", names, "config", c);
  json_object_set_new(m, "reference", cfg->reference ? json_string(refname) : json_null());
  double per = (cfg->budget_s > 0 ? cfg->budget_s : 300) + 70; /* build + measure */
  double wait = cfg->session_timeout_s > 0 ? cfg->session_timeout_s + 5 : 60 + per * (double)x->n;
  json_t *r = NULL;
  int crc = kc_session_call(s, m, wait, &r, err);
  json_decref(m);
  if (crc < 0)
    goto out;
  json_t *recs = json_object_get(r, "records");
  if (!json_is_array(recs) || json_array_size(recs) != x->n) {
    kc_error_set(err, EPROTO, "device agent returned %zu records for %zu kernels",
                 json_array_size(recs), x->n);
    json_decref(r);
    goto out;
  }
  size_t i;
  json_t *rec;
  json_array_foreach(recs, i, rec) json_object_set_new(rec, "kernel", json_string(x->kernels[i]));
  x->records = json_incref(recs);
  json_decref(r);
  rc = 0;
out:
  json_decref(names);
  kc_session_close(s);
  return rc;
}

int kc_bench_remote_run(const kc_bench_config *cfg, const char *const *kernels, size_t n,
                        json_t **records, kc_error *err) {
  char host[KC_TRACKER_MAX_ADDR];
  uint16_t port;
  if (!cfg->key || !*cfg->key)
    return kc_error_set(err, EINVAL, "--key is required with --tracker");
  if (kc_parse_hostport(cfg->tracker, KC_TRACKER_DEFAULT_PORT, host, sizeof host, &port, err) < 0)
    return kc_error_prefix(err, "--tracker");
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.priority = cfg->priority;
  o.session_timeout_s = cfg->session_timeout_s;
  const char *w = getenv("KCAGE_REQUEST_TIMEOUT");
  if (w && *w)
    o.wait_s = strtod(w, NULL);
  struct remote_ctx x = {cfg, kernels, n, NULL};
  if (kc_tracker_request_and_run(host, port, cfg->key, &o, 2, remote_session, &x, err) < 0)
    return -1;
  *records = x.records;
  return 0;
}
#endif
