/* The public view of a policy's limits, as the kc_limits a run takes, so an embedder (and
 * the Python package) reads them without the internal kc_policy_spec's layout. */
#include "kcage/sandbox.h"
#include "policy_internal.h"

#include <string.h>

void kc_policy_get_limits(const kc_policy *p, kc_limits *out) {
  memset(out, 0, sizeof *out);
  if (!p)
    return;
  const kc_policy_spec *s = kc_policy_get_spec(p);
  out->memory_bytes = s->memory_bytes;
  out->cpu_s = s->cpu_s;
  out->wall_s = s->wall_s;
  out->pids = s->pids;
  out->cpus = s->cpus;
  out->output_bytes = s->output_bytes;
}
