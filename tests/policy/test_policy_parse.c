/* Policy language: good files, every error with its exact FILE:LINE, includes,
 * overrides, the shipped profiles, dump round trip and notification classification. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/audit.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kcage/policy.h"
#include "kcage/seccomp.h"
#include "policy_internal.h"

static char dir[64];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static int setup(void **state) {
  (void)state;
  strcpy(dir, "/tmp/kcage-policy-test-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Write dir/name with text; returns the path (static buffer rotation). */
static const char *put(const char *name, const char *text) {
  static char bufs[8][256];
  static int k;
  char *path = bufs[k++ % 8];
  snprintf(path, 256, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

/* Parse text as NAME and expect the error "DIR/NAME:LINE: msg" (or a prefix match of
 * the message when prefix is set). */
static void expect_error(const char *name, const char *text, int line, const char *msg) {
  const char *path = put(name, text);
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_parse_file(path, &p, &err), -1);
  assert_null(p);
  char want[1200];
  snprintf(want, sizeof want, "%s:%d: %s", path, line, msg);
  assert_string_equal(err.msg, want);
}

static kc_policy *parse_ok(const char *name, const char *text) {
  const char *path = put(name, text);
  kc_policy *p = NULL;
  kc_error err = {0};
  int rc = kc_policy_parse_file(path, &p, &err);
  if (rc < 0)
    fail_msg("%s", err.msg);
  assert_non_null(p);
  return p;
}

static void test_errors(void **state) {
  (void)state;
  expect_error("e1.policy", "# comment\n\nfrobnicate 1\n", 3, "unknown keyword 'frobnicate'");
  expect_error("e2.policy", "allow read\nallow sockett\n", 2, "unknown syscall 'sockett'");
  expect_error("e3.policy", "allow read write open_by_handle_att close\n", 1,
               "unknown syscall 'open_by_handle_att'");
  expect_error("e4.policy", "limit pids 12x\n", 1, "limit pids: bad number '12x'");
  expect_error("e5.policy", "limit memory lots\n", 1, "limit memory: bad size 'lots' (e.g. 256M)");
  expect_error("e6.policy", "limit cpu -1\n", 1, "limit cpu: bad number '-1'");
  expect_error("e7.policy", "limit disk 1G\n", 1,
               "limit: unknown limit 'disk' (memory cpu wall pids cpus output)");
  expect_error("e8.policy", "tmpfs /tmp 12Q\n", 1, "tmpfs: bad size '12Q' (e.g. 64M)");
  expect_error("e9.policy", "ro-bind usr\n", 1, "source 'usr' must be an absolute path");
  expect_error("e10.policy", "bind /a /b extra\n", 1,
               "bind: unexpected 'extra' (expected SRC [DST] [optional])");
  expect_error("e11.policy", "ro-bind /usr /x/../etc\n", 1,
               "destination '/x/../etc' must not contain '..'");
  expect_error("e12.policy", "namespaces user time\n", 1, "namespaces: unknown namespace 'time'");
  expect_error("e13.policy", "rlimit nofiles 10\n", 1, "rlimit: unknown resource 'nofiles'");
  expect_error("e14.policy", "rlimit nofile 20 10\n", 1,
               "rlimit nofile: soft limit above hard limit");
  expect_error("e15.policy", "rlimit nofile ten\n", 1,
               "rlimit: bad value 'ten' (a number, 64M, or unlimited)");
  expect_error("e16.policy", "default maybe\n", 1,
               "unknown action 'maybe' (allow kill notify errno)");
  expect_error("e17.policy", "errno EPERMX socket\n", 1, "unknown errno name 'EPERMX'");
  expect_error("e18.policy", "errno 5000 socket\n", 1,
               "bad errno '5000' (1..4095 or a name such as EPERM)");
  expect_error("e19.policy", "allow socket arg0 == AF_UNIXX\n", 1, "unknown constant 'AF_UNIXX'");
  expect_error("e20.policy", "allow socket arg0 == 0x1g\n", 1, "bad number '0x1g'");
  expect_error("e21.policy", "allow socket arg9 == 1\n", 1,
               "expected a condition argN (N = 0..5) at 'arg9 == 1 '");
  expect_error("e22.policy", "allow socket arg0 =~ 1\n", 1,
               "expected an operator (== != < <= > >= &) after arg0");
  expect_error("e23.policy", "allow mmap arg2 & PROT_EXEC and arg2 & PROT_WRITE\n", 1,
               "two conditions on arg2 (libseccomp allows one per argument; write a second "
               "rule)");
  expect_error("e24.policy", "allow socket bind arg0 == 1\n", 1,
               "conditions apply to one syscall; write one line per syscall");
  expect_error("e25.policy", "allow read\nkill read\n", 2, "read: contradicts the rule at line 1");
  expect_error("e26.policy", "errno EPERM socket\n\nallow socket arg0 == AF_UNIX\n", 3,
               "socket: a rule without conditions cannot be combined with conditional rules "
               "for the same syscall (line 1); use conditions on both or the default");
  expect_error("e27.policy", "allow socket arg0 == 1 or arg1 == 2\n", 1,
               "unexpected 'or arg1 == 2 ' (conditions are joined with 'and')");
  expect_error("e28.policy", "allow mmap arg2 & PROT_READ == PROT_EXEC\n", 1,
               "arg2 & MASK == VALUE: VALUE has bits outside MASK, never matches");
  expect_error("e29.policy", "include no-such-profile-anywhere\n", 1,
               "include no-such-profile-anywhere: no such policy");
  expect_error("e30.policy", "cwd tmp\n", 1, "cwd 'tmp' must be an absolute path");
  expect_error("e31.policy", "symlink usr/bin\n", 1, "symlink: expected TARGET LINK");
  expect_error("e32.policy", "errno\n", 1, "errno: expected an errno (EPERM, 1, ...)");
  expect_error("e33.policy", "allow\n", 1, "allow: expected syscall names");
  expect_error("e35.policy", "include /dev/zero\n", 1,
               "include /dev/zero: not a regular file of at most 1048576 bytes");
  expect_error("e34.policy", "allow socket arg0 == AF_UNIX|\n", 1, "bad value 'AF_UNIX|'");
}

static void test_error_in_include_names_that_file(void **state) {
  (void)state;
  put("inc_bad.policy", "allow read\n\n  kill bogus_call  # typo\n");
  const char *top = put("inc_top.policy", "include inc_bad\n");
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_parse_file(top, &p, &err), -1);
  char want[512];
  snprintf(want, sizeof want, "%s/inc_bad.policy:3: unknown syscall 'bogus_call'", dir);
  assert_string_equal(err.msg, want);
}

