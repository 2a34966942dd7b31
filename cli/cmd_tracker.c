/* `kcage tracker`: a TVM-compatible RPC tracker (docs/contracts.md). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kcage/tracker.h"

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
               "  --version       print kcage's version\n"
               "The port bound is printed on stdout as `tracker listening on HOST:PORT`.\n");
}

typedef struct tracker_args {
  kc_tracker_opts o;
  bool port_end_set;
  const char *metrics;
} tracker_args;

#define NOT_MINE 1000

/* One option into t: 0, the exit status of bad usage, or NOT_MINE (--help, unknown). */
static int tracker_option(tracker_args *t, int ch, const char *arg) {
  uint64_t v;
  double d;
  switch (ch) {
  case 'H':
    t->o.host = arg;
    return 0;
  case 'p':
    return kc_cli_parse_port("tracker", "--port", arg, 0, &t->o.port) < 0 ? KC_EXIT_USAGE : 0;
  case 'e':
    if (kc_cli_parse_uint(arg, 1, 65536, &v) < 0) {
      kc_cli_error("tracker", "--port-end %s: not a port", arg);
      return KC_EXIT_USAGE;
    }
    t->o.port_end = v > 65535 ? 65535 : (uint16_t)v;
    t->port_end_set = true;
    return 0;
  case 'k':
    if (kc_parse_decimal(arg, &d) < 0 || d < 1) {
      kc_cli_error("tracker", "--keepalive %s: need seconds >= 1", arg);
      return KC_EXIT_USAGE;
    }
    t->o.keepalive_s = d;
    return 0;
  case 'v':
    t->o.verbose = true;
    return 0;
  case 'm':
    t->metrics = arg;
    return 0;
  }
  return NOT_MINE;
}

static void stop_server(void *s) {
  kc_tracker_server_stop(s);
}

static int run_server(void *s, kc_error *err) {
  return kc_tracker_server_run(s, err);
}

int kc_cmd_tracker(int argc, char **argv) {
  tracker_args t = {0};
  kc_tracker_opts_init(&t.o);
  static const struct option longs[] = {{"host", required_argument, 0, 'H'},
                                        {"port", required_argument, 0, 'p'},
                                        {"port-end", required_argument, 0, 'e'},
                                        {"keepalive", required_argument, 0, 'k'},
                                        {"verbose", no_argument, 0, 'v'},
                                        {"metrics", required_argument, 0, 'm'},
                                        {"help", no_argument, 0, 'h'},
                                        KC_OPTION_VERSION,
                                        {0, 0, 0, 0}};
  int ch, rc;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1)
    if ((rc = tracker_option(&t, ch, optarg)))
      return rc == NOT_MINE ? kc_cli_help_or_usage(ch, usage) : rc;
  if ((rc = kc_cli_no_operands("tracker", argc, argv)))
    return rc;
  if (!t.port_end_set)
    t.o.port_end = t.o.port && t.o.port < 65526 ? (uint16_t)(t.o.port + 10) : 0;
  kc_tracker_server *server;
  kc_error err = {0};
  if (kc_tracker_server_new(&t.o, &server, &err) < 0) {
    kc_cli_error("tracker", "%s", err.msg);
    return 1;
  }
  kc_cli_daemon d = {.cmd = "tracker",
                     .host = t.o.host,
                     .port = kc_tracker_server_port(server),
                     .metrics = t.metrics,
                     .metrics_prefix = "kcage_tracker",
                     .obj = server,
                     .stop = stop_server,
                     .run = run_server};
  rc = kc_cli_serve(&d);
  kc_tracker_server_free(server);
  return rc;
}
