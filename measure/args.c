/* The `--args` language (docs/contracts.md): "f32[512,512] f32[512,512] f32[512,512]:out". */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kcage/measure.h"

static const struct {
  const char *name;
  uint8_t code, bits;
} dtypes[] = {
    {"f32", kDLFloat, 32}, {"f64", kDLFloat, 64}, {"i32", kDLInt, 32},   {"i64", kDLInt, 64},
    {"i8", kDLInt, 8},     {"u8", kDLUInt, 8},    {"f16", kDLFloat, 16}, {"bf16", kDLBfloat, 16},
};

const char *kc_dtype_name(DLDataType t) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (dtypes[i].code == t.code && dtypes[i].bits == t.bits && t.lanes == 1)
      return dtypes[i].name;
  return "?";
}

int kc_dtype_parse(const char *name, size_t len, DLDataType *out) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strlen(dtypes[i].name) == len && !memcmp(dtypes[i].name, name, len)) {
      *out = (DLDataType){.code = dtypes[i].code, .bits = dtypes[i].bits, .lanes = 1};
      return 0;
    }
  return -1;
}

static uint64_t align64(uint64_t x) {
  return (x + 63) & ~(uint64_t)63;
}

/* The dimensions after '[' at *qp, into t; *qp at the ']' (or where one was wanted).
 * word (wlen characters) is the whole tensor, for the errors. */
static int parse_dims(const char **qp, kc_tensor_spec *t, const char *word, int wlen,
                      kc_error *err) {
  const char *q = *qp;
  for (;;) {
    while (isspace((unsigned char)*q))
      q++;
    if (!isdigit((unsigned char)*q))
      return kc_error_set(err, 0, "expected a dimension in '%.*s'", wlen, word);
    errno = 0;
    char *end;
    unsigned long long d = strtoull(q, &end, 10);
    if (errno || d == 0 || d > (1ull << 40))
      return kc_error_set(err, 0, "bad dimension in '%.*s' (must be 1..2^40)", wlen, word);
    if (t->ndim == KC_ARGS_MAX_NDIM)
      return kc_error_set(err, 0, "more than %d dimensions in '%.*s'", KC_ARGS_MAX_NDIM, wlen,
                          word);
    t->shape[t->ndim++] = (int64_t)d;
    if (t->numel > KC_ARGS_MAX_BYTES / d)
      return kc_error_set(err, 0, "tensor '%.*s' is too large", wlen, word);
    t->numel *= d;
    q = end;
    while (isspace((unsigned char)*q))
      q++;
    if (*q != ',')
      break;
    q++;
  }
  *qp = q;
  return 0;
}

/* One tensor, "f32[512,512]:out", at *pp into t; *pp past it. */
static int parse_tensor(const char **pp, kc_tensor_spec *t, kc_error *err) {
  const char *p = *pp, *word = p;
  int wlen = 0;
  while (word[wlen] && !isspace((unsigned char)word[wlen]))
    wlen++;
  const char *q = p;
  while (isalnum((unsigned char)*q))
    q++;
  if (q == p)
    return kc_error_set(err, 0, "expected a dtype at '%.*s'", wlen, word);
  if (kc_dtype_parse(p, (size_t)(q - p), &t->dtype) < 0)
    return kc_error_set(err, 0,
                        "unknown dtype '%.*s' in '%.*s' (known: f32 f64 i32 i64 i8 u8 f16 bf16)",
                        (int)(q - p), p, wlen, word);
  if (*q != '[')
    return kc_error_set(err, 0, "expected '[' after the dtype in '%.*s'", wlen, word);
  q++;
  t->numel = 1;
  while (isspace((unsigned char)*q))
    q++;
  if (*q != ']' && parse_dims(&q, t, word, wlen, err) < 0)
    return -1;
  if (*q != ']')
    return kc_error_set(err, 0, "expected ']' in '%.*s'", wlen, word);
  q++;
  if (!strncmp(q, ":out", 4) && (q[4] == 0 || isspace((unsigned char)q[4]) || q[4] == ',')) {
    t->out = true;
    q += 4;
  } else if (*q && !isspace((unsigned char)*q) && *q != ',') {
    return kc_error_set(err, 0, "unexpected '%.*s' after the shape in '%.*s' (only ':out')",
                        (int)(word + wlen - q), q, wlen, word);
  }
  t->nbytes = t->numel * (t->dtype.bits / 8u);
  *pp = q;
  return 0;
}

/* Where a tensor of `nbytes` starting at `start` goes so that it shares no 2 MiB-page
 * phase with the large tensors placed before it (phases[0..n)).
 *
 * Why: the address bits below 21 often survive from virtual to physical: in 2 MiB pages
 * (a file's large folios, transparent huge pages), and in 4 KiB pages handed out in
 * order, as a fresh file's or buffer's mostly are.  Streams whose addresses agree in
 * those bits fall on the same DRAM banks and cache sets, call after call: a 16M-element
 * vector add whose two 64 MiB inputs started at the same phase read 10-15 % slower
 * (17-22 % with them 4 KiB apart) than with 16 KiB or more between their phases (in one
 * process, interleaved, on this kind of machine).  Tensors under 64 KiB stay in the
 * caches; they are packed as they come.  The padding is under 2 MiB a tensor. */