static void test_include_cycle(void **state) {
  (void)state;
  put("cyc_a.policy", "allow read\ninclude cyc_b\n");
  put("cyc_b.policy", "# b\ninclude cyc_c.policy\n");
  put("cyc_c.policy", "include ./cyc_a.policy\n");
  kc_policy *p = NULL;
  kc_error err = {0};
  char path[256];
  snprintf(path, sizeof path, "%s/cyc_a.policy", dir);
  assert_int_equal(kc_policy_parse_file(path, &p, &err), -1);
  char want[512];
  snprintf(want, sizeof want,
           "%s/cyc_c.policy:1: include cycle: cyc_a.policy -> cyc_b.policy -> cyc_c.policy -> "
           "cyc_a.policy",
           dir);
  assert_string_equal(err.msg, want);
  /* including yourself */
  expect_error("self.policy", "\ninclude self\n", 2, "include cycle: self.policy -> self.policy");
}

/* g.policy's namespaces, limits and working directory. */
static void check_good_limits(const kc_policy_spec *s) {
  assert_string_equal(s->name, "g");
  assert_true(s->ns.user && s->ns.pid && s->ns.mount);
  assert_false(s->ns.net || s->ns.ipc || s->ns.uts || s->ns.cgroup);
  assert_int_equal(s->memory_bytes, 256ull << 20);
  assert_true(s->cpu_s == 1.5 && s->wall_s == 10 && s->cpus == 0.5);
  assert_int_equal(s->pids, 32);
  assert_int_equal(s->output_bytes, 1 << 20);
  assert_string_equal(s->cwd, "/work");
  assert_int_equal(s->n_rlimits, 3);
  assert_int_equal(s->rlimits[0].resource, RLIMIT_NOFILE);
  assert_int_equal(s->rlimits[0].soft, 256);
  assert_int_equal(s->rlimits[0].hard, 512);
  assert_int_equal(s->rlimits[1].soft, 0);
  assert_int_equal(s->rlimits[2].hard, RLIM_INFINITY);
}

