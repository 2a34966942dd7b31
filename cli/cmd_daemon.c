/* What `kcage tracker` and `kcage agent` do once bound: stop on SIGINT/SIGTERM, say
 * where they listen, serve --metrics (the server side is tracker/metrics.c) and run. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "metrics.h"

static const kc_cli_daemon *g_daemon;

static void on_signal(int sig) {
  (void)sig;
  const kc_cli_daemon *d = g_daemon;
  if (d)
    d->stop(d->obj);
}

/* --metrics HOST:PORT (NULL: none): prints `metrics listening on HOST:PORT`; -1 (and
 * the error printed) when it cannot. */
static int start_metrics(const char *cmd, const char *hostport, const char *prefix) {
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

int kc_cli_serve(const kc_cli_daemon *d) {
  g_daemon = d;
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  printf("%s listening on %s:%u\n", d->cmd, d->host ? d->host : "0.0.0.0", d->port);
  int rc = start_metrics(d->cmd, d->metrics, d->metrics_prefix);
  kc_error err = {0};
  if (rc == 0) {
    fflush(stdout);
    rc = d->run(d->obj, &err);
    if (rc < 0)
      kc_cli_error(d->cmd, "%s", err.msg);
  }
  g_daemon = NULL;
  return rc < 0 ? 1 : 0;
}
