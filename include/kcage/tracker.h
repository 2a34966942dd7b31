/* Tracker: Apache TVM's RPC tracker protocol, a tracker server, a tracker client with
 * leases and the TVM RPC handshake, and the device agent (docs/contracts.md).
 *
 * Wire (unchanged from TVM so TVM's own clients, servers and query_rpc_tracker work):
 *   client -> tracker: int32 LE 0x2F271; tracker -> client: the same magic.
 *   then frames: int32 LE length + UTF-8 JSON, one reply frame per request.
 * What kcage adds without changing the wire: frames are bounded (1 MiB, like TVM
 * v0.25), every message shape is validated and a bad one closes only its own
 * connection, servers whose connection dies are removed at once (with or without
 * UPDATE_INFO), silent peers are expired by TCP keepalive/user-timeout, a REQUEST whose
 * client left stops counting as pending, replies go out in one write with TCP_NODELAY,
 * the listen backlog is SOMAXCONN, connections that never send the magic are dropped
 * (first at the fd limit) and empty keys give way when the key table fills. */
#ifndef KCAGE_TRACKER_H
#define KCAGE_TRACKER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"
#include "kcage/settings.h"

#include "kcage/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

KC_PUBLIC_BEGIN

#define KC_TRACKER_MAX_KEY 256 /* device key */
#define KC_TRACKER_MAX_MATCHKEY 512
#define KC_TRACKER_MAX_ADDR 256
#define KC_TRACKER_DEFAULT_PORT 9190

/* ---------------------------------------------------------------------------------
 * Tracker server (tracker/server.c): single thread, epoll.
 * ------------------------------------------------------------------------------- */
typedef struct kc_tracker_opts {
  const char *host;     /* NULL = "0.0.0.0" */
  uint16_t port;        /* first port to try; 0 = any free port */
  uint16_t port_end;    /* exclusive end of the search (TVM's --port-end); 0 = port+1 */
  const char *stop_key; /* the key STOP must carry; NULL = a random one */
  size_t max_frame;     /* 0 = KC_TRACKER_MAX_FRAME */
  size_t max_buffered;  /* all connections' large buffers together; 0 = 256 MiB */
  double keepalive_s;   /* silent peers are dropped after about this; 0 = 15 */
  double handshake_s;   /* a connection without the magic by then is dropped; 0 = 5 */
  bool verbose;         /* log connections to stderr */
} kc_tracker_opts;
void kc_tracker_opts_init(kc_tracker_opts *o);

typedef struct kc_tracker_server kc_tracker_server;
int kc_tracker_server_new(const kc_tracker_opts *o, kc_tracker_server **out, kc_error *err);
uint16_t kc_tracker_server_port(const kc_tracker_server *s);
const char *kc_tracker_server_stop_key(const kc_tracker_server *s);
/* Serve until STOP (with the right key) or kc_tracker_server_stop. */
int kc_tracker_server_run(kc_tracker_server *s, kc_error *err);
/* Async-signal-safe and thread-safe: makes run() return. */
void kc_tracker_server_stop(kc_tracker_server *s);
void kc_tracker_server_free(kc_tracker_server *s);

/* ---------------------------------------------------------------------------------
 * Tracker client (tracker/client.c).  Every call has a deadline: timeout_s < 0 means
 * wait forever (only when asked), 0 means the default (10 s for one call).
 * ------------------------------------------------------------------------------- */
typedef struct kc_tracker_conn kc_tracker_conn;

/* TVM_TRACKER_HOST / TVM_TRACKER_PORT, else 127.0.0.1:9190. */
void kc_tracker_env_default(char *host, size_t host_len, uint16_t *port);

int kc_tracker_connect(const char *host, uint16_t port, double timeout_s, kc_tracker_conn **out,
                       kc_error *err);
