/* `kcage bench --tracker` against hostile and capped agents: the run config codec, the
 * client's decoder of an agent's records, a rogue agent over a real socket. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcage/measure.h"
#include "proc.h"
#include "rogue.h"
#include "trk_test.h"

static void test_run_config_roundtrip(void **state) {
  (void)state;
  kc_measure_config a, b;
  kc_measure_config_init(&a);
  a.args = "f32[4] f32[4]:out";
  a.seed = UINT64_MAX - 7;
  a.seed_set = true;
  a.rtol = 0.25;
  a.atol = 0.5;
  a.entry = "go";
  a.abi = KC_ABI_TVM_FFI;
  a.number = 3;
  a.repeat = 9;
  a.min_repeat_ms = 12.5;
  a.cooldown_ms = 7;
  a.flush_cache = true;
  a.timeout_s = 4.5;
  a.memory_bytes = 300u << 20;
  a.sets = 5;
  a.checks = 3;
  a.budget_s = 42.5;
  a.max_cv = 0.25;
  a.build.cc = "/usr/bin/gcc";
  a.build.cflags = "-O1 -fPIC -shared -DX=1";
  a.build.timeout_s = 33;
  a.build.memory_bytes = 200u << 20;
  a.build.no_cache = true;
  a.build.cache_dir = "/never/sent";
  a.workers = 17;
  json_t *c = kc_run_config_encode(&a);
  char *text = json_dumps(c, 0); /* through the wire's text form */
  json_decref(c);
  c = json_loads(text, 0, NULL);
  free(text);
  kc_error err = {0};
  assert_int_equal(kc_run_config_decode(c, &b, &err), 0);
  assert_string_equal(b.args, a.args);
  assert_true(b.seed == a.seed && b.seed_set);
  assert_true(b.budget_s == a.budget_s && b.max_cv == a.max_cv);
  assert_true(b.rtol == a.rtol && b.atol == a.atol);
  assert_string_equal(b.entry, a.entry);
  assert_int_equal(b.abi, KC_ABI_TVM_FFI);
  assert_int_equal(b.number, a.number);
  assert_int_equal(b.repeat, a.repeat);
  assert_true(b.min_repeat_ms == a.min_repeat_ms && b.cooldown_ms == a.cooldown_ms);
  assert_true(b.flush_cache);
  assert_true(b.timeout_s == a.timeout_s);
  assert_true(b.memory_bytes == a.memory_bytes);
  assert_int_equal(b.sets, a.sets);
  assert_int_equal(b.checks, a.checks);
  assert_string_equal(b.build.cc, a.build.cc);
  assert_string_equal(b.build.cflags, a.build.cflags);
  assert_true(b.build.timeout_s == a.build.timeout_s);
  assert_true(b.build.memory_bytes == a.build.memory_bytes);
  assert_true(b.build.no_cache);
  /* What only the agent decides never comes from the client. */
  assert_null(b.build.cache_dir);
  assert_int_equal(b.workers, 0);
  assert_null(b.tracker);
  json_decref(c);
  /* No --seed: none is sent, and the agent draws a secret one. */
  a.seed_set = false;
  c = kc_run_config_encode(&a);
  assert_null(json_object_get(c, "seed"));
  assert_int_equal(kc_run_config_decode(c, &b, &err), 0);
  assert_false(b.seed_set);
  /* A tenant never chooses its isolation. */
  json_object_set_new(c, "isolation", json_string("none"));
  assert_int_equal(kc_run_config_decode(c, &b, &err), -1);
  assert_non_null(strstr(err.msg, "sandbox"));
  json_decref(c);
  /* Defaults survive the trip too. */
  kc_measure_config_init(&a);
  a.args = "f32[]";
  c = kc_run_config_encode(&a);
  assert_int_equal(kc_run_config_decode(c, &b, &err), 0);
  assert_null(b.build.cc);
  assert_null(b.entry);
  assert_int_equal(b.abi, KC_ABI_DLPACK);
  assert_false(b.build.no_cache);
  /* An older client sends no ABI: its kernels are DLPack ones. */
  json_object_del(c, "abi");
  assert_int_equal(kc_run_config_decode(c, &b, &err), 0);
  assert_int_equal(b.abi, KC_ABI_DLPACK);
  assert_true(b.rtol == a.rtol && b.min_repeat_ms == a.min_repeat_ms);
  json_decref(c);
}

