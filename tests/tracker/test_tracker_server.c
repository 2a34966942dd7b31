/* The tracker server over real loopback sockets, driven by a raw client that writes
 * what TVM's Python writes. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <endian.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_internal.h"
#include "trk_test.h"

static int setup(void **state) {
  trk_srv *t = calloc(1, sizeof *t);
  trk_start(t);
  *state = t;
  return 0;
}

static int teardown(void **state) {
  trk_srv *t = *state;
  if (t->s)
    trk_stop(t);
  free(t);
  return 0;
}

static void test_ping_and_magic(void **state) {
  trk_srv *t = *state;
  int fd = raw_connect(t->port, true);
  raw_call_expect(fd, "[1]", "0");
  close(fd);
  /* A wrong magic is closed without a reply, like TVM. */
  fd = raw_connect(t->port, false);
  uint32_t bad = htole32(0x12345);
  raw_send_bytes(fd, &bad, 4);
  assert_true(raw_closed(fd, 2));
  close(fd);
}

/* Priority first (highest number wins), FIFO among equal priorities. */
static void test_priority_then_fifo(void **state) {
  trk_srv *t = *state;
  const char *reqs[] = {"[4, \"gpu\", \"\", 1]", "[4, \"gpu\", \"\", 5]", "[4, \"gpu\", \"\", 5]",
                        "[4, \"gpu\", \"\", 1]", "[4, \"gpu\", \"\", 2.5]"};
  int want_order[] = {1, 2, 4, 0, 3};
  int c[5];
  for (int i = 0; i < 5; i++) {
    c[i] = raw_connect(t->port, true);
    raw_send(c[i], reqs[i]);
    assert_int_equal(wait_count(t->port, "gpu", "pending", i + 1, 5), i + 1);
  }
  int srv = raw_connect(t->port, true);
  raw_call_expect(srv, "[5, {\"key\": \"server:gpu\", \"addr\": [null, 9000]}]", "0");
  for (int i = 0; i < 5; i++) {
    char put[128], want[160];
    snprintf(put, sizeof put, "[3, \"gpu\", [9000, \"gpu:0.%d\"], null]", i);
    raw_call_expect(srv, put, "0");
    snprintf(want, sizeof want, "[0, [\"127.0.0.1\", 9000, \"gpu:0.%d\"]]", i);
    char *r = raw_recv(c[want_order[i]], 2);
    assert_non_null(r);
    assert_string_equal(r, want);
    free(r);
    for (int j = i + 1; j < 5; j++)
      assert_true(raw_quiet(c[want_order[j]], 0.0));
  }
  assert_int_equal(summary_count(t->port, "gpu", "pending"), 0);
  assert_int_equal(summary_count(t->port, "gpu", "free"), 0);
  for (int i = 0; i < 5; i++)
    close(c[i]);
  close(srv);
}

/* SUMMARY byte for byte as TVM shapes it; addr[0] null becomes the peer address;
 * the C++ server's string port and the 3-element PUT are accepted. */
static void test_summary_shape(void **state) {
  trk_srv *t = *state;
  int s1 = raw_connect(t->port, true), s2 = raw_connect(t->port, true),
      q = raw_connect(t->port, true);
  raw_register(s1, "v100", 9091, "v100:0.5");
  raw_call_expect(s2, "[5, {\"key\": \"server:rasp\", \"addr\": [\"10.0.0.7\", \"9092\"]}]", "0");
  raw_call_expect(s2, "[3, \"rasp\", [9092, \"rasp:0.25\"]]", "0");
  raw_call_expect(q, "[6]",
                  "[0, {\"queue_info\": {\"v100\": {\"free\": 1, \"pending\": 0}, \"rasp\": "
                  "{\"free\": 1, \"pending\": 0}}, \"server_info\": [{\"key\": \"server:v100\", "
                  "\"addr\": [\"127.0.0.1\", 9091]}, {\"key\": \"server:rasp\", \"addr\": "
                  "[\"10.0.0.7\", \"9092\"]}]}]");
  raw_call_expect(s1, "[7]", "[\"v100:0.5\"]");
  /* A client connection (no server key) is not listed; a REQUEST creates its key. */
  int c = raw_connect(t->port, true);
  raw_call_expect(c, "[5, {\"key\": \"client\", \"addr\": [null, 0]}]", "0");
  raw_send(c, "[4, \"rasp\", \"\", 1]");
  char *r = raw_recv(c, 2);
  /* TVM: the lease address comes from PUT (peer, as no custom_addr), not UPDATE_INFO */
  assert_string_equal(r, "[0, [\"127.0.0.1\", 9092, \"rasp:0.25\"]]");
  free(r);
  raw_call_expect(s2, "[7]", "[]");
  assert_int_equal(summary_servers(t->port), 2);
  close(c);
  close(s1);
  close(s2);
  close(q);
}

