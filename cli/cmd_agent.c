/* `kcage agent`: a device agent for a TVM-compatible tracker (docs/contracts.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kcage/tracker.h"

static kc_auth_key auth;

static void usage(FILE *out) {
  fprintf(out,
          "usage: kcage agent --tracker HOST:PORT --key KEY [--host H] [--port P] [--port-end E]\n"
          "                   [--custom-addr A] [--workers N] [--auth-key FILE]\n"
          "                   [--auth-timeout SEC]\n"
          "                   [--max-memory SIZE] [--max-timeout SEC] [--max-session SEC]\n"
          "                   [--max-pids N] [--max-cpus X] [--tvm-python PATH]\n"
          "                   [--tvm-policy NAME]... [--no-tvm-zygote]\n"
          "                   [--metrics H:P] [--limits-fallback rlimit]\n"
          "                   [--sandbox-ids BASE:COUNT] [--verbose]\n\n"
          "Register this machine with an RPC tracker (kcage's or TVM's own) under KEY, like\n"
          "TVM's rpc_server, and serve kcage sessions (kernels uploaded by `kcage bench\n"
          "--tracker`, built and timed here in a sandboxed pool) and TVM RPC sessions (TVM's\n"
          "own server loop, each session in a fresh sandbox), under the same key.\n\n"
          "  --tracker HOST:PORT  the tracker (port defaults to 9190)\n"
          "  --key KEY            device key clients request (no ':')\n"
          "  --host H             address to listen on for sessions (default 0.0.0.0)\n"
          "  --port P             first port to try (default 9090; 0 = any)\n"
          "  --port-end E         last port to try + 1 (default 9199)\n"
          "  --custom-addr A      address the tracker hands to clients (NAT, containers)\n"
          "  --workers N          measuring workers per session (default: CPUs)\n"
          "  --auth-key FILE      serve only clients that prove this shared key (a file\n"
          "                       only you can read, 16+ bytes), and prove it to them;\n"
          "                       every byte of such a session is then encrypted and\n"
          "                       authenticated (docs/fleet-security.md)\n"
          "  --auth-timeout SEC   a client must prove the key within this long, or it is\n"
          "                       dropped and the device serves the next (default 5)\n"
          "  --max-memory SIZE    cap on a session's --memory and --build-memory\n"
          "  --max-timeout SEC    cap on a session's --timeout and --build-timeout\n"
          "  --max-session SEC    cap on a session's length, also when it asks for none\n"
          "  --max-pids N         cap on a TVM RPC session's processes and threads\n"
          "  --max-cpus X         cap on a TVM RPC session's CPU bandwidth, in CPUs\n"
          "                       (requests above a cap are lowered; records say so in\n"
          "                       their \"clamped\" field)\n"
          "  --tvm-python PATH    the Python with TVM that runs TVM RPC sessions (default:\n"
          "                       python3 in PATH); with a shared libpython it imports TVM\n"
          "                       once, in a zygote each session is forked from\n"
          "  --tvm-policy NAME    a policy a TVM session may name through kcage.sandbox\n"
          "                       (repeatable; the first is the default; default: tvm)\n"
          "  --no-tvm-zygote      start each TVM session's interpreter in a sandbox of its\n"
          "                       own, made ahead while the last session runs, instead of\n"
          "                       forking it from the zygote: no two sessions' processes\n"
          "                       share a parent or its memory layout (costs TVM's import,\n"
          "                       seconds of CPU, per session)\n"
          "  --metrics H:P        serve Prometheus metrics on http://H:P/metrics (sessions,\n"
          "                       verdicts by status, connections and drops by reason)\n"
          "  --limits-fallback rlimit\n"
          "                       without a delegated cgroup, hold the sessions' limits as\n"
          "                       rlimits instead of failing them\n"
          "  --sandbox-ids BASE:COUNT\n"
          "                       as root, the host ids the sessions' sandboxes run as\n"
          "                       (default 1500000000:65536); no account may use them\n"
          "  --verbose            log registrations to stderr (sessions and dropped\n"
          "                       clients are always logged)\n"
          "  --version          print kcage's version\n"
          "The session port is printed on stdout as `agent listening on HOST:PORT`.\n");
}

/* --auth-key and the operator caps. */
static int fleet_option(int ch, const char *arg, kc_agent_opts *o) {
  kc_error err = {0};
  double d;
  uint64_t v;
  switch (ch) {
  case 'A':
    if (kc_auth_key_load(arg, &auth, &err) < 0) {
      kc_cli_error("agent", "%s", err.msg);
      return -1;
    }
    o->auth = &auth;
    return 0;
  case 'a':
    if (kc_parse_decimal(arg, &d) < 0 || d <= 0 || d > 3600) {
      kc_cli_error("agent", "--auth-timeout %s: want seconds in (0, 3600]", arg);
      return -1;
    }
    o->auth_timeout_s = d;
    return 0;
  case 'M':
    if (kc_parse_size(arg, &o->caps.max_memory_bytes) < 0 ||
        o->caps.max_memory_bytes < (16u << 20)) {
      kc_cli_error("agent", "--max-memory %s: want a size of at least 16M", arg);
      return -1;
    }
    return 0;
  case 'P':
    if (kc_cli_parse_uint(arg, 1, 1u << 22, &v) < 0) {
      kc_cli_error("agent", "--max-pids %s: need 1..%u", arg, 1u << 22);
      return -1;
    }
    o->caps.max_pids = (uint32_t)v;
    return 0;
  case 'C':
    if (kc_parse_decimal(arg, &d) < 0 || d <= 0 || d > 4096) {
      kc_cli_error("agent", "--max-cpus %s: want CPUs > 0", arg);
      return -1;
    }
    o->caps.max_cpus = d;
    return 0;
  default:
    if (kc_parse_decimal(arg, &d) < 0 || d <= 0) {
      kc_cli_error("agent", "%s %s: want seconds > 0",
                   ch == 'T' ? "--max-timeout" : "--max-session", arg);
      return -1;
    }
    *(ch == 'T' ? &o->caps.max_timeout_s : &o->caps.max_session_s) = d;
    return 0;
  }
}

