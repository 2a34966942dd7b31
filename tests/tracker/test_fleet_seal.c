/* A keyed fleet session against a man in the middle without the key: the real `kcage
 * agent` and `kcage bench --tracker`, with a relay (relay.c) that holds the device's
 * place at the tracker and passes the session through.  Whatever it changes, drops,
 * replays or reorders is noticed as such and yields no result; what it reads holds none
 * of the kernel's source; a keyless peer that leases the agent is dropped within the
 * auth timeout; a downgrade to the plain protocol is refused on both sides. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "relay.h"
#include "trk_test.h"

#define ARGS "f32[64,64] f32[64,64] f32[64,64]:out"
#define MARKER "kc-seal-marker: this line must never be seen on the wire"

typedef struct fleet {
  trk_srv t;
  pid_t agent;
  char tracker[64];
  char dir[64];
  char key[128], kernel[128], agent_log[128];
} fleet;

static void write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  fchmod(fd, mode);
  close(fd);
}

/* naive.c with a line only the client has. */
static void make_kernel(fleet *f) {
  char src[8192], text[8400];
  FILE *nf = fopen(KC_EXAMPLES "/naive.c", "r");
  assert_non_null(nf);
  size_t got = fread(src, 1, sizeof src - 1, nf);
  fclose(nf);
  src[got] = '\0';
  snprintf(text, sizeof text, "/* " MARKER " */\n%s", src);
  snprintf(f->kernel, sizeof f->kernel, "%s/secret.c", f->dir);
  write_file(f->kernel, text, 0644);
}

