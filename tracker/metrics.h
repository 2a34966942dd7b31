/* Prometheus metrics of the daemons (`--metrics HOST:PORT`): counters the tracker and
 * the agent bump through this small API, served as Prometheus' text format by
 * libmicrohttpd on a thread of its own.  Every call is a cheap no-op until
 * kc_metrics_start(), so a daemon without --metrics pays nothing. */
#ifndef KCAGE_TRACKER_METRICS_H
#define KCAGE_TRACKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"

/* Serve GET /metrics and GET /healthz on "HOST:PORT" (port 0 = any; *bound_port tells).  prefix
 * names the daemon ("kcage_tracker", "kcage_agent").  Once per process, before any fork whose
 * children count verdicts (kc_metrics_verdict). */
int kc_metrics_start(const char *hostport, const char *prefix, uint16_t *bound_port, kc_error *err);
void kc_metrics_stop(void);
int kc_metrics_on(void);

/* A connection accepted; one closed by the peer; one we dropped, and why (a short
 * snake_case reason: "bad_frame", "mismatch", ...). */
void kc_metrics_conn_opened(void);
void kc_metrics_conn_closed(const char *drop_reason);
/* A lease of a device of `key`, after its request waited since `queued_at`
 * (kc_metrics_now(); 0 = not queued). */
double kc_metrics_now(void);
void kc_metrics_lease(const char *key, double queued_at);
/* The tracker's queues now: free devices and waiting requests of one key.  The
 * tracker calls it for every key at most every kc_metrics_snapshot_due(). */
int kc_metrics_snapshot_due(void);
void kc_metrics_queue(const char *key, size_t free_devices, size_t pending);
/* How long the tracker's event loop may sleep: -1 without metrics, else the snapshot
 * period in ms (so an idle loop still publishes its last state). */
int kc_metrics_poll_ms(void);
/* The daemon's event loop turned (each turn, no more than kc_metrics_poll_ms apart):
 * /healthz answers 503 once it has not for 10 s. */
void kc_metrics_heartbeat(void);
/* Agent: a session started / ended; one kernel's verdict ("ok", "crash", ...).  The
 * verdicts may be counted in a forked child: they live in shared memory. */
void kc_metrics_session(int started);
void kc_metrics_verdict(const char *status);

#endif
