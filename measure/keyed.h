/* Private: randomness a kernel cannot predict from what it observes (keyed.c). */
#ifndef KCAGE_MEASURE_KEYED_H
#define KCAGE_MEASURE_KEYED_H

#include <stdint.h>

#include <nettle/chacha.h>

#include "kcage/error.h"

/* The parent's own draws (poison seeds, the near-copy's call, the calls checked): a
 * ChaCha20 key stream under a key from getrandom. */
typedef struct kc_draws {
  struct chacha_ctx ctx;
  uint8_t block[CHACHA_BLOCK_SIZE];
  unsigned used;
} kc_draws;

int kc_draws_init(kc_draws *d, kc_error *err);
uint64_t kc_draws_next(kc_draws *d);

/* A pseudo-random function of (a, b) under `key`: the first 8 bytes of ChaCha20's
 * block `b` under nonce `a`.  Outputs for other (a, b) say nothing about the key. */
uint64_t kc_keyed64(uint64_t key, uint64_t a, uint64_t b);

#endif
