/* Where a batch's inputs file lives: in memory where /dev/shm is a tmpfs, its space
 * taken up front, seen at one path by the parent and by every kind of worker, removed
 * after the batch, and left behind by a run that died only until the next one starts;
 * on TMPDIR when memory cannot hold it. */
#include <dirent.h>
#include <errno.h>
#include <linux/magic.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kcage/measure.h"
#include "measure_internal.h"

static char cache[] = KC_TEST_CACHE_DIR;

static bool shm_is_tmpfs(void) {
  struct statfs fs;
  return statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* Entries of /dev/shm named kcage-inputs-PID. */
static int count_ours(pid_t pid) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "kcage-inputs-%d.", (int)pid);
  DIR *d = opendir("/dev/shm");
  if (!d)
    return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

/* A pid no process has now: a child's, reaped. */
static pid_t dead_pid(void) {
  pid_t p = fork();
  if (p == 0)
    _exit(0);
  assert_true(p > 0);
  waitpid(p, NULL, 0);
  return p;
}

static void test_in_memory(void **state) {
  (void)state;
  if (!shm_is_tmpfs())
    skip(); /* no tmpfs at /dev/shm: the TMPDIR case below covers it */
  char session[] = "/tmp/kc-inputs.XXXXXX", view[64], dir[4096], path[4200];
  assert_non_null(mkdtemp(session));
  snprintf(view, sizeof view, "%s/view", session);
  assert_int_equal(mkdir(view, 0755), 0);
  /* a dead run's directory goes, a live one's stays */
  char dead[128], live[128];
  snprintf(dead, sizeof dead, "/dev/shm/kcage-inputs-%d.test", (int)dead_pid());
  snprintf(live, sizeof live, "/dev/shm/kcage-inputs-%d.test", (int)getppid());
  assert_int_equal(mkdir(dead, 0700), 0);
  assert_int_equal(mkdir(live, 0700), 0);
  kc_error err = {0};
  int fd = kc_inputs_file(3u << 20, session, view, dir, sizeof dir, path, sizeof path, &err);
  assert_true(fd >= 0);
  assert_int_equal(access(dead, F_OK), -1);
  assert_int_equal(access(live, F_OK), 0);
  rmdir(live);
  /* in memory, the whole size allocated, read-only to others, at session/in */
  char want[128];
  snprintf(want, sizeof want, "/dev/shm/kcage-inputs-%d.", (int)getpid());
  assert_memory_equal(dir, want, strlen(want));
  char at[4200];
  snprintf(at, sizeof at, "%s/in/inputs.bin", session);
  assert_string_equal(path, at);
  struct stat a, b;
  struct statfs fs;
  assert_int_equal(fstat(fd, &a), 0);
  assert_int_equal(stat(path, &b), 0);
  assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
  assert_int_equal(fstatfs(fd, &fs), 0);
  assert_true(fs.f_type == TMPFS_MAGIC);
  assert_int_equal(a.st_size, 3u << 20);
  assert_true(a.st_blocks * 512 >= (3 << 20)); /* taken up front, not sparse */
  assert_int_equal(a.st_mode & 0777, 0444);
  close(fd);
  kc_rm_rf(dir);
  kc_rm_rf(session);
}

/* More than memory can hold: the file goes to the view on TMPDIR, sparse, and nothing
 * is left in /dev/shm. */
static void test_fallback(void **state) {
  (void)state;
  char session[] = "/tmp/kc-inputs.XXXXXX", view[64], dir[4096], path[4200];
  assert_non_null(mkdtemp(session));
  snprintf(view, sizeof view, "%s/view", session);
  assert_int_equal(mkdir(view, 0755), 0);
  kc_error err = {0};
  size_t huge = (size_t)1 << 42; /* 4 TiB */
  int fd = kc_inputs_file(huge, session, view, dir, sizeof dir, path, sizeof path, &err);
  if (fd < 0 && err.code == EFBIG) {
    kc_rm_rf(session);
    skip(); /* TMPDIR's filesystem takes no file this large either */
  }
  assert_true(fd >= 0);
  assert_string_equal(dir, "");
  char want[128];
  snprintf(want, sizeof want, "%s/inputs.bin", view);
  assert_string_equal(path, want);
  assert_int_equal(count_ours(getpid()), 0);
  close(fd);
  kc_rm_rf(session);
}

/* A whole batch: its inputs in memory while it runs (the kernels get their verdicts
 * through it), nothing of it in /dev/shm after. */
static void test_batch_leaves_nothing(void **state) {
  (void)state;
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.args = "f32[32,32] f32[32,32] f32[32,32]:out";
  cfg.timeout_s = 60;
  cfg.memory_bytes = 512u << 20;
  cfg.repeat = 2;
  cfg.min_repeat_ms = 2;
  cfg.build.cache_dir = cache;
  cfg.reference = KC_EXAMPLES_DIR "/reference.c";
  const char *k[] = {KC_EXAMPLES_DIR "/naive.c", KC_EXAMPLES_DIR "/wrong_result.c"};
  json_t *recs = NULL;
  kc_error err = {0};
  assert_int_equal(kc_measure_run_batch(&cfg, k, 2, &recs, &err), 0);
  assert_string_equal(json_string_value(json_object_get(json_array_get(recs, 0), "status")), "ok");
  assert_string_equal(json_string_value(json_object_get(json_array_get(recs, 1), "status")),
                      "wrong_result");
  json_decref(recs);
  assert_int_equal(count_ours(getpid()), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_in_memory),
      cmocka_unit_test(test_fallback),
      cmocka_unit_test(test_batch_leaves_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