/* g.policy's mounts, in order, the base's /tmp replaced in place. */
static void check_good_mounts(const kc_policy_spec *s) {
  assert_int_equal(s->n_mounts, 7);
  assert_int_equal(s->mounts[0].kind, KC_POLICY_MOUNT_RO);
  assert_string_equal(s->mounts[0].src, "/usr");
  assert_string_equal(s->mounts[0].dst, "/usr");
  assert_int_equal(s->mounts[1].kind, KC_POLICY_MOUNT_TMPFS);
  assert_int_equal(s->mounts[1].size, 8 << 20);
  assert_true(s->mounts[2].optional);
  assert_string_equal(s->mounts[2].dst, "/lib2");
  assert_int_equal(s->mounts[3].kind, KC_POLICY_MOUNT_RW);
  assert_int_equal(s->mounts[4].kind, KC_POLICY_MOUNT_PROC);
  assert_string_equal(s->mounts[4].dst, "/proc");
  assert_int_equal(s->mounts[5].kind, KC_POLICY_MOUNT_DEV);
  assert_int_equal(s->mounts[6].kind, KC_POLICY_MOUNT_SYMLINK);
  assert_string_equal(s->mounts[6].src, "usr/bin");
  assert_string_equal(s->mounts[6].dst, "/bin");
}

/* g.policy's rules after the includes and overrides. */
static void check_good_rules(const kc_policy *p) {
  /* overrides: ptrace is allowed, bpf kept from the base, getpid from g_other */
  int ptrace_rules = 0;
  bool bpf = false, getpid_ = false;
  for (size_t i = 0; i < p->n_rules; i++) {
    if (!strcmp(p->rules[i].name, "ptrace")) {
      ptrace_rules++;
      assert_int_equal(p->rules[i].action, KC_SC_ALLOW);
    }
    bpf |= !strcmp(p->rules[i].name, "bpf");
    getpid_ |= !strcmp(p->rules[i].name, "getpid");
  }
  assert_int_equal(ptrace_rules, 1);
  const kc_sc_rule *last = &p->rules[p->n_rules - 1];
  assert_string_equal(last->name, "mmap");
  assert_int_equal(last->n_conds, 2);
  assert_int_equal(last->conds[0].arg, 4);
  assert_int_equal(last->conds[0].value, UINT64_MAX);
  assert_int_equal(last->line, 29);
  assert_true(bpf && getpid_);
  assert_int_equal(p->default_action, KC_SC_ERRNO);
  assert_int_equal(p->default_errno, ENOSYS);
}

static void test_good_file_and_spec(void **state) {
  (void)state;
  put("g_base.policy", "namespaces all\nro-bind /usr\ntmpfs /tmp 64M\nkill ptrace\n"
                       "errno EPERM bpf\nlimit memory 1G\n");
  put("g_other.policy", "include g_base\nallow getpid\n"); /* diamond, not a cycle */
  kc_policy *p = parse_ok("g.policy", "# a good policy\n"
                                      "include g_base\n"
                                      "include g_other\n"
                                      "namespaces user pid mount\n"
                                      "ro-bind /opt/lib /lib2 optional\n"
                                      "bind /srv/scratch /work\n"
                                      "tmpfs /tmp 8M          # replaces the base's /tmp in place\n"
                                      "proc\n"
                                      "dev\n"
                                      "symlink usr/bin /bin\n"
                                      "limit memory 256M\n"
                                      "limit cpu 1.5\n"
                                      "limit wall 10\n"
                                      "limit pids 32\n"
                                      "limit cpus 0.5\n"
                                      "limit output 1M\n"
                                      "rlimit nofile 256 512\n"
                                      "rlimit core 0\n"
                                      "rlimit stack unlimited\n"
                                      "cwd /work\n"
                                      "default errno ENOSYS\n"
                                      "allow ptrace          # overrides the base's kill\n"
                                      "allow read write close\n"
                                      "allow socket arg0 == AF_UNIX\n"
                                      "errno EAFNOSUPPORT socket arg0 != AF_UNIX\n"
                                      "errno EPERM clone arg0 & CLONE_NEWUSER|CLONE_NEWNET\n"
                                      "kill mmap arg2 & PROT_EXEC and arg3 & MAP_ANONYMOUS\n"
                                      "notify execve\n"
                                      "allow mmap arg4 == -1 and arg3 & MAP_ANONYMOUS\n");
  check_good_limits(kc_policy_get_spec(p));
  check_good_mounts(kc_policy_get_spec(p));
  check_good_rules(p);
  assert_true(kc_policy_needs_listener(p));
  /* 3 files read, g_base once */
  assert_int_equal(p->n_files, 3);
  kc_error err = {0};
  int insns = kc_policy_check_seccomp(p, NULL, &err);
  if (insns < 0)
    fail_msg("%s", err.msg);
  assert_true(insns > 10);
  kc_policy_free(p);
}

