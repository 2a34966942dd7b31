/* Private: the agent's answer to session_constructor_args in a kcage session's hello. */
#ifndef KCAGE_TRACKER_SESSION_CTOR_AGENT_H
#define KCAGE_TRACKER_SESSION_CTOR_AGENT_H

#include <jansson.h>

#include "kcage/error.h"
#include "kcage/tracker.h"

/* args = [name, arg...]: rpc.LocalSession, or kcage.sandbox with memory=SIZE, which
 * lowers caps for the rest of the session.  *ack = {"name", "args", "clamped"} for the
 * hello; -1 (EINVAL) names what a kcage session cannot honour. */
int kc_session_ctor_accept(const json_t *args, kc_run_caps *caps, json_t **ack, kc_error *err);

#endif
