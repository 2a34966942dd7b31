/* `kcage query`: what `python -m tvm.exec.query_rpc_tracker` prints. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "kcage/tracker.h"

static void usage(FILE *out) {
  fprintf(out, "usage: kcage query [--tracker HOST:PORT] [--host H] [--port P] [--json]\n\n"
               "Print a tracker's servers and queues exactly like TVM's query_rpc_tracker.\n"
               "Defaults: $TVM_TRACKER_HOST / $TVM_TRACKER_PORT, else 127.0.0.1:9190.\n"
               "  --json      print the raw SUMMARY object instead\n"
               "  --version   print kcage's version\n");
}

int kc_cmd_query(int argc, char **argv) {
  char host[KC_TRACKER_MAX_ADDR];
  uint16_t port;
  kc_tracker_env_default(host, sizeof host, &port);
  bool json = false;
  static const struct option longs[] = {{"tracker", required_argument, 0, 't'},
                                        {"host", required_argument, 0, 'H'},
                                        {"port", required_argument, 0, 'p'},
                                        {"json", no_argument, 0, 'j'},
                                        {"help", no_argument, 0, 'h'},
                                        KC_OPTION_VERSION,
                                        {0, 0, 0, 0}};
  kc_error err = {0};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (ch) {
    case 't':
      if (kc_parse_hostport(optarg, port, host, sizeof host, &port, &err) < 0) {
        kc_cli_error("query", "--tracker: %s", err.msg);
        return KC_EXIT_USAGE;
      }
      break;
    case 'H':
      snprintf(host, sizeof host, "%s", optarg);
      break;
    case 'p':
      if (kc_cli_parse_port("query", "--port", optarg, 1, &port) < 0)
        return KC_EXIT_USAGE;
      break;
    case 'j':
      json = true;
      break;
    default:
      return kc_cli_help_or_usage(ch, usage);
    }
  }
  int rc = kc_cli_no_operands("query", argc, argv);
  if (rc)
    return rc;
  kc_tracker_conn *c;
  json_t *s;
  if (kc_tracker_connect(host, port, 10, &c, &err) < 0 || kc_tracker_summary(c, &s, &err) < 0) {
    kc_cli_error("query", "Cannot connect to tracker %s:%u: %s", host, port, err.msg);
    return 1;
  }
  kc_tracker_close(c);
  if (json) {
    char *t = json_dumps(s, KC_TRACKER_JSON_FLAGS);
    printf("%s\n", t ? t : "");
    free(t);
  } else {
    char *t = kc_tracker_text_summary(s);
    printf("Tracker address %s:%u\n\n%s\n", host, port, t ? t : "");
    free(t);
  }
  json_decref(s);
  return 0;
}
