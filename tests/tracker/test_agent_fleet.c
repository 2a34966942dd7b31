/* The real `kcage agent` and `kcage bench --tracker` as a fleet: build options reach the
 * device, operator caps, idle connections, mutual authentication. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "trk_test.h"

typedef struct fleet {
  trk_srv t;
  pid_t agent;
  char tracker[64];
  char dir[64]; /* scratch: key files, kernels, JSON output */
  char args[256];
} fleet;

static int setup(void **state) {
  fleet *f = calloc(1, sizeof *f);
  trk_start(&f->t);
  snprintf(f->tracker, sizeof f->tracker, "127.0.0.1:%u", f->t.port);
  snprintf(f->dir, sizeof f->dir, "/tmp/kc-fleet-XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  /* The agents' scratch goes here (sandboxes must traverse it), and they sweep only
   * here: other agents' leftovers in /tmp are not ours to judge. */
  chmod(f->dir, 0711);
  setenv("TMPDIR", f->dir, 1);
  FILE *af = fopen(KC_EXAMPLES "/ARGS", "r");
  assert_non_null(af);
  assert_non_null(fgets(f->args, sizeof f->args, af));
  fclose(af);
  f->args[strcspn(f->args, "\n")] = '\0';
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fleet *f = *state;
  proc_stop(&f->agent);
  trk_stop(&f->t);
  unsetenv("TMPDIR");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  assert_int_equal(system(cmd), 0);
  free(f);
  return 0;
}

/* Start `kcage agent --key cpu` with extra options (NULL-terminated). */
static void start_agent(fleet *f, const char *const *extra) {
  const char *argv[32] = {"agent",  "--tracker", f->tracker, "--key", "cpu",
                          "--host", "127.0.0.1", "--port",   "0"};
  size_t n = 9;
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n] = NULL;
  assert_true(proc_start(&f->agent, argv) > 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 10), 1);
}

static void write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  fchmod(fd, mode);
  close(fd);
}

/* Run `kcage bench --tracker` on one kernel with extra options; the one record (NULL
 * when the batch failed), the exit status in *rc and stderr in err. */
static json_t *bench(fleet *f, const char *kernel, const char *const *extra, int *rc, char *err,
                     size_t errlen) {
  char out[128];
  snprintf(out, sizeof out, "%s/out.json", f->dir);
  unlink(out);
  const char *argv[40] = {"bench", "--tracker", f->tracker, "--key",    "cpu", "--args",
                          f->args, "--json",    out,        "--repeat", "2"};
  size_t n = 11;
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n++] = kernel;
  argv[n] = NULL;
  *rc = proc_run_err(argv, 120, err, errlen);
  json_t *rec = json_load_file(out, JSON_DISABLE_EOF_CHECK, NULL);
  return rec;
}

/* --cflags, --no-cache (and the rest of the build options) take effect on the device. */
static void test_build_options_take_effect(void **state) {
  fleet *f = *state;
  start_agent(f, NULL);
  char kernel[128], src[8192], nonce[32], err[8192];
  snprintf(kernel, sizeof kernel, "%s/flagged.c", f->dir);
  FILE *nf = fopen(KC_EXAMPLES "/naive.c", "r");
  size_t got = fread(src, 1, 4096, nf);
  fclose(nf);
  src[got] = '\0';
  snprintf(nonce, sizeof nonce, "%ld", (long)getpid()); /* a source no cache has seen */
  char text[8400];
  snprintf(
      text, sizeof text,
      "/* %s */\n#ifdef KC_REMOTE_FLAG\n#error the remote build saw KC_REMOTE_FLAG\n#endif\n%s",
      nonce, src);
  write_file(kernel, text, 0644);
  int rc;
  const char *flagged[] = {"--cflags", "-O2 -fPIC -shared -DKC_REMOTE_FLAG", NULL};
  json_t *r = bench(f, kernel, flagged, &rc, err, sizeof err);
  if (rc != 0 || !r)
    fail_msg("exit %d: %s", rc, err);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "build_error");
  assert_non_null(strstr(json_string_value(json_object_get(r, "message")), "KC_REMOTE_FLAG"));
  json_decref(r);
  /* Without the flag it builds (first time: compiled), then comes from the cache... */
  r = bench(f, kernel, NULL, &rc, err, sizeof err);
  assert_int_equal(rc, 0);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
  json_decref(r);
  r = bench(f, kernel, NULL, &rc, err, sizeof err);
  assert_int_equal(rc, 0);
  assert_true(json_number_value(json_object_get(r, "build_s")) == 0);
  json_decref(r);
  /* ... unless --no-cache says compile. */
  const char *nocache[] = {"--no-cache", NULL};
  r = bench(f, kernel, nocache, &rc, err, sizeof err);
  assert_int_equal(rc, 0);
  assert_true(json_number_value(json_object_get(r, "build_s")) > 0);
  json_decref(r);
  /* --cc names the compiler on the device. */
  const char *cc[] = {"--cc", "/nonexistent/kc-cc", "--no-cache", NULL};
  r = bench(f, kernel, cc, &rc, err, sizeof err);
  assert_int_equal(rc, 0);
  assert_string_not_equal(json_string_value(json_object_get(r, "status")), "ok");
  json_decref(r);
}

