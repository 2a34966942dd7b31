/* `kcage tracker`: a TVM-compatible RPC tracker (docs/contracts.md). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kcage/tracker.h"

static kc_tracker_server *g_server;

static void on_signal(int sig) {
  (void)sig;
  if (g_server)
    kc_tracker_server_stop(g_server);
}

static void usage(FILE *out) {
  fprintf(out, "usage: kcage tracker [--host H] [--port P] [--port-end E] [--verbose]\n\n"
               "Run an RPC tracker that speaks TVM's protocol: TVM's rpc_server, its clients,\n"
               "`python -m tvm.exec.query_rpc_tracker` and kcage agents all use it unchanged.\n\n"
               "  --host H        address to listen on (default 0.0.0.0)\n"
               "  --port P        first port to try (default 9190)\n"
               "  --port-end E    try ports up to E-1 when P is taken (default P+10, like TVM)\n"
               "  --keepalive S   drop silent peers after about S seconds (default 15)\n"
               "  --verbose       log connections to stderr\n"
               "  --metrics H:P   serve Prometheus metrics on http://H:P/metrics (queues per\n"
               "                  key, leases, waiting time, connections and drops by reason)\n"
               "The port bound is printed on stdout as `tracker listening on HOST:PORT`.\n");
}

int kc_cmd_tracker(int argc, char **argv) {
  kc_tracker_opts o;
  kc_tracker_opts_init(&o);
  bool port_end_set = false;
  const char *metrics = NULL;
  static const struct option longs[] = {
      {"host", required_argument, 0, 'H'},     {"port", required_argument, 0, 'p'},
      {"port-end", required_argument, 0, 'e'}, {"keepalive", required_argument, 0, 'k'},
      {"verbose", no_argument, 0, 'v'},        {"metrics", required_argument, 0, 'm'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  uint64_t v;
  double d;
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (ch) {
    case 'H':
      o.host = optarg;
      break;
    case 'p':
      if (kc_cli_parse_port("tracker", "--port", optarg, 0, &o.port) < 0)
        return KC_EXIT_USAGE;
      break;
    case 'e':
      if (kc_cli_parse_uint(optarg, 1, 65536, &v) < 0) {
        kc_cli_error("tracker", "--port-end %s: not a port", optarg);
        return KC_EXIT_USAGE;
      }
      o.port_end = v > 65535 ? 65535 : (uint16_t)v;
      port_end_set = true;
      break;
    case 'k':
      if (kc_cli_parse_seconds(optarg, &d) < 0 || d < 1) {
        kc_cli_error("tracker", "--keepalive %s: need seconds >= 1", optarg);
        return KC_EXIT_USAGE;
      }
      o.keepalive_s = d;
      break;
    case 'v':
      o.verbose = true;
      break;
    case 'm':
      metrics = optarg;
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
    kc_cli_error("tracker", "unexpected argument %s", argv[optind]);
    return KC_EXIT_USAGE;
  }
  if (!port_end_set)
    o.port_end = o.port && o.port < 65526 ? (uint16_t)(o.port + 10) : 0;
  kc_error err = {0};
  if (kc_tracker_server_new(&o, &g_server, &err) < 0) {
    kc_cli_error("tracker", "%s", err.msg);
    return 1;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  printf("tracker listening on %s:%u\n", o.host ? o.host : "0.0.0.0",
         kc_tracker_server_port(g_server));
  if (kc_cli_metrics("tracker", metrics, "kcage_tracker") < 0) {
    kc_tracker_server_free(g_server);
    g_server = NULL;
    return 1;
  }
  fflush(stdout);
  int rc = kc_tracker_server_run(g_server, &err);
  kc_tracker_server_free(g_server);
  g_server = NULL;
  if (rc < 0) {
    kc_cli_error("tracker", "%s", err.msg);
    return 1;
  }
  return 0;
}