static void test_shipped_profiles(void **state) {
  (void)state;
  const char *names[] = {"exec", "build", "measure", "base", "deny"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    kc_policy *p = NULL;
    kc_error err = {0};
    if (kc_policy_load(names[i], &p, &err) < 0)
      fail_msg("%s: %s", names[i], err.msg);
    assert_string_equal(kc_policy_get_spec(p)->name, names[i]);
    if (kc_policy_check_seccomp(p, NULL, &err) < 0)
      fail_msg("%s: %s", names[i], err.msg);
    const kc_policy_spec *s = kc_policy_get_spec(p);
    if (!strcmp(names[i], "deny")) { /* a syscall list only */
      kc_policy_free(p);
      continue;
    }
    assert_true(s->ns.user && s->ns.pid && s->ns.mount && s->ns.net);
    bool usr = false;
    for (size_t j = 0; j < s->n_mounts; j++)
      usr |= s->mounts[j].kind == KC_POLICY_MOUNT_RO && !strcmp(s->mounts[j].dst, "/usr");
    assert_true(usr);
    kc_policy_free(p);
  }
  kc_policy *m = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("measure", &m, &err), 0);
  assert_int_equal(m->default_action, KC_SC_KILL);
  kc_policy_free(m);
}

static void test_dump_round_trip(void **state) {
  (void)state;
  const char *names[] = {"exec", "build", "measure"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    kc_policy *p = NULL;
    kc_error err = {0};
    assert_int_equal(kc_policy_load(names[i], &p, &err), 0);
    char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    FILE *f = open_memstream(&a, &al);
    assert_int_equal(kc_policy_dump(p, f, &err), 0);
    fclose(f);
    char path[256];
    snprintf(path, sizeof path, "%s/dumped-%s.policy", dir, names[i]);
    f = fopen(path, "w");
    fputs(a, f);
    fclose(f);
    kc_policy *q = NULL;
    if (kc_policy_parse_file(path, &q, &err) < 0)
      fail_msg("re-parse of the dump of %s: %s", names[i], err.msg);
    f = open_memstream(&b, &bl);
    assert_int_equal(kc_policy_dump(q, f, &err), 0);
    fclose(f);
    /* identical apart from the header line and the "# file:line" comments */
    assert_int_equal(p->n_rules, q->n_rules);
    const char *ba = strchr(a, '\n'), *bb = strchr(b, '\n');
    char *ca = strdup(ba), *cb = strdup(bb);
    for (char *s = ca, *t; (t = strstr(s, "  # ")); s = t) {
      char *e = strchr(t, '\n');
      memmove(t, e, strlen(e) + 1);
    }
    for (char *s = cb, *t; (t = strstr(s, "  # ")); s = t) {
      char *e = strchr(t, '\n');
      memmove(t, e, strlen(e) + 1);
    }
    assert_string_equal(ca, cb);
    free(ca), free(cb), free(a), free(b);
    kc_policy_free(p);
    kc_policy_free(q);
  }
}

static void test_lookup(void **state) {
  (void)state;
  put("mine.policy", "namespaces none\nlimit pids 7\n");
  setenv("KCAGE_POLICY_DIR", dir, 1);
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("mine", &p, &err), 0);
  assert_int_equal(kc_policy_get_spec(p)->pids, 7);
  assert_false(kc_policy_get_spec(p)->ns.user);
  kc_policy_free(p);
  /* $KCAGE_POLICY_DIR comes first, the source tree still answers the rest */
  assert_int_equal(kc_policy_load("exec", &p, &err), 0);
  kc_policy_free(p);
  unsetenv("KCAGE_POLICY_DIR");
  assert_int_equal(kc_policy_load("mine", &p, &err), -1);
  assert_int_equal(err.code, ENOENT);
  assert_int_equal(kc_policy_load("../etc/passwd", &p, &err), -1); /* a path: parsed */
  assert_int_equal(kc_policy_load("bad name", &p, &err), -1);
  assert_true(kc_policy_is_path("x.policy") && kc_policy_is_path("a/b"));
  assert_false(kc_policy_is_path("measure"));
  char path[512];
  assert_int_equal(kc_policy_resolve("measure", path, sizeof path, &err), 0);
  assert_non_null(strstr(path, "/policies/measure.policy"));
}

