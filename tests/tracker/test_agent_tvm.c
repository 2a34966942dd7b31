/* The real `kcage agent` meeting TVM's RPC wire without TVM: a TVM client's first packet
 * (kInitServer) is told from a kcage session's hello, and an agent that cannot serve it
 * says why in TVM's own exception packet; session_constructor_args in a kcage session's
 * hello are acknowledged, clamped or refused.  The sessions with TVM itself are
 * python/tests/test_tvm_rpc_agent.py. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netio.h"
#include "proc.h"
#include "trk_test.h"

typedef struct fixture {
  trk_srv t;
  pid_t agent;
  char tracker[64];
  char keyfile[64];
} fixture;

static fixture *start(const char *extra, const char *extra_arg) {
  fixture *f = calloc(1, sizeof *f);
  trk_start(&f->t);
  snprintf(f->tracker, sizeof f->tracker, "127.0.0.1:%u", f->t.port);
  const char *argv[] = {"agent",
                        "--tracker",
                        f->tracker,
                        "--key",
                        "cpu",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "0",
                        "--tvm-python",
                        "/nonexistent/python3",
                        "--max-memory",
                        "64M",
                        extra,
                        extra_arg,
                        NULL};
  assert_true(proc_start(&f->agent, argv) > 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 5), 1);
  return f;
}

static void stop(fixture *f) {
  proc_stop(&f->agent);
  trk_stop(&f->t);
  if (f->keyfile[0])
    unlink(f->keyfile);
  free(f);
}

static int lease_fd(fixture *f) {
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.wait_s = 5;
  kc_lease lease;
  int fd = -1;
  kc_error err = {0};
  if (kc_tracker_request("127.0.0.1", f->t.port, "cpu", &o, &lease, &fd, &err) < 0)
    fail_msg("request: %s", err.msg);
  return fd;
}

/* What TVM's client sends first: kInitServer, protocol "0.8.0", no constructor. */
static void send_init_server(int fd) {
  unsigned char p[8 + 4 + 8 + 5 + 4];
  uint64_t n = htole64(sizeof p - 8), vl = htole64(5);
  uint32_t code = htole32(2), nargs = 0;
  memcpy(p, &n, 8);
  memcpy(p + 8, &code, 4);
  memcpy(p + 12, &vl, 8);
  memcpy(p + 20, "0.8.0", 5);
  memcpy(p + 25, &nargs, 4);
  kc_error err = {0};
  assert_int_equal(kc_write_all(fd, p, sizeof p, kc_deadline(5), &err), 0);
}

/* TVM's kException packet: its message. */
static void read_exception(int fd, char *msg, size_t cap) {
  unsigned char h[28];
  kc_error err = {0};
  if (kc_read_exact(fd, h, sizeof h, kc_deadline(10), &err) < 0)
    fail_msg("no exception packet: %s", err.msg);
  uint32_t code, nargs, ti;
  uint64_t total, len;
  memcpy(&total, h, 8);
  memcpy(&code, h + 8, 4);
  memcpy(&nargs, h + 12, 4);
  memcpy(&ti, h + 16, 4);
  memcpy(&len, h + 20, 8);
  assert_int_equal(le32toh(code), 5); /* kException */
  assert_int_equal(le32toh(nargs), 1);
  assert_int_equal(le32toh(ti), 8); /* a raw string */
  assert_int_equal(le64toh(total), 20 + le64toh(len));
  assert_true(le64toh(len) < cap);
  assert_int_equal(kc_read_exact(fd, msg, le64toh(len), kc_deadline(5), &err), 0);
  msg[le64toh(len)] = '\0';
}

