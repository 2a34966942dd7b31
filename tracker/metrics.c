/* --metrics: a registry of labelled counters and gauges, and libmicrohttpd serving it
 * in Prometheus' text format (version 0.0.4).
 *
 * The registry is a bounded table under one mutex: labels come from peers (device
 * keys), so their number is capped and the rest is counted under key="_other".  The
 * verdict counts are fixed atomics in a shared anonymous mapping, because the agent's
 * sessions run in forked children; a child only ever adds to them.
 *
 * libmicrohttpd is loaded with dlopen() when --metrics is given: linked normally it
 * would bring gnutls and a dozen libraries into every `kcage run`'s start-up, whose
 * cost is the point of kcage's static link. */
#include "metrics.h"

#include <dlfcn.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>

#include "kcage/measure.h"

#define MAX_SERIES 2048
#define SNAPSHOT_MS 500
#define HEALTH_STALE_S 10.0

typedef enum { COUNTER, GAUGE } kind;

/* Every family a daemon serves, declared up front so that a scrape right after start-up
 * already shows each one (an unlabelled series at 0, a labelled family's HELP and TYPE). */
#define FOR_TRACKER 1u
#define FOR_AGENT 2u
enum {
  F_CONNECTIONS,
  F_CLOSED,
  F_DROPS,
  F_LEASES,
  F_LEASE_WAIT,
  F_QUEUE_FREE,
  F_QUEUE_PENDING,
  F_SESSIONS_STARTED,
  F_SESSIONS_ENDED,
  N_FAMILIES
};
typedef struct {
  const char *name, *help;
  kind k;
  const char *label; /* NULL: one series without labels */
  unsigned daemons;
} family;
static const family families[N_FAMILIES] = {
    [F_CONNECTIONS] = {"connections_total", "connections accepted", COUNTER, NULL,
                       FOR_TRACKER | FOR_AGENT},
    [F_CLOSED] = {"connections_closed_total", "connections ended, by us or the peer", COUNTER, NULL,
                  FOR_TRACKER | FOR_AGENT},
    [F_DROPS] = {"drops_total", "connections dropped by us, by reason", COUNTER, "reason",
                 FOR_TRACKER | FOR_AGENT},
    [F_LEASES] = {"leases_total", "devices leased, by key", COUNTER, "key", FOR_TRACKER},
    [F_LEASE_WAIT] = {"lease_wait_seconds_total", "time requests waited for their lease, by key",
                      COUNTER, "key", FOR_TRACKER},
    [F_QUEUE_FREE] = {"queue_free", "free devices, by key", GAUGE, "key", FOR_TRACKER},
    [F_QUEUE_PENDING] = {"queue_pending", "requests waiting for a device, by key", GAUGE, "key",
                         FOR_TRACKER},
    [F_SESSIONS_STARTED] = {"sessions_started_total", "sessions started", COUNTER, NULL, FOR_AGENT},
    [F_SESSIONS_ENDED] = {"sessions_ended_total", "sessions ended", COUNTER, NULL, FOR_AGENT},
};

typedef struct {
  int fam;
  char value[96]; /* label value */
  double v;
} series;

/* One verdict counter per kc_measure_status, plus one for anything else. */
#define N_VERDICTS 16
typedef struct {
  _Atomic uint64_t verdicts[N_VERDICTS];
} shared_counts;

/* The libmicrohttpd calls we use, from dlopen. */
static struct {
  struct MHD_Daemon *(*start)(unsigned, uint16_t, MHD_AcceptPolicyCallback, void *,
                              MHD_AccessHandlerCallback, void *, ...);
  void (*stop)(struct MHD_Daemon *);
  const union MHD_DaemonInfo *(*info)(struct MHD_Daemon *, enum MHD_DaemonInfoType, ...);
  struct MHD_Response *(*response)(size_t, void *, enum MHD_ResponseMemoryMode);
  enum MHD_Result (*header)(struct MHD_Response *, const char *, const char *);
  enum MHD_Result (*queue)(struct MHD_Connection *, unsigned int, struct MHD_Response *);
  void (*destroy)(struct MHD_Response *);
} mhd;