/* $KCAGE_POLICY_DIR is a policy, so a sandbox: a directory or policy that someone
 * other than root and the caller could change is refused, never skipped. */
static void test_lookup_untrusted_dir(void **state) {
  (void)state;
  put("loose.policy", "namespaces none\n");
  setenv("KCAGE_POLICY_DIR", dir, 1);
  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("loose", &p, &err), 0);
  kc_policy_free(p);

  assert_int_equal(chmod(dir, 0777), 0); /* anyone may plant a policy */
  assert_int_equal(kc_policy_load("loose", &p, &err), -1);
  assert_non_null(strstr(err.msg, "$KCAGE_POLICY_DIR"));
  assert_non_null(strstr(err.msg, "writable by others"));
  /* refused even for a name only kcage's own directory has */
  assert_int_equal(kc_policy_load("exec", &p, &err), -1);
  assert_int_equal(chmod(dir, 0755), 0);

  char f[128];
  snprintf(f, sizeof f, "%s/loose.policy", dir);
  assert_int_equal(chmod(f, 0666), 0); /* the policy itself writable by anyone */
  assert_int_equal(kc_policy_load("loose", &p, &err), -1);
  assert_non_null(strstr(err.msg, "loose.policy: writable by others"));
  assert_int_equal(chmod(f, 0644), 0);

  if (geteuid() == 0) { /* another user's directory */
    assert_int_equal(chown(dir, 4242, 4242), 0);
    assert_int_equal(kc_policy_load("loose", &p, &err), -1);
    assert_non_null(strstr(err.msg, "owned by uid 4242"));
    assert_int_equal(chown(dir, 0, 0), 0);
  }
  assert_int_equal(kc_policy_load("loose", &p, &err), 0);
  kc_policy_free(p);
  unsetenv("KCAGE_POLICY_DIR");
}

static void test_classify_and_names(void **state) {
  (void)state;
  char buf[48];
  assert_string_equal(kc_syscall_name(SYS_socket, buf, sizeof buf), "socket");
  assert_string_equal(kc_syscall_name(99999, buf, sizeof buf), "");
  assert_string_equal(kc_syscall_name_arch(AUDIT_ARCH_I386, 20, buf, sizeof buf), "getpid");

  kc_policy *p = NULL;
  kc_error err = {0};
  assert_int_equal(kc_policy_load("measure", &p, &err), 0);
  kc_seccomp_event ev = {.arch = AUDIT_ARCH_X86_64, .nr = SYS_execve};
  assert_int_equal(kc_policy_notify_kind(p, &ev), KC_NOTIFY_ASK);
  ev.nr = SYS_socket;
  ev.args[0] = AF_UNIX;
  assert_int_equal(kc_policy_notify_kind(p, &ev), KC_NOTIFY_VIOLATION);
  ev.nr = SYS_execve;
  ev.arch = AUDIT_ARCH_I386; /* a foreign arch is always a violation */
  assert_int_equal(kc_policy_notify_kind(p, &ev), KC_NOTIFY_VIOLATION);
  kc_policy_free(p);

  p = parse_ok("cls.policy", "default allow\nnotify mmap arg2 & PROT_EXEC\n"
                             "kill mprotect arg2 & PROT_EXEC\n");
  kc_seccomp_event m = {.arch = AUDIT_ARCH_X86_64, .nr = SYS_mmap};
  m.args[2] = PROT_READ | PROT_EXEC;
  assert_int_equal(kc_policy_notify_kind(p, &m), KC_NOTIFY_ASK);
  m.nr = SYS_mprotect;
  assert_int_equal(kc_policy_notify_kind(p, &m), KC_NOTIFY_VIOLATION);
  kc_policy_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_error_in_include_names_that_file),
      cmocka_unit_test(test_include_cycle),
      cmocka_unit_test(test_good_file_and_spec),
      cmocka_unit_test(test_shipped_profiles),
      cmocka_unit_test(test_dump_round_trip),
      cmocka_unit_test(test_lookup),
      cmocka_unit_test(test_lookup_untrusted_dir),
      cmocka_unit_test(test_classify_and_names),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
