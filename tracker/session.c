/* The kcage session protocol (include/kcage/tracker.h): both sides of it.  The client's
 * use of it for `kcage bench --tracker` is in remote_bench.c. */
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

#include <nettle/sha2.h>

#include "kcage/cleanup.h"
#include "kcage/escape.h"
#include "kcage/measure.h"
#include "kcage/tracker.h"
#include "metrics.h"
#include "netio.h"
#include "seal.h"
#include "session_ctor.h"
#include "session_ctor_agent.h"

int kc_session_send(int fd, const json_t *msg, double deadline, kc_error *err) {
  kc_chan c;
  kc_chan_init(&c, fd);
  return kc_chan_send(&c, msg, deadline, err);
}

int kc_session_recv(int fd, double deadline, json_t **msg, kc_error *err) {
  kc_chan c;
  kc_chan_init(&c, fd);
  return kc_chan_recv(&c, deadline, msg, err);
}

/* An authentication refusal: EACCES for callers, and a message without strerror's
 * words, since it also goes to the peer. */
static int denied(kc_error *err, const char *msg) {
  kc_error_set(err, 0, "%s", msg);
  if (err)
    err->code = EACCES;
  return -1;
}

/* ---- client side ----------------------------------------------------------------- */

struct kc_session {
  kc_chan ch;
  json_t *hello; /* the agent's */
};

static int lost(kc_error *err) {
  if (err && (err->code == ECONNRESET || err->code == EPIPE))
    return kc_error_set(err, ECONNRESET,
                        "device agent closed the session (agent lost, or the session was killed)");
  return -1;
}

/* An {"op":"error"} reply as -1 with its (escaped) message; 0 for anything else. */
static int reply_error(json_t *r, kc_error *err) {
  if (strcmp(json_string_value(json_object_get(r, "op")), "error"))
    return 0;
  const char *m = json_string_value(json_object_get(r, "message"));
  const char *code = json_string_value(json_object_get(r, "code"));
  char shown[512];
  kc_error_set(err, 0, "device agent: %s", kc_escape(m ? m : "error", shown, sizeof shown));
  if (err)
    err->code = code && !strcmp(code, "session_timeout") ? ETIMEDOUT : EPROTO;
  return -1;
}

int kc_session_call(kc_session *s, const json_t *msg, double timeout_s, json_t **reply,
                    kc_error *err) {
  double deadline = kc_deadline(timeout_s);
  json_t *r;
  if (kc_chan_send(&s->ch, msg, deadline, err) < 0 || kc_chan_recv(&s->ch, deadline, &r, err) < 0)
    return lost(err);
  if (reply_error(r, err) < 0) {
    json_decref(r);
    return -1;
  }
  *reply = r;
  return 0;
}

/* The two hellos as they crossed the wire: the sealed channel's keys depend on them. */
struct hellos {
  char nonce[KC_AUTH_HEX + 1];
  char *mine, *theirs;
  size_t mine_len, theirs_len;
};

/* The agent's proof in its hello; from here on every byte is sealed; then ours. */
static int client_auth(kc_session *s, const kc_auth_key *auth, const struct hellos *h,
                       json_t *hello, double timeout_s, kc_error *err) {
  json_t *a = json_object_get(hello, "auth");
  const char *an = json_string_value(json_object_get(a, "nonce"));
  const char *mac = json_string_value(json_object_get(a, "mac"));
  const char *rec = json_string_value(json_object_get(hello, "record"));
  if (!a)
    return denied(err, "refused: it did not prove the auth key (it has none)");
  if (!kc_auth_check(auth, true, h->nonce, an, mac))
    return denied(err, "refused: it did not prove the auth key (wrong key)");
  if (!rec || strcmp(rec, KC_SEAL_NAME))
    return denied(err, "refused: it does not seal the session (an older kcage agent, or a "
                       "downgrade on the way)");
  kc_seal seal;
  kc_seal_init(&seal, auth, false, h->nonce, an, h->mine, h->mine_len, h->theirs, h->theirs_len);
  kc_chan_seal(&s->ch, &seal);
  kc_seal_wipe(&seal);
  char mine[KC_AUTH_HEX + 1];
  kc_auth_mac(auth, false, h->nonce, an, mine);
  json_t *m = json_pack("{s:s, s:s}", "op", "auth", "mac", mine), *r = NULL;
  int rc = kc_session_call(s, m, timeout_s, &r, err);
  json_decref(m);
  if (rc == 0 && strcmp(json_string_value(json_object_get(r, "op")), "ok"))
    rc = kc_error_set(err, EPROTO, "authentication: unexpected reply");
  json_decref(r);
  return rc;
}