static void test_run_config_hostile(void **state) {
  (void)state;
  const char *bad[] = {
      "[]",
      "{}",
      "{\"args\": 1}",
      "{\"args\": \"f32[]\", \"number\": 1e30}",
      "{\"args\": \"f32[]\", \"memory_bytes\": -1}",
      "{\"args\": \"f32[]\", \"timeout_s\": \"10\"}",
      "{\"args\": \"f32[]\", \"cc\": 5}",
      "{\"args\": \"f32[]\", \"cc\": \"\"}",
      "{\"args\": \"f32[]\", \"cflags\": \"a\\u0000b\"}",
      "{\"args\": \"f32[]\", \"no_cache\": 1}",
      "{\"args\": \"f32[]\", \"seed\": 1.5}",
      "{\"args\": \"f32[]\", \"build_memory_bytes\": 1e300}",
      "{\"args\": \"f32[]\", \"abi\": \"tvm\"}",
      "{\"args\": \"f32[]\", \"abi\": 1}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    json_t *c = json_loads(bad[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    assert_non_null(c);
    kc_measure_config cfg;
    kc_error err = {0};
    if (kc_run_config_decode(c, &cfg, &err) == 0)
      fail_msg("accepted %s", bad[i]);
    json_decref(c);
  }
}

static void test_run_config_clamp(void **state) {
  (void)state;
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.memory_bytes = 1000000000000000ull; /* 1e15 */
  cfg.timeout_s = 0;                      /* the default, 10 s */
  cfg.build.timeout_s = 5;
  kc_run_caps caps = {.max_memory_bytes = 256u << 20, .max_timeout_s = 3};
  json_t *cl = kc_run_config_clamp(&cfg, &caps);
  assert_true(cfg.memory_bytes == 256u << 20);
  assert_true(cfg.build.memory_bytes == 256u << 20); /* its default (1 GiB) is over the cap */
  assert_true(cfg.timeout_s == 3 && cfg.build.timeout_s == 3);
  assert_true(json_number_value(json_object_get(json_object_get(cl, "memory_bytes"), "asked")) ==
              1e15);
  assert_true(json_number_value(json_object_get(json_object_get(cl, "timeout_s"), "asked")) == 10);
  assert_true(json_number_value(json_object_get(json_object_get(cl, "timeout_s"), "cap")) == 3);
  json_decref(cl);
  /* Under the caps nothing changes and nothing is said. */
  kc_measure_config_init(&cfg);
  cfg.memory_bytes = 64u << 20;
  cfg.build.memory_bytes = 64u << 20;
  cfg.timeout_s = 1;
  cfg.build.timeout_s = 2;
  cl = kc_run_config_clamp(&cfg, &caps);
  assert_int_equal(json_object_size(cl), 0);
  assert_true(cfg.memory_bytes == 64u << 20 && cfg.timeout_s == 1);
  json_decref(cl);
}

#define GOOD_REC                                                                                   \
  "{\"kernel\": \"k0-x.c\", \"status\": \"ok\", \"message\": null, \"run_secs\": [1e-9, 2e-9], "   \
  "\"median_s\": 1e-9, \"min_s\": 1e-9, \"cv\": 0.1, \"number\": 10, \"repeat\": 2, "              \
  "\"max_abs_err\": 0, \"build_s\": 0.5, \"device\": \"rogue@x\", \"clamped\": {\"timeout_s\": "   \
  "{\"asked\": 10, \"cap\": 3}}}"

static const char *hostile_replies[] = {
    "{\"op\": \"records\", \"records\": [1]}",
    "{\"op\": \"records\", \"records\": [null]}",
    "{\"op\": \"records\", \"records\": []}",
    "{\"op\": \"records\", \"records\": [" GOOD_REC ", " GOOD_REC "]}",
    "{\"op\": \"records\"}",
    "{\"op\": \"records\", \"records\": {\"0\": 1}}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"great\", \"device\": \"d\"}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": 1, \"device\": \"d\"}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\"}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": 7}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": \"d\", \"median_s\": "
    "\"fast\"}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": \"d\", \"median_s\": "
    "-1}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": \"d\", \"run_secs\": [1, "
    "\"x\"]}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": \"d\", \"number\": -3}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": \"d\", \"message\": "
    "[1]}]}",
    "{\"op\": \"records\", \"records\": [{\"status\": \"ok\", \"device\": \"d\", \"x\": "
    "[[[[[[1]]]]]]}]}",
};

