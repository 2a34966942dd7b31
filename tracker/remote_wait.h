/* Before a remote batch asks for a device: does the tracker know the key at all?
 * (internal to tracker/) */
#ifndef KC_TRACKER_REMOTE_WAIT_H
#define KC_TRACKER_REMOTE_WAIT_H

#include <stdint.h>

#include "kcage/error.h"

/* 0 when an agent has registered key with the tracker at host:port (after logging one
 * waiting line, with the queue position, when none of its devices is free); -1 with a
 * one-line error when the tracker cannot be reached or no agent registers key within
 * grace_s (agents reconnecting to a restarted tracker come back within seconds). */
int kc_remote_key_check(const char *host, uint16_t port, const char *key, double grace_s,
                        kc_error *err);

#endif
