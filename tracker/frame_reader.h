/* The tracker server's incremental frame reader: the stream side of TVM's framing
 * (int32 LE length + payload), bounded.  Internal to the tracker. */
#ifndef KCAGE_FRAME_READER_H
#define KCAGE_FRAME_READER_H

#include <stddef.h>

#include "kcage/error.h"

/* Incremental frame reader over a byte stream (bounded).  Feed bytes with
 * kc_frame_reader_push; take complete payloads with kc_frame_reader_next. */
typedef struct kc_frame_reader {
  char *buf;
  size_t off, len, cap; /* unread bytes are buf[off..len) */
  size_t taken;         /* bytes of the frame handed out by the last next() */
  size_t max_frame;
} kc_frame_reader;
void kc_frame_reader_init(kc_frame_reader *r, size_t max_frame);
void kc_frame_reader_free(kc_frame_reader *r);
int kc_frame_reader_push(kc_frame_reader *r, const void *data, size_t len, kc_error *err);
/* 1: the next frame is at *payload, *len bytes (valid until the next call); 0: need more
 * bytes; -1: bad length (<= 0 or > max_frame): the stream is unusable. */
int kc_frame_reader_next(kc_frame_reader *r, const char **payload, size_t *len, kc_error *err);

#endif
