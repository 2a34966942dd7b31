/* kcage-worker: the per-pool zygote (and, forked from it, every worker).  Started only
 * by the kcage library: `kcage-worker zygote FD`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker_internal.h"

/* In the sanitizer build, a worker's crash must stay a crash (the verdict names the
 * signal), not become ASan's report and exit(1); its own leaks are not checked (it is
 * always SIGKILLed). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0";
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "zygote"))
    return kc_zygote_main(atoi(argv[2]));
  fprintf(stderr, "kcage-worker: started by the kcage library only (usage: kcage-worker zygote FD)\n");
  return 2;
}
