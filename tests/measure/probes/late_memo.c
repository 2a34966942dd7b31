/* Cheat (memoising by content, schedule-aware): c = a + b, honest for its first 8 calls
 * (the untimed round: 4 sets, each called twice), then caches each answer under a hash
 * of a few sampled input values and replays it whenever the samples come back.  Timed
 * rounds of one call each would never show it a repeat.  Each timed round's near-copy
 * escapes it only when its one changed element is sampled (8 samples of 4096, 0.2 %),
 * so it memoises from the first warm-up round on: test_memo_one_call_rounds holds 5 timed
 * rounds (2 of warm-up, 3 repeats), and all of them would have to miss. */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct {
  uint64_t key;
  float *out;
} cache[64];
static unsigned calls, next;

static uint64_t sample_key(const float *a, const float *b, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int s = 0; s < 4; s++) {
    uint32_t x, y;
    memcpy(&x, &a[(s * 7919) % n], 4);
    memcpy(&y, &b[(s * 104729) % n], 4);
    h = (h ^ x) * 1099511628211ull;
    h = (h ^ y) * 1099511628211ull;
  }
  return h;
}

int kernel(DLTensor *args, int32_t num_args) {
  if (num_args != 3)
    return -1;
  const float *a = args[0].data, *b = args[1].data;
  float *c = args[2].data;
  int64_t n = args[0].shape[0];
  size_t bytes = (size_t)n * sizeof(float);
  uint64_t k = sample_key(a, b, n);
  if (++calls > 8)
    for (int i = 0; i < 64 && cache[i].out; i++)
      if (cache[i].key == k) {
        memcpy(c, cache[i].out, bytes);
        return 0;
      }
  for (int64_t i = 0; i < n; i++)
    c[i] = a[i] + b[i];
  if (calls > 8) {
    if (!cache[next].out)
      cache[next].out = malloc(bytes);
    if (cache[next].out) {
      cache[next].key = k;
      memcpy(cache[next].out, c, bytes);
      next = (next + 1) % 64;
    }
  }
  return 0;
}