static const struct option longs[] = {{"tracker", required_argument, 0, 't'},
                                      {"key", required_argument, 0, 'k'},
                                      {"host", required_argument, 0, 'H'},
                                      {"port", required_argument, 0, 'p'},
                                      {"port-end", required_argument, 0, 'e'},
                                      {"custom-addr", required_argument, 0, 'c'},
                                      {"workers", required_argument, 0, 'w'},
                                      {"reput", required_argument, 0, 'r'},
                                      {"verbose", no_argument, 0, 'v'},
                                      {"auth-key", required_argument, 0, 'A'},
                                      {"auth-timeout", required_argument, 0, 'a'},
                                      {"max-memory", required_argument, 0, 'M'},
                                      {"max-timeout", required_argument, 0, 'T'},
                                      {"max-session", required_argument, 0, 'S'},
                                      {"max-pids", required_argument, 0, 'P'},
                                      {"max-cpus", required_argument, 0, 'C'},
                                      {"tvm-python", required_argument, 0, 'y'},
                                      {"tvm-policy", required_argument, 0, 'o'},
                                      {"no-tvm-zygote", no_argument, 0, 'Z'},
                                      {"metrics", required_argument, 0, 'm'},
                                      {"limits-fallback", required_argument, 0, 'l'},
                                      {"sandbox-ids", required_argument, 0, 'i'},
                                      {"help", no_argument, 0, 'h'},
                                      KC_OPTION_VERSION,
                                      {0, 0, 0, 0}};

typedef struct agent_args {
  kc_agent_opts o;
  char thost[KC_TRACKER_MAX_ADDR];
  bool have_tracker, port_end_set;
  const char *metrics;
  const char *policies[8];
} agent_args;

#define NOT_MINE 1000

