/* The build stage: compile, cache hit, key changes with flags, compiler errors and
 * time limits as results, caller errors as -1. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kcage/measure.h"

static char cache[512];

static int setup(void **state) {
  (void)state;
  snprintf(cache, sizeof cache, "%s/build-%d", KC_TEST_CACHE_DIR, (int)getpid());
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_build_then_cached(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r, &err), 0);
  if (r.status != KC_BUILD_OK)
    fail_msg("status %d: %s", r.status, r.message);
  assert_int_equal(strlen(r.key), 64);
  assert_int_equal(access(r.artifact, R_OK), 0);
  assert_true(r.build_s > 0);
  char first[sizeof r.artifact];
  strcpy(first, r.artifact);

  kc_build_result r2;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r2, &err), 0);
  assert_int_equal(r2.status, KC_BUILD_CACHED);
  assert_string_equal(r2.artifact, first);
  assert_true(r2.build_s == 0);

  /* Other flags: another key, another artifact. */
  o.cflags = "-O1 -fPIC -shared";
  kc_build_result r3;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r3, &err), 0);
  assert_int_equal(r3.status, KC_BUILD_OK);
  assert_string_not_equal(r3.key, r.key);

  /* --no-cache compiles again. */
  o.cflags = NULL;
  o.no_cache = true;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/tiled.c", &r3, &err), 0);
  assert_int_equal(r3.status, KC_BUILD_OK);
  assert_string_equal(r3.key, r.key);
}

static void test_compile_error(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/build_error.c", &r, &err), 0);
  assert_int_equal(r.status, KC_BUILD_ERROR);
  assert_non_null(strstr(r.message, "build_error.c"));
  assert_non_null(strstr(r.message, "undeclared_variable"));
  assert_null(strstr(r.message, cache)); /* the scratch path is not the user's business */
  assert_int_not_equal(access(r.artifact, F_OK), 0);
}

static void test_time_limit(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache, .timeout_s = 0.001, .no_cache = true};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), 0);
  assert_int_equal(r.status, KC_BUILD_TIMEOUT);
}

static void test_caller_errors(void **state) {
  (void)state;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/no-such-file.c", &r, &err), -1);
  assert_non_null(strstr(err.msg, "no-such-file.c"));
  o.cc = "no-such-compiler-kcage";
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), -1);
  assert_non_null(strstr(err.msg, "not found"));
}

/* A root-only file the attacks below try to make the build read or overwrite. */
static void make_secret(char *path, size_t len) {
  snprintf(path, len, "%s/secret-%d", KC_TEST_CACHE_DIR, (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "SECRET", 6), 6);
  close(fd);
}

static void assert_secret_intact(const char *path) {
  char buf[16] = {0};
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(read(fd, buf, sizeof buf), 6);
  close(fd);
  assert_string_equal(buf, "SECRET");
}

/* A cache directory someone else owns, or others can write, is refused with one line
 * naming it; so is one below a directory others can write. */
