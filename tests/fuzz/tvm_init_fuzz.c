/* libFuzzer target: what the agent reads of a TVM client itself, before any sandbox
 * exists - the first packet after the handshake (kc_tvm_is_rpc, kc_tvm_init_size) and
 * the kInitServer it must be (kc_tvm_init_parse); and the exception packet it writes
 * back, which must carry its message whole.  Input starting with 'J': the rest is the
 * session_constructor_args of a kcage session's hello (kc_session_ctor_accept), whose
 * caps may only go down. */
#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session_ctor_agent.h"
#include "tvm_wire.h"

static void exception_roundtrip(const uint8_t *data, size_t size) {
  char msg[512], buf[600];
  size_t n = size < sizeof msg - 1 ? size : sizeof msg - 1;
  memcpy(msg, data, n);
  msg[n] = '\0';
  size_t len = strlen(msg), out = kc_tvm_exception_encode(msg, buf, sizeof buf);
  uint64_t total, slen;
  memcpy(&total, buf, 8);
  memcpy(&slen, buf + 20, 8);
  if (out != 28 + len || le64toh(total) != out - 8 || le64toh(slen) != len ||
      memcmp(buf + 28, msg, len))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void ctor_args(const uint8_t *data, size_t size) {
  json_t *args = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
  kc_run_caps caps = {.max_memory_bytes = 1u << 30}, before = caps;
  json_t *ack = NULL;
  kc_error err;
  if (args && kc_session_ctor_accept(args, &caps, &ack, &err) == 0) {
    if (!json_is_object(ack) || caps.max_memory_bytes > before.max_memory_bytes)
      abort();
  }
  json_decref(ack);
  json_decref(args);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size && data[0] == 'J') {
    ctor_args(data + 1, size - 1);
    return 0;
  }
  if (size >= 8) {
    (void)kc_tvm_is_rpc(data, size);
    size_t whole = kc_tvm_init_size(data);
    if (whole && (whole > KC_TVM_INIT_MAX || whole < 12))
      abort();
  }
  kc_tvm_init *in = malloc(sizeof *in);
  kc_error err;
  if (in && kc_tvm_init_parse(data, size, in, &err) == 0) {
    if (in->nargs > KC_TVM_MAX_ARGS)
      abort();
    for (size_t i = 0; i < in->nargs; i++)
      if (strnlen(in->args[i], KC_TVM_MAX_ARG) == KC_TVM_MAX_ARG)
        abort();
  }
  free(in);
  exception_roundtrip(data, size);
  return 0;
}
