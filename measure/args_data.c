/* Deterministic inputs, poison patterns and output comparison. */
#include <math.h>
#include <string.h>

#include "kcage/measure.h"

#include "keyed.h"

#define KEYED_FILL 1

uint64_t kc_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* IEEE half <-> float, round to nearest even on the way down. */
float kc_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {                           /* subnormal */
      float f = (float)man * 0x1p-24f; /* exact: man < 2^10 */
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kc_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) /* inf / nan */
    return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
  if (absx >= 0x477ff000u) /* overflow */
    return sign | 0x7c00;
  if (absx < 0x38800000u) { /* subnormal or zero */
    float a;
    memcpy(&a, &absx, 4);
    /* a * 2^24 < 2^10: adding and taking away 2^23 rounds it to an integer in the
     * current rounding mode, as lrintf would (nearest even by default). */
    float r = (a * 16777216.0f + 0x1p23f) - 0x1p23f;
    return sign | (uint16_t)r;
  }
  uint32_t r = absx + 0xc8000fffu + ((absx >> 13) & 1); /* rebias + round even */
  return sign | (uint16_t)(r >> 13);
}

float kc_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t kc_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static double unit(uint64_t r) {
  return (double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

void kc_data_fill(const kc_tensor_spec *t, void *buf, uint64_t seed, uint32_t set, uint32_t index) {
  /* Keyed (keyed.c): the stream's state, which its elements give away, is one output of
   * a pseudo-random function of (set, index) under the seed, and names nothing else. */
  uint64_t st = kc_keyed64(seed, (uint64_t)set << 32 | index, KEYED_FILL);
  uint64_t n = t->numel;
  switch (t->dtype.code) {
  case kDLFloat:
    if (t->dtype.bits == 32)
      for (uint64_t i = 0; i < n; i++)
        ((float *)buf)[i] = (float)unit(kc_splitmix64(&st));
    else if (t->dtype.bits == 64)
      for (uint64_t i = 0; i < n; i++)
        ((double *)buf)[i] = unit(kc_splitmix64(&st));
    else
      for (uint64_t i = 0; i < n; i++)
        ((uint16_t *)buf)[i] = kc_float_to_half((float)unit(kc_splitmix64(&st)));
    break;
  case kDLBfloat:
    for (uint64_t i = 0; i < n; i++)
      ((uint16_t *)buf)[i] = kc_float_to_bf16((float)unit(kc_splitmix64(&st)));
    break;
  case kDLInt: /* small values: sums of products stay exact and far from overflow */
    for (uint64_t i = 0; i < n; i++) {
      int64_t v = (int64_t)(kc_splitmix64(&st) % 17) - 8;
      if (t->dtype.bits == 8)
        ((int8_t *)buf)[i] = (int8_t)v;
      else if (t->dtype.bits == 32)
        ((int32_t *)buf)[i] = (int32_t)v;
      else
        ((int64_t *)buf)[i] = v;
    }
    break;
  case kDLUInt:
    for (uint64_t i = 0; i < n; i++)
      ((uint8_t *)buf)[i] = (uint8_t)(kc_splitmix64(&st) % 16);
    break;
  default:
    memset(buf, 0, t->nbytes);
  }
}

uint64_t kc_poison_word(uint64_t seed, uint64_t call) {
  /* Two requests whose seeds differ in the low bit poison every call differently. */
  if (((seed ^ call) & 1) == 0)
    return ~0ull; /* NaN in every float type, -1 in every integer type */
  uint64_t st = seed ^ (call * 0x9e3779b97f4a7c15ull);
  uint64_t w = kc_splitmix64(&st);
  return w == ~0ull ? 0x5a5a5a5a5a5a5a5aull : w;
}

void kc_poison_fill(void *buf, size_t len, uint64_t word) {
  unsigned char *p = buf;
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    memcpy(p + i, &word, 8);
  for (size_t k = 0; i < len; i++, k++)
    p[i] = (unsigned char)(word >> (8 * k));
}

bool kc_poison_equal(const void *buf, size_t len, uint64_t word) {
  const unsigned char *p = buf;
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    if (memcmp(p + i, &word, 8))
      return false;
  for (size_t k = 0; i < len; i++, k++)
    if (p[i] != (unsigned char)(word >> (8 * k)))
      return false;
  return true;
}

static double elem(const kc_tensor_spec *t, const void *buf, uint64_t i) {
  switch (t->dtype.code) {
  case kDLFloat:
    if (t->dtype.bits == 32)
      return ((const float *)buf)[i];
    if (t->dtype.bits == 64)
      return ((const double *)buf)[i];
    return kc_half_to_float(((const uint16_t *)buf)[i]);
  case kDLBfloat:
    return kc_bf16_to_float(((const uint16_t *)buf)[i]);
  case kDLInt:
    if (t->dtype.bits == 8)
      return ((const int8_t *)buf)[i];
    if (t->dtype.bits == 32)
      return ((const int32_t *)buf)[i];
    return (double)((const int64_t *)buf)[i];
  case kDLUInt:
    return ((const uint8_t *)buf)[i];
  }
  return 0;
}

bool kc_tensor_close(const kc_tensor_spec *t, const void *got, const void *want, double rtol,
                     double atol, double *max_abs_err) {
  double worst = 0;
  bool ok = true;
  for (uint64_t i = 0; i < t->numel; i++) {
    double g = elem(t, got, i), w = elem(t, want, i);
    if (isnan(w) || isinf(w) || isnan(g) || isinf(g)) {
      bool same = (isnan(w) && isnan(g)) || (isinf(w) && g == w);
      if (!same) {
        worst = INFINITY;
        ok = false;
      }
      continue;
    }
    double e = fabs(g - w);
    if (e > worst)
      worst = e;
    if (e > atol + rtol * fabs(w))
      ok = false;
  }
  if (max_abs_err)
    *max_abs_err = worst;
  return ok;
}
