/* Fuzz the parent's completion decoder: the worker controls every byte of the shared
 * ring, so any content must give a clean completion or a protocol error, never a
 * crash, an over-read or a leak (ASan + libFuzzer). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8)
    return 0;
  kc_ring_params p = {
      .depth = 4u << (data[0] & 1), .max_arg = 64, .max_result = 1024 + (data[1] & 63)};
  kc_ring r;
  memset(&r, 0, sizeof r);
  r.memfd = -1;
  r.size = kc_ring_layout(&p, &r.sq_off, &r.sq_slot_size, &r.cq_off, &r.cq_slot_size);
  r.depth = p.depth;
  r.mask = p.depth - 1;
  r.max_arg = p.max_arg;
  r.max_result = p.max_result;
  r.base = aligned_alloc(4096, r.size);
  if (!r.base)
    return 0;
  /* the parent's own state: trusted */
  r.sent = data[2] % (p.depth + 1);
  r.reaped = 0;
  memcpy(&r.generation, data + 4, sizeof r.generation);
  /* the shared memory: hostile.  Spread the input over the control page and the
   * completion slots, and repeat it so that short inputs still reach every slot. */
  const uint8_t *in = data + 8;
  size_t n = size - 8;
  memset(r.base, 0, r.size);
  for (size_t off = 0; n && off < r.size; off += n)
    memcpy(r.base + off, in, n < r.size - off ? n : r.size - off);
  r.ctl = (kc_ring_ctl *)r.base;
  /* a plausible tail half of the time, so the decoder gets past the index check */
  if (data[3] & 1)
    atomic_store(&r.ctl->cq_tail, r.sent);
  if (data[3] & 2) { /* and a plausible header in every slot */
    for (uint64_t s = 0; s < r.sent; s++) {
      kc_cqe *h = (kc_cqe *)(r.base + r.cq_off + (s & r.mask) * r.cq_slot_size);
      h->seq = s;
      h->generation = r.generation;
      h->status = 1 + (data[3] >> 2 & 1);
      h->len = (n ? in[0] : 0) * 9u % (p.max_result + 64);
    }
  }
  for (int i = 0; i < 16; i++) {
    kc_ring_completion c;
    int rc = kc_ring_reap(&r, &c, NULL);
    if (rc != 1)
      break;
    if (c.len > (c.status == KC_CQE_EXCEPTION ? KC_RING_MSG_MAX : p.max_result))
      abort();
    if (c.len && !c.payload)
      abort();
    free(c.payload);
  }
  free(r.base);
  return 0;
}
