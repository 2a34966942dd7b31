/* The real `kcage agent` (and, for the restart test, the real `kcage tracker`) over
 * loopback: sessions, a killed agent, session timeouts, tracker restarts, taken but
 * unused matchkeys. */
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
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kcage/cgroup.h"
#include "proc.h"
#include "trk_test.h"

typedef struct fixture {
  trk_srv t;
  pid_t agent;
  char tracker[64];
} fixture;

static uint16_t start_agent(fixture *f, pid_t *pid, const char *key, const char *reput) {
  const char *argv[] = {"agent",     "--tracker", f->tracker, "--key",   key,   "--host",
                        "127.0.0.1", "--port",    "0",        "--reput", reput, NULL};
  return proc_start(pid, argv);
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  trk_start(&f->t);
  snprintf(f->tracker, sizeof f->tracker, "127.0.0.1:%u", f->t.port);
  assert_true(start_agent(f, &f->agent, "cpu", "6") > 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 5), 1);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  proc_stop(&f->agent);
  trk_stop(&f->t);
  free(f);
  return 0;
}

static int lease_session(fixture *f, double session_timeout, kc_session **s, json_t **hello) {
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.wait_s = 5;
  o.session_timeout_s = session_timeout;
  kc_lease lease;
  int fd = -1;
  kc_error err = {0};
  if (kc_tracker_request("127.0.0.1", f->t.port, "cpu", &o, &lease, &fd, &err) < 0)
    fail_msg("request: %s", err.msg);
  assert_string_equal(lease.server_key, "server:cpu");
  assert_non_null(strstr(lease.matchkey, "cpu:0."));
  if (kc_session_open(fd, 5, NULL, s, hello, &err) < 0)
    fail_msg("session: %s", err.msg);
  return 0;
}

static void test_session_roundtrip(void **state) {
  fixture *f = *state;
  kc_session *s;
  json_t *hello;
  lease_session(f, 0, &s, &hello);
  assert_non_null(strstr(json_string_value(json_object_get(hello, "device")), "cpu@"));
  json_decref(hello);
  kc_error err = {0};
  assert_int_equal(kc_session_upload(s, "k0-a.c", "int x;\n", 7, &err), 0);
  /* Names that could escape the session directory are refused. */
  assert_int_equal(kc_session_upload(s, "../evil.c", "x", 1, &err), -1);
  kc_session_close(s);
  /* Hostile numbers in a run config are refused, not cast. */
  lease_session(f, 0, &s, NULL);
  json_t *m = json_pack("{s:s, s:[s], s:{s:s, s:f}}", "op", "run", "kernels", "k0-a.c", "config",
                        "args", "f32[4]", "number", 1e30),
         *r = NULL;
  assert_int_equal(kc_session_upload(s, "k0-a.c", "int x;\n", 7, &err), 0);
  assert_int_equal(kc_session_call(s, m, 5, &r, &err), -1);
  assert_non_null(strstr(err.msg, "out of range"));
  json_decref(m);
  kc_session_close(s);
  /* A tenant never chooses to run without the sandbox (a session of its own: an error
   * ends the session). */
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 3), 1);
  lease_session(f, 0, &s, NULL);
  assert_int_equal(kc_session_upload(s, "k0-a.c", "int x;\n", 7, &err), 0);
  m = json_pack("{s:s, s:[s], s:{s:s, s:s}}", "op", "run", "kernels", "k0-a.c", "config", "args",
                "f32[4]", "isolation", "none");
  assert_int_equal(kc_session_call(s, m, 5, &r, &err), -1);
  if (!strstr(err.msg, "sandbox"))
    fail_msg("isolation refused with: %s", err.msg);
  json_decref(m);
  kc_session_close(s);
  /* The agent re-registers with a fresh matchkey when the session ends. */
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

static json_t *load_jsonl(const char *path);