static char *hello_text(const kc_auth_key *auth, json_t *ctor, char nonce[KC_AUTH_HEX + 1],
                        kc_error *err) {
  json_t *m = json_pack("{s:s, s:i}", "op", "hello", "version", KC_SESSION_VERSION);
  if (ctor)
    json_object_set(m, "session_constructor_args", ctor);
  if (auth && auth->len) {
    if (kc_auth_nonce(nonce, err) < 0) {
      json_decref(m);
      return NULL;
    }
    json_object_set_new(m, "auth", json_pack("{s:s}", "nonce", nonce));
  }
  char *t = json_dumps(m, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(m);
  if (!t)
    kc_error_set(err, ENOMEM, "session");
  return t;
}

/* hello out, hello back (its bytes kept in h), *r its object. */
static int exchange_hellos(kc_session *s, const kc_auth_key *auth, json_t *ctor, struct hellos *h,
                           double timeout_s, json_t **r, kc_error *err) {
  double deadline = kc_deadline(timeout_s);
  h->mine = hello_text(auth, ctor, h->nonce, err);
  if (!h->mine)
    return -1;
  h->mine_len = strlen(h->mine);
  if (kc_chan_send_text(&s->ch, h->mine, h->mine_len, deadline, err) < 0 ||
      kc_chan_recv_text(&s->ch, deadline, &h->theirs, &h->theirs_len, err) < 0)
    return lost(err);
  *r = kc_session_parse(h->theirs, h->theirs_len);
  if (!*r)
    return kc_error_set(err, EPROTO, "session: malformed message");
  if (reply_error(*r, err) < 0)
    return -1;
  if (strcmp(json_string_value(json_object_get(*r, "op")), "hello"))
    return kc_error_set(err, EPROTO, "device is not a kcage agent");
  return 0;
}

int kc_session_open(int fd, double timeout_s, const kc_auth_key *auth, kc_session **out,
                    json_t **hello, kc_error *err) {
  kc_session_open_opts o = {.timeout_s = timeout_s, .auth = auth};
  return kc_session_open_with(fd, &o, out, hello, err);
}

/* The hello exchange (the constructor's arguments in ours), the agent's proof of the
 * key, and its acknowledgement of the constructor; *r gets the agent's hello. */
static int say_hello(kc_session *s, const kc_session_open_opts *o, json_t **r, kc_error *err) {
  double timeout_s = o->timeout_s ? o->timeout_s : 10;
  const kc_auth_key *auth = o->auth && o->auth->len ? o->auth : NULL;
  json_t *ctor = NULL;
  if (o->n_session_constructor_args) {
    if (kc_session_ctor_check(o->session_constructor_args, o->n_session_constructor_args, err) < 0)
      return -1;
    if (!(ctor = kc_session_ctor_json(o->session_constructor_args, o->n_session_constructor_args)))
      return kc_error_set(err, ENOMEM, "session");
  }
  struct hellos h = {0};
  int rc = exchange_hellos(s, auth, ctor, &h, timeout_s, r, err);
  if (rc == 0 && auth)
    rc = client_auth(s, auth, &h, *r, timeout_s, err);
  if (rc == 0 && ctor)
    rc = kc_session_ctor_acked(*r, ctor, err);
  free(h.mine);
  free(h.theirs);
  json_decref(ctor);
  return rc;
}

int kc_session_open_with(int fd, const kc_session_open_opts *o, kc_session **out, json_t **hello,
                         kc_error *err) {
  kc_session *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return kc_error_set(err, ENOMEM, "session");
  }
  kc_chan_init(&s->ch, fd);
  json_t *r = NULL;
  if (say_hello(s, o, &r, err) < 0) {
    json_decref(r);
    kc_chan_free(&s->ch);
    close(fd);
    free(s);
    return -1;
  }
  s->hello = r;
  if (hello)
    *hello = json_incref(r);
  *out = s;
  return 0;
}

