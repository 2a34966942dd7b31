/* Resource ownership through cleanup attributes rather than goto ladders. */
#ifndef KCAGE_CLEANUP_H
#define KCAGE_CLEANUP_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void kc_freep(void *p) {
  free(*(void **)p);
}
static inline void kc_closep(int *fd) {
  if (*fd >= 0)
    close(*fd);
}
static inline void kc_fclosep(FILE **f) {
  if (*f)
    fclose(*f);
}
static inline void kc_closedirp(DIR **d) {
  if (*d)
    closedir(*d);
}

#define kc_cleanup_free __attribute__((cleanup(kc_freep)))
#define kc_cleanup_close __attribute__((cleanup(kc_closep)))
#define kc_cleanup_fclose __attribute__((cleanup(kc_fclosep)))
#define kc_cleanup_closedir __attribute__((cleanup(kc_closedirp)))

/* Take ownership out of a cleanup-managed variable. */
#define kc_steal_ptr(p)                                                                            \
  ({                                                                                               \
    __typeof__(p) kc_tmp_ = (p);                                                                   \
    (p) = NULL;                                                                                    \
    kc_tmp_;                                                                                       \
  })
#define kc_steal_fd(fd)                                                                            \
  ({                                                                                               \
    int kc_tmp_ = (fd);                                                                            \
    (fd) = -1;                                                                                     \
    kc_tmp_;                                                                                       \
  })

#endif