static void test_records_decoder(void **state) {
  (void)state;
  const char *kernels[] = {"/home/me/mine.c"};
  for (size_t i = 0; i < sizeof hostile_replies / sizeof *hostile_replies; i++) {
    json_t *r = json_loads(hostile_replies[i], 0, NULL), *recs = NULL;
    assert_non_null(r);
    kc_error err = {0};
    if (kc_remote_records_decode(r, kernels, 1, "10.0.0.9:9090", &recs, &err) == 0)
      fail_msg("accepted %s", hostile_replies[i]);
    assert_non_null(strstr(err.msg, "10.0.0.9:9090"));
    json_decref(r);
  }
  json_t *r = json_loads("{\"op\": \"records\", \"records\": [" GOOD_REC "]}", 0, NULL), *recs;
  kc_error err = {0};
  assert_int_equal(kc_remote_records_decode(r, kernels, 1, "p", &recs, &err), 0);
  json_t *rec = json_array_get(recs, 0);
  /* The client's own name for the kernel, never the agent's. */
  assert_string_equal(json_string_value(json_object_get(rec, "kernel")), kernels[0]);
  assert_string_equal(json_string_value(json_object_get(rec, "status")), "ok");
  assert_non_null(json_object_get(json_object_get(rec, "clamped"), "timeout_s"));
  json_decref(recs);
  json_decref(r);
}

static void read_args(char *args, size_t len) {
  FILE *af = fopen(KC_EXAMPLES "/ARGS", "r");
  assert_non_null(af);
  assert_non_null(fgets(args, (int)len, af));
  fclose(af);
  args[strcspn(args, "\n")] = '\0';
}

/* A rogue agent's replies make `kcage bench --tracker` fail that batch with an error
 * naming the agent: never a crash. */
static void test_rogue_agent_replies(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  char tracker[64], args[256], peer[64], errbuf[8192];
  snprintf(tracker, sizeof tracker, "127.0.0.1:%u", t.port);
  read_args(args, sizeof args);
  setenv("KCAGE_REQUEST_TIMEOUT", "5", 1);
  for (size_t i = 0; i < sizeof hostile_replies / sizeof *hostile_replies; i++) {
    rogue_agent r = {0};
    rogue_start(&r, t.port, hostile_replies[i]);
    assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
    snprintf(peer, sizeof peer, "device agent 127.0.0.1:%u", r.port);
    const char *argv[] = {"bench", "--tracker", tracker, "--key",
                          "rogue", "--args",    args,    KC_EXAMPLES "/naive.c",
                          NULL};
    int rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
    if (rc <= 0 || rc >= 126 || !strstr(errbuf, peer))
      fail_msg("reply %s: exit %d, stderr: %s", hostile_replies[i], rc, errbuf);
    rogue_stop(&r);
    assert_int_equal(wait_count(t.port, "rogue", "free", 0, 5), 0);
  }
  /* A reply in shape is taken: the decoder refuses shapes, not agents. */
  rogue_agent r = {0};
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  const char *argv[] = {"bench", "--tracker", tracker, "--key",
                        "rogue", "--args",    args,    KC_EXAMPLES "/naive.c",
                        NULL};
  int rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
  if (rc != 0)
    fail_msg("exit %d: %s", rc, errbuf);
  rogue_stop(&r);
  unsetenv("KCAGE_REQUEST_TIMEOUT");
  trk_stop(&t);
}

/* Every build option of `kcage bench` reaches the device: the run message carries it. */
static void test_build_options_on_the_wire(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  char tracker[64], args[256], errbuf[8192];
  snprintf(tracker, sizeof tracker, "127.0.0.1:%u", t.port);
  read_args(args, sizeof args);
  rogue_agent r = {0};
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  const char *argv[] = {"bench",
                        "--tracker",
                        tracker,
                        "--key",
                        "rogue",
                        "--args",
                        args,
                        "--cc",
                        "clang",
                        "--cflags",
                        "-O1 -fPIC -shared",
                        "--build-timeout",
                        "17",
                        "--build-memory",
                        "300M",
                        "--no-cache",
                        KC_EXAMPLES "/naive.c",
                        NULL};
  int rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
  if (rc != 0)
    fail_msg("exit %d: %s", rc, errbuf);
  json_t *c = json_object_get(r.last_run, "config");
  assert_string_equal(json_string_value(json_object_get(c, "cc")), "clang");
  assert_string_equal(json_string_value(json_object_get(c, "cflags")), "-O1 -fPIC -shared");
  assert_true(json_number_value(json_object_get(c, "build_timeout_s")) == 17);
  assert_true(json_integer_value(json_object_get(c, "build_memory_bytes")) == 300 << 20);
  assert_true(json_is_true(json_object_get(c, "no_cache")));
  assert_null(json_object_get(c, "cache_dir"));
  rogue_stop(&r);
  trk_stop(&t);
}

