/* The few parts of TVM's RPC data plane the agent reads and writes itself (the rest is
 * TVM's own server loop, inside the session's sandbox): telling a TVM session from a
 * kcage one, the client's kInitServer packet (which names the session constructor and
 * its arguments), and the kException packet that reports a sandbox's end.  Layouts
 * are TVM 0.21+'s (tvm-ffi type indexes), all little-endian. */
#ifndef KCAGE_TVM_WIRE_H
#define KCAGE_TVM_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"

#define KC_TVM_PROTOCOL_VER "0.8.0"
#define KC_TVM_CODE_INIT_SERVER 2
#define KC_TVM_CODE_EXCEPTION 5
/* A kInitServer packet carries a version and a few constructor arguments: anything
 * bigger is not one TVM's clients send. */
#define KC_TVM_INIT_MAX 65536
#define KC_TVM_MAX_ARGS 16
#define KC_TVM_MAX_ARG 1024

typedef struct kc_tvm_init {
  size_t nargs;                               /* 0: TVM's default, rpc.LocalSession */
  char args[KC_TVM_MAX_ARGS][KC_TVM_MAX_ARG]; /* args[0] names the constructor; numbers
                                               arrive as their decimal text */
} kc_tvm_init;

/* The first bytes a client sends after the handshake: true when they start a TVM packet
 * (a uint64 length, so bytes 4..7 are zero) rather than a kcage frame (a uint32 length
 * followed by '{').  Needs at least 8 bytes. */
bool kc_tvm_is_rpc(const unsigned char *head, size_t n);

/* The whole packet's size from its first 8 bytes (length field included); 0 when it is
 * not a plausible kInitServer. */
size_t kc_tvm_init_size(const unsigned char head[8]);

/* Decode one whole kInitServer packet (its length field first).  Hostile input: every
 * length is checked against what is left, and anything but None, bool, int, float and
 * strings as arguments is refused. */
int kc_tvm_init_parse(const void *pkt, size_t len, kc_tvm_init *out, kc_error *err);

/* TVM's kException packet carrying msg (a raw string), as RPCReference::ReturnException
 * writes it; the length written into buf (cap >= 24 + strlen), or 0 when it does not fit. */
size_t kc_tvm_exception_encode(const char *msg, char *buf, size_t cap);

#endif