static void test_unsafe_cache_refused(void **state) {
  (void)state;
  char dir[600], inner[700];
  snprintf(dir, sizeof dir, "%s/unsafe-%d", KC_TEST_CACHE_DIR, (int)getpid());
  assert_int_equal(mkdir(dir, 0755), 0);
  kc_build_opts o = {.cache_dir = dir};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(chmod(dir, 0777), 0);
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), -1);
  assert_non_null(strstr(err.msg, dir));
  assert_non_null(strstr(err.msg, "writable by others"));
  assert_null(strchr(err.msg, '\n'));
  /* A safe-looking cache inside an open directory: the open one could swap it. */
  snprintf(inner, sizeof inner, "%s/cache", dir);
  assert_int_equal(mkdir(inner, 0755), 0);
  o.cache_dir = inner;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), -1);
  assert_non_null(strstr(err.msg, "writable by others"));
  assert_int_equal(chmod(dir, 0755), 0);
  if (geteuid() == 0) {
    assert_int_equal(chown(inner, 4321, 4321), 0);
    assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), -1);
    assert_non_null(strstr(err.msg, "owned by uid 4321"));
    assert_non_null(strstr(err.msg, inner));
  }
  /* Nothing was written into any of them. */
  char cmd[800];
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", inner);
  assert_int_equal(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Without HOME and XDG_CACHE_HOME the cache is never a shared /tmp directory. */
static void test_no_tmp_fallback(void **state) {
  (void)state;
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  unsetenv("HOME");
  unsetenv("XDG_CACHE_HOME");
  char buf[4096];
  kc_error err = {0};
  int rc = kc_build_cache_dir(NULL, buf, sizeof buf, &err);
  if (home)
    setenv("HOME", home, 1);
  if (xdg)
    setenv("XDG_CACHE_HOME", xdg, 1);
  free(home);
  free(xdg);
  if (rc == 0)
    assert_true(strncmp(buf, "/tmp", 4) != 0);
  else
    assert_non_null(strstr(err.msg, "cache"));
}

/* A link planted where an artifact or a key directory belongs is never followed: the
 * artifact is built again and the link replaced; a linked key directory is refused. */
static void test_planted_links(void **state) {
  (void)state;
  char secret[600];
  make_secret(secret, sizeof secret);
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), 0);
  assert_true(r.status == KC_BUILD_OK || r.status == KC_BUILD_CACHED);
  assert_int_equal(unlink(r.artifact), 0);
  assert_int_equal(symlink(secret, r.artifact), 0);
  kc_build_result r2;
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r2, &err), 0);
  assert_int_equal(r2.status, KC_BUILD_OK); /* not a cache hit */
  struct stat st;
  assert_int_equal(lstat(r2.artifact, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_secret_intact(secret);

  /* The key directory itself replaced by a link to elsewhere. */
  char sub[600], elsewhere[700], cmd[2400];
  snprintf(sub, sizeof sub, "%s/%.2s", cache, r2.key);
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere-%d", KC_TEST_CACHE_DIR, (int)getpid());
  assert_int_equal(mkdir(elsewhere, 0755), 0);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && ln -s '%s' '%s'", sub, elsewhere, sub);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r2, &err), -1);
  assert_non_null(strstr(err.msg, "symbolic link"));
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\" && rm -rf '%s' '%s'", elsewhere, elsewhere,
           sub);
  assert_int_equal(system(cmd), 0);
  unlink(secret);
}

/* The compiler (or anyone as its user) swaps its output for a link to a root-only file
 * or a fifo: root does not read through it, and nothing reaches the cache. */
static void test_output_swapped(void **state) {
  (void)state;
  char secret[600], flags[900];
  make_secret(secret, sizeof secret);
  static const char *const how[] = {"ln${IFS}-s${IFS}%s${IFS}$2", "mkfifo${IFS}$2"};
  for (size_t i = 0; i < 2; i++) {
    char script[800];
    snprintf(script, sizeof script, how[i], secret);
    snprintf(flags, sizeof flags, "-c %s x", script);
    kc_build_opts o = {.cache_dir = cache, .cc = "sh", .cflags = flags, .no_cache = true};
    kc_build_result r;
    kc_error err = {0};
    assert_int_equal(kc_build_kernel(&o, KC_EXAMPLES_DIR "/naive.c", &r, &err), 0);
    if (r.status != KC_BUILD_ERROR)
      fail_msg("case %zu: status %d: %s", i, r.status, r.message);
    if (!strstr(r.message, "not a regular file"))
      fail_msg("case %zu: %s", i, r.message);
    assert_int_not_equal(access(r.artifact, F_OK), 0);
  }
  assert_secret_intact(secret);
  unlink(secret);
}

/* A source that includes the host's /proc/cmdline: the build error must not echo the
 * host's boot command line back (it is masked in the build sandbox). */
static void test_proc_cmdline_masked(void **state) {
  (void)state;
  char host[256] = {0};
  FILE *f = fopen("/proc/cmdline", "r");
  if (!f || !fgets(host, sizeof host, f) || strlen(host) < 8) {
    if (f)
      fclose(f);
    skip();
  }
  fclose(f);
  host[strcspn(host, " \n")] = 0; /* the first word, e.g. BOOT_IMAGE=... */
  char src[600];
  snprintf(src, sizeof src, "%s/cmdline-%d.c", KC_TEST_CACHE_DIR, (int)getpid());
  f = fopen(src, "w");
  assert_non_null(f);
  fputs("int x[] = {\n#include \"/proc/cmdline\"\n};\n", f);
  fclose(f);
  kc_build_opts o = {.cache_dir = cache, .no_cache = true};
  kc_build_result r;
  kc_error err = {0};
  assert_int_equal(kc_build_kernel(&o, src, &r, &err), 0);
  unlink(src);
  assert_null(strstr(r.message, host));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_then_cached),    cmocka_unit_test(test_compile_error),
      cmocka_unit_test(test_time_limit),           cmocka_unit_test(test_caller_errors),
      cmocka_unit_test(test_unsafe_cache_refused), cmocka_unit_test(test_no_tmp_fallback),
      cmocka_unit_test(test_planted_links),        cmocka_unit_test(test_output_swapped),
      cmocka_unit_test(test_proc_cmdline_masked),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
