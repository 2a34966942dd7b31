/* A zygote shared by independent workers (kc_zygote_new): the public face of the
 * pool's zygote, for callers that keep one worker per thread (the Python package). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "worker_internal.h"

int kc_zygote_new(const kc_worker_opts *o, kc_zygote **out, kc_error *err) {
  kc_worker_opts d;
  if (o)
    d = *o;
  else
    kc_worker_opts_init(&d);
  /* the same default as a worker's, so that the zygote preloads the workers' policy */
  if (!d.policy && d.isolation == KC_ISOLATION_SANDBOX)
    d.policy = "measure";
  kc_zygote *z = NULL;
  if (kc_zygote_start(&d, &z, err) < 0)
    return -1;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  int rc = pthread_mutex_init(&z->mu, &a);
  pthread_mutexattr_destroy(&a);
  if (rc) {
    kc_zygote_stop(z);
    return kc_error_set(err, rc, "zygote: mutex");
  }
  z->shared = true;
  *out = z;
  return 0;
}

bool kc_zygote_is_alive(const kc_zygote *z) {
  return z && kc_zygote_alive(z);
}

void kc_zygote_free(kc_zygote *z) {
  if (!z)
    return;
  if (z->shared)
    pthread_mutex_destroy(&z->mu);
  kc_zygote_stop(z);
}

int kc_worker_new_on(const kc_worker_opts *opts, kc_zygote *z, kc_worker **out, kc_error *err) {
  if (!z)
    return kc_error_set(err, EINVAL, "worker: no zygote");
  return kc_worker_new_shared(opts, z, out, err);
}
