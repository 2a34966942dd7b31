/* --metrics for kcage tracker and kcage agent (the server side is tracker/metrics.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"

int kc_cli_metrics(const char *cmd, const char *hostport, const char *prefix) {
  if (!hostport)
    return 0;
  kc_error err = {0};
  uint16_t port = 0;
  if (kc_metrics_start(hostport, prefix, &port, &err) < 0) {
    kc_cli_error(cmd, "%s", err.msg);
    return -1;
  }
  const char *colon = strrchr(hostport, ':');
  printf("metrics listening on %.*s:%u\n", (int)(colon - hostport), hostport, port);
  return 0;
}
