/* `kcage bench --cpus N`: the measuring sandbox gets N CPUs.  Held by the kernel's
 * scheduler: this process keeps only N of the CPUs it may run on, and every worker it
 * starts inherits that set (a worker cannot widen it: its policies do not allow
 * sched_setaffinity).  The worker sizes a TVM-FFI module's thread pool from the same
 * set.  More CPUs than this process has cannot be held, and are refused. */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "cli.h"

int kc_measure_cli_cpus(unsigned n, int pin_cpu) {
  cpu_set_t mine, keep;
  if (sched_getaffinity(0, sizeof mine, &mine) < 0) {
    kc_cli_error("bench", "--cpus: %s", strerror(errno));
    return KC_EXIT_USAGE;
  }
  if ((int)n > CPU_COUNT(&mine)) {
    kc_cli_error("bench", "--cpus %u: this process may run on only %d CPUs", n, CPU_COUNT(&mine));
    return KC_EXIT_USAGE;
  }
  CPU_ZERO(&keep);
  unsigned have = 0;
  /* --cpu's CPU first (a pin outside the set would be refused later) */
  if (pin_cpu >= 0 && pin_cpu < CPU_SETSIZE && CPU_ISSET(pin_cpu, &mine)) {
    CPU_SET(pin_cpu, &keep);
    have++;
  }
  for (int c = 0; c < CPU_SETSIZE && have < n; c++)
    if (CPU_ISSET(c, &mine) && !CPU_ISSET(c, &keep)) {
      CPU_SET(c, &keep);
      have++;
    }
  if (sched_setaffinity(0, sizeof keep, &keep) < 0) {
    kc_cli_error("bench", "--cpus %u: %s", n, strerror(errno));
    return KC_EXIT_USAGE;
  }
  return 0;
}
