/* Regain privileges: no capability in any set, none can be raised, no nested user
 * namespace, no privileged operation works.  Exit 0 when all refused. */
#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 2;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if ((sscanf(line, "CapInh: %llx", &v) == 1 || sscanf(line, "CapPrm: %llx", &v) == 1 ||
         sscanf(line, "CapEff: %llx", &v) == 1 || sscanf(line, "CapBnd: %llx", &v) == 1 ||
         sscanf(line, "CapAmb: %llx", &v) == 1) &&
        v != 0) {
      fprintf(stderr, "capability left: %s", line);
      return 10;
    }
    unsigned nnp;
    if (sscanf(line, "NoNewPrivs: %u", &nnp) == 1 && nnp != 1)
      return 11;
  }
  fclose(f);
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0xff, sizeof d);
  if (syscall(SYS_capset, &h, d) == 0)
    return 12;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0) == 0)
    return 13;
  if (unshare(CLONE_NEWUSER) == 0)
    return 14;
  if (sethostname("owned", 5) == 0)
    return 15;
  if (chroot("/tmp") == 0)
    return 16;
  return 0;
}
