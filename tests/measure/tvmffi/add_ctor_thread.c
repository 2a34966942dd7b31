/* Hostile: a module whose constructor, run when the worker loads it, clones a thread
 * with exactly the flags glibc uses (the ones the worker's own pool was let through
 * with).  It must meet the worker's seal: a `syscall` verdict. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((constructor)) static void early(void) {
  long flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
               CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
  /* no stack of its own: a child that ran would crash the worker, not pass */
  syscall(SYS_clone, flags, 0, 0, 0, 0);
}

typedef struct {
  int32_t type_index;
  uint32_t zero_padding;
  void *v_ptr;
} TVMFFIAny;

int __tvm_ffi_add(void *self, const TVMFFIAny *args, int32_t num_args, TVMFFIAny *result) {
  (void)self;
  (void)args;
  (void)num_args;
  (void)result;
  return 0;
}
