/* kcage: sandboxed workers and measurement for untrusted compute kernels.  The whole
 * public API of libkcage (docs/api.md): errors, a tenant's settings, policies, one
 * sandboxed run, workers and pools, a bench batch, the tracker client. */
#ifndef KCAGE_H
#define KCAGE_H

#include "kcage/error.h"
#include "kcage/measure.h"
#include "kcage/policy.h"
#include "kcage/pool.h"
#include "kcage/sandbox.h"
#include "kcage/settings.h"
#include "kcage/tracker.h"
#include "kcage/worker.h"

#endif