/* Operator caps: requests above them are lowered, and the record says so; a session
 * that asks for no timeout gets --max-session. */
static void test_caps_clamp_and_say_so(void **state) {
  fleet *f = *state;
  const char *caps[] = {"--max-memory", "128M", "--max-timeout", "3", "--max-session", "40", NULL};
  start_agent(f, caps);
  const char *ask[] = {"--memory", "1G", "--timeout", "30", NULL};
  int rc;
  char err[8192];
  json_t *r = bench(f, KC_EXAMPLES "/naive.c", ask, &rc, err, sizeof err);
  if (rc != 0 || !r)
    fail_msg("exit %d: %s", rc, err);
  json_t *cl = json_object_get(r, "clamped");
  assert_true(json_number_value(json_object_get(json_object_get(cl, "memory_bytes"), "asked")) ==
              1073741824.0);
  assert_true(json_number_value(json_object_get(json_object_get(cl, "memory_bytes"), "cap")) ==
              134217728.0);
  assert_true(json_number_value(json_object_get(json_object_get(cl, "timeout_s"), "cap")) == 3);
  assert_true(
      json_number_value(json_object_get(json_object_get(cl, "session_timeout_s"), "asked")) == 0);
  assert_true(json_number_value(json_object_get(json_object_get(cl, "session_timeout_s"), "cap")) ==
              40);
  json_decref(r);
  /* Within the caps (the build's defaults, 1G and 60 s, are not): nothing to say. */
  const char *fine[] = {"--memory",
                        "64M",
                        "--timeout",
                        "2",
                        "--session-timeout",
                        "30",
                        "--build-memory",
                        "100M",
                        "--build-timeout",
                        "3",
                        NULL};
  r = bench(f, KC_EXAMPLES "/naive.c", fine, &rc, err, sizeof err);
  assert_int_equal(rc, 0);
  assert_null(json_object_get(r, "clamped"));
  json_decref(r);
}

/* A client that asks for no session timeout and then says nothing: --max-session ends
 * it, and the device comes back. */
static void test_max_session_ends_silent_client(void **state) {
  fleet *f = *state;
  const char *caps[] = {"--max-session", "1", NULL};
  start_agent(f, caps);
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.wait_s = 5;
  kc_lease lease;
  int fd;
  kc_error err = {0};
  assert_int_equal(kc_tracker_request("127.0.0.1", f->t.port, "cpu", &o, &lease, &fd, &err), 0);
  double t0 = now_s();
  assert_true(raw_closed(fd, 15));
  assert_true(now_s() - t0 < 10);
  close(fd);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 5), 1);
}

static int idle_conn(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* Twenty connections that never finish TVM's handshake do not hold a real client up:
 * handshakes run side by side (read one after the other, 2 s each, they took 40 s). */
static void test_idle_handshakes_do_not_stall(void **state) {
  fleet *f = *state;
  const char *argv[] = {"agent",  "--tracker", f->tracker, "--key", "cpu",
                        "--host", "127.0.0.1", "--port",   "0",     NULL};
  uint16_t port = proc_start(&f->agent, argv);
  assert_true(port > 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 10), 1);
  int idle[20];
  for (int i = 0; i < 20; i++)
    idle[i] = idle_conn(port);
  double t0 = now_s();
  int rc;
  char err[8192];
  json_t *r = bench(f, KC_EXAMPLES "/naive.c", NULL, &rc, err, sizeof err);
  double took = now_s() - t0;
  if (rc != 0 || !r)
    fail_msg("exit %d: %s", rc, err);
  printf("# remote bench with 20 idle connections held: %.2f s\n", took);
  assert_true(took < 20); /* generous for a loaded machine; serial handshakes took 40 s */
  json_decref(r);
  for (int i = 0; i < 20; i++)
    close(idle[i]);
}

static void key_files(fleet *f, char *a, char *b, char *open_key) {
  sprintf(a, "%s/a.key", f->dir);
  sprintf(b, "%s/b.key", f->dir);
  sprintf(open_key, "%s/open.key", f->dir);
  write_file(a, "alpha-secret-key-0123456789abcdef\n", 0600);
  write_file(b, "bravo-secret-key-0123456789abcdef\n", 0600);
  write_file(open_key, "alpha-secret-key-0123456789abcdef\n", 0644);
}