#define PHASE (2ull << 20)
#define GUARD (32ull << 10)   /* twice the least distance that was enough */
#define STEP (68ull << 10)    /* 31 candidates in 2 MiB */
#define ROTATE (792ull << 10) /* near 2 MiB / golden ratio²: slots spread evenly */
static uint64_t stagger(uint64_t start, uint64_t nbytes, const uint64_t *phases, uint32_t n) {
  if (nbytes < (64u << 10))
    return start;
  for (uint64_t s = start; s < start + PHASE; s += STEP) {
    bool clear = true;
    for (uint32_t j = 0; j < n && clear; j++) {
      uint64_t d = (s - phases[j]) % PHASE;
      clear = d >= GUARD && PHASE - d >= GUARD;
    }
    if (clear)
      return s;
  }
  return start; /* more large tensors than phases: packed */
}

/* The inputs of a set are one region that can be mapped read-only, the outputs another
 * that the kernel may write; their tensors' offsets and the regions' sizes. */
static void lay_out(kc_args_spec *a) {
  for (int out = 0; out < 2; out++) {
    uint64_t end = 0, phases[KC_ARGS_MAX_TENSORS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < a->n; i++) {
      kc_tensor_spec *t = &a->t[i];
      if (t->out != (bool)out)
        continue;
      t->offset = stagger(align64(end), t->nbytes, phases, n);
      if (t->nbytes >= (64u << 10))
        phases[n++] = t->offset % PHASE;
      end = t->offset + t->nbytes;
    }
    a->region[out] = end ? align64(end) : 64;
  }
  /* Each call of a round writes its own slot of the output area, one region apart, in
   * pages handed out in order.  Regions of a whole number of 2 MiB would put every
   * call's outputs at one phase against its inputs, good or bad for the whole run, and
   * the run drew it anew: a 1M vector add read 454-467 us in three runs with 4 MiB
   * regions and 423-432 us in four with slots stepping through the phases
   * (bench_accuracy, the same hour). */
  uint64_t r = a->region[1];
  if (r >= (1u << 20))
    a->region[1] = r + ((ROTATE + PHASE - r % PHASE) % PHASE);
}

int kc_args_parse(const char *text, kc_args_spec *a, kc_error *err) {
  memset(a, 0, sizeof *a);
  if (!text)
    return kc_error_set(err, 0, "no tensors given");
  const char *p = text;
  uint64_t total = 0;
  for (;;) {
    while (isspace((unsigned char)*p) || *p == ',')
      p++;
    if (!*p)
      break;
    if (a->n == KC_ARGS_MAX_TENSORS)
      return kc_error_set(err, 0, "more than %d tensors", KC_ARGS_MAX_TENSORS);
    kc_tensor_spec *t = &a->t[a->n];
    if (parse_tensor(&p, t, err) < 0)
      return -1;
    total += align64(t->nbytes);
    if (total > KC_ARGS_MAX_BYTES)
      return kc_error_set(err, 0, "tensors too large (more than %llu bytes per set)",
                          (unsigned long long)KC_ARGS_MAX_BYTES);
    if (t->out)
      a->out_bytes += t->nbytes;
    else
      a->in_bytes += t->nbytes;
    a->n++;
  }
  if (a->n == 0)
    return kc_error_set(err, 0, "no tensors given");
  bool any_out = false;
  for (uint32_t i = 0; i < a->n; i++)
    any_out |= a->t[i].out;
  if (!any_out)
    return kc_error_set(err, 0, "no output tensor (mark the kernel's outputs with ':out')");
  lay_out(a);
  return 0;
}

int kc_args_format(const kc_args_spec *a, char *buf, size_t len) {
  size_t w = 0;
  int total = 0;
#define EMIT(...)                                                                                  \
  do {                                                                                             \
    int n_ = snprintf(buf + (w < len ? w : len), w < len ? len - w : 0, __VA_ARGS__);              \
    if (n_ > 0) {                                                                                  \
      w += (size_t)n_;                                                                             \
      total += n_;                                                                                 \
    }                                                                                              \
  } while (0)
  if (len)
    buf[0] = 0;
  for (uint32_t i = 0; i < a->n; i++) {
    const kc_tensor_spec *t = &a->t[i];
    EMIT("%s%s[", i ? " " : "", kc_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
      EMIT("%s%lld", d ? "," : "", (long long)t->shape[d]);
    EMIT("]%s", t->out ? ":out" : "");
  }
#undef EMIT
  return total;
}

uint64_t kc_args_offset(const kc_args_spec *a, uint32_t i) {
  return a->t[i].offset;
}

uint64_t kc_args_region_bytes(const kc_args_spec *a, bool out) {
  return a->region[out];
}