/* With --auth-key, an agent that cannot prove the key never sees a kernel: the client
 * refuses it before any upload, and names it. */
static void test_auth_no_kernel_to_unproven_agent(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  char tracker[64], args[256], errbuf[8192], key[] = "/tmp/kc-trk-key-XXXXXX";
  int kfd = mkstemp(key);
  assert_int_equal(write(kfd, "0123456789abcdef0123", 20), 20);
  close(kfd);
  snprintf(tracker, sizeof tracker, "127.0.0.1:%u", t.port);
  read_args(args, sizeof args);
  setenv("KCAGE_REQUEST_TIMEOUT", "5", 1);
  rogue_agent r = {0};
  /* It even claims a proof: a MAC it cannot compute. */
  r.hello = "{\"op\": \"hello\", \"version\": 1, \"auth\": {\"nonce\": "
            "\"00000000000000000000000000000000000000000000000000000000000000aa\", \"mac\": "
            "\"00000000000000000000000000000000000000000000000000000000000000bb\"}}";
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  const char *argv[] = {"bench",      "--tracker", tracker,  "--key", "rogue",
                        "--auth-key", key,         "--args", args,    KC_EXAMPLES "/naive.c",
                        NULL};
  int rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
  if (rc <= 0 || rc >= 126 || !strstr(errbuf, "did not prove the auth key"))
    fail_msg("exit %d: %s", rc, errbuf);
  assert_null(r.last_run);
  rogue_stop(&r);
  unlink(key);
  unsetenv("KCAGE_REQUEST_TIMEOUT");
  trk_stop(&t);
}

/* A lease whose address holds control characters (any peer can PUT one) is refused
 * before it reaches a connect call or an error message. */
static void test_lease_with_control_characters(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  int srv = raw_connect(t.port, true);
  raw_call_expect(srv, "[3, \"esc\", [9000, \"esc:0.1\"], \"h\\u001b[2J\"]", "0");
  kc_tracker_conn *c;
  kc_error err = {0};
  kc_lease lease;
  assert_int_equal(kc_tracker_connect("127.0.0.1", t.port, 5, &c, &err), 0);
  assert_int_equal(kc_tracker_request_lease(c, "esc", 1, 5, &lease, &err), -1);
  assert_non_null(strstr(err.msg, "Invalid return value"));
  assert_null(strchr(err.msg, 0x1b));
  kc_tracker_close(c);
  close(srv);
  trk_stop(&t);
}

/* --session-constructor: TVM's session_constructor_args reach the agent in the hello;
 * an agent that does not acknowledge them (an older one ignores the field) never sees
 * a kernel; one that does runs the batch. */