static int load_mhd(kc_error *err) {
  if (mhd.start)
    return 0;
  void *h = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    h = dlopen("libmicrohttpd.so", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return kc_error_set(err, 0, "--metrics needs libmicrohttpd: %s", dlerror());
  /* POSIX allows the object-to-function pointer conversion dlsym needs. */
  *(void **)&mhd.start = dlsym(h, "MHD_start_daemon");
  *(void **)&mhd.stop = dlsym(h, "MHD_stop_daemon");
  *(void **)&mhd.info = dlsym(h, "MHD_get_daemon_info");
  *(void **)&mhd.response = dlsym(h, "MHD_create_response_from_buffer");
  *(void **)&mhd.header = dlsym(h, "MHD_add_response_header");
  *(void **)&mhd.queue = dlsym(h, "MHD_queue_response");
  *(void **)&mhd.destroy = dlsym(h, "MHD_destroy_response");
  if (!mhd.start || !mhd.stop || !mhd.info || !mhd.response || !mhd.header || !mhd.queue ||
      !mhd.destroy) {
    mhd.start = NULL;
    return kc_error_set(err, 0, "--metrics: libmicrohttpd lacks a function kcage uses");
  }
  return 0;
}

static _Atomic int g_on;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static series g_series[MAX_SERIES];
static size_t g_n;
static char g_prefix[32];
static struct MHD_Daemon *g_mhd;
static shared_counts *g_shared;
static double g_last_snapshot;
static double g_started_at;        /* CLOCK_REALTIME at kc_metrics_start */
static _Atomic double g_heartbeat; /* kc_metrics_now() of the event loop's last turn */

int kc_metrics_on(void) {
  return atomic_load_explicit(&g_on, memory_order_relaxed);
}

double kc_metrics_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The series fam/label=value, created on first use; the "_other" series once the
 * table is full.  Called with g_mu held. */
static series *find(int fam, const char *value) {
  if (!value)
    value = "";
  for (size_t i = 0; i < g_n; i++)
    if (g_series[i].fam == fam && !strcmp(g_series[i].value, value))
      return &g_series[i];
  if (g_n >= MAX_SERIES - 64) { /* the last rows are kept for the "_other" series */
    if (strcmp(value, "_other") && families[fam].label)
      return find(fam, "_other");
    if (g_n >= MAX_SERIES)
      return NULL;
  }
  series *s = &g_series[g_n++];
  s->fam = fam;
  snprintf(s->value, sizeof s->value, "%s", value);
  s->v = 0;
  return s;
}

static void add(int fam, const char *value, double v, bool set) {
  if (!kc_metrics_on())
    return;
  pthread_mutex_lock(&g_mu);
  series *s = find(fam, value);
  if (s)
    s->v = set ? v : s->v + v;
  pthread_mutex_unlock(&g_mu);
}

void kc_metrics_conn_opened(void) {
  add(F_CONNECTIONS, NULL, 1, false);
}

void kc_metrics_conn_closed(const char *drop_reason) {
  add(F_CLOSED, NULL, 1, false);
  if (drop_reason)
    add(F_DROPS, drop_reason, 1, false);
}

void kc_metrics_lease(const char *key, double queued_at) {
  if (!kc_metrics_on())
    return;
  double wait = queued_at > 0 ? kc_metrics_now() - queued_at : 0;
  if (wait < 0)
    wait = 0;
  add(F_LEASES, key, 1, false);
  add(F_LEASE_WAIT, key, wait, false);
}

int kc_metrics_snapshot_due(void) {
  if (!kc_metrics_on())
    return 0;
  double now = kc_metrics_now();
  if (now - g_last_snapshot < SNAPSHOT_MS / 1000.0)
    return 0;
  g_last_snapshot = now;
  return 1;
}

void kc_metrics_heartbeat(void) {
  if (kc_metrics_on())
    atomic_store(&g_heartbeat, kc_metrics_now());
}

int kc_metrics_poll_ms(void) {
  return kc_metrics_on() ? SNAPSHOT_MS : -1;
}

void kc_metrics_queue(const char *key, size_t free_devices, size_t pending) {
  add(F_QUEUE_FREE, key, (double)free_devices, true);
  add(F_QUEUE_PENDING, key, (double)pending, true);
}

void kc_metrics_session(int started) {
  add(started ? F_SESSIONS_STARTED : F_SESSIONS_ENDED, NULL, 1, false);
}

void kc_metrics_verdict(const char *status) {
  shared_counts *sh = g_shared;
  if (!sh || !status)
    return;
  kc_measure_status st;
  size_t i = kc_measure_status_parse(status, &st) == 0 && (size_t)st < N_VERDICTS - 1
                 ? (size_t)st
                 : N_VERDICTS - 1;
  atomic_fetch_add(&sh->verdicts[i], 1);
}

/* ---- the text format --------------------------------------------------------------- */

typedef struct {
  char *buf;
  size_t len, cap;
  bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (!t->buf && !t->oom) {
    t->cap = 4096;
    t->buf = malloc(t->cap);
    t->oom = !t->buf;
  }
  for (int tries = 0; tries < 2 && !t->oom; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = (t->cap + (size_t)n + 1) * 2;
    char *b = realloc(t->buf, cap);
    if (!b) {
      t->oom = true;
      return;
    }
    t->buf = b;
    t->cap = cap;
  }
}

/* A label value as the format wants it: \\, \" and \n escaped, control bytes dropped. */
static void label_value(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p && o + 3 < cap; p++) {
    if (*p == '\\' || *p == '"') {
      out[o++] = '\\';
      out[o++] = (char)*p;
    } else if (*p == '\n') {
      out[o++] = '\\';
      out[o++] = 'n';
    } else if (*p >= 0x20 && *p != 0x7f) {
      out[o++] = (char)*p;
    }
  }
  out[o] = '\0';
}

