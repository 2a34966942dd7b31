/* Runs inside the qemu guest (pure cgroup v2, cgroup_no_v1=all): the same limit cases
 * as tests/cgroup on the host, through the v2 code path.  Static (no cmocka in the
 * guest): results are console lines that run.sh checks,
 *   CG2 MODE v2 / CG2 OK <case> / CG2 FAIL <case>: <why> / CG2 DONE pass=N fail=M */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_cases.h"
#include "kcage/cgroup.h"

/* `payload hostile WHAT`: the hostile programs that guest-extra.sh runs under
 * `kcage run` in the guest (one static binary, nothing else to carry in). */
static int hostile(const char *what) {
  if (!strcmp(what, "ok"))
    return 0;
  if (!strcmp(what, "memory")) { /* touch memory until killed */
    for (;;) {
      char *p = mmap(NULL, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED)
        return 3;
      for (size_t i = 0; i < (16u << 20); i += 4096)
        p[i] = 1;
    }
  }
  if (!strcmp(what, "spin"))
    for (volatile unsigned long x = 0;; x++)
      ;
  if (!strcmp(what, "sleep")) {
    sleep(1000);
    return 0;
  }
  if (!strcmp(what, "forkbomb")) {
    for (;;)
      if (fork() == 0)
        pause();
  }
  if (!strcmp(what, "flood")) {
    static char buf[65536];
    memset(buf, 'x', sizeof buf);
    for (;;)
      if (write(1, buf, sizeof buf) < 0)
        return 1;
  }
  if (!strcmp(what, "segv")) {
    volatile uintptr_t addr = 16; /* opaque to the compiler: a real fault */
    return *(volatile int *)addr;
  }
  if (!strcmp(what, "socket")) /* forbidden under the measure policy */
    return socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : 4;
  if (!strcmp(what, "daemon")) { /* a grandchild that outlives its parent */
    if (fork() == 0) {
      setsid();
      if (fork() == 0)
        for (;;)
          pause();
      _exit(0);
    }
    return 0;
  }
  if (!strcmp(what, "clock")) { /* the sandbox's own uptime: boot clock and sysinfo */
    struct timespec b;
    struct sysinfo si;
    clock_gettime(CLOCK_BOOTTIME, &b);
    if (sysinfo(&si) < 0 || b.tv_sec > 5 || si.uptime > 5 || si.loads[0]) {
      fprintf(stderr, "payload: the host's clock: boot %lld s, sysinfo up %ld s, load %lu\n",
              (long long)b.tv_sec, si.uptime, si.loads[0]);
      return 5;
    }
    return 0;
  }
  fprintf(stderr, "payload: unknown hostile case %s\n", what);
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "hostile"))
    return hostile(argv[2]);
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