/* The agent's scratch dir ($TMPDIR/kcage-agent-PID) made in advance by someone else
 * (any user can, in a shared /tmp): the agent refuses to start rather than put the
 * tenants' kernels where that user can read them, and leaves the dir alone. */
static void test_foreign_scratch_dir_refused(void **state) {
  (void)state;
  if (geteuid() != 0)
    skip();
  const char *td = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/kcage-agent-%ld", td, (long)getpid());
  assert_int_equal(mkdir(dir, 0777), 0);
  assert_int_equal(chown(dir, 65534, 65534), 0);
  kc_agent_opts o;
  kc_agent_opts_init(&o);
  o.tracker_host = "127.0.0.1";
  o.tracker_port = 1;
  o.key = "cpu";
  o.host = "127.0.0.1";
  o.port = 0;
  o.port_end = 0;
  kc_agent *a = NULL;
  kc_error err = {0};
  assert_int_equal(kc_agent_new(&o, &a, &err), -1);
  assert_non_null(strstr(err.msg, "not this agent's own"));
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  assert_int_equal(rmdir(dir), 0);
  /* Its own dir, left by a dead agent with this pid, is taken. */
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(kc_agent_new(&o, &a, &err), 0);
  kc_agent_free(a);
  rmdir(dir);
}

/* An agent started with the variables that once chose the cgroup mode, the sandbox
 * host ids and an unsandboxed mode, and with the rlimit fallback allowed: its tenants'
 * kernels are still sandboxed, their memory limit still held by a cgroup (not turned
 * into an RLIMIT_AS by "none"), exactly as the agent's own options say. */
static void test_env_cannot_weaken_sessions(void **state) {
  fixture *f = *state;
  const char *how = kc_cgroup_enforcement(NULL, "memory");
  if (!how || strcmp(how, "cgroup"))
    skip(); /* no memory cgroup here: nothing a variable could drop */
  proc_stop(&f->agent);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 0, 8), 0);
  setenv("KCAGE_CGROUP", "none", 1);
  setenv("KCAGE_SANDBOX_IDS", "1600000000:8", 1);
  setenv("KCAGE_BENCH_PLAIN", "1", 1);
  const char *aargv[] = {"agent",  "--tracker", f->tracker, "--key", "cpu",
                         "--host", "127.0.0.1", "--port",   "0",     "--limits-fallback",
                         "rlimit", NULL};
  uint16_t port = proc_start(&f->agent, aargv);
  unsetenv("KCAGE_CGROUP");
  unsetenv("KCAGE_SANDBOX_IDS");
  unsetenv("KCAGE_BENCH_PLAIN");
  assert_true(port > 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 5), 1);
  char out[] = "/tmp/kc-trk-env-XXXXXX";
  close(mkstemp(out));
  const char *argv[] = {"bench",     "--args",   "f32[256] f32[256] f32[256]:out",
                        "--memory",  "128M",     "--repeat",
                        "2",         "--json",   out,
                        "--tracker", f->tracker, "--key",
                        "cpu",       KC_HONEST,  NULL};
  assert_int_equal(proc_run(argv, 60), 0);
  json_t *r = load_jsonl(out);
  unlink(out);
  assert_int_equal(json_array_size(r), 1);
  json_t *rec = json_array_get(r, 0);
  assert_string_equal(json_string_value(json_object_get(rec, "status")), "ok");
  assert_string_equal(json_string_value(json_object_get(rec, "isolation")), "sandbox");
  json_t *lim = json_object_get(rec, "limits");
  if (!json_is_string(json_object_get(lim, "memory")))
    fail_msg("no memory limit in the record: %s", json_dumps(rec, JSON_COMPACT));
  assert_string_equal(json_string_value(json_object_get(lim, "memory")), "cgroup");
  json_decref(r);
}

/* A SIGKILLed agent cannot remove its scratch dir ($TMPDIR/kcage-agent-PID) nor a
 * running batch's inputs (/dev/shm/kcage-inputs-PID.*); the next agent that starts
 * sweeps both, so nothing is left behind on the host. */
