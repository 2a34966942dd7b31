/* Helpers for the tracker tests: a tracker server on a thread of the test process, and
 * a raw client that writes the bytes TVM's Python writes (base.sendjson: "<i" length,
 * then json.dumps with its default ", " separators) so compatibility is tested on the
 * wire, not through our own client library. */
#ifndef KC_TRK_TEST_H
#define KC_TRK_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/tracker.h"

typedef struct trk_srv {
  kc_tracker_server *s;
  uint16_t port;
  unsigned long thread;
} trk_srv;

void trk_start(trk_srv *t);
/* Same, with keepalive_s (silent peers are dropped after about that long). */
void trk_start_ka(trk_srv *t, double keepalive_s);
/* Same, with handshake_s (a connection without the magic is dropped after that). */
void trk_start_hs(trk_srv *t, double keepalive_s, double handshake_s);
/* Same, with these options (host, port and stop key are the tests' own). */
void trk_start_opts(trk_srv *t, kc_tracker_opts *o);
void trk_stop(trk_srv *t);

/* Connect to 127.0.0.1:port; with magic, do the tracker magic exchange. */
int raw_connect(uint16_t port, bool magic);
/* Like base.sendjson: "<i" length then the JSON text exactly as given, as TWO writes
 * (TVM's Python writes the length and the payload separately). */
void raw_send(int fd, const char *json);
void raw_send_bytes(int fd, const void *buf, size_t len);
/* One reply frame as text (malloc'd), or NULL on EOF/timeout. */
char *raw_recv(int fd, double timeout_s);
/* true when the peer closed the connection within timeout_s. */
bool raw_closed(int fd, double timeout_s);
/* true when nothing is readable for timeout_s. */
bool raw_quiet(int fd, double timeout_s);
/* Send and expect this exact reply text. */
void raw_call_expect(int fd, const char *json, const char *want);

/* Register like TVM's rpc_server: UPDATE_INFO then PUT. */
void raw_register(int fd, const char *key, int port, const char *matchkey);
/* queue_info[key].free / .pending via SUMMARY on a fresh connection (-1 when absent). */
int summary_count(uint16_t port, const char *key, const char *field);
int summary_servers(uint16_t port);
/* Poll until summary_count == want or timeout; returns the last value. */
int wait_count(uint16_t port, const char *key, const char *field, int want, double timeout_s);
double now_s(void);

#endif
