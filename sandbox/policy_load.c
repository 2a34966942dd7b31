/* Loading a policy by name or path: resolve it (policy_resolve.c), parse the file
 * (policy_parse.c) and keep the profile's name. */
#include "policy_internal.h"
#include "sysname.h"

#include <seccomp.h>
#include <stdlib.h>
#include <string.h>

int kc_policy_load(const char *name_or_path, kc_policy **out, kc_error *err) {
  return kc_policy_load_in(NULL, name_or_path, out, err);
}

int kc_policy_load_in(const kc_settings *s, const char *name_or_path, kc_policy **out,
                      kc_error *err) {
  char path[4096];
  *out = NULL;
  if (kc_policy_resolve_in(s, name_or_path, path, sizeof path, err) < 0)
    return -1;
  if (kc_policy_parse_file(path, out, err) < 0)
    return -1;
  if (!kc_policy_is_path(name_or_path)) { /* the profile's name, not the file's */
    char *n = strdup(name_or_path);
    if (n) {
      free((*out)->name);
      (*out)->name = n;
      (*out)->spec.name = n;
    }
  }
  return 0;
}

const char *kc_syscall_name(int nr, char *buf, size_t len) {
  return kc_syscall_lookup(SCMP_ARCH_NATIVE, nr, buf, len);
}
