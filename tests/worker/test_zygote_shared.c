/* kc_zygote_new / kc_worker_new_on: one sandboxed zygote shared by workers of several
 * threads (the Python package's layout), and the "python" handler's refusals. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kcage/worker.h"

enum { CALLS = 200 };

typedef struct thread_job {
  kc_zygote *z;
  int ok; /* calls answered with exactly their argument */
  pid_t pids[2];
  char err[KC_ERROR_MSG_MAX];
} thread_job;

static void *run_thread(void *p) {
  thread_job *j = p;
  kc_worker_opts o;
  kc_worker_opts_init(&o);
  kc_worker *w = NULL;
  kc_error err = {0};
  if (kc_worker_new_on(&o, j->z, &w, &err) < 0) {
    snprintf(j->err, sizeof j->err, "%s", err.msg);
    return NULL;
  }
  for (int i = 0; i < CALLS; i++) {
    char arg[32];
    int n = snprintf(arg, sizeof arg, "call %d %p", i, (void *)j);
    kc_call_result r;
    kc_call_result_init(&r);
    if (kc_worker_send(w, "echo", arg, (size_t)n, 30.0, &err) < 0 ||
        kc_worker_recv(w, &r, &err) < 0) {
      snprintf(j->err, sizeof j->err, "%s", err.msg);
      break;
    }
    if (r.status == KC_CALL_COMPLETE && r.value_len == (size_t)n && !memcmp(r.value, arg, n))
      j->ok++;
    if (i == 0)
      j->pids[0] = kc_worker_pid(w);
    if (i == CALLS / 2) { /* a restart comes from the shared zygote too */
      kc_worker_kill(w);
    }
    kc_call_result_clear(&r);
  }
  j->pids[1] = kc_worker_pid(w);
  kc_worker_free(w);
  return NULL;
}

static kc_zygote *shared_or_skip(const char *python_lib) {
  kc_worker_opts o;
  kc_worker_opts_init(&o);
  o.python_lib = python_lib;
  kc_zygote *z = NULL;
  kc_error err = {0};
  if (kc_zygote_new(&o, &z, &err) < 0) {
    if (python_lib) /* the caller expects this failure */
      return NULL;
    print_message("no sandboxed zygote here: %s\n", err.msg);
    skip();
  }
  return z;
}

static void test_two_threads_share_a_zygote(void **state) {
  (void)state;
  kc_zygote *z = shared_or_skip(NULL);
  assert_true(kc_zygote_is_alive(z));
  thread_job jobs[2] = {{.z = z}, {.z = z}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, run_thread, &jobs[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (jobs[i].err[0])
      fail_msg("thread %d: %s", i, jobs[i].err);
    assert_int_equal(jobs[i].ok, CALLS);
    assert_true(jobs[i].pids[0] > 0 && jobs[i].pids[1] > 0);
    assert_int_not_equal(jobs[i].pids[0], jobs[i].pids[1]); /* killed and restarted */
  }
  assert_int_not_equal(jobs[0].pids[0], jobs[1].pids[0]);
  assert_true(kc_zygote_is_alive(z));
  kc_zygote_free(z);
}

static void test_python_without_interpreter(void **state) {
  (void)state;
  kc_zygote *z = shared_or_skip(NULL);
  kc_worker_opts o;
  kc_worker_opts_init(&o);
  kc_worker *w = NULL;
  kc_error err = {0};
  assert_int_equal(kc_worker_new_on(&o, z, &w, &err), 0);
  kc_call_result r;
  kc_call_result_init(&r);
  assert_int_equal(kc_worker_send(w, "python", "x", 1, 30.0, &err), 0);
  assert_int_equal(kc_worker_recv(w, &r, &err), 0);
  assert_int_equal(r.status, KC_CALL_EXCEPTION);
  assert_non_null(strstr(r.message, "no interpreter"));
  kc_call_result_clear(&r);
  kc_worker_free(w);
  kc_zygote_free(z);
  assert_int_equal(kc_worker_new_on(&o, NULL, &w, &err), -1);
}

static void test_python_bad_library(void **state) {
  (void)state;
  kc_zygote *probe = shared_or_skip(NULL);
  kc_zygote_free(probe);
  kc_zygote *z = shared_or_skip("/nonexistent/libpython9.9.so");
  assert_null(z);
  kc_worker_opts o;
  kc_worker_opts_init(&o);
  o.python_lib = "/nonexistent/libpython9.9.so";
  kc_error err = {0};
  assert_int_equal(kc_zygote_new(&o, &z, &err), -1);
  assert_non_null(strstr(err.msg, "python: dlopen"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_threads_share_a_zygote),
      cmocka_unit_test(test_python_without_interpreter),
      cmocka_unit_test(test_python_bad_library),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
