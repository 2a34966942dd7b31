/* Mutual authentication of kcage clients and agents with a shared key, inside the kcage
 * session (after TVM's handshake, so the tracker wire and TVM's tools are untouched):
 *   client hello  {"auth": {"nonce": Nc}}
 *   agent hello   {"auth": {"nonce": Na, "mac": HMAC(K, "kcage agent v1" 0 Nc Na)}}
 *   client        {"op": "auth", "mac": HMAC(K, "kcage client v1" 0 Na Nc)} -> {"op": "ok"}
 * Each side draws a fresh 32-byte nonce from getrandom and accepts the other's MAC only
 * over its own nonce, so a recorded exchange cannot be replayed; the labels keep either
 * side from reflecting the other's proof.  HMAC-SHA256 and the constant-time compare
 * are nettle's. */
#include <errno.h>
#include <fcntl.h>
#include <nettle/base16.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"
#include "kcage/tracker.h"

#define LABEL_AGENT "kcage agent v1"
#define LABEL_CLIENT "kcage client v1"

int kc_auth_key_load(const char *path, kc_auth_key *key, kc_error *err) {
  memset(key, 0, sizeof *key);
  kc_cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0)
    return kc_error_set(err, errno, "--auth-key %s", path);
  if (!S_ISREG(st.st_mode))
    return kc_error_set(err, EINVAL, "--auth-key %s: not a regular file", path);
  if (st.st_mode & 077)
    return kc_error_set(err, EPERM, "--auth-key %s: others may read it (chmod 600 it)", path);
  ssize_t n = read(fd, key->bytes, sizeof key->bytes);
  if (n < 0)
    return kc_error_set(err, errno, "--auth-key %s", path);
  while (n > 0 && (key->bytes[n - 1] == '\n' || key->bytes[n - 1] == '\r'))
    n--;
  if (n < KC_AUTH_KEY_MIN || st.st_size > (off_t)sizeof key->bytes)
    return kc_error_set(err, EINVAL, "--auth-key %s: want %d to %zu bytes of key", path,
                        KC_AUTH_KEY_MIN, sizeof key->bytes);
  key->len = (size_t)n;
  return 0;
}

int kc_auth_nonce(char out[KC_AUTH_HEX + 1], kc_error *err) {
  uint8_t r[KC_AUTH_BYTES];
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = getrandom(r + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return kc_error_set(err, errno, "getrandom");
    got += (size_t)n;
  }
  base16_encode_update(out, sizeof r, r);
  out[KC_AUTH_HEX] = '\0';
  return 0;
}

/* HMAC(K, label 0 first second) over the nonces as sent (hex), in hex. */
static void mac_hex(const kc_auth_key *key, const char *label, const char *first,
                    const char *second, char out[KC_AUTH_HEX + 1]) {
  struct hmac_sha256_ctx ctx;
  uint8_t d[SHA256_DIGEST_SIZE];
  hmac_sha256_set_key(&ctx, key->len, key->bytes);
  hmac_sha256_update(&ctx, strlen(label) + 1, (const uint8_t *)label);
  hmac_sha256_update(&ctx, KC_AUTH_HEX, (const uint8_t *)first);
  hmac_sha256_update(&ctx, KC_AUTH_HEX, (const uint8_t *)second);
  hmac_sha256_digest(&ctx, sizeof d, d);
  base16_encode_update(out, sizeof d, d);
  out[KC_AUTH_HEX] = '\0';
}

bool kc_auth_hex_ok(const char *s) {
  if (!s || strlen(s) != KC_AUTH_HEX)
    return false;
  for (size_t i = 0; i < KC_AUTH_HEX; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

void kc_auth_mac(const kc_auth_key *key, bool agent, const char *client_nonce,
                 const char *agent_nonce, char out[KC_AUTH_HEX + 1]) {
  if (agent)
    mac_hex(key, LABEL_AGENT, client_nonce, agent_nonce, out);
  else
    mac_hex(key, LABEL_CLIENT, agent_nonce, client_nonce, out);
}

bool kc_auth_check(const kc_auth_key *key, bool agent, const char *client_nonce,
                   const char *agent_nonce, const char *mac) {
  if (!kc_auth_hex_ok(client_nonce) || !kc_auth_hex_ok(agent_nonce) || !kc_auth_hex_ok(mac))
    return false;
  char want[KC_AUTH_HEX + 1];
  kc_auth_mac(key, agent, client_nonce, agent_nonce, want);
  return memeql_sec(want, mac, KC_AUTH_HEX) != 0;
}
