/* `kcage agent`: a device agent for a TVM-compatible tracker (docs/contracts.md). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kcage/tracker.h"

static kc_agent *g_agent;
static kc_auth_key auth;

static void on_signal(int sig) {
  (void)sig;
  if (g_agent)
    kc_agent_stop(g_agent);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: kcage agent --tracker HOST:PORT --key KEY [--host H] [--port P] [--port-end E]\n"
          "                   [--custom-addr A] [--workers N] [--auth-key FILE]\n"
          "                   [--max-memory SIZE] [--max-timeout SEC] [--max-session SEC]\n"
          "                   [--metrics H:P] [--limits-fallback rlimit] [--verbose]\n\n"
          "Register this machine with an RPC tracker (kcage's or TVM's own) under KEY, like\n"
          "TVM's rpc_server, and serve kcage sessions: kernels uploaded by `kcage bench\n"
          "--tracker` are built and timed here, each session in its own sandboxed pool.\n\n"
          "  --tracker HOST:PORT  the tracker (port defaults to 9190)\n"
          "  --key KEY            device key clients request (no ':')\n"
          "  --host H             address to listen on for sessions (default 0.0.0.0)\n"
          "  --port P             first port to try (default 9090; 0 = any)\n"
          "  --port-end E         last port to try + 1 (default 9199)\n"
          "  --custom-addr A      address the tracker hands to clients (NAT, containers)\n"
          "  --workers N          measuring workers per session (default: CPUs)\n"
          "  --auth-key FILE      serve only clients that prove this shared key (a file\n"
          "                       only you can read, 16+ bytes), and prove it to them\n"
          "  --max-memory SIZE    cap on a session's --memory and --build-memory\n"
          "  --max-timeout SEC    cap on a session's --timeout and --build-timeout\n"
          "  --max-session SEC    cap on a session's length, also when it asks for none\n"
          "                       (requests above a cap are lowered; records say so in\n"
          "                       their \"clamped\" field)\n"
          "  --metrics H:P        serve Prometheus metrics on http://H:P/metrics (sessions,\n"
          "                       verdicts by status, connections and drops by reason)\n"
          "  --limits-fallback rlimit\n"
          "                       without a delegated cgroup, hold the sessions' limits as\n"
          "                       rlimits instead of failing them\n"
          "  --verbose            log registrations to stderr (sessions and dropped\n"
          "                       clients are always logged)\n"
          "The session port is printed on stdout as `agent listening on HOST:PORT`.\n");
}

/* --auth-key and the operator caps. */
static int fleet_option(int ch, const char *arg, kc_agent_opts *o) {
  kc_error err = {0};
  double d;
  switch (ch) {
  case 'A':
    if (kc_auth_key_load(arg, &auth, &err) < 0) {
      kc_cli_error("agent", "%s", err.msg);
      return -1;
    }
    o->auth = &auth;
    return 0;
  case 'M':
    if (kc_cli_parse_size(arg, &o->caps.max_memory_bytes) < 0 ||
        o->caps.max_memory_bytes < (16u << 20)) {
      kc_cli_error("agent", "--max-memory %s: want a size of at least 16M", arg);
      return -1;
    }
    return 0;
  default:
    if (kc_cli_parse_seconds(arg, &d) < 0 || d <= 0) {
      kc_cli_error("agent", "%s %s: want seconds > 0",
                   ch == 'T' ? "--max-timeout" : "--max-session", arg);
      return -1;
    }
    *(ch == 'T' ? &o->caps.max_timeout_s : &o->caps.max_session_s) = d;
    return 0;
  }
}

int kc_cmd_agent(int argc, char **argv) {
  kc_agent_opts o;
  kc_agent_opts_init(&o);
  char thost[KC_TRACKER_MAX_ADDR];
  bool have_tracker = false, port_end_set = false;
  const char *metrics = NULL;
  kc_error err = {0};
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
                                        {"max-memory", required_argument, 0, 'M'},
                                        {"max-timeout", required_argument, 0, 'T'},
                                        {"max-session", required_argument, 0, 'S'},
                                        {"metrics", required_argument, 0, 'm'},
                                        {"limits-fallback", required_argument, 0, 'l'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  uint64_t v;
  double d;
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (ch) {
    case 't':
      if (kc_parse_hostport(optarg, KC_TRACKER_DEFAULT_PORT, thost, sizeof thost, &o.tracker_port,
                            &err) < 0) {
        kc_cli_error("agent", "--tracker: %s", err.msg);
        return KC_EXIT_USAGE;
      }
      o.tracker_host = thost;
      have_tracker = true;
      break;
    case 'k':
      o.key = optarg;
      break;
    case 'H':
      o.host = optarg;
      break;
    case 'p':
      if (kc_cli_parse_port("agent", "--port", optarg, 0, &o.port) < 0)
        return KC_EXIT_USAGE;
      break;
    case 'e':
      if (kc_cli_parse_port("agent", "--port-end", optarg, 1, &o.port_end) < 0)
        return KC_EXIT_USAGE;
      port_end_set = true;
      break;
    case 'c':
      o.custom_addr = optarg;
      break;
    case 'w':
      if (kc_cli_parse_uint(optarg, 1, 1024, &v) < 0) {
        kc_cli_error("agent", "--workers %s: need 1..1024", optarg);
        return KC_EXIT_USAGE;
      }
      o.workers = (unsigned)v;
      break;
    case 'r': /* undocumented: re-PUT delay, for tests */
      if (kc_cli_parse_seconds(optarg, &d) < 0) {
        kc_cli_error("agent", "--reput %s: not seconds", optarg);
        return KC_EXIT_USAGE;
      }
      o.reput_s = d;
      o.check_s = d / 3 > 0.05 ? d / 3 : 0.05;
      break;
    case 'v':
      o.verbose = true;
      break;
    case 'A':
    case 'M':
    case 'T':
    case 'S':
      if (fleet_option(ch, optarg, &o) < 0)
        return KC_EXIT_USAGE;
      break;
    case 'm':
      metrics = optarg;
      break;
    case 'l':
      if (kc_cli_limits_fallback("agent", optarg) < 0)
        return KC_EXIT_USAGE;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return KC_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    kc_cli_error("agent", "unexpected argument %s", argv[optind]);
    return KC_EXIT_USAGE;
  }
  if (!have_tracker || !o.key) {
    kc_cli_error("agent", "--tracker and --key are required");
    return KC_EXIT_USAGE;
  }
  if (o.port == 0 && !port_end_set)
    o.port_end = 0;
  if (kc_agent_new(&o, &g_agent, &err) < 0) {
    kc_cli_error("agent", "%s", err.msg);
    return err.code == EINVAL ? KC_EXIT_USAGE : 1;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  printf("agent listening on %s:%u\n", o.host ? o.host : "0.0.0.0", kc_agent_port(g_agent));
  if (kc_cli_metrics("agent", metrics, "kcage_agent") < 0) {
    kc_agent_free(g_agent);
    g_agent = NULL;
    return 1;
  }
  fflush(stdout);
  int rc = kc_agent_run(g_agent, &err);
  kc_agent_free(g_agent);
  g_agent = NULL;
  if (rc < 0) {
    kc_cli_error("agent", "%s", err.msg);
    return 1;
  }
  return 0;
}
