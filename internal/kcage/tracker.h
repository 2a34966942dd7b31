/* The TVM tracker wire (codes, frames, messages), the session protocol's frames and the agent's
 * side of a session, for tracker/ and its tests.  Not installed: it extends the public
 * include/kcage/tracker.h, which it includes first; in-tree code that includes "kcage/tracker.h"
 * gets both (internal/ comes first on its include path). */
#ifndef KCAGE_INTERNAL_TRACKER_H
#define KCAGE_INTERNAL_TRACKER_H

#include_next <kcage/tracker.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KC_TRACKER_MAGIC 0x2F271
#define KC_RPC_MAGIC 0xFF271
#define KC_RPC_CODE_SUCCESS 0xFF271
#define KC_RPC_CODE_DUPLICATE 0xFF272
#define KC_RPC_CODE_MISMATCH 0xFF273

/* TVM's TrackerCode. */
enum {
  KC_TRK_FAIL = -1,
  KC_TRK_SUCCESS = 0,
  KC_TRK_PING = 1,
  KC_TRK_STOP = 2,
  KC_TRK_PUT = 3,
  KC_TRK_REQUEST = 4,
  KC_TRK_UPDATE_INFO = 5,
  KC_TRK_SUMMARY = 6,
  KC_TRK_GET_PENDING_MATCHKEYS = 7,
};

#define KC_TRACKER_MAX_FRAME (1u << 20) /* TVM main: length <= 0 or > 1 MiB closes */
/* Replies may be larger (a SUMMARY of a big fleet); clients accept up to this. */
#define KC_TRACKER_MAX_REPLY (64u << 20)

/* JSON the way Python's json.dumps writes it (", " and ": " separators, ASCII only,
 * insertion order): what TVM's peers see on the wire. */
#define KC_TRACKER_JSON_FLAGS (JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII | JSON_ENCODE_ANY)

/* ---------------------------------------------------------------------------------
 * Messages: decoding and strict validation (tracker/proto.c).
 * ------------------------------------------------------------------------------- */
typedef struct kc_tracker_msg {
  int code;
  json_t *root;            /* owns everything below */
  const char *key;         /* PUT, REQUEST */
  json_t *port;            /* PUT: integer (or digit string) */
  const char *matchkey;    /* PUT */
  const char *custom_addr; /* PUT: NULL = the peer's address */
  double priority;         /* REQUEST */
  json_t *info;            /* UPDATE_INFO: the object */
  const char *stop_key;    /* STOP */
} kc_tracker_msg;

/* Parse one frame payload (no length prefix).  Returns 0, or -1 with err for anything
 * that is not a well-formed TVM tracker message (bad JSON, unknown code, wrong shape,
 * over-long strings).  On success msg->root must be released with kc_tracker_msg_clear. */
int kc_tracker_msg_parse(const void *buf, size_t len, kc_tracker_msg *msg, kc_error *err);
void kc_tracker_msg_clear(kc_tracker_msg *msg);

/* Encode `value` as one frame (length prefix + JSON) into a malloc'd buffer. */
int kc_tracker_frame_encode(const json_t *value, char **out, size_t *out_len, kc_error *err);

/* "HOST:PORT", "[v6]:PORT" or "HOST" (port = default_port). */
int kc_parse_hostport(const char *s, uint16_t default_port, char *host, size_t host_len,
                      uint16_t *port, kc_error *err);

/* TCP connect with a deadline; returns the fd (blocking, TCP_NODELAY) or -1. */
int kc_tcp_connect(const char *host, uint16_t port, double timeout_s, kc_error *err);

/* Send one message and wait for its one reply frame (*reply: new reference). */
int kc_tracker_call(kc_tracker_conn *c, const json_t *msg, double timeout_s, json_t **reply,
                    kc_error *err);

/* The server side: does the key a client sent ("client:<matchkey>[ -timeout=N]") name
 * this matchkey?  *timeout_s gets N (0 when absent or not a positive number). */
bool kc_rpc_client_key(const char *key, const char *matchkey, double *timeout_s);

#define KC_SESSION_VERSION 1
#define KC_SESSION_MAX_FILE (64u << 20)
#define KC_SESSION_MAX_TOTAL (256u << 20)
#define KC_SESSION_MAX_FILES 1024

int kc_auth_nonce(char out[KC_AUTH_HEX + 1], kc_error *err);
bool kc_auth_hex_ok(const char *s);
/* The proof of `agent` (true) or of the client, over both nonces. */
void kc_auth_mac(const kc_auth_key *key, bool agent, const char *client_nonce,
                 const char *agent_nonce, char out[KC_AUTH_HEX + 1]);
/* Constant-time: the MAC is the proof of that side. */
bool kc_auth_check(const kc_auth_key *key, bool agent, const char *client_nonce,
                   const char *agent_nonce, const char *mac);

int kc_session_fd(const kc_session *s);

/* Frame helpers shared by both sides. */
int kc_session_send(int fd, const json_t *msg, double deadline, kc_error *err);
int kc_session_recv(int fd, double deadline, json_t **msg, kc_error *err);

/* Agent side of one session (runs in the session's own process).  deadline < 0 = no
 * session timeout; timeout_s is what the client asked for (for the message). */
typedef struct kc_session_serve_opts {
  const char *device; /* "key@host" reported in hello and in every record */
  const char *dir;    /* private scratch directory for uploads */
  unsigned workers;
  double deadline; /* CLOCK_MONOTONIC seconds, < 0 = none */
  double timeout_s;
  double asked_timeout_s; /* what the client asked for (0 = none), when a cap changed it */
  kc_run_caps caps;
  const kc_auth_key *auth; /* NULL = no authentication */
  double auth_timeout_s;   /* the proof's deadline; 0 = KC_AUTH_TIMEOUT_S */
  kc_settings settings;    /* the agent's, for this session's batch */
} kc_session_serve_opts;
int kc_session_serve(int fd, const kc_session_serve_opts *o, kc_error *err);

/* The run config on the wire (tracker/run_config.c): every option of the batch that the
 * device honours.  decode fills cfg from c (strings point into c) or refuses it. */
json_t *kc_run_config_encode(const struct kc_measure_config *cfg);
int kc_run_config_decode(const json_t *c, struct kc_measure_config *cfg, kc_error *err);
/* Lower cfg's limits to the caps; returns {"name": {"asked": X, "cap": Y}, ...}. */
json_t *kc_run_config_clamp(struct kc_measure_config *cfg, const kc_run_caps *caps);
/* An agent's {"op":"records"} reply as hostile input: n records rebuilt and checked,
 * named after kernels[i], or -1 with an error naming peer. */
int kc_remote_records_decode(const json_t *reply, const char *const *kernels, size_t n,
                             const char *peer, json_t **records, kc_error *err);

#ifdef __cplusplus
}
#endif
#endif