const json_t *kc_session_hello(const kc_session *s) {
  return s ? s->hello : NULL;
}

int kc_session_upload(kc_session *s, const char *name, const void *data, size_t len,
                      kc_error *err) {
  if (len > KC_SESSION_MAX_FILE)
    return kc_error_set(err, EFBIG, "%s: %zu bytes is over the %u-byte upload limit", name, len,
                        KC_SESSION_MAX_FILE);
  double deadline = kc_deadline(30 + (double)len / 1e6);
  json_t *m = json_pack("{s:s, s:s, s:I}", "op", "file", "name", name, "size", (json_int_t)len), *r;
  int rc = kc_chan_send(&s->ch, m, deadline, err);
  json_decref(m);
  if (rc < 0 || kc_chan_write(&s->ch, data, len, deadline, err) < 0 ||
      kc_chan_recv(&s->ch, deadline, &r, err) < 0)
    return lost(err);
  const char *op = json_string_value(json_object_get(r, "op"));
  if (strcmp(op, "ok")) {
    const char *msg = json_string_value(json_object_get(r, "message"));
    char shown[512];
    kc_error_set(err, EPROTO, "device agent: %s", kc_escape(msg ? msg : op, shown, sizeof shown));
    json_decref(r);
    return -1;
  }
  json_decref(r);
  return 0;
}

int kc_session_upload_file(kc_session *s, const char *name, const char *path, kc_error *err) {
  return kc_session_upload_file_hashed(s, name, path, NULL, err);
}

int kc_session_upload_file_hashed(kc_session *s, const char *name, const char *path,
                                  char sha256[65], kc_error *err) {
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
  if (sha256) {
    struct sha256_ctx h;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&h);
    sha256_update(&h, got, (const uint8_t *)buf);
    sha256_digest(&h, sizeof d, d);
    for (size_t i = 0; i < sizeof d; i++)
      snprintf(sha256 + 2 * i, 3, "%02x", d[i]);
  }
  return kc_session_upload(s, name, buf, got, err);
}

int kc_session_fd(const kc_session *s) {
  return s->ch.fd;
}

void kc_session_close(kc_session *s) {
  if (!s)
    return;
  json_t *m = json_pack("{s:s}", "op", "bye");
  kc_chan_send(&s->ch, m, kc_deadline(1), NULL);
  json_decref(m);
  kc_chan_free(&s->ch);
  close(s->ch.fd);
  json_decref(s->hello);
  free(s);
}

/* ---- agent side ------------------------------------------------------------------ */

static volatile sig_atomic_t g_in_io;
static kc_chan *g_chan;
static char *g_timeout_frame; /* the frame, and room for it as one sealed record */
static uint8_t *g_timeout_record;
static size_t g_timeout_len;

/* The timeout message, sealed when the channel is: from the alarm, so nothing here
 * allocates. */
static void say_timeout(void) {
  if (!g_timeout_frame || !g_chan)
    return;
  const void *out = g_timeout_frame;
  size_t len = g_timeout_len;
  if (g_chan->sealed) {
    if (!g_timeout_record ||
        kc_seal_record(&g_chan->seal, g_timeout_frame, g_timeout_len, g_timeout_record) < 0)
      return;
    out = g_timeout_record;
    len = kc_seal_wire_len(g_timeout_len);
  }
  ssize_t n = write(g_chan->fd, out, len);
  (void)n;
}