/* --auth-key on both sides: the right key works, a wrong key or none on either side is
 * refused with a clear error. */
static void test_auth(void **state) {
  fleet *f = *state;
  char ka[128], kb[128], kopen[128], err[8192];
  key_files(f, ka, kb, kopen);
  /* A key file others can read is refused before anything starts. */
  const char *bad[] = {"agent", "--tracker", f->tracker, "--key", "cpu", "--auth-key", kopen, NULL};
  assert_int_equal(proc_run_err(bad, 10, err, sizeof err), 2);
  assert_non_null(strstr(err, "chmod 600"));
  const char *agent_key[] = {"--auth-key", ka, NULL};
  start_agent(f, agent_key);
  int rc;
  const char *right[] = {"--auth-key", ka, NULL};
  json_t *r = bench(f, KC_EXAMPLES "/naive.c", right, &rc, err, sizeof err);
  if (rc != 0 || !r)
    fail_msg("right key: exit %d: %s", rc, err);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
  json_decref(r);
  setenv("KCAGE_REQUEST_TIMEOUT", "5", 1);
  const char *wrong[] = {"--auth-key", kb, NULL};
  r = bench(f, KC_EXAMPLES "/naive.c", wrong, &rc, err, sizeof err);
  assert_null(r);
  if (rc <= 0 || rc >= 126 || !strstr(err, "did not prove the auth key (wrong key)"))
    fail_msg("wrong key: exit %d: %s", rc, err);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 10), 1);
  r = bench(f, KC_EXAMPLES "/naive.c", NULL, &rc, err, sizeof err);
  assert_null(r);
  if (rc <= 0 || rc >= 126 || !strstr(err, "requires authentication"))
    fail_msg("no client key: exit %d: %s", rc, err);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 10), 1);
  /* An agent without the key is refused by a client that has one. */
  proc_stop(&f->agent);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 0, 5), 0);
  start_agent(f, NULL);
  r = bench(f, KC_EXAMPLES "/naive.c", right, &rc, err, sizeof err);
  assert_null(r);
  if (rc <= 0 || rc >= 126 || !strstr(err, "did not prove the auth key (it has none)"))
    fail_msg("agent without key: exit %d: %s", rc, err);
  unsetenv("KCAGE_REQUEST_TIMEOUT");
}

/* The agent's side: a client that cannot prove the key gets nothing, and uploads before
 * the proof are refused: after the agent's hello only sealed records are read, so a
 * plaintext proof or upload ends the session without a plaintext word back. */
static void test_auth_agent_refuses(void **state) {
  fleet *f = *state;
  char ka[128], kb[128], kopen[128];
  key_files(f, ka, kb, kopen);
  const char *agent_key[] = {"--auth-key", ka, NULL};
  start_agent(f, agent_key);
  for (int attempt = 0; attempt < 2; attempt++) {
    kc_request_opts o;
    kc_request_opts_init(&o);
    o.wait_s = 10;
    kc_lease lease;
    int fd;
    kc_error err = {0};
    assert_int_equal(kc_tracker_request("127.0.0.1", f->t.port, "cpu", &o, &lease, &fd, &err), 0);
    char nonce[KC_AUTH_HEX + 1];
    assert_int_equal(kc_auth_nonce(nonce, &err), 0);
    json_t *m = json_pack("{s:s, s:i, s:{s:s}}", "op", "hello", "version", 1, "auth", "nonce",
                          nonce),
           *r = NULL;
    assert_int_equal(kc_session_send(fd, m, now_s() + 5, &err), 0);
    json_decref(m);
    assert_int_equal(kc_session_recv(fd, now_s() + 5, &r, &err), 0);
    assert_string_equal(json_string_value(json_object_get(r, "op")), "hello");
    json_decref(r);
    if (attempt == 0) /* a forged proof */
      m = json_pack("{s:s, s:s}", "op", "auth", "mac",
                    "00000000000000000000000000000000000000000000000000000000000000ff");
    else /* no proof at all, straight to an upload */
      m = json_pack("{s:s, s:s, s:i}", "op", "file", "name", "k0-a.c", "size", 1);
    assert_int_equal(kc_session_send(fd, m, now_s() + 5, &err), 0);
    json_decref(m);
    r = NULL;
    assert_int_equal(kc_session_recv(fd, now_s() + 5, &r, &err), -1);
    assert_null(r);
    assert_true(raw_closed(fd, 5));
    close(fd);
    assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 10), 1);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_build_options_take_effect, setup, teardown),
      cmocka_unit_test_setup_teardown(test_caps_clamp_and_say_so, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_session_ends_silent_client, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_handshakes_do_not_stall, setup, teardown),
      cmocka_unit_test_setup_teardown(test_auth, setup, teardown),
      cmocka_unit_test_setup_teardown(test_auth_agent_refuses, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
