/* bench_tracker: kcage's tracker under the load of reference/tracker-load.md, on
 * loopback.  The tracker runs in a child process (one core); this process is the load
 * generator (the other core): simulated agents register (magic, UPDATE_INFO, PUT),
 * clients REQUEST, and every leased device is re-PUT by its agent with a fresh
 * matchkey, as a real agent does after a session.  Clients use ordinary sockets and
 * write like TVM's Python (base.sendjson: the length, then the JSON, two writes).
 *
 * Figures: REQUEST->lease latency unloaded; registration of 1 000 agents connecting at
 * once; requests/s and latency with 1 000 agents, 50 clients, 10 000 REQUESTs, 3 keys;
 * tracker RSS over 200 000 leases.  TVM's figures are quoted from tracker-load.md
 * (TVM is not installed here, so they are not re-measured in this run). */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "kcage/tracker.h"

#define NKEYS 3

typedef struct lconn {
  int fd;
  int is_client;
  int key;
  int idx;
  char in[16384];
  size_t inlen;
  int replies; /* agents: replies seen (magic counts as one) */
  bool magic;
  uint32_t gen;
  double t_sent;
  int left; /* clients: requests left */
} lconn;

static uint16_t g_port;
static int g_efd;
static lconn *g_agents;
static int g_nagents;
static double *g_lat;
static size_t g_nlat, g_caplat;
static long g_leases;
static int g_registered;
static bool g_split = true;

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void xsend(int fd, const void *b, size_t n) {
  const char *p = b;
  while (n) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      die("send");
    }
    p += r;
    n -= (size_t)r;
  }
}

static void send_frame(int fd, const char *json, bool split) {
  uint32_t l = htole32((uint32_t)strlen(json));
  if (split) { /* like TVM's Python client */
    xsend(fd, &l, 4);
    xsend(fd, json, strlen(json));
  } else {
    char buf[1024];
    memcpy(buf, &l, 4);
    memcpy(buf + 4, json, strlen(json));
    xsend(fd, buf, 4 + strlen(json));
  }
}

static int tcp_connect_nb(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(g_port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
    die("connect");
  return fd;
}

static void agent_put(lconn *a) {
  char buf[256];
  snprintf(buf, sizeof buf, "[3, \"key%d\", [9000, \"key%d:0.%d_%u\"], null]", a->key, a->key,
           a->idx, a->gen++);
  send_frame(a->fd, buf, false);
}

static void client_request(lconn *c) {
  char buf[128];
  snprintf(buf, sizeof buf, "[4, \"key%d\", \"\", 1]", c->key);
  c->t_sent = kc_measure_now();
  send_frame(c->fd, buf, g_split);
}

static void on_frame(lconn *c, const char *p, size_t n) {
  if (!c->is_client) {
    c->replies++;
    if (c->replies == 3) /* magic, UPDATE_INFO, first PUT */
      g_registered++;
    return;
  }
  double t = kc_measure_now();
  if (g_nlat == g_caplat) {
    g_caplat = g_caplat ? 2 * g_caplat : 65536;
    g_lat = realloc(g_lat, g_caplat * sizeof *g_lat);
  }
  g_lat[g_nlat++] = t - c->t_sent;
  g_leases++;
  /* [0, ["127.0.0.1", 9000, "keyK:0.<agent>_<gen>"]]: the owning agent re-PUTs. */
  const char *m = memmem(p, n, ":0.", 3);
  if (!m)
    die("bad lease");
  int ai = atoi(m + 3);
  if (ai < 0 || ai >= g_nagents)
    die("bad agent in lease");
  agent_put(&g_agents[ai]);
  if (--c->left > 0)
    client_request(c);
}

static void on_readable(lconn *c) {
  ssize_t r = recv(c->fd, c->in + c->inlen, sizeof c->in - c->inlen, 0);
  if (r <= 0)
    die("tracker closed a connection");
  c->inlen += (size_t)r;
  size_t off = 0;
  if (!c->magic) {
    if (c->inlen < 4)
      return;
    off = 4;
    c->magic = true;
    if (!c->is_client)
      c->replies++;
    else if (c->left > 0)
      client_request(c);
  }
  for (;;) {
    if (c->inlen - off < 4)
      break;
    uint32_t l;
    memcpy(&l, c->in + off, 4);
    l = le32toh(l);
    if (c->inlen - off - 4 < l)
      break;
    on_frame(c, c->in + off + 4, l);
    off += 4 + l;
  }
  memmove(c->in, c->in + off, c->inlen - off);
  c->inlen -= off;
}

static void pump_until(bool (*done)(void *), void *arg, double timeout_s) {
  struct epoll_event evs[512];
  double end = kc_measure_now() + timeout_s;
  while (!done(arg)) {
    if (kc_measure_now() > end) {
      fprintf(stderr, "bench_tracker: phase timed out\n");
      exit(1);
    }
    int n = epoll_wait(g_efd, evs, 512, 100);
    for (int i = 0; i < n; i++)
      on_readable(evs[i].data.ptr);
  }
}

static void watch(lconn *c) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (epoll_ctl(g_efd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
    die("epoll_ctl");
}

static bool all_registered(void *arg) {
  return g_registered >= *(int *)arg;
}
static bool leases_reached(void *arg) {
  return g_leases >= *(long *)arg;
}

static long rss_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6))
      kb = atol(line + 6);
  if (f)
    fclose(f);
  return kb;
}

