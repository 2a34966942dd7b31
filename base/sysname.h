/* Syscall names as people read them, from libseccomp's tables: one namer for the
 * seccomp listener's verdicts, the worker's seal trap and the measure runner. */
#ifndef KCAGE_SYSNAME_H
#define KCAGE_SYSNAME_H

#include <stddef.h>
#include <stdint.h>

/* The bare name of call nr of arch (an AUDIT_ARCH_* value; 0 is the native one) into
 * buf, or "" when libseccomp knows no such call; returns buf. */
const char *kc_syscall_lookup(uint32_t arch, int nr, char *buf, size_t len);

/* The name a verdict shows, into buf; returns buf:
 *   "getpid"       a native call
 *   "i386:getpid"  a call of another arch
 *   "x32:read"     an x32 call (the native arch with the x32 bit in the number)
 *   "#123", "i386#123", "x32:?"  a number libseccomp has no name for */
const char *kc_syscall_label(uint32_t arch, int nr, char *buf, size_t len);

#endif
