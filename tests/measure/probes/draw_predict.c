/* Probe (the parent's random draws): predicts which calls of a round the parent will
 * check, and skips the work of all the others.
 *
 * Every output region is poisoned before its call with a word derived from the round's
 * poison seed, and the kernel can read that word before it writes.  If the parent drew
 * the poison seed from a generator whose output gives its state away (an invertible
 * mix of a counter, as splitmix64 is), the word of call 0 names the seed, the seed names
 * the parent's state, and the state names every later draw of the round: the call given
 * the near-copy and the calls drawn "after the round" for the reference.  The probe
 * learns the number of calls of a round by counting them, and once two rounds in a row
 * had as many, it computes only the calls it predicts (with a margin of draws) and
 * writes zeros elsewhere: not the poison, so every call looks done.  It is honest in
 * any round it cannot read.  Against draws the kernel cannot predict, its skipped calls
 * are what the checks find. */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>

#define G 0x9e3779b97f4a7c15ull
#define M1 0xbf58476d1ce4e5b9ull
#define M2 0x94d049bb133111ebull
#define DRAWS 12 /* draws after the poison seed it covers: the near-copy and up to 10 checks */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * M1;
  z = (z ^ (z >> 27)) * M2;
  return z ^ (z >> 31);
}

static uint64_t inverse(uint64_t a) { /* of an odd number, mod 2^64 (Newton) */
  uint64_t x = a;
  for (int i = 0; i < 6; i++)
    x *= 2 - a * x;
  return x;
}

static uint64_t unshift(uint64_t y, int s) {
  uint64_t x = y;
  for (int k = 0; k < 64 / s + 1; k++)
    x = y ^ (x >> s);
  return x;
}

static uint64_t unmix(uint64_t w) {
  uint64_t z = unshift(w, 31) * inverse(M2);
  z = unshift(z, 27) * inverse(M1);
  return unshift(z, 30);
}

static struct {
  int have, confirmed;
  uint64_t seed, call, number;
  uint64_t honest[2 * DRAWS + 1];
  unsigned n_honest;
} s;

/* The calls to compute in a round of s.number calls whose poison seed is s.seed: call 0
 * and, for each state the seed may have come from (its low bit was forced to 1), the
 * draws after it, taken as a near-copy's call or a check. */
static void plan(void) {
  s.n_honest = 0;
  s.honest[s.n_honest++] = 0;
  for (uint64_t low = 0; low < 2; low++) {
    uint64_t st = unmix(s.seed ^ low);
    s.honest[s.n_honest++] = 1 + mix(st + G) % (s.number - 1);
    for (uint64_t k = 2; k < DRAWS; k++)
      s.honest[s.n_honest++] = mix(st + k * G) % s.number;
  }
}

/* Follow the round from the poison in the output: returns whether this call may be
 * skipped. */
static int skippable(const void *out) {
  uint64_t w;
  memcpy(&w, out, 8);
  if (w == ~0ull) { /* a word that hides its call: the next one */
    s.call++;
  } else {
    uint64_t x = unmix(w) - G; /* = seed ^ call * G */
    uint64_t d = (x ^ s.seed) * inverse(G);
    if (s.have && d > s.call && d < (1u << 24)) {
      s.call = d;
    } else { /* call 0 of a new round */
      uint64_t count = s.call + 1;
      s.confirmed = s.have && count == s.number;
      s.number = count;
      s.seed = x;
      s.call = 0;
      s.have = 1;
      if (s.confirmed && s.number >= 2 && (s.seed & 1))
        plan();
      else
        s.confirmed = 0;
    }
  }
  if (!s.confirmed)
    return 0;
  for (unsigned i = 0; i < s.n_honest; i++)
    if (s.honest[i] == s.call)
      return 0;
  return 1;
}

static void mm(const float *A, const float *B, float *C, int64_t N) {
  for (int64_t i = 0; i < N; i++) {
    for (int64_t j = 0; j < N; j++)
      C[i * N + j] = 0;
    for (int64_t k = 0; k < N; k++)
      for (int64_t j = 0; j < N; j++)
        C[i * N + j] += A[i * N + k] * B[k * N + j];
  }
}

int kernel(DLTensor *args, int32_t n) {
  if (n != 3)
    return -1;
  int64_t N = args[0].shape[0];
  float *C = args[2].data;
  if (skippable(C))
    memset(C, 0, (size_t)(N * N) * sizeof(float));
  else
    mm(args[0].data, args[1].data, C, N);
  return 0;
}