static unsigned this_daemon(void) {
  return strcmp(g_prefix, "kcage_agent") ? FOR_TRACKER : FOR_AGENT;
}

static void render_family(text *t, int fam) {
  const family *f = &families[fam];
  put(t, "# HELP %s_%s %s\n# TYPE %s_%s %s\n", g_prefix, f->name, f->help, g_prefix, f->name,
      f->k == COUNTER ? "counter" : "gauge");
  bool any = false;
  for (size_t j = 0; j < g_n; j++) {
    const series *x = &g_series[j];
    if (x->fam != fam)
      continue;
    any = true;
    if (f->label) {
      char v[sizeof x->value * 2];
      label_value(x->value, v, sizeof v);
      put(t, "%s_%s{%s=\"%s\"} %.9g\n", g_prefix, f->name, f->label, v, x->v);
    } else {
      put(t, "%s_%s %.9g\n", g_prefix, f->name, x->v);
    }
  }
  if (!any && !f->label)
    put(t, "%s_%s 0\n", g_prefix, f->name);
}

static void render(text *t) {
  put(t, "# HELP %s_build_info the running kcage, by version (always 1)\n", g_prefix);
  put(t, "# TYPE %s_build_info gauge\n", g_prefix);
  put(t, "%s_build_info{version=\"%s\"} 1\n", g_prefix, KC_VERSION);
  put(t, "# HELP %s_start_time_seconds when the daemon started, in seconds since the epoch\n",
      g_prefix);
  put(t, "# TYPE %s_start_time_seconds gauge\n", g_prefix);
  put(t, "%s_start_time_seconds %.3f\n", g_prefix, g_started_at);
  pthread_mutex_lock(&g_mu);
  for (int fam = 0; fam < N_FAMILIES; fam++)
    if (families[fam].daemons & this_daemon())
      render_family(t, fam);
  pthread_mutex_unlock(&g_mu);
  if (this_daemon() == FOR_AGENT && g_shared) {
    put(t, "# HELP %s_verdicts_total kernels measured, by status\n", g_prefix);
    put(t, "# TYPE %s_verdicts_total counter\n", g_prefix);
    for (int s = KC_MEASURE_OK; s <= KC_MEASURE_SUSPICIOUS; s++)
      put(t, "%s_verdicts_total{status=\"%s\"} %llu\n", g_prefix,
          kc_measure_status_name((kc_measure_status)s),
          (unsigned long long)atomic_load(&g_shared->verdicts[s]));
  }
}

/* Alive when the daemon's event loop has turned lately (it turns at least every
 * SNAPSHOT_MS while metrics are on): a wedged loop answers 503 though this thread runs. */
