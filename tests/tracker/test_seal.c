/* The record layer on its own (tracker/seal.c): what opens and what never does. */
/* cmocka needs these first, in this order */
// clang-format off
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>
// clang-format on

#include <endian.h>
#include <string.h>

#include "seal.h"

static const kc_auth_key key = {.bytes = "echo-secret-key-0123456789abcdef", .len = 32};
static const char cn[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static const char an[] = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
#define CH "{\"op\":\"hello\",\"version\":1}"
#define AH "{\"op\":\"hello\",\"record\":\"chacha20-poly1305\"}"

static void pair(kc_seal *c, kc_seal *a, const char *agent_hello) {
  kc_seal_init(c, &key, false, cn, an, CH, strlen(CH), AH, strlen(AH));
  kc_seal_init(a, &key, true, cn, an, CH, strlen(CH), agent_hello, strlen(agent_hello));
}

static int open_rec(kc_seal *s, const uint8_t *rec, size_t len, uint8_t *plain) {
  size_t body;
  if (kc_seal_body_len(rec, &body, NULL) < 0 || body != len - KC_SEAL_HDR)
    return -1;
  return kc_seal_open(s, rec, rec + KC_SEAL_HDR, body, plain, NULL);
}

/* Sealed one way, opened the other; never by its own sender (a reflected record), never
 * twice (a replay), never out of turn, and nothing more once one has failed. */
static void test_direction_sequence_and_breakage(void **state) {
  (void)state;
  kc_seal c, a, c_copy;
  pair(&c, &a, AH);
  uint8_t r0[64], r1[64], plain[64];
  assert_int_equal(kc_seal_record(&c, "first", 5, r0), 0);
  assert_int_equal(kc_seal_record(&c, "secnd", 5, r1), 0);
  c_copy = c;
  assert_int_equal(open_rec(&c_copy, r0, kc_seal_wire_len(5), plain), -1); /* reflected */
  assert_int_equal(open_rec(&a, r0, kc_seal_wire_len(5), plain), 0);
  assert_memory_equal(plain, "first", 5);
  kc_seal a_copy = a;
  assert_int_equal(open_rec(&a_copy, r0, kc_seal_wire_len(5), plain), -1); /* replayed */
  assert_int_equal(open_rec(&a, r1, kc_seal_wire_len(5), plain), 0);
  /* r1 before r0: a reorder */
  kc_seal c2, a2;
  pair(&c2, &a2, AH);
  assert_int_equal(open_rec(&a2, r1, kc_seal_wire_len(5), plain), -1);
  assert_true(a2.broken);
  assert_int_equal(open_rec(&a2, r0, kc_seal_wire_len(5), plain), -1); /* broken for good */
}

/* A changed hello (one byte) leaves the sides with different keys. */
static void test_hello_bound(void **state) {
  (void)state;
  kc_seal c, a;
  pair(&c, &a, "{\"op\":\"hello\",\"record\":\"chacha20-poly1304\"}");
  uint8_t r[64], plain[64];
  assert_int_equal(kc_seal_record(&c, "x", 1, r), 0);
  assert_int_equal(open_rec(&a, r, kc_seal_wire_len(1), plain), -1);
}

/* Lengths: an empty record and one over 1 MiB are refused before anything is read. */
static void test_length_bounds(void **state) {
  (void)state;
  uint8_t hdr[4];
  size_t body;
  uint32_t bad[] = {0, KC_SEAL_TAG, KC_SEAL_MAX_PLAIN + KC_SEAL_TAG + 1, 0xffffffffu};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint32_t le = htole32(bad[i]);
    memcpy(hdr, &le, 4);
    assert_int_equal(kc_seal_body_len(hdr, &body, NULL), -1);
  }
  uint32_t ok[] = {KC_SEAL_TAG + 1, KC_SEAL_MAX_PLAIN + KC_SEAL_TAG};
  for (size_t i = 0; i < 2; i++) {
    uint32_t le = htole32(ok[i]);
    memcpy(hdr, &le, 4);
    assert_int_equal(kc_seal_body_len(hdr, &body, NULL), 0);
    assert_int_equal(body, ok[i]);
  }
  kc_seal c, a;
  pair(&c, &a, AH);
  uint8_t r[64];
  assert_int_equal(kc_seal_record(&c, "", 0, r), -1);
  assert_int_equal(kc_seal_record(&c, r, KC_SEAL_MAX_PLAIN + 1, r), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_direction_sequence_and_breakage),
      cmocka_unit_test(test_hello_bound),
      cmocka_unit_test(test_length_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
