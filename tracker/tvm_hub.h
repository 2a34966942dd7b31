/* The agent's TVM zygote (tvm_hub.c) and what a session process says to it (internal to
 * tracker/).  Both ends are the agent's own processes. */
#ifndef KCAGE_TVM_HUB_H
#define KCAGE_TVM_HUB_H

#include <stdint.h>

#include "kcage/sandbox.h"

#include "tvm_session.h"

#define KC_TVM_HUB_MAGIC 0x6b637468u  /* "kcth" */
#define KC_TVM_HUB_TEXT_MAX 65536     /* the session's description (JSON) */
#define KC_TVM_TAIL 600               /* the last bytes of the server loop's output */
#define KC_TVM_HUB_EXIT_UNAVAILABLE 3 /* the zygote could not start: do without it */

typedef struct kc_tvm_hub_limits {
  uint64_t memory_bytes; /* 0 = the policy's */
  uint32_t pids;
  double cpus;
} kc_tvm_hub_limits;

/* session process -> hub, followed by the description's text, with two descriptors:
 * the client's socket and the reply socket */
typedef struct kc_tvm_hub_request {
  uint32_t magic;
  kc_tvm_hub_limits lim;
  double wall_s; /* the session's wall limit; 0 = none */
} kc_tvm_hub_request;

enum { KC_TVM_HUB_TAKEN = 1, KC_TVM_HUB_ENDED = 2 };

/* hub -> session process: TAKEN once the worker has the client's socket (from then on
 * the session is the hub's), ENDED with the verdict */
typedef struct kc_tvm_hub_reply {
  uint32_t magic, phase;
  kc_status status;
  char limit[8];
  char message[512];
  uint32_t tail_len;
  char tail[KC_TVM_TAIL];
} kc_tvm_hub_reply;

/* The hub's process (forked by the agent; ctl its end of a SEQPACKET socketpair, on
 * which requests queue while TVM is imported).  Exits KC_TVM_HUB_EXIT_UNAVAILABLE when the
 * zygote could not start, 0 when the agent closed ctl. */
__attribute__((noreturn)) void kc_tvm_hub_main(const kc_tvm_serve_opts *o, int ctl);

/* In a session's process: the TVM session on fd through the hub on hub_ctl.  1 when
 * the hub did not take it (nothing of fd consumed: serve it another way), 0 when it
 * was served, -1 with err. */
int kc_tvm_hub_serve(int hub_ctl, int fd, const kc_tvm_serve_opts *o, kc_error *err);

#endif