/* The lease reply carries PUT's custom_addr, and its port and matchkey as they were
 * sent (a C++ server's port is a digit string), escaped as jansson writes them with
 * ensure_ascii (Python's json.dumps differs only in the case of \\u hex digits). */
static void test_lease_reply_encoding(void **state) {
  trk_srv *t = *state;
  int s = raw_connect(t->port, true);
  raw_call_expect(s, "[3, \"esc\", [\"9092\", \"esc:\\\"q\\\"\u00e9/\\n\"], \"10.1.2.3\"]", "0");
  raw_call_expect(s, "[3, \"esc\", [9093, \"esc:plain\"], null]", "0");
  int c = raw_connect(t->port, true);
  raw_send(c, "[4, \"esc\", \"\", 1]");
  char *r = raw_recv(c, 2);
  assert_string_equal(r, "[0, [\"10.1.2.3\", \"9092\", \"esc:\\\"q\\\"\\u00E9/\\n\"]]");
  free(r);
  raw_send(c, "[4, \"esc\", \"\", 1]");
  r = raw_recv(c, 2);
  assert_string_equal(r, "[0, [\"127.0.0.1\", 9093, \"esc:plain\"]]");
  free(r);
  close(c);
  close(s);
}

/* Improvements: a server whose connection dies is removed at once (even without
 * UPDATE_INFO); a client that leaves while waiting stops counting as pending. */
static void test_dead_peers_removed(void **state) {
  trk_srv *t = *state;
  int s = raw_connect(t->port, true);
  raw_register(s, "cpu", 9000, "cpu:0.1");
  int bare = raw_connect(t->port, true);
  raw_call_expect(bare, "[3, \"cpu\", [9001, \"cpu:0.2\"], null]", "0");
  assert_int_equal(summary_count(t->port, "cpu", "free"), 2);
  assert_int_equal(summary_servers(t->port), 1);
  double t0 = now_s();
  close(s);
  close(bare);
  assert_int_equal(wait_count(t->port, "cpu", "free", 0, 5.0), 0);
  assert_int_equal(summary_servers(t->port), 0);
  assert_true(now_s() - t0 < 5.0);

  int c1 = raw_connect(t->port, true), c2 = raw_connect(t->port, true);
  raw_send(c1, "[4, \"cpu\", \"\", 1]");
  raw_send(c2, "[4, \"cpu\", \"\", 1]");
  assert_int_equal(wait_count(t->port, "cpu", "pending", 2, 5), 2);
  close(c1);
  assert_int_equal(wait_count(t->port, "cpu", "pending", 1, 5), 1);
  /* The device goes to the client that is still there, not to the phantom. */
  s = raw_connect(t->port, true);
  raw_register(s, "cpu", 9000, "cpu:0.3");
  char *r = raw_recv(c2, 2);
  assert_string_equal(r, "[0, [\"127.0.0.1\", 9000, \"cpu:0.3\"]]");
  free(r);
  assert_int_equal(summary_count(t->port, "cpu", "free"), 0);
  close(c2);
  close(s);
}

/* Garbage, oversized, negative, truncated, unknown-code and wrong-shape frames close
 * only their own connection; everybody else carries on. */
