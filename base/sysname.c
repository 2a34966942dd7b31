#include "sysname.h"

#include <linux/audit.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>

#define KC_X32_BIT 0x40000000

const char *kc_syscall_lookup(uint32_t arch, int nr, char *buf, size_t len) {
  if (!len)
    return buf;
  buf[0] = '\0';
  char *s = seccomp_syscall_resolve_num_arch(arch, nr);
  if (s) {
    snprintf(buf, len, "%s", s);
    free(s);
  }
  return buf;
}

static const char *arch_prefix(uint32_t arch) {
  switch (arch) {
  case AUDIT_ARCH_I386:
    return "i386";
  case AUDIT_ARCH_X86_64:
    return "x86_64";
  case AUDIT_ARCH_AARCH64:
    return "aarch64";
  case AUDIT_ARCH_ARM:
    return "arm";
  default:
    return "arch?";
  }
}

const char *kc_syscall_label(uint32_t arch, int nr, char *buf, size_t len) {
  if (!len)
    return buf;
  char name[40];
  uint32_t native = seccomp_arch_native();
  if (arch == SCMP_ARCH_NATIVE)
    arch = native;
#ifdef __x86_64__
  /* x32 calls come with the native arch and the x32 bit in the number */
  if (arch == AUDIT_ARCH_X86_64 && (nr & KC_X32_BIT)) {
    kc_syscall_lookup(SCMP_ARCH_X32, nr, name, sizeof name);
    if (!name[0])
      kc_syscall_lookup(SCMP_ARCH_X32, nr & ~KC_X32_BIT, name, sizeof name);
    snprintf(buf, len, "x32:%s", name[0] ? name : "?");
    return buf;
  }
#endif
  kc_syscall_lookup(arch, nr, name, sizeof name);
  if (!name[0])
    snprintf(buf, len, "%s#%d", arch == native ? "" : arch_prefix(arch), nr);
  else if (arch != native)
    snprintf(buf, len, "%s:%s", arch_prefix(arch), name);
  else
    snprintf(buf, len, "%s", name);
  return buf;
}