/* CPU time of a process in seconds: /proc/PID/schedstat (ns) when there is one; the
 * clock ticks of /proc/PID/stat (10 ms) are too coarse for a 0.2 s run. */
static double cpu_s(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
  FILE *sf = fopen(path, "r");
  unsigned long long run_ns;
  if (sf) {
    int got = fscanf(sf, "%llu", &run_ns);
    fclose(sf);
    if (got == 1)
      return (double)run_ns * 1e-9;
  }
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  unsigned long ut = 0, st = 0;
  if (f) {
    if (fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
      ut = st = 0;
    fclose(f);
  }
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void pin(int cpu) {
  if (!getenv("KC_BENCH_PIN") || sysconf(_SC_NPROCESSORS_ONLN) < 2)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

/* Seconds spent runnable but waiting for a CPU (other tenants of the machine). */
static double runq_s(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
  FILE *f = fopen(path, "r");
  unsigned long long run = 0, wait = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &run, &wait) != 2)
      wait = 0;
    fclose(f);
  }
  return (double)wait * 1e-9;
}

static kc_tracker_server *g_server;
static void on_term(int sig) {
  (void)sig;
  if (g_server)
    kc_tracker_server_stop(g_server);
}

static pid_t start_tracker(void) {
  int p[2];
  if (pipe(p) < 0)
    die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the bench */
    close(p[0]);
    pin(1); /* tracker on one core, load generator on the other */
    kc_tracker_opts o;
    kc_tracker_opts_init(&o);
    o.host = "127.0.0.1";
    o.port = 0;
    kc_tracker_server *s;
    kc_error err;
    if (kc_tracker_server_new(&o, &s, &err) < 0) {
      fprintf(stderr, "tracker: %s\n", err.msg);
      _exit(1);
    }
    g_server = s;
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    uint16_t port = kc_tracker_server_port(s);
    if (write(p[1], &port, 2) != 2)
      _exit(1);
    close(p[1]);
    kc_tracker_server_run(s, &err);
    kc_tracker_server_free(s);
    _exit(0);
  }
  close(p[1]);
  if (read(p[0], &g_port, 2) != 2)
    die("tracker did not start");
  close(p[0]);
  return pid;
}