static void test_bad_frames_close_only_their_connection(void **state) {
  trk_srv *t = *state;
  int s = raw_connect(t->port, true);
  raw_register(s, "k", 9000, "k:0.1");
  int waiting = raw_connect(t->port, true);
  raw_send(waiting, "[4, \"other\", \"\", 1]");
  const char *bodies[] = {"not json",
                          "{\"a\": 1}",
                          "[99]",
                          "[4, \"k\"]",
                          "[3, \"k\", [9000], null]",
                          "[5, {\"key\": \"server:x\"}]",
                          "[4, 7, \"\", 1]",
                          "[\"1\"]",
                          "[3, \"k\", [70000, \"k:1\"], null]",
                          "[5, []]",
                          "[1, 2]"};
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    int fd = raw_connect(t->port, true);
    raw_send(fd, bodies[i]);
    if (!raw_closed(fd, 2))
      fail_msg("frame %s did not close its connection", bodies[i]);
    close(fd);
  }
  int32_t lens[] = {(int32_t)(2u << 20), -5, 0};
  for (size_t i = 0; i < 3; i++) {
    int fd = raw_connect(t->port, true);
    uint32_t l = htole32((uint32_t)lens[i]);
    raw_send_bytes(fd, &l, 4);
    raw_send_bytes(fd, "[1]", 3);
    assert_true(raw_closed(fd, 2));
    close(fd);
  }
  /* An UPDATE_INFO whose info outgrows 16 KiB (info is kept for the connection's life). */
  {
    size_t big = 20000;
    char *b = malloc(big + 128);
    int n = snprintf(b, 128, "[5, {\"key\": \"server:x\", \"addr\": [null, 1], \"pad\": \"");
    memset(b + n, 'a', big);
    strcpy(b + n + big, "\"}]");
    int fd = raw_connect(t->port, true);
    raw_send(fd, b);
    assert_true(raw_closed(fd, 2));
    close(fd);
    free(b);
  }
  /* Truncated: half a frame, then the client goes away. */
  int fd = raw_connect(t->port, true);
  uint32_t l = htole32(100);
  raw_send_bytes(fd, &l, 4);
  raw_send_bytes(fd, "[1, ", 4);
  close(fd);
  /* Two frames in one packet are both served, in order. */
  fd = raw_connect(t->port, true);
  char two[32];
  uint32_t l3 = htole32(3);
  memcpy(two, &l3, 4);
  memcpy(two + 4, "[1]", 3);
  memcpy(two + 7, &l3, 4);
  memcpy(two + 11, "[7]", 3);
  raw_send_bytes(fd, two, 14);
  char *r1 = raw_recv(fd, 2), *r2 = raw_recv(fd, 2);
  assert_string_equal(r1, "0");
  assert_string_equal(r2, "[]");
  free(r1);
  free(r2);
  close(fd);

  raw_call_expect(s, "[1]", "0");
  raw_call_expect(s, "[7]", "[\"k:0.1\"]");
  assert_int_equal(summary_count(t->port, "k", "free"), 1);
  assert_int_equal(summary_count(t->port, "other", "pending"), 1);
  close(waiting);
  close(s);
}

static void test_stop(void **state) {
  trk_srv *t = *state;
  int fd = raw_connect(t->port, true);
  raw_call_expect(fd, "[2, \"tracker:0.wrong\"]", "-1");
  raw_call_expect(fd, "[2, \"tracker:0.test\"]", "0");
  close(fd);
  trk_stop(t); /* returns because STOP ended run() */
}

/* The client library: a REQUEST with a deadline gives up cleanly and withdraws. */
static void test_client_deadline(void **state) {
  trk_srv *t = *state;
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.wait_s = 0.3;
  kc_lease lease;
  int fd = -1;
  kc_error err = {0};
  double t0 = now_s();
  assert_int_equal(kc_tracker_request("127.0.0.1", t->port, "nothing", &o, &lease, &fd, &err), -1);
  assert_true(now_s() - t0 < 10.0);
  assert_non_null(strstr(err.msg, "Cannot request nothing"));
  assert_non_null(strstr(err.msg, "no nothing device was free"));
  assert_int_equal(wait_count(t->port, "nothing", "pending", 0, 5), 0);
}