static void next_agent_sweeps(fixture *f, pid_t killed) {
  char dir[512];
  const char *td = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/kcage-agent-%ld", td && *td && strlen(td) <= 200 ? td : "/tmp",
           (long)killed);
  struct stat st;
  assert_int_equal(stat(dir, &st), 0); /* left by the killed agent */
  /* and the inputs of a batch it was running, in memory */
  char shm[128];
  snprintf(shm, sizeof shm, "/dev/shm/kcage-inputs-%ld.test", (long)killed);
  bool have_shm = mkdir(shm, 0700) == 0;
  assert_true(start_agent(f, &f->agent, "cpu", "6") > 0);
  assert_int_equal(stat(dir, &st), -1);
  if (have_shm)
    assert_int_equal(stat(shm, &st), -1);
}

/* An agent SIGKILLed mid-session: gone from SUMMARY within seconds, and the client gets a
 * clear error instead of hanging. */
static void test_agent_killed_mid_session(void **state) {
  fixture *f = *state;
  kc_session *s;
  lease_session(f, 0, &s, NULL);
  assert_int_equal(summary_servers(f->t.port), 1);
  double t0 = now_s();
  pid_t killed = f->agent;
  proc_kill(&f->agent);
  while (summary_servers(f->t.port) != 0 && now_s() - t0 < 5.0)
    usleep(5000);
  assert_int_equal(summary_servers(f->t.port), 0);
  assert_true(now_s() - t0 < 5.0);
  assert_int_equal(summary_count(f->t.port, "cpu", "free"), 0);
  kc_error err = {0};
  json_t *m = json_pack("{s:s}", "op", "hello"), *r = NULL;
  assert_int_equal(kc_session_call(s, m, 2, &r, &err), -1);
  json_decref(m);
  assert_non_null(strstr(err.msg, "device agent closed the session"));
  assert_true(now_s() - t0 < 8.0);
  kc_session_close(s);
  next_agent_sweeps(f, killed);
}

/* A session past its timeout is ended by the agent, with TVM's message. */
static void test_session_timeout(void **state) {
  fixture *f = *state;
  kc_session *s;
  lease_session(f, 1, &s, NULL);
  double t0 = now_s();
  /* Idle: the agent must tell us and close at ~1 s. */
  kc_error err = {0};
  json_t *msg = NULL;
  assert_int_equal(kc_session_recv(kc_session_fd(s), now_s() + 10, &msg, &err), 0);
  double took = now_s() - t0;
  assert_true(took > 0.8 && took < 8.0);
  assert_string_equal(json_string_value(json_object_get(msg, "code")), "session_timeout");
  assert_non_null(
      strstr(json_string_value(json_object_get(msg, "message")), "session has expired"));
  json_decref(msg);
  assert_true(raw_closed(kc_session_fd(s), 2));
  kc_session_close(s);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

/* A client that takes the device and never comes: the agent takes it back. */
static void test_taken_unused_matchkey_reput(void **state) {
  fixture *f = *state;
  proc_kill(&f->agent);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 0, 5), 0);
  assert_true(start_agent(f, &f->agent, "cpu", "0.3") > 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
  int c = raw_connect(f->t.port, true);
  raw_send(c, "[4, \"cpu\", \"\", 1]");
  char *r = raw_recv(c, 2);
  assert_non_null(r);
  free(r);
  assert_int_equal(summary_count(f->t.port, "cpu", "free"), 0);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
  close(c);
}

