/* libFuzzer target: what a kcage client and agent decode from each other.
 * Input byte 0 selects:
 *   'C' the rest is a run config as the agent reads it (kc_run_config_decode), then
 *       clamped to operator caps;
 *   else byte 0 is the number of kernels (mod 8: "1" is one) and the rest an agent's reply to
 *       "run", decoded by the client (kc_remote_records_decode); what it accepts must
 *       print and re-encode. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kcage/measure.h"
#include "kcage/tracker.h"

static void config(const uint8_t *data, size_t size) {
  json_t *c = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
  kc_bench_config cfg;
  kc_error err;
  if (c && kc_run_config_decode(c, &cfg, &err) == 0) {
    kc_run_caps caps = {.max_memory_bytes = 1u << 28, .max_timeout_s = 5, .max_session_s = 60};
    json_decref(kc_run_config_clamp(&cfg, &caps));
    json_t *again = kc_run_config_encode(&cfg);
    kc_bench_config back;
    if (!again || kc_run_config_decode(again, &back, &err) < 0)
      abort(); /* what we accept, we can send on */
    json_decref(again);
  }
  json_decref(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  if (data[0] == 'C') {
    config(data + 1, size - 1);
    return 0;
  }
  static const char *const kernels[8] = {"a.c", "b.c", "c.c", "d.c", "e.c", "f.c", "g.c", "h.c"};
  size_t n = data[0] % 8;
  json_t *r = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL), *recs = NULL;
  kc_error err;
  if (r && kc_remote_records_decode(r, kernels, n, "peer", &recs, &err) == 0) {
    char *t = json_dumps(recs, JSON_COMPACT);
    if (!t || json_array_size(recs) != n)
      abort();
    free(t);
    json_decref(recs);
  }
  json_decref(r);
  return 0;
}