/* kcage query's text is TVM's text_summary, byte for byte. */
static void test_text_summary(void **state) {
  (void)state;
  json_t *s = json_loads(
      "{\"queue_info\": {\"v100\": {\"free\": 1, \"pending\": 0}, \"rasp3b\": {\"free\": 0, "
      "\"pending\": 2}, \"idle\": {\"free\": 0, \"pending\": 0}}, \"server_info\": [{\"key\": "
      "\"server:v100\", \"addr\": [\"10.0.0.2\", 9090]}, {\"key\": \"server:rasp3b\", \"addr\": "
      "[\"192.168.100.100\", 19090]}]}",
      0, NULL);
  char *t = kc_tracker_text_summary(s);
  const char *want = "Server List\n"
                     "------------------------------\n"
                     "server-address           key\n"
                     "------------------------------\n"
                     "192.168.100.100:19090    server:rasp3b\n"
                     "10.0.0.2:9090            server:v100\n"
                     "------------------------------\n"
                     "\n"
                     "Queue Status\n"
                     "------------------------------\n"
                     "key      total  free  pending\n"
                     "------------------------------\n"
                     "rasp3b   1      0     2      \n"
                     "v100     1      1     0      \n"
                     "------------------------------\n";
  assert_string_equal(t, want);
  free(t);
  json_decref(s);
}

/* A server that vanishes without FIN or RST (its host rebooted, its cable pulled) is
 * expired by keepalive.  TCP_REPAIR makes close() silent, which is exactly that; it
 * needs CAP_NET_ADMIN, so the test is skipped without it. */
static void test_silent_server_expired(void **state) {
  (void)state;
  trk_srv t = {0};
  trk_start_ka(&t, 3);
  int s = raw_connect(t.port, true);
  raw_register(s, "gone", 9000, "gone:0.1");
  usleep(300000); /* let our delayed ACK of the last reply go out first */
  int one = 1;
  if (setsockopt(s, IPPROTO_TCP, TCP_REPAIR, &one, sizeof one) < 0) {
    close(s);
    trk_stop(&t);
    skip();
  }
  close(s); /* nothing goes on the wire */
  double t0 = now_s();
  usleep(500000);
  assert_int_equal(summary_count(t.port, "gone", "free"), 1); /* still believed alive */
  assert_int_equal(wait_count(t.port, "gone", "free", 0, 8), 0);
  assert_int_equal(summary_servers(t.port), 0);
  printf("# silent server expired after %.2f s (keepalive 3 s)\n", now_s() - t0);
  trk_stop(&t);
}

/* A key's bucket is a keyed hash: names that share a bucket in one tracker do not in
 * another, so a peer cannot aim its keys at one bucket and make every lookup walk up
 * to the table's 65 536 keys.  An unkeyed hash puts every name in the same bucket
 * in both. */
static void test_buckets_are_keyed(void **state) {
  trk_srv *t = *state, u = {0};
  trk_start(&u);
  int same = 0, stable = 1;
  for (int i = 0; i < 64; i++) {
    char name[32];
    snprintf(name, sizeof name, "key-%d", i);
    size_t b = srv_bucket_of(t->s, name);
    stable &= srv_bucket_of(t->s, name) == b; /* within one tracker */
    same += srv_bucket_of(u.s, name) == b;
  }
  trk_stop(&u);
  assert_true(stable);
  assert_true(same < 8); /* 64 / 4096 expected */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_buckets_are_keyed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ping_and_magic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_priority_then_fifo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lease_reply_encoding, setup, teardown),
      cmocka_unit_test_setup_teardown(test_summary_shape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dead_peers_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_frames_close_only_their_connection, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_deadline, setup, teardown),
      cmocka_unit_test(test_text_summary),
      cmocka_unit_test(test_silent_server_expired),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