/* ---- the floor: the least any tracker can do for this load ---------------------------
 * A server that speaks just enough of the protocol for this generator (the magic, a
 * fixed reply to UPDATE_INFO and PUT, the oldest free PUT of the key to a REQUEST), with
 * no JSON library, no priorities, no validation, no bookkeeping of connections: the
 * same sockets, socket options and packets per lease as the tracker.  Its requests/s,
 * measured in the same run with the same load generator, is the ceiling of any tracker
 * on this machine; the distance to it is what the tracker's own code costs. */
enum { FLOOR_Q = 4096, FLOOR_W = 256 };
static char g_fq[NKEYS][FLOOR_Q][48];
static unsigned g_fh[NKEYS], g_ft[NKEYS];
static int g_fw[NKEYS][FLOOR_W], g_fwn[NKEYS];

typedef struct fconn {
  int fd;
  bool magic;
  size_t len;
  char in[4096];
} fconn;

static void floor_send(int fd, const char *b, size_t n) {
  if (send(fd, b, n, MSG_NOSIGNAL) != (ssize_t)n)
    _exit(3); /* tiny replies into an empty socket buffer: always whole */
}

static void floor_lease(int fd, int k) {
  char b[128];
  int n = snprintf(b + 4, sizeof b - 4, "[0, [\"127.0.0.1\", 9000, \"%s\"]]",
                   g_fq[k][g_fh[k]++ % FLOOR_Q]);
  uint32_t l = htole32((uint32_t)n);
  memcpy(b, &l, 4);
  floor_send(fd, b, 4 + (size_t)n);
}

static void floor_frame(int fd, const char *p, size_t n) {
  static const char ok[] = {3, 0, 0, 0, '[', '0', ']'};
  const char *q1 = memchr(p, '"', n);
  int code = atoi(p + 1), k = q1 && q1 + 4 < p + n ? atoi(q1 + 4) : -1;
  if (k < 0 || k >= NKEYS || code == KC_TRK_UPDATE_INFO) {
    floor_send(fd, ok, sizeof ok);
    return;
  }
  if (code == KC_TRK_PUT) {
    const char *q2 = memchr(q1 + 1, '"', (size_t)(p + n - q1 - 1));
    const char *q3 = q2 ? memchr(q2 + 1, '"', (size_t)(p + n - q2 - 1)) : NULL;
    const char *q4 = q3 ? memchr(q3 + 1, '"', (size_t)(p + n - q3 - 1)) : NULL;
    if (!q4 || q4 - q3 - 1 >= 48 || g_ft[k] - g_fh[k] >= FLOOR_Q)
      _exit(3);
    char *slot = g_fq[k][g_ft[k]++ % FLOOR_Q];
    memcpy(slot, q3 + 1, (size_t)(q4 - q3 - 1));
    slot[q4 - q3 - 1] = 0;
    floor_send(fd, ok, sizeof ok);
    if (g_fwn[k]) { /* a REQUEST was waiting */
      floor_lease(g_fw[k][0], k);
      memmove(g_fw[k], g_fw[k] + 1, (size_t)--g_fwn[k] * sizeof(int));
    }
  } else if (code == KC_TRK_REQUEST) {
    if (g_ft[k] != g_fh[k])
      floor_lease(fd, k);
    else if (g_fwn[k] < FLOOR_W)
      g_fw[k][g_fwn[k]++] = fd;
  }
}