static void test_session_constructor_args(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  char tracker[64], args[256], errbuf[8192];
  snprintf(tracker, sizeof tracker, "127.0.0.1:%u", t.port);
  read_args(args, sizeof args);
  setenv("KCAGE_REQUEST_TIMEOUT", "5", 1);
  const char *argv[] = {"bench",
                        "--tracker",
                        tracker,
                        "--key",
                        "rogue",
                        "--session-constructor",
                        "kcage.sandbox,memory=256M,pids=8",
                        "--args",
                        args,
                        KC_EXAMPLES "/naive.c",
                        NULL};
  rogue_agent r = {0};
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  int rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
  if (rc <= 0 || rc >= 126 || !strstr(errbuf, "did not acknowledge session_constructor_args"))
    fail_msg("exit %d: %s", rc, errbuf);
  assert_null(r.last_run);
  json_t *sent = json_object_get(r.last_hello, "session_constructor_args");
  json_t *want = json_pack("[s, s, s]", "kcage.sandbox", "memory=256M", "pids=8");
  assert_true(json_equal(sent, want));
  rogue_stop(&r);
  assert_int_equal(wait_count(t.port, "rogue", "free", 0, 5), 0);
  /* An agent that acknowledges another constructor is refused too. */
  r = (rogue_agent){0};
  r.hello = "{\"op\": \"hello\", \"version\": 1, \"session_constructor\": {\"name\": "
            "\"rpc.LocalSession\", \"args\": []}}";
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
  if (rc <= 0 || rc >= 126 || !strstr(errbuf, "another session constructor"))
    fail_msg("exit %d: %s", rc, errbuf);
  assert_null(r.last_run);
  rogue_stop(&r);
  assert_int_equal(wait_count(t.port, "rogue", "free", 0, 5), 0);
  /* The acknowledged constructor: the batch runs. */
  r = (rogue_agent){0};
  r.hello = "{\"op\": \"hello\", \"version\": 1, \"session_constructor\": {\"name\": "
            "\"kcage.sandbox\", \"args\": [\"memory=256M\", \"pids=8\"], \"clamped\": {}}}";
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  rc = proc_run_err(argv, 60, errbuf, sizeof errbuf);
  if (rc != 0)
    fail_msg("exit %d: %s", rc, errbuf);
  assert_non_null(r.last_run);
  rogue_stop(&r);
  /* Without the option, no field: an older agent sees the hello it always saw. */
  r = (rogue_agent){0};
  rogue_start(&r, t.port, "{\"op\": \"records\", \"records\": [" GOOD_REC "]}");
  assert_int_equal(wait_count(t.port, "rogue", "free", 1, 5), 1);
  const char *plain[] = {"bench", "--tracker", tracker, "--key",
                         "rogue", "--args",    args,    KC_EXAMPLES "/naive.c",
                         NULL};
  rc = proc_run_err(plain, 60, errbuf, sizeof errbuf);
  if (rc != 0)
    fail_msg("exit %d: %s", rc, errbuf);
  assert_null(json_object_get(r.last_hello, "session_constructor_args"));
  rogue_stop(&r);
  json_decref(want);
  unsetenv("KCAGE_REQUEST_TIMEOUT");
  trk_stop(&t);
}

/* Malformed session_constructor_args are refused before the tracker is asked (no
 * lease is taken from another tenant), and as bad usage by the command line. */
static void test_session_constructor_refused(void **state) {
  (void)state;
  trk_srv t;
  trk_start(&t);
  int srv = raw_connect(t.port, true);
  raw_register(srv, "ctor", 9, "ctor:0.1");
  assert_int_equal(wait_count(t.port, "ctor", "free", 1, 5), 1);
  static const char *const bad[][2] = {{"", NULL}, {"a b", NULL}, {"kcage.sandbox", "x\ny"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    kc_request_opts o;
    kc_request_opts_init(&o);
    o.wait_s = 2;
    o.session_constructor_args = bad[i];
    o.n_session_constructor_args = bad[i][1] ? 2 : 1;
    kc_lease lease;
    int fd = -1;
    kc_error err = {0};
    assert_int_equal(kc_tracker_request("127.0.0.1", t.port, "ctor", &o, &lease, &fd, &err), -1);
    assert_non_null(strstr(err.msg, "session_constructor_args"));
  }
  assert_int_equal(summary_count(t.port, "ctor", "free"), 1);
  char tracker[64], args[256], errbuf[4096];
  snprintf(tracker, sizeof tracker, "127.0.0.1:%u", t.port);
  read_args(args, sizeof args);
  const char *no_tracker[] = {
      "bench", "--session-constructor", "kcage.sandbox", "--args", args, KC_EXAMPLES "/naive.c",
      NULL};
  assert_int_equal(proc_run_err(no_tracker, 30, errbuf, sizeof errbuf), 2);
  assert_non_null(strstr(errbuf, "--session-constructor"));
  const char *empty[] = {"bench",      "--tracker",
                         tracker,      "--key",
                         "ctor",       "--session-constructor",
                         ",memory=1G", "--args",
                         args,         KC_EXAMPLES "/naive.c",
                         NULL};
  assert_int_equal(proc_run_err(empty, 30, errbuf, sizeof errbuf), 2);
  assert_non_null(strstr(errbuf, "names the constructor"));
  assert_int_equal(summary_count(t.port, "ctor", "free"), 1);
  close(srv);
  trk_stop(&t);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_config_roundtrip),
      cmocka_unit_test(test_run_config_hostile),
      cmocka_unit_test(test_run_config_clamp),
      cmocka_unit_test(test_records_decoder),
      cmocka_unit_test(test_rogue_agent_replies),
      cmocka_unit_test(test_build_options_on_the_wire),
      cmocka_unit_test(test_auth_no_kernel_to_unproven_agent),
      cmocka_unit_test(test_lease_with_control_characters),
      cmocka_unit_test(test_session_constructor_args),
      cmocka_unit_test(test_session_constructor_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