/* TVM's handshake codes: wrong magic = silent close, unknown key = MISMATCH. */
static void test_handshake_codes(void **state) {
  fixture *f = *state;
  char mk[KC_TRACKER_MAX_MATCHKEY];
  kc_error err = {0};
  kc_tracker_conn *tc;
  assert_int_equal(kc_tracker_connect("127.0.0.1", f->t.port, 2, &tc, &err), 0);
  kc_lease lease;
  assert_int_equal(kc_tracker_request_lease(tc, "cpu", 1, 2, &lease, &err), 0);
  kc_tracker_close(tc);
  snprintf(mk, sizeof mk, "%s", lease.matchkey);
  int fd = kc_rpc_connect(lease.host, lease.port, "cpu:0.wrong", 0, 2, NULL, 0, &err);
  assert_int_equal(fd, -1);
  assert_non_null(strstr(err.msg, "cannot find server that matches key"));
  /* The right key still works after a mismatch (like TVM's Python server). */
  char sk[64];
  fd = kc_rpc_connect(lease.host, lease.port, mk, 2.5, 2, sk, sizeof sk, &err);
  assert_true(fd >= 0);
  assert_string_equal(sk, "server:cpu");
  /* ... and is spent once used. */
  int fd2 = kc_rpc_connect(lease.host, lease.port, mk, 0, 2, NULL, 0, &err);
  assert_int_equal(fd2, -1);
  close(fd);
}

/* The tracker restarts: every agent registers again, quickly. */
static void test_tracker_restart(void **state) {
  (void)state;
  uint16_t port = free_port();
  char ps[8], pe[8], addr[32];
  snprintf(ps, sizeof ps, "%u", port);
  snprintf(pe, sizeof pe, "%u", port + 1);
  snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
  const char *targv[] = {"tracker", "--host", "127.0.0.1", "--port", ps, "--port-end", pe, NULL};
  pid_t trk = 0, ag[3] = {0};
  assert_int_equal(proc_start(&trk, targv), port);
  fixture f = {0};
  snprintf(f.tracker, sizeof f.tracker, "%s", addr);
  for (int i = 0; i < 3; i++)
    assert_true(start_agent(&f, &ag[i], "gpu", "6") > 0);
  assert_int_equal(wait_count(port, "gpu", "free", 3, 5), 3);
  proc_kill(&trk);
  double t0 = now_s();
  assert_int_equal(proc_start(&trk, targv), port);
  assert_int_equal(wait_count(port, "gpu", "free", 3, 5), 3);
  assert_int_equal(summary_servers(port), 3);
  printf("# all 3 agents re-registered %.3f s after the restart\n", now_s() - t0);
  for (int i = 0; i < 3; i++)
    proc_stop(&ag[i]);
  proc_stop(&trk);
}

static json_t *load_jsonl(const char *path) {
  json_t *a = json_array();
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[65536];
  while (fgets(line, sizeof line, f)) {
    json_t *v = json_loads(line, 0, NULL);
    if (v)
      json_array_append_new(a, v);
  }
  fclose(f);
  unlink(path);
  return a;
}