/* One option into a: 0, the exit status of bad usage, or NOT_MINE (--help, unknown). */
static int agent_option(agent_args *a, int ch, const char *arg) {
  kc_agent_opts *o = &a->o;
  kc_error err = {0};
  uint64_t v;
  double d;
  switch (ch) {
  case 't':
    if (kc_parse_hostport(arg, KC_TRACKER_DEFAULT_PORT, a->thost, sizeof a->thost, &o->tracker_port,
                          &err) < 0) {
      kc_cli_error("agent", "--tracker: %s", err.msg);
      return KC_EXIT_USAGE;
    }
    o->tracker_host = a->thost;
    a->have_tracker = true;
    return 0;
  case 'k':
    o->key = arg;
    return 0;
  case 'H':
    o->host = arg;
    return 0;
  case 'p':
    return kc_cli_parse_port("agent", "--port", arg, 0, &o->port) < 0 ? KC_EXIT_USAGE : 0;
  case 'e':
    a->port_end_set = true;
    return kc_cli_parse_port("agent", "--port-end", arg, 1, &o->port_end) < 0 ? KC_EXIT_USAGE : 0;
  case 'c':
    o->custom_addr = arg;
    return 0;
  case 'w':
    if (kc_cli_parse_uint(arg, 1, 1024, &v) < 0) {
      kc_cli_error("agent", "--workers %s: need 1..1024", arg);
      return KC_EXIT_USAGE;
    }
    o->workers = (unsigned)v;
    return 0;
  case 'r': /* undocumented: re-PUT delay, for tests */
    if (kc_parse_decimal(arg, &d) < 0) {
      kc_cli_error("agent", "--reput %s: not seconds", arg);
      return KC_EXIT_USAGE;
    }
    o->reput_s = d;
    o->check_s = d / 3 > 0.05 ? d / 3 : 0.05;
    return 0;
  case 'v':
    o->verbose = true;
    return 0;
  case 'y':
    o->tvm_python = arg;
    return 0;
  case 'Z':
    o->tvm_no_zygote = true;
    return 0;
  case 'o':
    if (o->n_tvm_policies == sizeof a->policies / sizeof a->policies[0]) {
      kc_cli_error("agent", "--tvm-policy: at most %zu", o->n_tvm_policies);
      return KC_EXIT_USAGE;
    }
    a->policies[o->n_tvm_policies++] = arg;
    o->tvm_policies = a->policies;
    return 0;
  case 'A':
  case 'a':
  case 'M':
  case 'T':
  case 'S':
  case 'P':
  case 'C':
    return fleet_option(ch, arg, o) < 0 ? KC_EXIT_USAGE : 0;
  case 'm':
    a->metrics = arg;
    return 0;
  case 'l':
    return kc_cli_limits_fallback("agent", arg, &o->settings) < 0 ? KC_EXIT_USAGE : 0;
  case 'i':
    return kc_cli_sandbox_ids("agent", arg, &o->settings) < 0 ? KC_EXIT_USAGE : 0;
  }
  return NOT_MINE;
}

static void stop_agent(void *a) {
  kc_agent_stop(a);
}

static int run_agent(void *a, kc_error *err) {
  return kc_agent_run(a, err);
}

int kc_cmd_agent(int argc, char **argv) {
  agent_args a = {0};
  kc_agent_opts_init(&a.o);
  int ch, rc;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1)
    if ((rc = agent_option(&a, ch, optarg)))
      return rc == NOT_MINE ? kc_cli_help_or_usage(ch, usage) : rc;
  if ((rc = kc_cli_no_operands("agent", argc, argv)))
    return rc;
  if (!a.have_tracker || !a.o.key) {
    kc_cli_error("agent", "--tracker and --key are required");
    return KC_EXIT_USAGE;
  }
  if (a.o.port == 0 && !a.port_end_set)
    a.o.port_end = 0;
  kc_agent *agent;
  kc_error err = {0};
  if (kc_agent_new(&a.o, &agent, &err) < 0) {
    kc_cli_error("agent", "%s", err.msg);
    return err.code == EINVAL ? KC_EXIT_USAGE : 1;
  }
  kc_cli_daemon d = {.cmd = "agent",
                     .host = a.o.host,
                     .port = kc_agent_port(agent),
                     .metrics = a.metrics,
                     .metrics_prefix = "kcage_agent",
                     .obj = agent,
                     .stop = stop_agent,
                     .run = run_agent};
  rc = kc_cli_serve(&d);
  kc_agent_free(agent);
  return rc;
}
