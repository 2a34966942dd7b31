/* A relay without the key between `kcage bench --tracker` and a real agent: it takes
 * the device's place at the tracker (registers under the key clients ask for), leases
 * the real agent under another key, and passes the session through frame by frame,
 * changing, dropping, replaying or reading what the test asks (a man in the middle). */
#ifndef KC_TRK_RELAY_H
#define KC_TRK_RELAY_H

#include <stddef.h>
#include <stdint.h>

typedef enum relay_mode {
  RELAY_PASS,         /* pass everything (and keep a copy of the client's bytes) */
  RELAY_FORGE_RECORD, /* agent frame 3 (the records): times / 100, or a flipped byte */
  RELAY_DROP,         /* client frame 2 (the first after the proof) never arrives */
  RELAY_REPLAY,       /* agent frame 2 is replaced by a copy of agent frame 1 */
  RELAY_REORDER,      /* client frames 2 and 3 arrive swapped */
  RELAY_STRIP,        /* the agent's hello loses its "record" (a downgrade offer) */
  RELAY_INJECT,       /* a plaintext upload slipped to the agent after the proof */
} relay_mode;

typedef struct relay {
  uint16_t tracker_port, port;
  const char *front_key, *back_key; /* registers as front_key, leases back_key */
  relay_mode mode;
  int lfd;
  volatile int stop;
  unsigned long thread;
  char *seen; /* the client's bytes as they crossed (RELAY_PASS), malloc'd */
  size_t seen_len;
  volatile int sessions;       /* sessions relayed */
  volatile int injected_reply; /* RELAY_INJECT: 1 the agent answered plainly, 2 not */
} relay;

void relay_start(relay *r, uint16_t tracker_port, const char *front_key, const char *back_key,
                 relay_mode mode);
void relay_stop(relay *r);

#endif