static void floor_run(int lfd) {
  int efd = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(efd, EPOLL_CTL_ADD, lfd, &ev);
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(efd, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      fconn *c = evs[i].data.ptr;
      if (!c) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
          continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* the tracker's options for its default keepalive of 15 s */
        int idle = 5, intvl = 2, cnt = 3;
        unsigned uto = 15000;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof uto);
        c = calloc(1, sizeof *c);
        c->fd = fd;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(efd, EPOLL_CTL_ADD, fd, &e);
        continue;
      }
      ssize_t r = recv(c->fd, c->in + c->len, sizeof c->in - c->len, 0);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN)
          continue;
        close(c->fd); /* closing drops it from the epoll set */
        free(c);
        continue;
      }
      c->len += (size_t)r;
      size_t off = 0;
      if (!c->magic && c->len >= 4) {
        floor_send(c->fd, c->in, 4);
        c->magic = true;
        off = 4;
      }
      while (c->magic && c->len - off >= 4) {
        uint32_t l;
        memcpy(&l, c->in + off, 4);
        l = le32toh(l);
        if (l > sizeof c->in - 4)
          _exit(3);
        if (c->len - off - 4 < l)
          break;
        floor_frame(c->fd, c->in + off + 4, l);
        off += 4 + l;
      }
      memmove(c->in, c->in + off, c->len - off);
      c->len -= off;
      if (c->len) { /* half a frame: ACK now, as the tracker does */
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
      }
    }
  }
}

static pid_t start_floor(uint16_t *port) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, SOMAXCONN) < 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
    die("floor server");
  *port = ntohs(a.sin_port);
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pin(1);
    floor_run(lfd);
  }
  close(lfd);
  return pid;
}

/* Clients: start n client connections sharing `total` requests. */
static lconn *start_clients(int n, long total) {
  lconn *cs = calloc((size_t)n, sizeof *cs);
  for (int i = 0; i < n; i++) {
    cs[i].fd = tcp_connect_nb();
    cs[i].is_client = 1;
    cs[i].key = i % NKEYS;
    cs[i].idx = i;
    cs[i].left = (int)(total / n + (i < total % n));
    watch(&cs[i]);
    uint32_t m = htole32(KC_TRACKER_MAGIC);
    xsend(cs[i].fd, &m, 4);
  }
  return cs;
}

static void close_clients(lconn *cs, int n) {
  for (int i = 0; i < n; i++) {
    epoll_ctl(g_efd, EPOLL_CTL_DEL, cs[i].fd, NULL);
    close(cs[i].fd);
  }
  free(cs);
}

/* Connect n agents to g_port at once, then magic + UPDATE_INFO + PUT each; returns when
 * all are registered.  They become g_agents. */
static void register_agents(int n) {
  uint32_t magic = htole32(KC_TRACKER_MAGIC);
  g_nagents = n;
  g_agents = calloc((size_t)g_nagents, sizeof *g_agents);
  g_registered = 0;
  for (int i = 0; i < g_nagents; i++) {
    g_agents[i].fd = tcp_connect_nb();
    g_agents[i].key = i % NKEYS;
    g_agents[i].idx = i;
    watch(&g_agents[i]);
  }
  for (int i = 0; i < g_nagents; i++) {
    char buf[256];
    xsend(g_agents[i].fd, &magic, 4);
    snprintf(buf, sizeof buf, "[5, {\"key\": \"server:key%d\", \"addr\": [null, 9000]}]",
             g_agents[i].key);
    send_frame(g_agents[i].fd, buf, false);
    agent_put(&g_agents[i]);
  }
  pump_until(all_registered, &g_nagents, 30);
}

#define FR 3 /* runs of each load against the tracker and the floor, alternating */

/* Every figure of the run, for the table and results.json. */
typedef struct results {
  double lat_split[2], lat_single[2]; /* REQUEST->lease median, p99; unloaded */
  double reg_s;                       /* 1 000 agents registered after */
  long want;                          /* REQUESTs of each loaded run */
  double run_s, trk_cpu, gen_cpu, runq, rps, med, p99, rps_min, rps_max; /* median run */
  double rps1, med1, cpu1;                     /* clients writing a frame at once */
  double fmed[2][2], fcmed[2][2], fgmed[2][2]; /* [trk, floor][1 write, split] */
  long rss[5];
} results;

