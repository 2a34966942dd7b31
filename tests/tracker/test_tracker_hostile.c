/* The tracker against hostile peers, over real sockets: key table exhaustion, idle
 * connections that never send the magic, deep JSON in UPDATE_INFO. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proc.h"
#include "trk_test.h"

/* Append one frame (length + text) to buf. */
static size_t put_frame(char *buf, size_t at, const char *json) {
  uint32_t l = htole32((uint32_t)strlen(json));
  memcpy(buf + at, &l, 4);
  memcpy(buf + at + 4, json, strlen(json));
  return at + 4 + strlen(json);
}

static void send_all(int fd, const char *buf, size_t len) {
  while (len) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    assert_true(n > 0);
    buf += n;
    len -= (size_t)n;
  }
}

/* REQUESTs for more distinct keys than the table holds, from short-lived connections,
 * leave room for a newcomer: its PUT and REQUEST are served. */
static void test_key_table_not_exhausted(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  enum { CONNS = 280, PER_CONN = 250 }; /* 70 000 keys, over the 65 536 the table holds */
  static char buf[PER_CONN * 40 + 16];
  for (int c = 0; c < CONNS; c++) {
    int fd = raw_connect(t.port, true);
    size_t n = 0;
    char req[64];
    for (int i = 0; i < PER_CONN; i++) {
      snprintf(req, sizeof req, "[4, \"k%d.%d\", \"\", 1]", c, i);
      n = put_frame(buf, n, req);
    }
    n = put_frame(buf, n, "[1]");
    send_all(fd, buf, n);
    char *r = raw_recv(fd, 10); /* the PING's reply: every REQUEST before it was read */
    assert_non_null(r);
    assert_string_equal(r, "0");
    free(r);
    close(fd);
  }
  int srv = raw_connect(t.port, true);
  raw_register(srv, "fresh", 9000, "fresh:0.1");
  int cli = raw_connect(t.port, true);
  raw_call_expect(cli, "[4, \"fresh\", \"\", 1]", "[0, [\"127.0.0.1\", 9000, \"fresh:0.1\"]]");
  /* A new key that has to wait is held too. */
  raw_send(cli, "[4, \"fresh2\", \"\", 1]");
  assert_int_equal(wait_count(t.port, "fresh2", "pending", 1, 5), 1);
  close(cli);
  close(srv);
  trk_stop(&t);
}

/* A connection that never sends the magic is dropped after the handshake deadline; one
 * that did send it is kept. */
static void test_handshake_deadline(void **state) {
  (void)state;
  trk_srv t;
  trk_start_hs(&t, 0, 0.5);
  int idle = raw_connect(t.port, false);
  int good = raw_connect(t.port, true);
  double t0 = now_s();
  assert_true(raw_closed(idle, 5));
  assert_true(now_s() - t0 >= 0.3);
  assert_true(raw_quiet(good, 1.0));
  raw_call_expect(good, "[1]", "0");
  close(idle);
  close(good);
  trk_stop(&t);
}

/* Connections that each hold most of a 1 MiB frame fill the buffer budget (here 2 MiB);
 * a newcomer with a small frame is still served. */
static void test_buffer_budget_leaves_room(void **state) {
  (void)state;
  trk_srv t;
  kc_tracker_opts o;
  kc_tracker_opts_init(&o);
  o.max_buffered = 2u << 20;
  trk_start_opts(&t, &o);
  enum { HOGS = 4, PART = 700000 };
  char *part = calloc(1, PART);
  int hog[HOGS];
  uint32_t len = htole32(1u << 20);
  for (int i = 0; i < HOGS; i++) {
    hog[i] = raw_connect(t.port, true);
    raw_send_bytes(hog[i], &len, 4);
    raw_send_bytes(hog[i], part, PART);
    usleep(100000); /* the tracker reads it (not a timing assertion: either way is fine) */
  }
  free(part);
  int fd = raw_connect(t.port, true);
  raw_call_expect(fd, "[1]", "0");
  raw_call_expect(fd, "[3, \"k\", [9000, \"k:0.1\"], null]", "0");
  close(fd);
  for (int i = 0; i < HOGS; i++)
    close(hog[i]);
  trk_stop(&t);
}

struct flood {
  uint16_t port;
  volatile int stop;
  int opened;
};