/* `kcage bench --tracker` gives the same verdicts as a local run, plus `device`. */
static void test_remote_bench_same_records(void **state) {
  fixture *f = *state;
  char local[] = "/tmp/kc-trk-local-XXXXXX", remote[] = "/tmp/kc-trk-remote-XXXXXX";
  close(mkstemp(local));
  close(mkstemp(remote));
  const char *ks[] = {KC_EXAMPLES "/naive.c", KC_EXAMPLES "/wrong_result.c",
                      KC_EXAMPLES "/segfault.c"};
  char args[256] = "";
  FILE *af = fopen(KC_EXAMPLES "/ARGS", "r");
  assert_non_null(af);
  assert_non_null(fgets(args, sizeof args, af));
  fclose(af);
  args[strcspn(args, "\n")] = '\0';
  const char *common[] = {"bench",    "--reference", KC_EXAMPLES "/reference.c",
                          "--args",   args,          "--atol",
                          "1e-4",     "--timeout",   "10",
                          "--memory", "256M",        "--repeat",
                          "2"};
  const char *argv[32];
  size_t n = 0;
  for (size_t i = 0; i < sizeof common / sizeof *common; i++)
    argv[n++] = common[i];
  size_t base = n;
  argv[n++] = "--json";
  argv[n++] = local;
  for (int i = 0; i < 3; i++)
    argv[n++] = ks[i];
  argv[n] = NULL;
  assert_int_equal(proc_run(argv, 60), 0);
  n = base;
  argv[n++] = "--json";
  argv[n++] = remote;
  argv[n++] = "--tracker";
  argv[n++] = f->tracker;
  argv[n++] = "--key";
  argv[n++] = "cpu";
  argv[n++] = "--session-timeout";
  argv[n++] = "60";
  for (int i = 0; i < 3; i++)
    argv[n++] = ks[i];
  argv[n] = NULL;
  assert_int_equal(proc_run(argv, 60), 0);
  json_t *l = load_jsonl(local), *r = load_jsonl(remote);
  assert_int_equal(json_array_size(l), 3);
  assert_int_equal(json_array_size(r), 3);
  for (size_t i = 0; i < 3; i++) {
    json_t *a = json_array_get(l, i), *b = json_array_get(r, i);
    assert_string_equal(json_string_value(json_object_get(a, "kernel")), ks[i]);
    assert_string_equal(json_string_value(json_object_get(b, "kernel")), ks[i]);
    assert_string_equal(json_string_value(json_object_get(a, "status")),
                        json_string_value(json_object_get(b, "status")));
    assert_non_null(strstr(json_string_value(json_object_get(b, "device")), "cpu@"));
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v) assert_non_null(json_object_get(b, k)); /* same fields */
  }
  assert_string_equal(json_string_value(json_object_get(json_array_get(r, 0), "status")), "ok");
  /* The remote record has the speed-up against the reference, like the local one. */
  assert_true(json_is_number(json_object_get(json_array_get(r, 0), "speedup")));
  assert_true(json_is_number(json_object_get(json_array_get(r, 0), "reference_median_s")));
  json_decref(l);
  json_decref(r);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

/* --abi and --entry reach the agent: a TVM-FFI reference and kernels, called as such. */
static void test_remote_bench_tvm_ffi(void **state) {
  fixture *f = *state;
  char out[] = "/tmp/kc-trk-tvmffi-XXXXXX";
  close(mkstemp(out));
  const char *argv[] = {"bench",
                        "--abi",
                        "tvm-ffi",
                        "--entry",
                        "add",
                        "--args",
                        "f32[100] f32[100] f32[100]:out",
                        "--reference",
                        KC_TVMFFI "/add.c",
                        "--repeat",
                        "2",
                        "--json",
                        out,
                        "--tracker",
                        f->tracker,
                        "--key",
                        "cpu",
                        "--session-timeout",
                        "60",
                        KC_TVMFFI "/add.c",
                        KC_TVMFFI "/add_wrong.c",
                        NULL};
  assert_int_equal(proc_run(argv, 60), 0);
  json_t *r = load_jsonl(out);
  unlink(out);
  assert_int_equal(json_array_size(r), 2);
  const char *want[] = {"ok", "wrong_result"};
  for (size_t i = 0; i < 2; i++) {
    json_t *rec = json_array_get(r, i);
    assert_string_equal(json_string_value(json_object_get(rec, "status")), want[i]);
    assert_string_equal(json_string_value(json_object_get(rec, "abi")), "tvm-ffi");
  }
  json_decref(r);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

/* A session that runs past its timeout in the middle of a batch (a kernel that never
 * returns) is ended by the agent; the client hears of it and the device comes back. */
static void test_session_timeout_mid_batch(void **state) {
  fixture *f = *state;
  char args[256] = "";
  FILE *af = fopen(KC_EXAMPLES "/ARGS", "r");
  assert_non_null(af);
  assert_non_null(fgets(args, sizeof args, af));
  fclose(af);
  args[strcspn(args, "\n")] = '\0';
  const char *argv[] = {"bench", "--tracker",         f->tracker, "--key",
                        "cpu",   "--session-timeout", "2",        "--args",
                        args,    "--timeout",         "30",       KC_EXAMPLES "/infinite_loop.c",
                        NULL};
  double t0 = now_s();
  int rc = proc_run(argv, 20);
  double took = now_s() - t0;
  assert_true(rc > 0);
  assert_true(took >= 1.8 && took < 15);
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 1, 8), 1);
}