void kc_tracker_close(kc_tracker_conn *c);
int kc_tracker_fd(const kc_tracker_conn *c);
/* SUMMARY: *summary = {"queue_info": ..., "server_info": [...]} (new reference). */
int kc_tracker_summary(kc_tracker_conn *c, json_t **summary, kc_error *err);
/* TVM's TrackerSession.text_summary(), byte for byte (malloc'd). */
char *kc_tracker_text_summary(const json_t *summary);

/* A lease: one device handed out by the tracker. */
typedef struct kc_lease {
  char host[KC_TRACKER_MAX_ADDR];
  uint16_t port;
  char matchkey[KC_TRACKER_MAX_MATCHKEY];
  char server_key[KC_TRACKER_MAX_KEY + 16]; /* "server:<key>" from the handshake */
  /* The request's session_constructor_args (not copied: they live as long as the
   * kc_request_opts they came from), for whatever opens the session on this lease. */
  const char *const *session_constructor_args;
  size_t n_session_constructor_args;
} kc_lease;

/* TVM's session_constructor_args: args[0] names the constructor the device server
 * calls to make the session (TVM: any registered global, default "rpc.LocalSession";
 * a kcage agent: see the session protocol below), args[1..] are its arguments.  Like
 * TVM's, they travel after the tracker match, on the session's own connection: the
 * tracker protocol does not change.  n = 0: none (the server's default session). */
#define KC_SESSION_CTOR_MAX_ARGS 32
#define KC_SESSION_CTOR_MAX_NAME 128
#define KC_SESSION_CTOR_MAX_ARG 1024
/* 0, or -1 naming what is wrong: a name outside [A-Za-z0-9._-] or empty, too many or
 * too long arguments, control characters (they reach logs and terminals). */
int kc_session_ctor_check(const char *const *args, size_t n, kc_error *err);

typedef struct kc_request_opts {
  double priority;          /* TVM default 1 */
  double session_timeout_s; /* 0 = none (sent as " -timeout=N", integer seconds rounded up) */
  unsigned max_retry;       /* attempts; 0 = 5 (TVM) */
  double wait_s;            /* client-side deadline for the whole request: 0 = 60 s,
                               < 0 = wait forever (TVM's behaviour) */
  /* TVM's session_constructor_args (see above); checked before the tracker is asked,
   * handed to the session through kc_lease. */
  const char *const *session_constructor_args;
  size_t n_session_constructor_args;
} kc_request_opts;
void kc_request_opts_init(kc_request_opts *o);

/* REQUEST on an open tracker connection only (no device connect). */
int kc_tracker_request_lease(kc_tracker_conn *c, const char *key, double priority, double timeout_s,
                             kc_lease *lease, kc_error *err);

/* TVM's RPC handshake as the client: RPC_MAGIC, "client:<matchkey>[ -timeout=N]";
 * returns the connected fd (the data plane follows). */
int kc_rpc_connect(const char *host, uint16_t port, const char *matchkey, double session_timeout_s,
                   double timeout_s, char *server_key, size_t server_key_len, kc_error *err);

/* TVM's TrackerSession.request: up to max_retry attempts of REQUEST + connect +
 * handshake.  *fd = the connected device session.  Error text follows TVM's
 * "Cannot request <key> after <n> retry, last_error:<err>". */
int kc_tracker_request(const char *tracker_host, uint16_t tracker_port, const char *key,
                       const kc_request_opts *o, kc_lease *lease, int *fd, kc_error *err);

/* TVM's request_and_run: fn(fd, lease, ctx) returns 0, or -1 with err to retry with a
 * new device (up to max_retry times; a failure after >= 95 % of the session timeout is
 * reported as a session timeout and not retried).  fn does not close fd. */
typedef int (*kc_session_fn)(int fd, const kc_lease *lease, void *ctx, kc_error *err);
int kc_tracker_request_and_run(const char *tracker_host, uint16_t tracker_port, const char *key,
                               const kc_request_opts *o, unsigned max_retry, kc_session_fn fn,
                               void *ctx, kc_error *err);

