/* Record sealing and opening for keyed sessions (the format is in seal.h).  The AEAD,
 * HKDF, HMAC and SHA-256 are nettle's; this file only lays out the bytes. */
#include "seal.h"

#include <endian.h>
#include <errno.h>
#include <nettle/chacha-poly1305.h>
#include <nettle/hkdf.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <string.h>

#define LABEL_TRANSCRIPT "kcage transcript v1"
#define LABEL_C2S "kcage c2s v1"
#define LABEL_S2C "kcage s2c v1"

static void hash_part(struct sha256_ctx *h, const void *p, size_t len) {
  uint32_t le = htole32((uint32_t)len);
  sha256_update(h, sizeof le, (const uint8_t *)&le);
  sha256_update(h, len, p);
}

static void expand(struct hmac_sha256_ctx *prk, const char *label,
                   const uint8_t t[SHA256_DIGEST_SIZE], uint8_t out[KC_SEAL_KEY]) {
  uint8_t info[64 + SHA256_DIGEST_SIZE];
  size_t l = strlen(label) + 1;
  memcpy(info, label, l);
  memcpy(info + l, t, SHA256_DIGEST_SIZE);
  hkdf_expand(prk, (nettle_hash_update_func *)hmac_sha256_update,
              (nettle_hash_digest_func *)hmac_sha256_digest, SHA256_DIGEST_SIZE,
              l + SHA256_DIGEST_SIZE, info, KC_SEAL_KEY, out);
}

void kc_seal_init(kc_seal *s, const kc_auth_key *key, bool agent, const char *client_nonce,
                  const char *agent_nonce, const void *client_hello, size_t ch_len,
                  const void *agent_hello, size_t ah_len) {
  memset(s, 0, sizeof *s);
  uint8_t salt[2 * KC_AUTH_HEX], prk[SHA256_DIGEST_SIZE], t[SHA256_DIGEST_SIZE];
  memcpy(salt, client_nonce, KC_AUTH_HEX);
  memcpy(salt + KC_AUTH_HEX, agent_nonce, KC_AUTH_HEX);
  struct hmac_sha256_ctx mac;
  hmac_sha256_set_key(&mac, sizeof salt, salt);
  hkdf_extract(&mac, (nettle_hash_update_func *)hmac_sha256_update,
               (nettle_hash_digest_func *)hmac_sha256_digest, SHA256_DIGEST_SIZE, key->len,
               key->bytes, prk);
  struct sha256_ctx h;
  sha256_init(&h);
  sha256_update(&h, sizeof LABEL_TRANSCRIPT, (const uint8_t *)LABEL_TRANSCRIPT);
  hash_part(&h, client_hello, ch_len);
  hash_part(&h, agent_hello, ah_len);
  sha256_digest(&h, sizeof t, t);
  hmac_sha256_set_key(&mac, sizeof prk, prk);
  expand(&mac, agent ? LABEL_S2C : LABEL_C2S, t, s->send_key);
  expand(&mac, agent ? LABEL_C2S : LABEL_S2C, t, s->recv_key);
  memset(prk, 0, sizeof prk);
  memset(&mac, 0, sizeof mac);
}

void kc_seal_wipe(kc_seal *s) {
  /* volatile: a plain memset of memory about to be freed may be dropped */
  volatile uint8_t *p = (volatile uint8_t *)s;
  for (size_t i = 0; i < sizeof *s; i++)
    p[i] = 0;
}

/* EBADMSG without strerror's words: the message goes to the user, and to the peer. */
static int bad(kc_error *err, const char *what, unsigned long long seq) {
  kc_error_set(err, 0, "sealed session: record %llu %s", seq, what);
  if (err)
    err->code = EBADMSG;
  return -1;
}

static void set_nonce(struct chacha_poly1305_ctx *ctx, uint64_t seq) {
  uint8_t nonce[CHACHA_POLY1305_NONCE_SIZE] = {0};
  uint64_t le = htole64(seq);
  memcpy(nonce + 4, &le, sizeof le);
  chacha_poly1305_set_nonce(ctx, nonce);
}

int kc_seal_record(kc_seal *s, const void *plain, size_t len, uint8_t *out) {
  if (s->broken || len == 0 || len > KC_SEAL_MAX_PLAIN || s->send_seq == UINT64_MAX)
    return -1;
  uint32_t le = htole32((uint32_t)(len + KC_SEAL_TAG));
  memcpy(out, &le, KC_SEAL_HDR);
  struct chacha_poly1305_ctx ctx;
  chacha_poly1305_set_key(&ctx, s->send_key);
  set_nonce(&ctx, s->send_seq++);
  chacha_poly1305_update(&ctx, KC_SEAL_HDR, out);
  chacha_poly1305_encrypt(&ctx, len, out + KC_SEAL_HDR, plain);
  chacha_poly1305_digest(&ctx, KC_SEAL_TAG, out + KC_SEAL_HDR + len);
  return 0;
}

int kc_seal_body_len(const uint8_t hdr[KC_SEAL_HDR], size_t *body_len, kc_error *err) {
  uint32_t le;
  memcpy(&le, hdr, sizeof le);
  size_t n = le32toh(le);
  if (n <= KC_SEAL_TAG || n > KC_SEAL_MAX_PLAIN + KC_SEAL_TAG) {
    kc_error_set(err, 0, "sealed session: a record length of %zu is out of bounds", n);
    if (err)
      err->code = EBADMSG;
    return -1;
  }
  *body_len = n;
  return 0;
}

int kc_seal_open(kc_seal *s, const uint8_t hdr[KC_SEAL_HDR], const uint8_t *body, size_t body_len,
                 uint8_t *plain, kc_error *err) {
  size_t len = body_len - KC_SEAL_TAG;
  if (s->broken || body_len <= KC_SEAL_TAG || s->recv_seq == UINT64_MAX) {
    s->broken = true;
    return bad(err, "not opened: the channel is unusable", (unsigned long long)s->recv_seq);
  }
  struct chacha_poly1305_ctx ctx;
  uint8_t tag[KC_SEAL_TAG];
  chacha_poly1305_set_key(&ctx, s->recv_key);
  set_nonce(&ctx, s->recv_seq);
  chacha_poly1305_update(&ctx, KC_SEAL_HDR, hdr);
  chacha_poly1305_decrypt(&ctx, len, plain, body);
  chacha_poly1305_digest(&ctx, sizeof tag, tag);
  if (!memeql_sec(tag, body + len, KC_SEAL_TAG)) {
    memset(plain, 0, len); /* nothing of a forged record is ever used */
    s->broken = true;
    return bad(err,
               "failed authentication (changed, dropped, reordered or replayed on the way, "
               "or sealed with another key)",
               (unsigned long long)s->recv_seq);
  }
  s->recv_seq++;
  return 0;
}
