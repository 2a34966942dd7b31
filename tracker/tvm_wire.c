/* TVM's RPC packets that the agent handles itself (tvm_wire.h). */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tvm_wire.h"

/* tvm-ffi's type indexes (tvm/ffi/c_api.h) of what a constructor argument may be. */
enum {
  TI_NONE = 0,
  TI_INT = 1,
  TI_BOOL = 2,
  TI_FLOAT = 3,
  TI_RAW_STR = 8,
  TI_BYTE_ARRAY = 9,
  TI_SMALL_STR = 11,
  TI_SMALL_BYTES = 12,
  TI_STR = 65,
  TI_BYTES = 66,
};

bool kc_tvm_is_rpc(const unsigned char *head, size_t n) {
  return n >= 8 && head[4] == 0 && head[5] == 0 && head[6] == 0 && head[7] == 0;
}

size_t kc_tvm_init_size(const unsigned char head[8]) {
  uint64_t n;
  memcpy(&n, head, 8);
  n = le64toh(n);
  return n >= 4 && n <= KC_TVM_INIT_MAX - 8 ? (size_t)n + 8 : 0;
}

/* A bounded reader over the packet. */
struct rd {
  const unsigned char *p;
  size_t left;
};

static bool take(struct rd *r, void *out, size_t n) {
  if (n > r->left)
    return false;
  memcpy(out, r->p, n);
  r->p += n;
  r->left -= n;
  return true;
}

static bool take_u32(struct rd *r, uint32_t *v) {
  if (!take(r, v, 4))
    return false;
  *v = le32toh(*v);
  return true;
}

static bool take_u64(struct rd *r, uint64_t *v) {
  if (!take(r, v, 8))
    return false;
  *v = le64toh(*v);
  return true;
}

/* A length-prefixed string into out (NUL-terminated), refused when it holds a NUL. */
static bool take_str(struct rd *r, char *out, size_t cap) {
  uint64_t n;
  if (!take_u64(r, &n) || n >= cap || n > r->left)
    return false;
  if (!take(r, out, (size_t)n))
    return false;
  out[n] = '\0';
  return strlen(out) == n;
}

static bool take_object_str(struct rd *r, char *out, size_t cap) {
  uint32_t inner;
  return take_u32(r, &inner) && (inner == TI_STR || inner == TI_BYTES) && take_str(r, out, cap);
}

static bool take_arg(struct rd *r, char *out, size_t cap) {
  uint32_t ti;
  uint64_t v;
  if (!take_u32(r, &ti))
    return false;
  switch (ti) {
  case TI_NONE:
    snprintf(out, cap, "None");
    return true;
  case TI_INT:
  case TI_BOOL:
    if (!take_u64(r, &v))
      return false;
    snprintf(out, cap, "%" PRId64, (int64_t)v);
    return true;
  case TI_FLOAT: {
    double d;
    if (!take_u64(r, &v))
      return false;
    memcpy(&d, &v, sizeof d);
    snprintf(out, cap, "%.17g", d);
    return true;
  }
  case TI_RAW_STR:
  case TI_BYTE_ARRAY:
    return take_str(r, out, cap);
  case TI_SMALL_STR:
  case TI_SMALL_BYTES:
  case TI_STR:
  case TI_BYTES:
    return take_object_str(r, out, cap);
  default:
    return false;
  }
}

int kc_tvm_init_parse(const void *pkt, size_t len, kc_tvm_init *out, kc_error *err) {
  memset(out, 0, sizeof *out);
  struct rd r = {pkt, len};
  uint64_t nbytes;
  uint32_t code, nargs;
  char ver[16];
  if (!take_u64(&r, &nbytes) || nbytes != r.left)
    return kc_error_set(err, EPROTO, "TVM RPC: bad packet length");
  if (!take_u32(&r, &code) || code != KC_TVM_CODE_INIT_SERVER)
    return kc_error_set(err, EPROTO, "TVM RPC: the first packet is not kInitServer");
  if (!take_str(&r, ver, sizeof ver) || strcmp(ver, KC_TVM_PROTOCOL_VER))
    return kc_error_set(err, EPROTO, "TVM RPC: client protocol version is not %s",
                        KC_TVM_PROTOCOL_VER);
  if (!take_u32(&r, &nargs) || nargs > KC_TVM_MAX_ARGS)
    return kc_error_set(err, EPROTO, "TVM RPC: at most %d session constructor arguments",
                        KC_TVM_MAX_ARGS);
  for (uint32_t i = 0; i < nargs; i++)
    if (!take_arg(&r, out->args[i], sizeof out->args[i]))
      return kc_error_set(err, EPROTO,
                          "TVM RPC: session constructor argument %u is not a string or number "
                          "of at most %d bytes",
                          i, KC_TVM_MAX_ARG - 1);
  if (r.left)
    return kc_error_set(err, EPROTO, "TVM RPC: trailing bytes after kInitServer");
  out->nargs = nargs;
  return 0;
}

static void put(char **p, const void *v, size_t n) {
  memcpy(*p, v, n);
  *p += n;
}

size_t kc_tvm_exception_encode(const char *msg, char *buf, size_t cap) {
  uint64_t len = strlen(msg), total = 4 + 4 + 4 + 8 + len;
  if (8 + total > cap)
    return 0;
  uint64_t le_total = htole64(total), le_len = htole64(len);
  uint32_t code = htole32(KC_TVM_CODE_EXCEPTION), nargs = htole32(1), ti = htole32(TI_RAW_STR);
  char *p = buf;
  put(&p, &le_total, 8);
  put(&p, &code, 4);
  put(&p, &nargs, 4);
  put(&p, &ti, 4);
  put(&p, &le_len, 8);
  put(&p, msg, (size_t)len);
  return (size_t)(p - buf);
}
