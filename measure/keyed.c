/* Randomness a kernel cannot predict from what it observes.
 *
 * Whatever the parent derives from its secrets reaches the kernel: the poison in each
 * output region comes from a poison seed the parent drew, and every input element is a
 * draw of the inputs' generator.  An invertible generator (splitmix64: an odd multiple
 * of a counter through a bijective mix) gives its state away from one output, and the
 * state every other output: the poison of call 0 would name the calls the parent is
 * about to check, and two f64 inputs the run's seed, so that the rounds to come could be
 * computed ahead, outside the clock (tests/measure/probes/draw_predict.c and
 * seed_predict.c).  So both come from ChaCha20 (nettle): the parent's draws from a key
 * stream under a fresh random key, and each input stream from a keyed function of the
 * seed, the round, the call and the tensor.  What the kernel can invert then is a
 * single output of a pseudo-random function, which names nothing else. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "keyed.h"

static void le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

int kc_draws_init(kc_draws *d, kc_error *err) {
  uint8_t key[CHACHA_KEY_SIZE], nonce[CHACHA_NONCE_SIZE] = {0};
  if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key)
    return kc_error_set(err, errno ? errno : EIO, "getrandom");
  chacha_set_key(&d->ctx, key);
  chacha_set_nonce(&d->ctx, nonce);
  explicit_bzero(key, sizeof key); /* a plain memset of a dead buffer may be dropped */
  d->used = sizeof d->block;
  return 0;
}

uint64_t kc_draws_next(kc_draws *d) {
  if (d->used + 8 > sizeof d->block) {
    static const uint8_t zero[CHACHA_BLOCK_SIZE];
    chacha_crypt(&d->ctx, sizeof d->block, d->block, zero);
    d->used = 0;
  }
  uint64_t v = get_le64(d->block + d->used);
  d->used += 8;
  return v;
}

uint64_t kc_keyed64(uint64_t key, uint64_t a, uint64_t b) {
  uint8_t k[CHACHA_KEY_SIZE] = {0}, nonce[CHACHA_NONCE_SIZE], counter[CHACHA_COUNTER_SIZE];
  uint8_t out[8];
  static const uint8_t zero[8];
  struct chacha_ctx ctx;
  le64(k, key);
  le64(nonce, a);
  le64(counter, b);
  chacha_set_key(&ctx, k);
  chacha_set_nonce(&ctx, nonce);
  chacha_set_counter(&ctx, counter);
  chacha_crypt(&ctx, sizeof out, out, zero);
  return get_le64(out);
}