static int setup(void **state) {
  fleet *f = calloc(1, sizeof *f);
  trk_start(&f->t);
  snprintf(f->tracker, sizeof f->tracker, "127.0.0.1:%u", f->t.port);
  snprintf(f->dir, sizeof f->dir, "/tmp/kc-seal-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  chmod(f->dir, 0711); /* the agent's sandboxes traverse into its scratch here */
  setenv("TMPDIR", f->dir, 1);
  setenv("KCAGE_REQUEST_TIMEOUT", "20", 1);
  snprintf(f->key, sizeof f->key, "%s/fleet.key", f->dir);
  write_file(f->key, "charlie-secret-key-0123456789abcdef\n", 0600);
  snprintf(f->agent_log, sizeof f->agent_log, "%s/agent.log", f->dir);
  make_kernel(f);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fleet *f = *state;
  proc_stop(&f->agent);
  trk_stop(&f->t);
  unsetenv("TMPDIR");
  unsetenv("KCAGE_REQUEST_TIMEOUT");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

/* `kcage agent --auth-key` registered under dev_key (extra options NULL-terminated), its
 * stderr in f->agent_log. */
static void start_agent(fleet *f, const char *dev_key, const char *const *extra) {
  const char *argv[32] = {"agent",     "--tracker", f->tracker, "--key",      dev_key, "--host",
                          "127.0.0.1", "--port",    "0",        "--auth-key", f->key};
  size_t n = 11;
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  int log = open(f->agent_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int saved = dup(2);
  assert_true(log >= 0 && saved >= 0);
  dup2(log, 2);
  uint16_t port = proc_start(&f->agent, argv);
  dup2(saved, 2);
  close(saved);
  close(log);
  assert_true(port > 0);
  assert_int_equal(wait_count(f->t.port, dev_key, "free", 1, 10), 1);
}

static bool agent_log_has(fleet *f, const char *what) {
  char buf[65536];
  FILE *lf = fopen(f->agent_log, "r");
  size_t n = lf ? fread(buf, 1, sizeof buf - 1, lf) : 0;
  if (lf)
    fclose(lf);
  buf[n] = '\0';
  return strstr(buf, what) != NULL;
}

/* `kcage bench --tracker ... --key cpu --auth-key K` of the marked kernel: the record's
 * status (malloc'd, NULL when there was none), exit status in *rc, stderr in err. */
static char *bench(fleet *f, int *rc, char *err, size_t errlen) {
  char out[128];
  snprintf(out, sizeof out, "%s/out.json", f->dir);
  unlink(out);
  const char *argv[] = {"bench",      "--tracker", f->tracker, "--key",   "cpu",
                        "--auth-key", f->key,      "--args",   ARGS,      "--json",
                        out,          "--repeat",  "2",        f->kernel, NULL};
  *rc = proc_run_err(argv, 120, err, errlen);
  json_t *rec = json_load_file(out, JSON_DISABLE_EOF_CHECK, NULL);
  const char *st = json_string_value(json_object_get(rec, "status"));
  char *status = st ? strdup(st) : NULL;
  json_decref(rec);
  return status;
}

static bool seen(const relay *r, const char *what) {
  return memmem(r->seen, r->seen_len, what, strlen(what)) != NULL;
}

/* The relay passes the session untouched: the batch is measured, and nothing of the
 * kernel's source crossed the relay in the clear. */
static void test_relay_reads_no_upload(void **state) {
  fleet *f = *state;
  start_agent(f, "hidden", NULL);
  relay r;
  relay_start(&r, f->t.port, "cpu", "hidden", RELAY_PASS);
  int rc;
  char err[8192];
  char *status = bench(f, &rc, err, sizeof err);
  if (rc != 0 || !status || strcmp(status, "ok"))
    fail_msg("through the relay: exit %d, status %s: %s", rc, status ? status : "-", err);
  free(status);
  /* The client may be gone before the relay has seen both sides close. */
  for (double t0 = now_s(); r.sessions < 1 && now_s() - t0 < 10;)
    usleep(10000);
  assert_true(r.sessions >= 1);
  struct stat st;
  assert_int_equal(stat(f->kernel, &st), 0);
  assert_true(r.seen_len > (size_t)st.st_size); /* the upload did cross it */
  bool marker = seen(&r, MARKER), code = seen(&r, "int kernel(DLTensor");
  relay_stop(&r);
  assert_false(marker);
  assert_false(code);
}

/* A batch through a relay in `mode` yields no record and fails; the tampering is named
 * by the side that met it (the client's stderr, or else the agent's log). */
static void tampered(fleet *f, relay_mode mode, bool client_sees) {
  start_agent(f, "hidden", NULL);
  relay r;
  relay_start(&r, f->t.port, "cpu", "hidden", mode);
  int rc;
  char err[8192];
  char *status = bench(f, &rc, err, sizeof err);
  relay_stop(&r);
  if (rc == 0 || status)
    fail_msg("mode %d: exit %d, status %s: %s", (int)mode, rc, status ? status : "-", err);
  assert_true(rc > 0 && rc < 126);
  if (client_sees && !strstr(err, "failed authentication"))
    fail_msg("mode %d: the client did not name the tampering: %s", (int)mode, err);
  if (!client_sees && !agent_log_has(f, "failed authentication"))
    fail_msg("mode %d: the agent did not name the tampering; client: %s", (int)mode, err);
  proc_stop(&f->agent);
  assert_int_equal(wait_count(f->t.port, "hidden", "free", 0, 5), 0);
}

/* The agent's records made 100x faster on the way: refused, nothing printed as ok. */
static void test_changed_records_refused(void **state) {
  tampered(*state, RELAY_FORGE_RECORD, true);
}

/* A client frame dropped on the way: the agent notices the gap at the next record. */
static void test_dropped_frame_refused(void **state) {
  tampered(*state, RELAY_DROP, false);
}

/* An earlier "ok" of the agent's replayed in place of a later one, and two client
 * frames swapped: both noticed. */
static void test_replayed_or_reordered_frame_refused(void **state) {
  tampered(*state, RELAY_REPLAY, true);
  tampered(*state, RELAY_REORDER, false);
}

/* A hello with its "record" announcement stripped on the way (the agent offers the
 * plain protocol): the keyed client refuses it before any upload. */
static void test_downgrade_refused_by_client(void **state) {
  fleet *f = *state;
  start_agent(f, "hidden", NULL);
  relay r;
  relay_start(&r, f->t.port, "cpu", "hidden", RELAY_STRIP);
  int rc;
  char err[8192];
  char *status = bench(f, &rc, err, sizeof err);
  bool marker = seen(&r, MARKER);
  relay_stop(&r);
  if (rc == 0 || status || !strstr(err, "does not seal the session"))
    fail_msg("exit %d, status %s: %s", rc, status ? status : "-", err);
  assert_false(marker);
}

/* A plaintext upload slipped to the agent after the client's proof: the agent answers
 * it with nothing (it reads only sealed records) and ends the session. */
static void test_downgrade_refused_by_agent(void **state) {
  fleet *f = *state;
  start_agent(f, "hidden", NULL);
  relay r;
  relay_start(&r, f->t.port, "cpu", "hidden", RELAY_INJECT);
  int rc;
  char err[8192];
  char *status = bench(f, &rc, err, sizeof err);
  int answered = r.injected_reply;
  relay_stop(&r);
  if (answered != 2)
    fail_msg("the agent answered a plaintext upload (%d); client: exit %d: %s", answered, rc, err);
  assert_null(status);
  assert_true(agent_log_has(f, "failed authentication"));
}

/* A keyless peer leases the keyed agent and never proves the key (after a hello, or
 * saying nothing at all): it is dropped within --auth-timeout, not --max-session, and the
 * next tenant gets the device. */
static void test_keyless_client_dropped_within_auth_timeout(void **state) {
  fleet *f = *state;
  const char *extra[] = {"--auth-timeout", "2", "--max-session", "600", NULL};
  start_agent(f, "cpu", extra);
  for (int say_hello = 0; say_hello < 2; say_hello++) {
    kc_request_opts o;
    kc_request_opts_init(&o);
    o.wait_s = 10;
    kc_lease lease;
    int fd;
    kc_error e = {0};
    assert_int_equal(kc_tracker_request("127.0.0.1", f->t.port, "cpu", &o, &lease, &fd, &e), 0);
    double t0 = now_s();
    if (say_hello) {
      char nonce[KC_AUTH_HEX + 1];
      assert_int_equal(kc_auth_nonce(nonce, &e), 0);
      json_t *m = json_pack("{s:s, s:i, s:{s:s}}", "op", "hello", "version", 1, "auth", "nonce",
                            nonce),
             *r = NULL;
      assert_int_equal(kc_session_send(fd, m, now_s() + 5, &e), 0);
      json_decref(m);
      assert_int_equal(kc_session_recv(fd, now_s() + 5, &r, &e), 0);
      assert_string_equal(json_string_value(json_object_get(r, "op")), "hello");
      json_decref(r);
    }
    /* Whatever the agent says at the end is sealed or an error: read until it closes. */
    assert_true(raw_closed(fd, 15));
    double held = now_s() - t0;
    close(fd);
    if (held > 8) /* 2 s, with room for a loaded machine */
      fail_msg("a keyless peer held the device for %.1f s", held);
    assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
  }
  assert_true(agent_log_has(f, "did not prove the key within 2 s"));
  int rc;
  char err[8192];
  char *status = bench(f, &rc, err, sizeof err);
  if (rc != 0 || !status || strcmp(status, "ok"))
    fail_msg("the next tenant: exit %d, status %s: %s", rc, status ? status : "-", err);
  free(status);
}

/* The session timeout in the middle of a keyed batch: the agent's last word, sent from
 * its alarm, is a sealed record the client opens and shows. */
static void test_session_timeout_is_sealed(void **state) {
  fleet *f = *state;
  start_agent(f, "cpu", NULL);
  char out[128], err[8192];
  snprintf(out, sizeof out, "%s/out.json", f->dir);
  const char *argv[] = {"bench",    "--tracker",
                        f->tracker, "--key",
                        "cpu",      "--auth-key",
                        f->key,     "--session-timeout",
                        "2",        "--args",
                        ARGS,       "--timeout",
                        "30",       KC_EXAMPLES "/infinite_loop.c",
                        NULL};
  double t0 = now_s();
  int rc = proc_run_err(argv, 60, err, sizeof err);
  double took = now_s() - t0;
  if (rc <= 0 || rc >= 126 || !strstr(err, "session has expired"))
    fail_msg("exit %d after %.1f s: %s", rc, took, err);
  assert_true(took >= 1.8 && took < 30);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

/* An upload of several records' worth (3 MiB and a bit: the last record short) arrives
 * whole, and the session goes on. */
static void test_upload_spans_records(void **state) {
  fleet *f = *state;
  start_agent(f, "cpu", NULL);
  kc_auth_key key;
  kc_error e = {0};
  assert_int_equal(kc_auth_key_load(f->key, &key, &e), 0);
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.wait_s = 10;
  kc_lease lease;
  int fd;
  assert_int_equal(kc_tracker_request("127.0.0.1", f->t.port, "cpu", &o, &lease, &fd, &e), 0);
  kc_session *s;
  if (kc_session_open(fd, 10, &key, &s, NULL, &e) < 0)
    fail_msg("open: %s", e.msg);
  size_t n = (3u << 20) + 12345;
  char *big = malloc(n);
  assert_non_null(big);
  for (size_t i = 0; i < n; i++)
    big[i] = (char)(i * 2654435761u >> 13);
  if (kc_session_upload(s, "big.bin", big, n, &e) < 0 ||
      kc_session_upload(s, "small.bin", "x", 1, &e) < 0)
    fail_msg("upload: %s", e.msg);
  free(big);
  kc_session_close(s);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_relay_reads_no_upload, setup, teardown),
      cmocka_unit_test_setup_teardown(test_changed_records_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dropped_frame_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replayed_or_reordered_frame_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_downgrade_refused_by_client, setup, teardown),
      cmocka_unit_test_setup_teardown(test_downgrade_refused_by_agent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_keyless_client_dropped_within_auth_timeout, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_session_timeout_is_sealed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_upload_spans_records, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