/* 1. REQUEST->lease unloaded: one agent, one client, 2 000 leases each way. */
static void phase_unloaded(results *r) {
  g_nagents = 1;
  g_agents = calloc(1, sizeof *g_agents);
  g_agents[0].fd = tcp_connect_nb();
  watch(&g_agents[0]);
  uint32_t magic = htole32(KC_TRACKER_MAGIC);
  xsend(g_agents[0].fd, &magic, 4);
  send_frame(g_agents[0].fd, "[5, {\"key\": \"server:key0\", \"addr\": [null, 9000]}]", false);
  agent_put(&g_agents[0]);
  int one_agent = 1;
  pump_until(all_registered, &one_agent, 10);
  for (int mode = 0; mode < 2; mode++) {
    g_split = mode == 0;
    g_nlat = 0;
    g_leases = 0;
    lconn *c = start_clients(1, 2000);
    long want = 2000;
    pump_until(leases_reached, &want, 60);
    double *l = mode == 0 ? r->lat_split : r->lat_single;
    l[0] = kc_measure_quantile(g_lat, g_nlat, 0.5);
    l[1] = kc_measure_quantile(g_lat, g_nlat, 0.99);
    close_clients(c, 1);
  }
  g_split = !getenv("KC_BENCH_ONE_WRITE");
  epoll_ctl(g_efd, EPOLL_CTL_DEL, g_agents[0].fd, NULL);
  close(g_agents[0].fd);
  free(g_agents);
  usleep(100000);
}

/* 3. 50 clients, 10 000 REQUESTs, every lease re-PUT.  Three runs (the machine is
 * shared and noisy); the run with the median requests/s is reported. */
static void phase_loaded(results *r, pid_t trk) {
  double rep_rps[3], rep_med[3], rep_p99[3], rep_cpu[3], rep_gen[3], rep_q[3], rep_s[3];
  for (int rep = 0; rep < 3; rep++) {
    g_nlat = 0;
    g_leases = 0;
    double c0 = cpu_s(trk), g0 = cpu_s(getpid()), q0 = runq_s(trk) + runq_s(getpid());
    double t0 = kc_measure_now();
    lconn *cs = start_clients(50, 10000);
    pump_until(leases_reached, &r->want, 120);
    rep_s[rep] = kc_measure_now() - t0;
    rep_cpu[rep] = cpu_s(trk) - c0;
    rep_gen[rep] = cpu_s(getpid()) - g0;
    rep_q[rep] = runq_s(trk) + runq_s(getpid()) - q0;
    rep_rps[rep] = (double)g_leases / rep_s[rep];
    rep_med[rep] = kc_measure_quantile(g_lat, g_nlat, 0.5);
    rep_p99[rep] = kc_measure_quantile(g_lat, g_nlat, 0.99);
    close_clients(cs, 50);
  }
  int mid = 0;
  for (int i = 0; i < 3; i++) {
    int below = 0;
    for (int j = 0; j < 3; j++)
      below += rep_rps[j] < rep_rps[i];
    if (below == 1)
      mid = i;
  }
  r->run_s = rep_s[mid];
  r->trk_cpu = rep_cpu[mid];
  r->gen_cpu = rep_gen[mid];
  r->runq = rep_q[mid];
  r->rps = rep_rps[mid];
  r->med = rep_med[mid];
  r->p99 = rep_p99[mid];
  r->rps_min = fmin(rep_rps[0], fmin(rep_rps[1], rep_rps[2]));
  r->rps_max = fmax(rep_rps[0], fmax(rep_rps[1], rep_rps[2]));
}

/* 3b. The same with clients that write each frame in one write (kcage's own client). */
static void phase_one_write(results *r, pid_t trk) {
  bool split_saved = g_split;
  g_split = false;
  g_nlat = 0;
  g_leases = 0;
  double c1 = cpu_s(trk);
  double t1 = kc_measure_now();
  lconn *cs = start_clients(50, 10000);
  pump_until(leases_reached, &r->want, 120);
  double run1_s = kc_measure_now() - t1;
  r->rps1 = (double)g_leases / run1_s;
  r->cpu1 = cpu_s(trk) - c1;
  r->med1 = kc_measure_quantile(g_lat, g_nlat, 0.5);
  close_clients(cs, 50);
  g_split = split_saved;
}