/* A kcage session still works after the TVM client: the agent serves both. */
static json_t *kcage_hello(fixture *f, json_t *extra) {
  int fd = lease_fd(f);
  json_t *m = json_pack("{s:s, s:i}", "op", "hello", "version", KC_SESSION_VERSION), *r = NULL;
  if (extra)
    json_object_update(m, extra);
  kc_error err = {0};
  assert_int_equal(kc_session_send(fd, m, kc_deadline(5), &err), 0);
  json_decref(m);
  if (kc_session_recv(fd, kc_deadline(5), &r, &err) < 0)
    fail_msg("hello: %s", err.msg);
  close(fd);
  return r;
}

static void test_tvm_client_is_told_why(void **state) {
  (void)state;
  fixture *f = start(NULL, NULL);
  int fd = lease_fd(f);
  send_init_server(fd);
  char msg[2048];
  read_exception(fd, msg, sizeof msg);
  close(fd);
  if (!strstr(msg, "serves no TVM RPC sessions") || !strstr(msg, "/nonexistent/python3"))
    fail_msg("unexpected: %s", msg);
  json_t *h = kcage_hello(f, NULL);
  assert_string_equal(json_string_value(json_object_get(h, "op")), "hello");
  json_decref(h);
  stop(f);
}

static void test_auth_agent_refuses_tvm_clients(void **state) {
  (void)state;
  char keyfile[] = "/tmp/kc-tvm-key-XXXXXX";
  int kfd = mkstemp(keyfile);
  assert_true(kfd >= 0);
  assert_int_equal(write(kfd, "0123456789abcdef0123", 20), 20);
  fchmod(kfd, 0600);
  close(kfd);
  fixture *f = start("--auth-key", keyfile);
  snprintf(f->keyfile, sizeof f->keyfile, "%s", keyfile);
  int fd = lease_fd(f);
  send_init_server(fd);
  char msg[2048];
  read_exception(fd, msg, sizeof msg);
  close(fd);
  if (!strstr(msg, "requires authentication"))
    fail_msg("unexpected: %s", msg);
  stop(f);
}

static void test_kcage_session_constructor(void **state) {
  (void)state;
  fixture *f = start(NULL, NULL);
  /* acknowledged, and the operator's 64M cap clamps what was asked */
  json_t *x = json_pack("{s:[s, s]}", "session_constructor_args", "kcage.sandbox", "memory=1G");
  json_t *h = kcage_hello(f, x);
  json_decref(x);
  json_t *ack = json_object_get(h, "session_constructor");
  if (!json_is_object(ack))
    fail_msg("no acknowledgement of session_constructor_args in the hello");
  assert_string_equal(json_string_value(json_object_get(ack, "name")), "kcage.sandbox");
  assert_string_equal(json_string_value(json_array_get(json_object_get(ack, "args"), 0)),
                      "memory=1G");
  json_t *mem = json_object_get(json_object_get(ack, "clamped"), "memory_bytes");
  assert_int_equal((long long)json_number_value(json_object_get(mem, "cap")), 64ll << 20);
  json_decref(h);
  /* TVM's default constructor: nothing to apply */
  x = json_pack("{s:[s]}", "session_constructor_args", "rpc.LocalSession");
  h = kcage_hello(f, x);
  json_decref(x);
  assert_string_equal(
      json_string_value(json_object_get(json_object_get(h, "session_constructor"), "name")),
      "rpc.LocalSession");
  json_decref(h);
  /* what a kcage session cannot honour is refused, never dropped */
  const char *bad[][2] = {{"kcage.sandbox", "pids=3"}, {"rpc.PopenSession", "x"}};
  for (size_t i = 0; i < 2; i++) {
    x = json_pack("{s:[s, s]}", "session_constructor_args", bad[i][0], bad[i][1]);
    h = kcage_hello(f, x);
    json_decref(x);
    assert_string_equal(json_string_value(json_object_get(h, "op")), "error");
    json_decref(h);
  }
  stop(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tvm_client_is_told_why),
      cmocka_unit_test(test_auth_agent_refuses_tvm_clients),
      cmocka_unit_test(test_kcage_session_constructor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
