/* libFuzzer target: everything the tracker and its clients decode from the network.
 * Input byte 0 selects:
 *   'J' the rest is one frame payload: kc_tracker_msg_parse, and as a reply to a client:
 *       kc_tracker_text_summary (what `kcage query` does with a SUMMARY);
 *   else the whole input is a byte stream fed in odd-sized chunks through the bounded
 *       frame reader, each complete frame parsed as a message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame_reader.h"
#include "kcage/tracker.h"

static void parse_one(const char *p, size_t n) {
  kc_tracker_msg m;
  kc_error err;
  if (kc_tracker_msg_parse(p, n, &m, &err) == 0) {
    /* Re-encoding what we accepted must work: replies echo these values. */
    char *out;
    size_t len;
    if (kc_tracker_frame_encode(m.root, &out, &len, &err) == 0)
      free(out);
    kc_tracker_msg_clear(&m);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* libFuzzer's entry point */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 0 && data[0] == 'J') {
    parse_one((const char *)data + 1, size - 1);
    json_t *v = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, NULL);
    if (v) {
      free(kc_tracker_text_summary(
          json_object_get(json_array_get(v, 1), "queue_info") ? json_array_get(v, 1) : v));
      json_decref(v);
    }
    return 0;
  }
  kc_frame_reader r;
  kc_frame_reader_init(&r, 4096);
  size_t off = 0, chunk = 1;
  kc_error err;
  while (off < size) {
    size_t n = size - off < chunk ? size - off : chunk;
    if (kc_frame_reader_push(&r, data + off, n, &err) < 0)
      break;
    off += n;
    chunk = chunk * 3 % 61 + 1;
    const char *p;
    size_t len;
    int rc;
    while ((rc = kc_frame_reader_next(&r, &p, &len, &err)) == 1)
      parse_one(p, len);
    if (rc < 0)
      break;
  }
  kc_frame_reader_free(&r);
  return 0;
}
