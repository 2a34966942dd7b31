/* A fake device agent on a thread of the test process: it registers with a tracker,
 * answers TVM's handshake and the kcage session like a real agent, and answers "run"
 * with whatever reply the test gives it (a hostile peer). */
#ifndef KC_TRK_ROGUE_H
#define KC_TRK_ROGUE_H

#include <jansson.h>
#include <stdint.h>

typedef struct rogue_agent {
  uint16_t tracker_port, port;
  int lfd;
  const char *reply; /* the JSON text sent for "run" */
  const char *hello; /* the JSON text sent for "hello"; NULL = a plain hello */
  volatile int stop;
  unsigned long thread;
  json_t *last_run;   /* the last "run" message received */
  json_t *last_hello; /* the last "hello" message received */
} rogue_agent;

void rogue_start(rogue_agent *r, uint16_t tracker_port, const char *reply);
void rogue_stop(rogue_agent *r);

#endif
