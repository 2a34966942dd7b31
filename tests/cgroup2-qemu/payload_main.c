/* Runs inside the qemu guest (pure cgroup v2, cgroup_no_v1=all): the same limit cases
 * as tests/cgroup on the host, through the v2 code path.  Static (no cmocka in the
 * guest): results are console lines that run.sh checks,
 *   CG2 MODE v2 / CG2 OK <case> / CG2 FAIL <case>: <why> / CG2 DONE pass=N fail=M */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgroup_cases.h"
#include "kcage/cgroup.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  kc_cgt_init();
  int pass = 0, fail = 0;
  kc_cgroup_mode m = kc_cgroup_detect();
  printf("CG2 MODE %s\n", kc_cgroup_mode_name(m));
  if (m != KC_CGROUP_V2) {
    printf("CG2 FAIL detect: expected v2, got %s\n", kc_cgroup_mode_name(m));
    fail++;
  }
  for (const kc_cgt_case *c = kc_cgt_cases; c->name; c++) {
    char msg[512] = "";
    if (c->fn(msg, sizeof msg) == 0) {
      printf("CG2 OK %s%s%s\n", c->name, msg[0] ? ": " : "", msg);
      pass++;
    } else {
      printf("CG2 FAIL %s: %s\n", c->name, msg);
      fail++;
    }
  }
  kc_error err = {0};
  int r = kc_cgroup_reap_stale(&err);
  printf("CG2 INFO reap_stale at end: %d\n", r);
  char msg[512] = "";
  if (kc_cgt_no_leftovers(msg, sizeof msg) == 0) {
    printf("CG2 OK no_leftovers\n");
    pass++;
  } else {
    printf("CG2 FAIL no_leftovers: %s\n", msg);
    fail++;
  }
  printf("CG2 DONE pass=%d fail=%d\n", pass, fail);
  return fail ? 1 : 0;
}
