/* kcage-worker: the per-pool zygote (and, forked from it, every worker).  Started only
 * by the kcage library: `kcage-worker zygote FD`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker_internal.h"

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "zygote"))
    return kc_zygote_main(atoi(argv[2]));
  fprintf(stderr, "kcage-worker: started by the kcage library only (usage: kcage-worker zygote FD)\n");
  return 2;
}