/* ---------------------------------------------------------------------------------
 * The kcage session protocol (tracker/session.c), spoken on the connection after the
 * TVM handshake.  Frames: uint32 LE length + JSON object (<= 1 MiB).  A file upload
 * is a header frame {"op":"file","name":N,"size":S} followed by S raw bytes.
 *   client                                   agent
 *   {"op":"hello","version":1}          ->   {"op":"hello","version":1,"device":D,...}
 *   {"op":"file","name":..,"size":..}+bytes -> {"op":"ok"}
 *   {"op":"run","kernels":[names],"reference":name|null,"config":{...}}
 *                                        ->   {"op":"records","records":[...]}
 *   {"op":"bye"}                         ->   (close)
 * session_constructor_args: the client's hello carries them as
 * "session_constructor_args": [name, arg...] (strings).  An agent that honours them
 * answers with "session_constructor": {"name": name, "args": [...], "clamped": {...}}
 * (clamped: what the operator's caps lowered, as kc_run_config_clamp says it), or
 * refuses the session with an error naming the constructor.  A client that sent them
 * and gets a hello without that acknowledgement refuses the session: a limit the
 * tenant asked for is never silently dropped (an older agent ignores the field).
 * Any failure: {"op":"error","message":M[,"code":"session_timeout"]} and the agent
 * closes.  The config object carries kc_measure_config's fields by name (args, seed,
 * rtol, atol, entry, number, repeat, min_repeat_ms, cooldown_ms, flush_cache,
 * timeout_s, memory_bytes, sets, checks).
 * ------------------------------------------------------------------------------- */
/* Opt-in mutual authentication (tracker/auth.c): a shared key both sides prove by
 * HMAC-SHA256 over fresh nonces, right after hello (see auth.c for the exchange).
 * Under a key, every byte after the two hellos travels in ChaCha20-Poly1305 records
 * under per-session, per-direction keys (tracker/seal.h, docs/fleet-security.md); a
 * peer that offers the plain protocol is refused.  The client must prove the key
 * within the agent's auth timeout (KC_AUTH_TIMEOUT_S unless set), whatever the
 * session's own timeout. */
#define KC_AUTH_TIMEOUT_S 5.0
#define KC_AUTH_KEY_MIN 16
#define KC_AUTH_BYTES 32
#define KC_AUTH_HEX (2 * KC_AUTH_BYTES)
typedef struct kc_auth_key {
  uint8_t bytes[1024];
  size_t len; /* 0 = no key */
} kc_auth_key;
/* The key file: a regular file only its owner can read, 16..1024 bytes (a trailing
 * newline is not part of the key). */
int kc_auth_key_load(const char *path, kc_auth_key *key, kc_error *err);
typedef struct kc_session kc_session;
/* Say hello on a connected device fd (from kc_tracker_request); takes ownership of fd.
 * With auth (a key, else NULL) the agent must prove the key and the client proves it
 * back; an agent that does not is refused.  *hello (may be NULL) gets the agent's
 * hello object. */
int kc_session_open(int fd, double timeout_s, const kc_auth_key *auth, kc_session **out,
                    json_t **hello, kc_error *err);
typedef struct kc_session_open_opts {
  double timeout_s;        /* for the hello (and the auth exchange); 0 = 10 s */
  const kc_auth_key *auth; /* NULL = none */
  const char *const *session_constructor_args;
  size_t n_session_constructor_args;
} kc_session_open_opts;
/* kc_session_open with session_constructor_args: sent in the hello, and the session
 * refused unless the agent acknowledges them (see the protocol above). */
int kc_session_open_with(int fd, const kc_session_open_opts *o, kc_session **out, json_t **hello,
                         kc_error *err);
/* The agent's hello, kept by the session (borrowed; NULL after a failed open). */
const json_t *kc_session_hello(const kc_session *s);
int kc_session_upload(kc_session *s, const char *name, const void *data, size_t len, kc_error *err);
int kc_session_upload_file(kc_session *s, const char *name, const char *path, kc_error *err);
/* Send one {"op": ...} request and wait for its reply (new reference).  An "error"
 * reply becomes -1 with its message; a closed connection says the agent was lost. */