/* `kcage query` prints what TVM's query_rpc_tracker prints, finding the tracker via
 * TVM_TRACKER_HOST / TVM_TRACKER_PORT. */
static void test_query_output(void **state) {
  fixture *f = *state;
  char port[16], cmd[512];
  snprintf(port, sizeof port, "%u", f->t.port);
  setenv("TVM_TRACKER_HOST", "127.0.0.1", 1);
  setenv("TVM_TRACKER_PORT", port, 1);
  snprintf(cmd, sizeof cmd, "%s query", KCAGE_BIN);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char out[4096];
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  unsetenv("TVM_TRACKER_HOST");
  unsetenv("TVM_TRACKER_PORT");
  char want[2048];
  /* The agent's port is not known here: compare around it. */
  const char *line = strstr(out, "127.0.0.1:");
  line = line ? strstr(line + 1, "127.0.0.1:") : NULL;
  assert_non_null(line);
  char agent_port[8] = "";
  sscanf(line, "127.0.0.1:%7[0-9]", agent_port);
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%s", agent_port);
  snprintf(want, sizeof want,
           "Tracker address 127.0.0.1:%u\n\n"
           "Server List\n"
           "------------------------------\n"
           "server-address           key\n"
           "------------------------------\n"
           "%-21s    server:cpu\n"
           "------------------------------\n"
           "\n"
           "Queue Status\n"
           "---------------------------\n"
           "key   total  free  pending\n"
           "---------------------------\n"
           "cpu   1      1     0      \n"
           "---------------------------\n\n",
           f->t.port, addr);
  assert_string_equal(out, want);
}

/* The agent dies in the middle of a remote batch: it leaves SUMMARY within 1 s and
 * `kcage bench` says so and exits instead of hanging. */
static void test_agent_killed_mid_batch(void **state) {
  fixture *f = *state;
  char args[256] = "";
  FILE *af = fopen(KC_EXAMPLES "/ARGS", "r");
  assert_non_null(af);
  assert_non_null(fgets(args, sizeof args, af));
  fclose(af);
  args[strcspn(args, "\n")] = '\0';
  int errp[2];
  assert_int_equal(pipe(errp), 0);
  pid_t b = fork();
  if (b == 0) {
    setenv("KCAGE_REQUEST_TIMEOUT", "1", 1); /* no second device will come */
    dup2(errp[1], 2);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(KCAGE_BIN, KCAGE_BIN, "bench", "--tracker", f->tracker, "--key", "cpu", "--args", args,
          "--timeout", "30", KC_EXAMPLES "/infinite_loop.c", (char *)NULL);
    _exit(127);
  }
  close(errp[1]);
  /* Wait until the session is under way (the device is leased), then kill the agent. */
  assert_int_equal(wait_count(f->t.port, "cpu", "free", 0, 5), 0);
  usleep(500000);
  double t0 = now_s();
  pid_t killed = f->agent;
  proc_kill(&f->agent);
  while (summary_servers(f->t.port) != 0 && now_s() - t0 < 5.0)
    usleep(5000);
  assert_int_equal(summary_servers(f->t.port), 0);
  assert_true(now_s() - t0 < 5.0);
  int st = 0;
  bool exited = false;
  for (int i = 0; i < 1000 && !exited; i++) {
    if (waitpid(b, &st, WNOHANG) == b)
      exited = true;
    else
      usleep(10000);
  }
  if (!exited) {
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
  }
  assert_true(exited);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  char msg[4096];
  ssize_t n = read(errp[0], msg, sizeof msg - 1);
  close(errp[0]);
  msg[n > 0 ? n : 0] = '\0';
  if (!strstr(msg, "device agent closed the session"))
    fail_msg("unclear error: %s", msg);
  next_agent_sweeps(f, killed);
}

