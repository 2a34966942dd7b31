/* The TVM-FFI thread pool's semantics, as TVM's runtime gives them to a module's
 * parallel loops: num_task 0 is one task per thread, task i on its own thread, the
 * barrier holds every task until all reached it, a failed task fails the launch, and
 * a launch inside a task or of more tasks than threads is refused with TVM's text.
 * In-process: the pool is plain threads; the sandbox around it is the CLI tests'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "tvmffi.h"

enum { THREADS = 3, ROUNDS = 2000 };

typedef struct {
  long tid[THREADS];
  atomic_int before[THREADS];
  atomic_int bad; /* a task that passed the barrier before another reached it */
  int num_task;
  int fail_task; /* -1: none */
} job;

static int task(int id, kc_parallel_env *env, void *cdata) {
  job *j = cdata;
  if (id < 0 || id >= THREADS)
    return -1;
  j->tid[id] = syscall(SYS_gettid);
  j->num_task = env->num_task;
  atomic_store(&j->before[id], 1);
  kc_tvmffi_parallel_barrier(id, env);
  for (int i = 0; i < env->num_task; i++)
    if (!atomic_load(&j->before[i]))
      atomic_store(&j->bad, 1);
  return id == j->fail_task ? -1 : 0;
}

static int nested(int id, kc_parallel_env *env, void *cdata) {
  (void)env;
  return id == 0 ? kc_tvmffi_parallel_launch(task, cdata, 0) : 0;
}

static int setup(void **state) {
  (void)state;
  return kc_tvmffi_pool_start(THREADS) == 0 ? 0 : -1;
}

static void test_one_task_per_thread(void **state) {
  (void)state;
  assert_int_equal(kc_tvmffi_pool_threads(), THREADS);
  for (int r = 0; r < ROUNDS; r++) {
    job j = {.fail_task = -1};
    assert_int_equal(kc_tvmffi_parallel_launch(task, &j, 0), 0);
    assert_int_equal(j.num_task, THREADS);
    assert_int_equal(j.tid[0], syscall(SYS_gettid)); /* task 0: the caller */
    assert_true(j.tid[1] != j.tid[0] && j.tid[2] != j.tid[0] && j.tid[1] != j.tid[2]);
    assert_int_equal(atomic_load(&j.bad), 0);
  }
}

static void test_fewer_tasks(void **state) {
  (void)state;
  for (int r = 0; r < ROUNDS; r++) {
    job j = {.fail_task = -1};
    assert_int_equal(kc_tvmffi_parallel_launch(task, &j, 2), 0);
    assert_int_equal(j.num_task, 2);
    assert_int_equal(j.tid[2], 0);
    assert_int_equal(atomic_load(&j.bad), 0);
  }
}

static void test_failed_task_fails_launch(void **state) {
  (void)state;
  job j = {.fail_task = 2};
  assert_int_equal(kc_tvmffi_parallel_launch(task, &j, 0), -1);
  job ok = {.fail_task = -1};
  assert_int_equal(kc_tvmffi_parallel_launch(task, &ok, 0), 0); /* the pool goes on */
}

static void test_refusals(void **state) {
  (void)state;
  job j = {.fail_task = -1};
  assert_int_equal(kc_tvmffi_parallel_launch(task, &j, THREADS + 1), -1);
  assert_non_null(strstr(kc_tvmffi_take_error(), "larger than number of threads"));
  assert_int_equal(kc_tvmffi_parallel_launch(nested, &j, 0), -1);
  assert_non_null(strstr(kc_tvmffi_take_error(), "Cannot launch parallel job inside worker"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_task_per_thread),
      cmocka_unit_test(test_fewer_tasks),
      cmocka_unit_test(test_failed_task_fails_launch),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