static int connect_nb(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Idle connections that never send the magic: the first STICKY are held for the whole
 * test (more than the tracker has fds), then a ring of CHURN more, the oldest replaced
 * by a new one every millisecond. */
enum { STICKY = 100, CHURN = 300 };
static void *flood_main(void *arg) {
  struct flood *f = arg;
  int sticky[STICKY], ring[CHURN];
  for (int i = 0; i < STICKY; i++) {
    sticky[i] = connect_nb(f->port);
    f->opened++;
  }
  for (int i = 0; i < CHURN; i++)
    ring[i] = -1;
  for (int i = 0; !f->stop; i = (i + 1) % CHURN) {
    if (ring[i] >= 0)
      close(ring[i]);
    ring[i] = connect_nb(f->port);
    f->opened++;
    if (f->opened > STICKY + CHURN)
      usleep(1000);
  }
  for (int i = 0; i < CHURN; i++)
    if (ring[i] >= 0)
      close(ring[i]);
  for (int i = 0; i < STICKY; i++)
    if (sticky[i] >= 0)
      close(sticky[i]);
  return NULL;
}

/* The real `kcage tracker` with few fds under a flood of idle connections: agents and
 * clients are still served within seconds, while the flood goes on. */
static void test_idle_flood(void **state) {
  (void)state;
  uint16_t port = free_port();
  char ps[8], pe[8];
  snprintf(ps, sizeof ps, "%u", port);
  snprintf(pe, sizeof pe, "%u", port + 1);
  const char *argv[] = {"tracker", "--host", "127.0.0.1", "--port", ps, "--port-end", pe, NULL};
  pid_t trk = 0;
  proc_nofile = 64;
  uint16_t got = proc_start(&trk, argv);
  proc_nofile = 0;
  assert_int_equal(got, port);
  struct flood f = {.port = port};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, flood_main, &f), 0);
  while (f.opened < STICKY + CHURN)
    usleep(10000);
  for (int i = 0; i < 5; i++) {
    double t0 = now_s();
    kc_tracker_conn *c = NULL;
    kc_error err = {0};
    int rc = -1;
    /* A client retries a reset connection, as TVM's do; all within the bound. */
    while (rc < 0 && now_s() - t0 < 10) {
      rc = kc_tracker_connect("127.0.0.1", port, 5, &c, &err);
      json_t *s = NULL;
      if (rc == 0 && kc_tracker_summary(c, &s, &err) < 0)
        rc = -1;
      json_decref(s);
      if (c)
        kc_tracker_close(c);
      c = NULL;
    }
    if (rc < 0)
      fail_msg("client %d not served within 10 s of flood: %s", i, err.msg);
    printf("# client %d served after %.3f s (%d idle connections opened so far)\n", i, now_s() - t0,
           f.opened);
  }
  f.stop = 1;
  pthread_join(th, NULL);
  proc_stop(&trk);
}

/* UPDATE_INFO nested 1500 deep is refused (its connection closed) and never reaches
 * SUMMARY, which stays shallow; a normal one is stored and served. */
static void test_deep_info_refused(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  enum { DEPTH = 1500 };
  char *msg = malloc(2 * DEPTH + 128);
  int n = sprintf(msg, "[5, {\"key\": \"server:deep\", \"addr\": [null, 9000], \"x\": ");
  for (int i = 0; i < DEPTH; i++)
    msg[n++] = '[';
  msg[n++] = '1';
  for (int i = 0; i < DEPTH; i++)
    msg[n++] = ']';
  strcpy(msg + n, "}]");
  int fd = raw_connect(t.port, true);
  raw_send(fd, msg);
  assert_true(raw_closed(fd, 5));
  close(fd);
  free(msg);
  int ok = raw_connect(t.port, true);
  raw_call_expect(ok, "[5, {\"key\": \"server:fine\", \"addr\": [null, 9000], \"x\": [[1]]}]", "0");
  fd = raw_connect(t.port, true);
  raw_send(fd, "[6]");
  char *r = raw_recv(fd, 5);
  assert_non_null(r);
  assert_null(strstr(r, "deep"));
  assert_non_null(strstr(r, "server:fine"));
  assert_null(strstr(r, "[[[[[[[[[[")); /* no deep value is repeated */
  free(r);
  close(fd);
  close(ok);
  trk_stop(&t);
}

/* Keys and addresses are a peer's strings: `kcage query` shows their control
 * characters escaped, never raw. */
static void test_query_escapes_peer_strings(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  int srv = raw_connect(t.port, true);
  raw_call_expect(srv,
                  "[5, {\"key\": \"server:ev\\u001b[2Jil\", \"addr\": [\"h\\u001b]0;x\\u0007\", "
                  "9000]}]",
                  "0");
  raw_call_expect(srv, "[3, \"ev\\u001b[2Jil\", [9000, \"ev:0.1\"], \"h\\u009b1m\"]", "0");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s query --tracker 127.0.0.1:%u", KCAGE_BIN, t.port);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[8192];
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)out[i] < 0x20 && out[i] != '\n') || out[i] == 0x7f ||
        ((unsigned char)out[i] == 0xc2 && (unsigned char)out[i + 1] >= 0x80 &&
         (unsigned char)out[i + 1] <= 0x9f))
      fail_msg("raw control character at %zu: %s", i, out);
  assert_non_null(strstr(out, "server:ev\\e[2Jil"));
  assert_non_null(strstr(out, "h\\e]0;x\\x07:9000"));
  assert_non_null(strstr(out, "ev\\e[2Jil   1      1     0"));
  close(srv);
  trk_stop(&t);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key_table_not_exhausted),
      cmocka_unit_test(test_handshake_deadline),
      cmocka_unit_test(test_idle_flood),
      cmocka_unit_test(test_deep_info_refused),
      cmocka_unit_test(test_buffer_budget_leaves_room),
      cmocka_unit_test(test_query_escapes_peer_strings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
