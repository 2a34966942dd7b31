#include "signame.h"

#include <stdio.h>
#include <string.h>

const char *kc_signal_name(int sig) {
  static __thread char buf[24];
  const char *n = sigabbrev_np(sig); /* glibc >= 2.32: the name without the prefix */
  if (n)
    snprintf(buf, sizeof buf, "SIG%s", n);
  else
    snprintf(buf, sizeof buf, "SIG%d", sig);
  return buf;
}