static struct MHD_Response *health(unsigned *code) {
  char body[160];
  double idle = kc_metrics_now() - atomic_load(&g_heartbeat);
  if (idle <= HEALTH_STALE_S) {
    snprintf(body, sizeof body, "ok %s %s\n", g_prefix, KC_VERSION);
    *code = MHD_HTTP_OK;
  } else {
    snprintf(body, sizeof body, "stalled: the event loop has not turned for %.0f s\n", idle);
    *code = MHD_HTTP_SERVICE_UNAVAILABLE;
  }
  return mhd.response(strlen(body), body, MHD_RESPMEM_MUST_COPY);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **state) {
  (void)cls, (void)version, (void)data, (void)data_size, (void)state;
  struct MHD_Response *r;
  unsigned code;
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    static const char m[] = "only GET\n";
    r = mhd.response(sizeof m - 1, (void *)m, MHD_RESPMEM_PERSISTENT);
    code = MHD_HTTP_METHOD_NOT_ALLOWED;
  } else if (!strcmp(url, "/healthz")) {
    r = health(&code);
  } else if (strcmp(url, "/metrics")) {
    static const char m[] = "see /metrics or /healthz\n";
    r = mhd.response(sizeof m - 1, (void *)m, MHD_RESPMEM_PERSISTENT);
    code = MHD_HTTP_NOT_FOUND;
  } else {
    text t = {0};
    render(&t);
    if (t.oom) {
      free(t.buf);
      return MHD_NO;
    }
    r = mhd.response(t.len, t.buf, MHD_RESPMEM_MUST_FREE);
    code = MHD_HTTP_OK;
    if (r)
      mhd.header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
  }
  if (!r)
    return MHD_NO;
  enum MHD_Result ret = mhd.queue(conn, code, r);
  mhd.destroy(r);
  return ret;
}

/* "HOST:PORT", "[V6]:PORT" or ":PORT" (all addresses). */
static int parse_hostport(const char *hp, struct sockaddr_storage *ss, socklen_t *sl,
                          kc_error *err) {
  char host[256], port[16];
  const char *colon = strrchr(hp, ':');
  if (!colon || !colon[1] || strlen(colon + 1) >= sizeof port ||
      (size_t)(colon - hp) >= sizeof host)
    return kc_error_set(err, EINVAL, "--metrics %s: want HOST:PORT", hp);
  size_t hl = (size_t)(colon - hp);
  if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
    memcpy(host, hp + 1, hl - 2);
    host[hl - 2] = '\0';
  } else {
    memcpy(host, hp, hl);
    host[hl] = '\0';
  }
  snprintf(port, sizeof port, "%s", colon + 1);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
  if (rc != 0)
    return kc_error_set(err, 0, "--metrics %s: %s", hp, gai_strerror(rc));
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *sl = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

int kc_metrics_start(const char *hostport, const char *prefix, uint16_t *bound_port,
                     kc_error *err) {
  if (g_mhd)
    return kc_error_set(err, EBUSY, "metrics: already serving");
  struct sockaddr_storage ss;
  socklen_t sl;
  if (parse_hostport(hostport, &ss, &sl, err) < 0 || load_mhd(err) < 0)
    return -1;
  if (!g_shared) {
    void *p = mmap(NULL, sizeof(shared_counts), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
      return kc_error_set(err, errno, "metrics: mmap");
    g_shared = p;
  }
  snprintf(g_prefix, sizeof g_prefix, "%s", prefix);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  g_started_at = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
  atomic_store(&g_heartbeat, kc_metrics_now());
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
  if (ss.ss_family == AF_INET6)
    flags |= MHD_USE_IPv6;
  uint16_t port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  /* A scrape is small and rare: a few connections, each held briefly. */
  g_mhd = mhd.start(flags, port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
                    (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
                    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
  if (!g_mhd)
    return kc_error_set(err, 0, "--metrics %s: cannot listen there", hostport);
  const union MHD_DaemonInfo *di = mhd.info(g_mhd, MHD_DAEMON_INFO_BIND_PORT);
  if (bound_port)
    *bound_port = di ? di->port : port;
  atomic_store(&g_on, 1);
  (void)sl;
  return 0;
}

void kc_metrics_stop(void) {
  atomic_store(&g_on, 0);
  if (g_mhd)
    mhd.stop(g_mhd);
  g_mhd = NULL;
}