int kc_session_call(kc_session *s, const json_t *msg, double timeout_s, json_t **reply,
                    kc_error *err);
void kc_session_close(kc_session *s); /* sends bye; safe with NULL */
/* ---------------------------------------------------------------------------------
 * The device agent (tracker/agent.c): registers with a tracker like TVM's rpc_server
 * and serves kcage sessions, one at a time, each in its own process (one tenant: its
 * own pool, workers and cgroup subtree), killed at its session timeout.
 * ------------------------------------------------------------------------------- */
/* Operator caps (kcage agent --max-memory/--max-timeout/--max-session/--max-pids/
 * --max-cpus); 0 = no cap. */
typedef struct kc_run_caps {
  uint64_t max_memory_bytes; /* per measuring worker and per build */
  double max_timeout_s;      /* per kernel measurement and per build */
  double max_session_s;      /* a session's timeout, also when the client sets none */
  uint32_t max_pids;         /* a TVM RPC session's sandbox: processes and threads */
  double max_cpus;           /* a TVM RPC session's sandbox: CPU bandwidth in CPUs */
} kc_run_caps;

typedef struct kc_agent_opts {
  const char *tracker_host;
  uint16_t tracker_port;
  const char *key;         /* device key (no ':') */
  const char *host;        /* listen address; NULL = "0.0.0.0" */
  uint16_t port, port_end; /* listen port search [port, port_end); defaults 9090..9199 */
  const char *custom_addr; /* address the tracker hands out; NULL = what it sees */
  unsigned workers;        /* measuring workers per session; 0 = default */
  double check_s;          /* GET_PENDING_MATCHKEYS period; 0 = 2 (TVM) */
  double reput_s;          /* re-PUT a taken but unused matchkey after this; 0 = 6 (TVM ~8) */
  double max_backoff_s;    /* reconnect backoff cap; 0 = 5 */
  kc_run_caps caps;        /* operator caps on what a session may ask for */
  const kc_auth_key *auth; /* clients must prove this key; NULL = anyone */
  double auth_timeout_s;   /* ...within this long of the handshake; 0 = KC_AUTH_TIMEOUT_S */
  /* TVM RPC sessions: the interpreter with TVM (NULL = python3 in PATH) and the policies
   * a tenant may name through kcage.sandbox (NULL = "tvm"; [0] is the default). */
  const char *tvm_python;
  const char *const *tvm_policies;
  size_t n_tvm_policies;
  bool verbose;
  kc_settings settings; /* every session's sandboxes: the operator's, never a client's */
  /* Start each TVM session's interpreter in its own sandbox (a standby started ahead)
   * rather than fork it from the zygote: no session's process descends from one that
   * other tenants' sessions descend from too, at TVM's import per session. */
  bool tvm_no_zygote;
} kc_agent_opts;
void kc_agent_opts_init(kc_agent_opts *o);

typedef struct kc_agent kc_agent;
int kc_agent_new(const kc_agent_opts *o, kc_agent **out, kc_error *err);
uint16_t kc_agent_port(const kc_agent *a);
/* Serve forever (reconnecting to the tracker with backoff) until kc_agent_stop. */
int kc_agent_run(kc_agent *a, kc_error *err);
void kc_agent_stop(kc_agent *a); /* async-signal-safe */
void kc_agent_free(kc_agent *a);

/* ---------------------------------------------------------------------------------
 * `kcage bench --tracker` (tracker/remote_bench.c and its codecs).
 * ------------------------------------------------------------------------------- */
struct kc_measure_config;
/* Run a batch on a device leased from cfg->tracker under cfg->key; same contract as
 * kc_measure_run_batch.  auth: a key the agent must prove (NULL = none). */
int kc_measure_remote_run(const struct kc_measure_config *cfg, const kc_auth_key *auth,
                          const char *const *kernels, size_t n, json_t **records, kc_error *err);
KC_PUBLIC_END

#ifdef __cplusplus
}
#endif
#endif