static void on_alarm(int sig) {
  (void)sig;
  /* Past the session's deadline while the batch runs: tell the client and end the
   * session process (its pool dies with it).  During I/O the I/O deadline does it, so
   * the channel is idle here and sealing one more record is safe. */
  if (g_in_io)
    return;
  say_timeout();
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

/* Every write and read of the agent's side marks itself, so the alarm never cuts a
 * frame or a record in two. */
static int chan_send(kc_chan *c, const json_t *m, double deadline, kc_error *err) {
  g_in_io = 1;
  int rc = kc_chan_send(c, m, deadline, err);
  g_in_io = 0;
  return rc;
}

static int send_error(kc_chan *c, double deadline, const char *code, const char *msg) {
  json_t *m = json_pack("{s:s, s:s}", "op", "error", "message", msg ? msg : "error");
  if (code)
    json_object_set_new(m, "code", json_string(code));
  int rc = chan_send(c, m, deadline, NULL);
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
  kc_chan ch;
  const kc_session_serve_opts *o;
  kc_run_caps caps; /* the operator's, lowered by the client's kcage.sandbox */
  size_t nfiles;
  uint64_t total;
  bool hello_done, authed;
  double auth_deadline; /* the key must be proven by then (when there is a key) */
  char client_nonce[KC_AUTH_HEX + 1], agent_nonce[KC_AUTH_HEX + 1];
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
    int rc = kc_chan_read(&st->ch, buf, chunk, st->o->deadline, err);
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

static int kernel_paths(const struct serve_state *st, json_t *ks, char **paths, kc_error *err) {
  for (size_t i = 0; i < json_array_size(ks); i++) {
    const char *k = json_string_value(json_array_get(ks, i));
    if (!k || !valid_name(k))
      return kc_error_set(err, EPROTO, "run: bad kernel name");
    if (asprintf(&paths[i], "%s/%s", st->o->dir, k) < 0) {
      paths[i] = NULL;
      return kc_error_set(err, ENOMEM, "run");
    }
  }
  return 0;
}

/* What the operator's caps changed: the config's limits and the session timeout. */
static json_t *clamp_all(const struct serve_state *st, kc_measure_config *cfg) {
  json_t *clamped = kc_run_config_clamp(cfg, &st->caps);
  if (st->o->asked_timeout_s != st->o->timeout_s)
    json_object_set_new(
        clamped, "session_timeout_s",
        json_pack("{s:f, s:f}", "asked", st->o->asked_timeout_s, "cap", st->o->timeout_s));
  return clamped;
}

static void stamp_records(const struct serve_state *st, json_t *records, json_t *ks,
                          json_t *clamped) {
  size_t i;
  json_t *r;
  json_array_foreach(records, i, r) {
    kc_metrics_verdict(json_string_value(json_object_get(r, "status")));
    json_object_set_new(r, "device", json_string(st->o->device));
    json_object_set_new(r, "kernel", json_incref(json_array_get(ks, i)));
    if (json_object_size(clamped))
      json_object_set(r, "clamped", clamped);
  }
}

static int do_run(struct serve_state *st, json_t *m, json_t **records, kc_error *err) {
  json_t *ks = json_object_get(m, "kernels");
  json_t *refj = json_object_get(m, "reference");
  const char *ref = json_string_value(refj);
  if (!json_is_array(ks) || json_array_size(ks) == 0 || json_array_size(ks) > KC_SESSION_MAX_FILES)
    return kc_error_set(err, EPROTO, "run: expected kernels");
  if ((refj && !json_is_null(refj) && !ref) || (ref && !valid_name(ref)))
    return kc_error_set(err, EPROTO, "run: bad reference name");
  kc_measure_config cfg;
  if (kc_run_config_decode(json_object_get(m, "config"), &cfg, err) < 0)
    return -1;
  size_t n = json_array_size(ks);
  char **paths = calloc(n, sizeof *paths);
  char refpath[4096];
  if (!paths)
    return kc_error_set(err, ENOMEM, "run");
  int rc = kernel_paths(st, ks, paths, err);
  if (ref) {
    snprintf(refpath, sizeof refpath, "%s/%s", st->o->dir, ref);
    cfg.reference = refpath;
  }
  if (st->o->workers)
    cfg.workers = st->o->workers;
  cfg.settings = st->o->settings; /* the agent's: nothing a client sends chooses them */
  json_t *clamped = clamp_all(st, &cfg);
  if (rc == 0)
    rc = kc_measure_run_batch(&cfg, (const char *const *)paths, n, records, err);
  if (rc == 0)
    stamp_records(st, *records, ks, clamped);
  json_decref(clamped);
  for (size_t k = 0; k < n; k++)
    free(paths[k]);
  free(paths);
  return rc;
}

/* The session timeout: SIGALRM at the deadline, with the frame it then sends ready. */
static void arm_deadline(kc_chan *c, const kc_session_serve_opts *o, const char *tmsg) {
  json_t *m = json_pack("{s:s, s:s, s:s}", "op", "error", "code", "session_timeout", "message",
                        tmsg ? tmsg : "session timeout");
  char *t = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  if (t) {
    g_timeout_len = strlen(t) + 4;
    g_timeout_frame = malloc(g_timeout_len);
    uint32_t le = htole32((uint32_t)strlen(t));
    if (g_timeout_frame) {
      memcpy(g_timeout_frame, &le, 4);
      memcpy(g_timeout_frame + 4, t, strlen(t));
    }
    g_timeout_record = malloc(kc_seal_wire_len(g_timeout_len));
    free(t);
  }
  g_chan = c;
  struct sigaction sa = {.sa_handler = on_alarm};
  sigaction(SIGALRM, &sa, NULL);
  double left = o->deadline - kc_now_s();
  if (left < 0.001)
    left = 0.001;
  struct itimerval it = {.it_value = {(time_t)left, (suseconds_t)((left - floor(left)) * 1e6)}};
  setitimer(ITIMER_REAL, &it, NULL);
}

static json_t *do_hello(struct serve_state *st, json_t *m, kc_error *err) {
  const kc_session_serve_opts *o = st->o;
  const char *cn = json_string_value(json_object_get(json_object_get(m, "auth"), "nonce"));
  if (st->hello_done) {
    kc_error_set(err, EPROTO, "hello: said twice");
    return NULL;
  }
  st->hello_done = true;
  if (o->auth && !kc_auth_hex_ok(cn)) {
    denied(err, "this device agent requires authentication (--auth-key)");
    return NULL;
  }
  json_t *ctor = json_object_get(m, "session_constructor_args"), *ack = NULL;
  if (ctor && kc_session_ctor_accept(ctor, &st->caps, &ack, err) < 0)
    return NULL;
  json_t *reply = json_pack("{s:s, s:i, s:s, s:i}", "op", "hello", "version", KC_SESSION_VERSION,
                            "device", o->device ? o->device : "", "workers", (int)o->workers);
  if (ack)
    json_object_set_new(reply, "session_constructor", ack);
  if (o->deadline >= 0)
    json_object_set_new(reply, "session_timeout", json_real(o->timeout_s));
  if (o->auth) {
    char mac[KC_AUTH_HEX + 1];
    if (kc_auth_nonce(st->agent_nonce, err) < 0) {
      json_decref(reply);
      return NULL;
    }
    snprintf(st->client_nonce, sizeof st->client_nonce, "%s", cn);
    kc_auth_mac(o->auth, true, st->client_nonce, st->agent_nonce, mac);
    json_object_set_new(reply, "auth",
                        json_pack("{s:s, s:s}", "nonce", st->agent_nonce, "mac", mac));
    json_object_set_new(reply, "record", json_string(KC_SEAL_NAME));
  }
  return reply;
}

static json_t *do_auth(struct serve_state *st, json_t *m, kc_error *err) {
  const char *mac = json_string_value(json_object_get(m, "mac"));
  if (!st->o->auth || !st->agent_nonce[0] ||
      !kc_auth_check(st->o->auth, false, st->client_nonce, st->agent_nonce, mac)) {
    denied(err, "authentication failed: the client did not prove the auth key");
    return NULL;
  }
  st->authed = true;
  return json_pack("{s:s}", "op", "ok");
}

/* One request; NULL with err ends the session.  Before a client proves the key (when
 * there is one) only hello and auth are served. */
static json_t *dispatch(struct serve_state *st, const char *op, json_t *m, kc_error *err) {
  if (!strcmp(op, "hello"))
    return do_hello(st, m, err);
  if (!strcmp(op, "auth"))
    return do_auth(st, m, err);
  if (st->o->auth && !st->authed) {
    denied(err, "this device agent requires authentication (--auth-key)");
    return NULL;
  }
  if (!strcmp(op, "file"))
    return do_file(st, m, err) == 0 ? json_pack("{s:s}", "op", "ok") : NULL;
  if (!strcmp(op, "run")) {
    json_t *records = NULL;
    if (do_run(st, m, &records, err) < 0)
      return NULL;
    return json_pack("{s:s, s:o}", "op", "records", "records", records);
  }
  kc_error_set(err, EPROTO, "unknown op");
  return NULL;
}

/* The deadline of the next read: before the key is proven, the proof's own. */
static double recv_deadline(const struct serve_state *st) {
  double d = st->o->deadline;
  if (!st->o->auth || st->authed)
    return d;
  return d < 0 || st->auth_deadline < d ? st->auth_deadline : d;
}

static int recv_failed(struct serve_state *st, const char *tmsg, kc_error *err) {
  if (err->code == ETIMEDOUT && st->o->auth && !st->authed) {
    kc_error_set(err, 0, "authentication: the client did not prove the key within %g s",
                 st->o->auth_timeout_s > 0 ? st->o->auth_timeout_s : KC_AUTH_TIMEOUT_S);
    err->code = EACCES;
    send_error(&st->ch, kc_deadline(1), NULL, err->msg);
    return -1;
  }
  if (err->code == ETIMEDOUT) {
    send_error(&st->ch, kc_deadline(1), "session_timeout", tmsg);
    return -1;
  }
  if (err->code == ECONNRESET)
    return 0;               /* the client went away */
  if (err->code != EBADMSG) /* a broken seal leaves nothing to say anything with */
    send_error(&st->ch, kc_deadline(1), NULL, err->msg);
  return -1;
}

/* The reply, as text on the wire; after the agent's hello under a key, the channel seals
 * everything with keys bound to both hellos' bytes. */
static int respond(struct serve_state *st, const char *op, const char *req, size_t req_len,
                   json_t *reply, kc_error *err) {
  kc_cleanup_free char *t = json_dumps(reply, JSON_COMPACT | JSON_ENSURE_ASCII);
  if (!t)
    return kc_error_set(err, EINVAL, "session: cannot encode reply");
  g_in_io = 1;
  int rc = kc_chan_send_text(&st->ch, t, strlen(t), st->o->deadline, err);
  g_in_io = 0;
  if (rc == 0 && st->o->auth && !strcmp(op, "hello")) {
    kc_seal seal;
    kc_seal_init(&seal, st->o->auth, true, st->client_nonce, st->agent_nonce, req, req_len, t,
                 strlen(t));
    kc_chan_seal(&st->ch, &seal);
    kc_seal_wipe(&seal);
  }
  return rc;
}

/* One request in, one reply out: 1 to go on, 0 at the end, -1 on failure. */
static int serve_one(struct serve_state *st, const char *tmsg, kc_error *err) {
  kc_cleanup_free char *text = NULL;
  size_t len;
  g_in_io = 1;
  int r = kc_chan_recv_text(&st->ch, recv_deadline(st), &text, &len, err);
  g_in_io = 0;
  if (r < 0)
    return recv_failed(st, tmsg, err);
  json_t *m = kc_session_parse(text, len);
  if (!m) {
    send_error(&st->ch, kc_deadline(1), NULL, "session: malformed message");
    return kc_error_set(err, EPROTO, "session: malformed message");
  }
  const char *op = json_string_value(json_object_get(m, "op"));
  if (!strcmp(op, "bye")) {
    json_decref(m);
    return 0;
  }
  json_t *reply = dispatch(st, op, m, err);
  if (!reply) {
    json_decref(m);
    bool timed_out = err->code == ETIMEDOUT;
    send_error(&st->ch, kc_deadline(1), timed_out ? "session_timeout" : NULL,
               timed_out ? tmsg : err->msg);
    return -1;
  }
  r = respond(st, op, text, len, reply, err);
  json_decref(reply);
  json_decref(m);
  return r < 0 ? -1 : 1;
}

int kc_session_serve(int fd, const kc_session_serve_opts *o, kc_error *err) {
  kc_error local;
  if (!err)
    err = &local;
  struct serve_state st = {.o = o, .caps = o->caps};
  kc_chan_init(&st.ch, fd);
  st.auth_deadline = kc_deadline(o->auth_timeout_s > 0 ? o->auth_timeout_s : KC_AUTH_TIMEOUT_S);
  kc_cleanup_free char *tmsg = o->deadline >= 0 ? timeout_message(o->timeout_s) : NULL;
  if (o->deadline >= 0)
    arm_deadline(&st.ch, o, tmsg);
  int rc;
  while ((rc = serve_one(&st, tmsg, err)) > 0)
    ;
  struct itimerval off = {0};
  setitimer(ITIMER_REAL, &off, NULL);
  g_chan = NULL;
  kc_chan_free(&st.ch);
  return rc;
}