/* 3c. The same loads against the floor (see start_floor), alternating with the
 * tracker run by run, so both see the same machine. */
static void phase_floor(results *r, pid_t trk) {
  bool split_saved = g_split;
  uint16_t trk_port = g_port, floor_port;
  lconn *trk_agents = g_agents;
  pid_t flp = start_floor(&floor_port);
  g_port = floor_port;
  register_agents(1000);
  lconn *floor_agents = g_agents;
  double frps[2][2][FR], fcpu[2][2][FR], fgen[2][2][FR]; /* [trk, floor][1 write, split][run] */
  for (int rep = 0; rep < FR; rep++)
    for (int split = 0; split < 2; split++)
      for (int tgt = 0; tgt < 2; tgt++) {
        g_port = tgt ? floor_port : trk_port;
        g_agents = tgt ? floor_agents : trk_agents;
        g_split = split;
        g_nlat = 0;
        g_leases = 0;
        pid_t srv = tgt ? flp : trk;
        double cc = cpu_s(srv), gg = cpu_s(getpid()), tt = kc_measure_now();
        lconn *cs = start_clients(50, 10000);
        pump_until(leases_reached, &r->want, 120);
        frps[tgt][split][rep] = (double)g_leases / (kc_measure_now() - tt);
        fcpu[tgt][split][rep] = (cpu_s(srv) - cc) / (double)r->want;
        fgen[tgt][split][rep] = (cpu_s(getpid()) - gg) / (double)r->want;
        close_clients(cs, 50);
      }
  for (int i = 0; i < g_nagents; i++)
    close(floor_agents[i].fd);
  kill(flp, SIGKILL);
  waitpid(flp, NULL, 0);
  g_port = trk_port;
  g_agents = trk_agents;
  g_split = split_saved;
  for (int t = 0; t < 2; t++)
    for (int sp = 0; sp < 2; sp++) {
      r->fmed[t][sp] = kc_measure_quantile(frps[t][sp], FR, 0.5);
      r->fcmed[t][sp] = kc_measure_quantile(fcpu[t][sp], FR, 0.5);
      r->fgmed[t][sp] = kc_measure_quantile(fgen[t][sp], FR, 0.5);
    }
}

/* 4. Memory over 200 000 more leases. */
static void phase_memory(results *r, pid_t trk) {
  r->rss[0] = rss_kb(trk);
  g_leases = 0;
  g_nlat = 0;
  lconn *cs = start_clients(50, getenv("KC_BENCH_SHORT") ? 20000 : 200000);
  for (int i = 1; i <= 4; i++) {
    long w = (getenv("KC_BENCH_SHORT") ? 5000L : 50000L) * i;
    pump_until(leases_reached, &w, 300);
    r->rss[i] = rss_kb(trk);
  }
  close_clients(cs, 50);
}