/* What the agent sends a tracker, byte for byte as TVM's rpc_server does: a fake
 * tracker records it.  --custom-addr goes into both UPDATE_INFO and PUT. */
static void test_agent_wire_like_rpc_server(void **state) {
  (void)state;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 4), 0);
  getsockname(l, (struct sockaddr *)&a, &al);
  fixture f = {0};
  snprintf(f.tracker, sizeof f.tracker, "127.0.0.1:%u", ntohs(a.sin_port));
  const char *argv[] = {"agent",     "--tracker", f.tracker, "--key",         "cpu",      "--host",
                        "127.0.0.1", "--port",    "0",       "--custom-addr", "10.1.2.3", NULL};
  pid_t ag = 0;
  uint16_t port = proc_start(&ag, argv);
  assert_true(port > 0);
  struct pollfd pf = {.fd = l, .events = POLLIN};
  assert_int_equal(poll(&pf, 1, 5000), 1);
  int c = accept(l, NULL, NULL);
  assert_true(c >= 0);
  uint32_t m;
  assert_int_equal(recv(c, &m, 4, MSG_WAITALL), 4);
  assert_int_equal(le32toh(m), KC_TRACKER_MAGIC);
  raw_send_bytes(c, &m, 4);
  char want[256];
  char *got = raw_recv(c, 5);
  snprintf(want, sizeof want, "[5, {\"key\": \"server:cpu\", \"addr\": [\"10.1.2.3\", %u]}]", port);
  assert_string_equal(got, want);
  free(got);
  raw_send(c, "0");
  got = raw_recv(c, 5);
  snprintf(want, sizeof want, "[3, \"cpu\", [%u, \"cpu:0.", port);
  assert_non_null(got);
  assert_memory_equal(got, want, strlen(want));
  assert_non_null(strstr(got, "\"], \"10.1.2.3\"]"));
  char mk[128];
  assert_int_equal(sscanf(got + strlen(want) - strlen("cpu:0."), "%127[^\"]", mk), 1);
  free(got);
  raw_send(c, "0");
  /* Then it polls GET_PENDING_MATCHKEYS (TVM: every 2 s). */
  got = raw_recv(c, 5);
  assert_string_equal(got, "[7]");
  free(got);
  proc_stop(&ag);
  close(c);
  close(l);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  /* The agents' scratch (and their sweep of dead agents' dirs) stays in a directory of
   * this test's own: agents of other tests sweep /tmp, and the sweep test must see only
   * what its own killed agent left.  0711: the sandboxes must traverse it. */
  char scratch[] = "/tmp/kc-agent-test-XXXXXX";
  if (!mkdtemp(scratch) || chmod(scratch, 0711) < 0)
    return 1;
  setenv("TMPDIR", scratch, 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_session_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_query_output, setup, teardown),
      cmocka_unit_test_setup_teardown(test_agent_killed_mid_session, setup, teardown),
      cmocka_unit_test_setup_teardown(test_session_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_taken_unused_matchkey_reput, setup, teardown),
      cmocka_unit_test_setup_teardown(test_handshake_codes, setup, teardown),
      cmocka_unit_test(test_tracker_restart),
      cmocka_unit_test(test_agent_wire_like_rpc_server),
      cmocka_unit_test_setup_teardown(test_remote_bench_same_records, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remote_bench_tvm_ffi, setup, teardown),
      cmocka_unit_test_setup_teardown(test_session_timeout_mid_batch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_agent_killed_mid_batch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_env_cannot_weaken_sessions, setup, teardown),
      cmocka_unit_test(test_foreign_scratch_dir_refused),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
  if (system(cmd) != 0)
    rc = rc ? rc : 1;
  return rc;
}
