/* The inputs of one round, from the run's seed and the round's number, written by the
 * parent while the worker is stopped.  Each call of a timed round gets data of its own,
 * never met before in the round (docs/measurement-integrity.md): a cache a kernel builds
 * can only ever miss, in this round and the next, and data it could have generated in
 * advance exists only when the seed is known (--seed).  The untimed round repeats its
 * sets on purpose (a kernel whose answer changes between two calls of one input is
 * caught there). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cache_size.h"
#include "keyed.h"
#include "measure_kernel.h"

/* Keyed (keyed.c): a round's seed names neither the run's seed nor another round's. */
#define KEYED_ROUND 2
#define KEYED_NEAR 3

static uint64_t round_seed(uint64_t seed, uint64_t round) {
  return kc_keyed64(seed, round, KEYED_ROUND);
}

/* Write data `id` of the round into the inputs at dst (one region). */
static void fill_data(const kc_args_spec *a, unsigned char *dst, uint64_t rs, uint64_t id) {
  for (uint32_t i = 0; i < a->n; i++)
    if (!a->t[i].out)
      kc_data_fill(&a->t[i], dst + kc_args_offset(a, i), rs, (uint32_t)id, i);
}

/* Write into dst a near-copy of data `orig`: data `dup`'s own fresh values at about one
 * element in 4096 of each input (at least one), `orig`'s everywhere else.  A cache keyed
 * on a sample of the input takes it for `orig` and replays that answer, which the
 * reference tells apart.  Only the elements kept are saved (1/4096 of the tensor). */
static void near_copy(const kc_args_spec *a, unsigned char *dst, uint64_t rs, uint64_t orig,
                      uint64_t dup) {
  fill_data(a, dst, rs, dup);
  unsigned char *saved[KC_ARGS_MAX_TENSORS] = {0};
  uint64_t st0 = kc_keyed64(rs, dup, KEYED_NEAR), st = st0;
  for (uint32_t i = 0; i < a->n; i++) {
    const kc_tensor_spec *t = &a->t[i];
    if (t->out || !t->numel)
      continue;
    size_t es = (size_t)(t->nbytes / t->numel);
    uint64_t k = t->numel / 4096 ? t->numel / 4096 : 1;
    unsigned char *p = dst + kc_args_offset(a, i);
    if ((saved[i] = malloc((size_t)(k * es))))
      for (uint64_t j = 0; j < k; j++)
        memcpy(saved[i] + j * es, p + kc_splitmix64(&st) % t->numel * es, es);
  }
  fill_data(a, dst, rs, orig);
  st = st0; /* the same indices, drawn again to put the values back */
  for (uint32_t i = 0; i < a->n; i++) {
    const kc_tensor_spec *t = &a->t[i];
    if (t->out || !t->numel)
      continue;
    size_t es = (size_t)(t->nbytes / t->numel);
    uint64_t k = t->numel / 4096 ? t->numel / 4096 : 1;
    unsigned char *p = dst + kc_args_offset(a, i);
    for (uint64_t j = 0; j < k; j++) {
      uint64_t e = kc_splitmix64(&st) % t->numel;
      if (saved[i]) /* else the set stays `orig`'s: only less is tested */
        memcpy(p + e * es, saved[i] + j * es, es);
    }
    free(saved[i]);
  }
}

void kc_round_data(const kc_round_layout *l, unsigned char *dst, uint64_t call) {
  uint64_t rs = round_seed(l->seed, l->round), id = call % l->n_data;
  if (id == l->dup && l->dup != UINT32_MAX)
    near_copy(l->spec, dst, rs, 0, id);
  else
    fill_data(l->spec, dst, rs, id);
}

void kc_round_write(const kc_round_layout *l, unsigned char *map, uint64_t c0, uint64_t cnt,
                    bool flush) {
  for (uint64_t c = c0; c < c0 + cnt; c++)
    kc_round_data(l, map + c % l->n_slots * l->in_region, c);
#if defined(__x86_64__) || defined(__i386__)
  if (flush) { /* --flush-cache: the inputs leave the caches the parent just filled */
    for (uint64_t c = c0; c < c0 + cnt; c++)
      for (uint64_t i = 0; i < l->in_region; i += 64)
        __builtin_ia32_clflush(map + c % l->n_slots * l->in_region + i);
    __builtin_ia32_mfence();
  }
#else
  (void)flush;
#endif
}

uint32_t kc_round_inputs(const kc_args_spec *a, unsigned char *map, uint64_t in_region,
                         uint32_t n_sets, uint64_t seed, uint64_t round, bool flush) {
  kc_round_layout l = {.spec = a,
                       .in_region = in_region,
                       .seed = seed,
                       .round = round,
                       .n_data = n_sets ? n_sets : 1,
                       .n_slots = n_sets ? n_sets : 1,
                       .dup = n_sets >= 2 ? n_sets - 1 : UINT32_MAX};
  kc_round_write(&l, map, 0, n_sets, flush);
  return (uint32_t)l.dup;
}

/* The bytes of distinct input sets a round spreads its calls over.  A harness (TVM's
 * evaluator) rotating --sets sets reads them from the smallest cache level they fit in;
 * sets spread past that level make every call fetch its inputs from a slower one, inside
 * the clock (a 32x32 matmul read 19 % slower over 8 MiB of sets than over 4 sets, which
 * sit in L1 and L2; over 512 KiB, 0.8 %).  So sets that a harness keeps in L1 or L2 stay
 * within half of that level; larger ones, read from the last level or from memory
 * anyway, get up to 8 MiB.  Unknown cache sizes: 8 MiB. */
uint64_t kc_round_input_budget(uint64_t in_region, uint32_t n_sets) {
  for (unsigned level = 1; level <= 2; level++) {
    uint64_t half = kc_cache_bytes(level) / 2;
    if (half && in_region * n_sets <= half)
      return half;
  }
  return 8ull << 20;
}

uint32_t kc_round_input_slots(uint64_t in_region, uint32_t n_sets) {
  uint64_t slots = in_region ? kc_round_input_budget(in_region, n_sets) / in_region : 4096;
  slots = slots > 4096 ? 4096 : slots;
  return (uint32_t)(slots > n_sets ? slots : n_sets);
}
