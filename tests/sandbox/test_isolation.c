/* `kcage run` as root against the host: bind sources only root can reach, and the
 * sandbox's own host identity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>

#include "kc_run_helper.h"

#define RUN(o, ...)                                                                                \
  do {                                                                                             \
    const char *a_[] = {__VA_ARGS__, NULL};                                                        \
    assert_int_equal(kc_test_run(a_, (o)), 0);                                                     \
  } while (0)

static void put(const char *dir, const char *name, const char *text, mode_t mode) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(p, mode), 0);
}

/* A source inside a 0700 directory binds (the parent opens it), and inside the files'
 * own modes still rule: a 0600 root file stays unreadable, a root 0755 directory
 * unwritable, a 0777 one writable. */
static void test_bind_root_only_path(void **s) {
  (void)s;
  if (geteuid() != 0)
    skip();
  char top[] = "/tmp/kc-test-private-XXXXXX";
  assert_non_null(mkdtemp(top)); /* 0700: only root gets through */
  char data[128], open_dir[160], spec_ro[200], spec_rw[200];
  snprintf(data, sizeof data, "%s/data", top);
  assert_int_equal(mkdir(data, 0755), 0);
  put(data, "public", "visible\n", 0644);
  put(data, "secret", "hidden\n", 0600);
  snprintf(open_dir, sizeof open_dir, "%s/open", data);
  assert_int_equal(mkdir(open_dir, 0777), 0);
  assert_int_equal(chmod(open_dir, 0777), 0);
  snprintf(spec_ro, sizeof spec_ro, "%s:/data", data);
  kc_run_out o;
  RUN(&o, "--ro-bind", spec_ro, "--", "sh", "-c",
      "cat /data/public; cat /data/secret 2>/dev/null && echo LEAK; "
      "echo x > /data/open/x 2>/dev/null && echo WROTE-RO; echo done");
  if (o.exit_status != 0)
    fail_msg("exit %d: %s", o.exit_status, kc_test_str(&o, "message") ? kc_test_str(&o, "message") : "");
  assert_string_equal(o.out, "visible\ndone\n");
  json_decref(o.report);
  snprintf(spec_rw, sizeof spec_rw, "%s:/data", data);
  RUN(&o, "--bind", spec_rw, "--", "sh", "-c",
      "echo x > /data/new 2>/dev/null && echo WROTE-ROOT-DIR; echo y > /data/open/y && echo ok");
  assert_int_equal(o.exit_status, 0);
  assert_string_equal(o.out, "ok\n");
  json_decref(o.report);
  assert_true(kc_test_no_stray_mount());
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bind_root_only_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