static void print_table(const results *r) {
  printf("kcage tracker on loopback (load generator: this process; tracker: a child)\n\n");
  printf("%-58s %14s %16s\n", "figure", "kcage", "TVM (reference*)");
  printf("%-58s %11.3f ms %16s\n", "REQUEST->lease median, unloaded, split writes (TVM client)",
         r->lat_split[0] * 1e3, "43.99 ms");
  printf("%-58s %11.3f ms %16s\n", "REQUEST->lease p99, unloaded, split writes",
         r->lat_split[1] * 1e3, "44.66 ms");
  printf("%-58s %11.3f ms %16s\n", "REQUEST->lease median, unloaded, one write",
         r->lat_single[0] * 1e3, "-");
  printf("%-58s %11.3f s  %16s\n", "1 000 agents connecting at once: all registered after",
         r->reg_s, "263/1000 then RST");
  printf("%-58s %12.0f/s %14s/s\n", "requests/s: 1 000 agents, 50 clients, 10 000 REQUESTs", r->rps,
         "1 136");
  printf("%-58s %5.0f..%.0f/s %12s\n", "  (min..max of the three runs)", r->rps_min, r->rps_max,
         "-");
  printf("%-58s %11.3f ms %16s\n", "  REQUEST->lease median under that load", r->med * 1e3,
         "43.99 ms");
  printf("%-58s %11.3f ms %16s\n", "  REQUEST->lease p99 under that load", r->p99 * 1e3,
         "44.66 ms");
  printf("%-58s %11.0f %% %16s\n", "  tracker CPU during that phase (of one core)",
         100 * r->trk_cpu / r->run_s, "4 %");
  printf("%-58s %11.1f us %16s\n", "  tracker CPU per request (user+kernel)",
         1e6 * r->trk_cpu / (double)r->want, "28 us");
  printf("%-58s %12.0f/s %16s\n", "  => one-core capacity at that cost",
         (double)r->want / r->trk_cpu, "35 359/s");
  printf("%-58s %11.0f %% %16s\n", "  load generator CPU during that phase (of one core)",
         100 * r->gen_cpu / r->run_s, "-");
  printf("%-58s %11.0f %% %16s\n", "  both waiting for a CPU (run queue; other tenants)",
         100 * r->runq / r->run_s, "-");
  printf("%-58s %12.0f/s %16s\n", "requests/s, same load, clients writing a frame at once", r->rps1,
         "-");
  printf("%-58s %11.3f ms %16s\n", "  REQUEST->lease median", r->med1 * 1e3, "-");
  printf("%-58s %11.1f us %16s\n", "  tracker CPU per request", 1e6 * r->cpu1 / (double)r->want,
         "-");
  printf(
      "\nthe same loads against the floor (a server doing only what this load needs: no JSON\n"
      "library, no priorities, no validation; same sockets and packets), alternating, %d runs:\n",
      FR);
  printf("  %-28s %13s %11s %6s %16s %18s\n", "clients", "kcage tracker", "floor", "ratio",
         "CPU/req trk|flr", "load gen CPU/req");
  for (int sp = 0; sp < 2; sp++)
    printf("  %-28s %11.0f/s %9.0f/s %6.2f %9.1f|%.1f us %10.1f|%.1f us\n",
           sp ? "split writes (TVM's Python)" : "one write per frame", r->fmed[0][sp],
           r->fmed[1][sp], r->fmed[0][sp] / r->fmed[1][sp], r->fcmed[0][sp] * 1e6,
           r->fcmed[1][sp] * 1e6, r->fgmed[0][sp] * 1e6, r->fgmed[1][sp] * 1e6);
  printf("%-58s %5ld->%ld->%ld->%ld->%ld KiB\n",
         "tracker RSS at 0/50k/100k/150k/200k further leases", r->rss[0], r->rss[1], r->rss[2],
         r->rss[3], r->rss[4]);
  printf("\nratios: %.0fx TVM's requests/s, median latency %.0fx lower (targets: >= 50 000/s, "
         "median <= 0.5 ms, all 1 000 registered within 1 s, flat RSS)\n",
         r->rps / 1136.0, 43.99e-3 / r->med);
  /* Why the latency target and the load contradict each other here: every client keeps
   * one REQUEST outstanding, so the mean latency is clients / throughput (Little's law)
   * whatever the tracker does; TVM's 43.99 ms is 50 / 1 136 too. */
  printf("Little's law: 50 clients, one REQUEST outstanding each => mean latency = 50 / "
         "requests/s:\n  %.3f ms at the measured %.0f/s (median %.3f ms); a median of 0.5 ms "
         "needs ~100 000/s,\n  %.1fx the floor measured above (%.0f/s) for this load on this "
         "machine\n",
         50e3 / r->rps1, r->rps1, r->med1 * 1e3, 100000.0 / r->fmed[1][0], r->fmed[1][0]);
  printf(
      "* TVM's figures are from reference/tracker-load.md (same kind of machine, same load); TVM\n"
      "  is not installed here, so they are quoted, not re-measured in this run.  The load\n"
      "  generator shares the 2 vCPUs with the tracker, so requests/s is a lower bound.\n"
      "  TVM's 28 us / 35 359/s per core: a quiet machine, clients that ACK at once; ours share\n"
      "  the machine with whatever else runs (see the run-queue line), which inflates every "
      "figure.\n");
}

