/* libFuzzer target for the sealed record opener (tracker/seal.c), from the receiving
 * side of a keyed session.  The first byte picks what the rest is:
 *   even: bytes off the wire, read as records one after another (length checked, then
 *         opened); none may open, since nothing here knows the key;
 *   odd:  two bytes of position, then a plaintext that a genuine sender seals; the record
 *         has its byte at that position flipped (or none, when it is past the end) and
 *         must open exactly when nothing was flipped, to the same plaintext. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seal.h"

static void pair(kc_seal *client, kc_seal *agent) {
  static kc_auth_key key = {.bytes = "fuzz-key-0123456789abcdef", .len = 25};
  static const char cn[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  static const char an[] = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
  kc_seal_init(client, &key, false, cn, an, "{\"op\":\"hello\"}", 14, "{\"op\":\"hello\"}", 14);
  kc_seal_init(agent, &key, true, cn, an, "{\"op\":\"hello\"}", 14, "{\"op\":\"hello\"}", 14);
}

static void hostile(kc_seal *agent, const uint8_t *d, size_t n) {
  while (n >= KC_SEAL_HDR) {
    size_t body;
    if (kc_seal_body_len(d, &body, NULL) < 0 || n - KC_SEAL_HDR < body)
      return;
    uint8_t *plain = malloc(body - KC_SEAL_TAG);
    if (!plain)
      return;
    int rc = kc_seal_open(agent, d, d + KC_SEAL_HDR, body, plain, NULL);
    free(plain);
    if (rc == 0)
      abort(); /* a record opened without the key */
    d += KC_SEAL_HDR + body;
    n -= KC_SEAL_HDR + body;
  }
}

static void genuine(kc_seal *client, kc_seal *agent, const uint8_t *d, size_t n) {
  if (n < 3)
    return;
  size_t pos = (size_t)d[0] << 8 | d[1];
  d += 2, n -= 2;
  size_t wire = kc_seal_wire_len(n);
  uint8_t *rec = malloc(wire), *plain = malloc(n);
  if (rec && plain && kc_seal_record(client, d, n, rec) == 0) {
    if (pos < wire)
      rec[pos] ^= 0x01;
    size_t body;
    int rc = kc_seal_body_len(rec, &body, NULL);
    if (rc == 0 && body == wire - KC_SEAL_HDR)
      rc = kc_seal_open(agent, rec, rec + KC_SEAL_HDR, body, plain, NULL);
    else
      rc = -1;
    if ((rc == 0) != (pos >= wire) || (rc == 0 && memcmp(plain, d, n)))
      abort();
  }
  free(rec);
  free(plain);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  kc_seal client, agent;
  pair(&client, &agent);
  if (data[0] & 1)
    genuine(&client, &agent, data + 1, size - 1);
  else
    hostile(&agent, data + 1, size - 1);
  return 0;
}
