/* The inputs of one round: fresh data for every set, from the run's seed and the
 * round's number, written by the parent while the worker is stopped.  A cache a kernel
 * built in one round is useless in the next, and data it could have generated in
 * advance exists only when the seed is known (--seed). */
#include <stdlib.h>
#include <string.h>

#include "cache_size.h"
#include "measure_kernel.h"

static uint64_t round_seed(uint64_t seed, uint64_t round) {
  uint64_t st = seed ^ (round * 0xd1b54a32d192ed03ull);
  return kc_splitmix64(&st);
}

/* Make set `dup` a copy of set 0 with about one element in 4096 of each input replaced by
 * the value it would have had (at least one): a cache keyed on a sample of the input
 * takes it for set 0 and replays set 0's answer, which the reference tells apart.  Only
 * the elements kept are saved (1/4096 of the tensor), never a copy of the whole: that
 * would cost the parent a fresh mapping of the input's size every round. */
static void near_copy(const kc_args_spec *a, unsigned char *map, uint64_t in_region, uint32_t dup,
                      uint64_t seed) {
  uint64_t st = seed ^ 0x6e656172ull;
  for (uint32_t i = 0; i < a->n; i++) {
    const kc_tensor_spec *t = &a->t[i];
    if (t->out || !t->numel)
      continue;
    size_t es = (size_t)(t->nbytes / t->numel);
    unsigned char *dst = map + dup * in_region + kc_args_offset(a, i);
    uint64_t k = t->numel / 4096 ? t->numel / 4096 : 1;
    unsigned char *saved = malloc((size_t)(k * es));
    if (!saved)
      continue;        /* the set stays all fresh: nothing is wrong, only less is tested */
    uint64_t st0 = st; /* the same indices, drawn again to put the values back */
    for (uint64_t j = 0; j < k; j++)
      memcpy(saved + j * es, dst + kc_splitmix64(&st) % t->numel * es, es);
    memcpy(dst, map + kc_args_offset(a, i), (size_t)t->nbytes);
    st = st0;
    for (uint64_t j = 0; j < k; j++)
      memcpy(dst + kc_splitmix64(&st) % t->numel * es, saved + j * es, es);
    free(saved);
  }
}

uint32_t kc_round_inputs(const kc_args_spec *a, unsigned char *map, uint64_t in_region,
                         uint32_t n_sets, uint64_t seed, uint64_t round, bool flush) {
  uint64_t rs = round_seed(seed, round);
  for (uint32_t k = 0; k < n_sets; k++)
    for (uint32_t i = 0; i < a->n; i++)
      if (!a->t[i].out)
        kc_data_fill(&a->t[i], map + k * in_region + kc_args_offset(a, i), rs, k, i);
  uint32_t dup = UINT32_MAX;
  if (n_sets >= 2) {
    dup = n_sets - 1;
    near_copy(a, map, in_region, dup, rs);
  }
#if defined(__x86_64__) || defined(__i386__)
  if (flush) { /* --flush-cache: the inputs leave the caches the parent just filled */
    for (uint64_t i = 0; i < n_sets * in_region; i += 64)
      __builtin_ia32_clflush(map + i);
    __builtin_ia32_mfence();
  }
#else
  (void)flush;
#endif
  return dup;
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