static void record(const results *r) {
  kc_measure_set("tracker", "lease_median_unloaded_split_s", r->lat_split[0]);
  kc_measure_set("tracker", "lease_p99_unloaded_split_s", r->lat_split[1]);
  kc_measure_set("tracker", "lease_median_unloaded_single_s", r->lat_single[0]);
  kc_measure_set("tracker", "register_1000_at_once_s", r->reg_s);
  kc_measure_set("tracker", "requests_per_s_1000_agents_50_clients", r->rps);
  kc_measure_set("tracker", "lease_median_loaded_s", r->med);
  kc_measure_set("tracker", "lease_p99_loaded_s", r->p99);
  kc_measure_set("tracker", "tracker_cpu_fraction", r->trk_cpu / r->run_s);
  kc_measure_set("tracker", "loadgen_cpu_fraction", r->gen_cpu / r->run_s);
  kc_measure_set("tracker", "tracker_cpu_per_request_s", r->trk_cpu / (double)r->want);
  kc_measure_set("tracker", "requests_per_s_one_write_clients", r->rps1);
  kc_measure_set("tracker", "lease_median_loaded_one_write_s", r->med1);
  kc_measure_set("tracker", "tracker_cpu_per_request_one_write_s", r->cpu1 / (double)r->want);
  kc_measure_set("tracker", "runqueue_wait_fraction", r->runq / r->run_s);
  kc_measure_set("tracker", "floor_requests_per_s_one_write", r->fmed[1][0]);
  kc_measure_set("tracker", "floor_requests_per_s_split", r->fmed[1][1]);
  kc_measure_set("tracker", "alternating_tracker_requests_per_s_one_write", r->fmed[0][0]);
  kc_measure_set("tracker", "alternating_tracker_requests_per_s_split", r->fmed[0][1]);
  kc_measure_set("tracker", "rss_kb_start", (double)r->rss[0]);
  kc_measure_set("tracker", "rss_kb_after_200k_leases", (double)r->rss[4]);
  kc_measure_set("tracker", "tvm_requests_per_s_reference", 1136);
  kc_measure_set("tracker", "tvm_lease_median_s_reference", 43.99e-3);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 2200) {
    fprintf(stderr, "bench_tracker: need 2200 fds, have %lu\n", (unsigned long)rl.rlim_cur);
    return 1;
  }
  pid_t trk = start_tracker();
  pin(0);
  g_efd = epoll_create1(EPOLL_CLOEXEC);
  results r = {.want = 10000};
  phase_unloaded(&r);
  /* 2. 1 000 agents connecting at once: connect all, then magic+UPDATE_INFO+PUT. */
  double t0 = kc_measure_now();
  register_agents(1000);
  r.reg_s = kc_measure_now() - t0;
  phase_loaded(&r, trk);
  phase_one_write(&r, trk);
  phase_floor(&r, trk);
  phase_memory(&r, trk);
  for (int i = 0; i < g_nagents; i++)
    close(g_agents[i].fd);
  kill(trk, SIGTERM);
  waitpid(trk, NULL, 0);
  print_table(&r);
  record(&r);
  kc_measure_write();
  return 0;
}
