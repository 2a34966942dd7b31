/* The record layer of a keyed kcage session (internal to tracker/; docs/fleet-security.md).
 *
 * Once both hellos have crossed, every byte either side sends travels in records:
 *   u32 LE L | ciphertext (L - 16 bytes) | Poly1305 tag (16 bytes)
 * sealed with ChaCha20-Poly1305 (nettle) under a key per direction, the nonce being 4
 * zero bytes and the record's 64-bit little-endian sequence number in that direction
 * (0, 1, 2, ...), and the 4 length bytes as associated data.  17 <= L <= 1 MiB + 16 is
 * checked before anything is allocated.  A record that fails to open breaks the channel
 * for good: a changed, dropped, reordered or replayed record never opens, since the
 * receiver only tries the one sequence number it expects next.
 *
 * Keys (HKDF-SHA256, RFC 5869):
 *   PRK   = HKDF-Extract(salt = Nc || Na (the hello nonces, hex as sent), IKM = the key)
 *   T     = SHA-256("kcage transcript v1" 0 | u32 LE |CH| CH | u32 LE |AH| AH)
 *   k_c2s = HKDF-Expand(PRK, "kcage c2s v1" 0 T, 32)
 *   k_s2c = HKDF-Expand(PRK, "kcage s2c v1" 0 T, 32)
 * where CH and AH are the client's and the agent's hello payloads byte for byte, so a
 * hello changed on the way leaves the two sides with different keys. */
#ifndef KC_TRACKER_SEAL_H
#define KC_TRACKER_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"
#include "kcage/tracker.h"

#define KC_SEAL_MAX_PLAIN (1u << 20)
#define KC_SEAL_TAG 16
#define KC_SEAL_HDR 4
#define KC_SEAL_KEY 32
#define KC_SEAL_NAME "chacha20-poly1305" /* what a keyed hello announces */

typedef struct kc_seal {
  uint8_t send_key[KC_SEAL_KEY], recv_key[KC_SEAL_KEY];
  uint64_t send_seq, recv_seq;
  bool broken; /* a record failed to open, or a counter ran out: nothing more */
} kc_seal;

/* Both directions' keys for `agent`'s side of the session (see above). */
void kc_seal_init(kc_seal *s, const kc_auth_key *key, bool agent, const char *client_nonce,
                  const char *agent_nonce, const void *client_hello, size_t ch_len,
                  const void *agent_hello, size_t ah_len);
void kc_seal_wipe(kc_seal *s);

/* Bytes on the wire for a record of len plaintext bytes. */
static inline size_t kc_seal_wire_len(size_t len) {
  return KC_SEAL_HDR + len + KC_SEAL_TAG;
}
/* Seal len (1..KC_SEAL_MAX_PLAIN) bytes into out (kc_seal_wire_len(len) bytes), header
 * included.  Allocates nothing and takes no lock: a signal handler may call it while
 * the channel is idle.  -1 when the sequence ran out. */
int kc_seal_record(kc_seal *s, const void *plain, size_t len, uint8_t *out);
/* The body length a record header announces, or -1 when it is out of bounds. */
int kc_seal_body_len(const uint8_t hdr[KC_SEAL_HDR], size_t *body_len, kc_error *err);
/* Open the record hdr + body (body_len bytes, as kc_seal_body_len said) into plain
 * (body_len - 16 bytes): 0, or -1 with EBADMSG and the channel broken. */
int kc_seal_open(kc_seal *s, const uint8_t hdr[KC_SEAL_HDR], const uint8_t *body, size_t body_len,
                 uint8_t *plain, kc_error *err);

/* A session's byte stream: plain over fd until kc_chan_seal, records afterwards
 * (seal_chan.c).  Reads and writes are exact and bounded by a deadline. */
typedef struct kc_chan {
  int fd;
  bool sealed;
  kc_seal seal;
  uint8_t *plain; /* the last opened record's plaintext not yet read */
  size_t off, len;
} kc_chan;
void kc_chan_init(kc_chan *c, int fd);
void kc_chan_free(kc_chan *c);
void kc_chan_seal(kc_chan *c, const kc_seal *s);
int kc_chan_write(kc_chan *c, const void *buf, size_t len, double deadline, kc_error *err);
int kc_chan_read(kc_chan *c, void *buf, size_t len, double deadline, kc_error *err);
/* One session frame (u32 LE length + JSON, <= 1 MiB) as text: *text is malloc'd. */
int kc_chan_send_text(kc_chan *c, const char *text, size_t len, double deadline, kc_error *err);
int kc_chan_recv_text(kc_chan *c, double deadline, char **text, size_t *len, kc_error *err);
/* The same with a JSON object that has a string "op" (anything else is refused). */
int kc_chan_send(kc_chan *c, const json_t *msg, double deadline, kc_error *err);
int kc_chan_recv(kc_chan *c, double deadline, json_t **msg, kc_error *err);
/* The text's object, when it is one with a string "op"; NULL otherwise. */
json_t *kc_session_parse(const char *text, size_t len);

#endif
