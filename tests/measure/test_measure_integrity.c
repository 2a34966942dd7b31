/* Measurement nobody can fool, from the parent's side: the mapping audit and the ELF
 * check on crafted input, the parent's outside view of a process (stop, CPU account,
 * memory), what a worker can see, the integrity fields of the records, and no false
 * alarms: honest kernels of many shapes, dtypes and speeds stay `ok`, every time. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache_size.h"
#include "kcage/measure.h"
#include "measure_kernel.h"

static char cache[512];

static void test_maps_lines(void **state) {
  (void)state;
  char msg[512];
  const char *so = "/tmp/kcage-bench.x/view/kernel.so";
  /* writable and executable: refused, whatever it maps */
  assert_int_equal(kc_audit_maps_line("7f00-7f01 rwxp 00000000 08:01 12 /usr/lib/libc.so.6\n", so,
                                      NULL, msg, sizeof msg),
                   -1);
  assert_non_null(strstr(msg, "writable and executable"));
  assert_int_equal(
      kc_audit_maps_line("7f00-7f01 rwxp 00000000 00:00 0 \n", so, NULL, msg, sizeof msg), -1);
  /* executable from elsewhere: a memfd, an anonymous mapping, a file in /tmp */
  assert_int_equal(kc_audit_maps_line("7f00-7f01 r-xs 00000000 00:01 9 /memfd:kcage-ring "
                                      "(deleted)\n",
                                      so, NULL, msg, sizeof msg),
                   -1);
  assert_non_null(strstr(msg, "neither the kernel's .so nor a system library"));
  assert_int_equal(
      kc_audit_maps_line("7f00-7f01 r-xp 00000000 00:00 0\n", so, NULL, msg, sizeof msg), -1);
  assert_int_equal(
      kc_audit_maps_line("7f00-7f01 r-xp 00000000 00:10 3 /tmp/x.so\n", so, NULL, msg, sizeof msg),
      -1);
  /* a name that only starts like the kernel's */
  char longer[256];
  snprintf(longer, sizeof longer, "7f00-7f01 r-xp 00000000 00:10 3 %s.evil\n", so);
  assert_int_equal(kc_audit_maps_line(longer, so, NULL, msg, sizeof msg), -1);
  /* allowed: the kernel, system libraries, the worker program, the vdso, data */
  char own[256];
  snprintf(own, sizeof own, "7f00-7f01 r-xp 00001000 00:10 3 %s\n", so);
  assert_int_equal(kc_audit_maps_line(own, so, NULL, msg, sizeof msg), 0);
  assert_int_equal(kc_audit_maps_line("7f00-7f01 r-xp 00000000 08:01 12 "
                                      "/usr/lib/x86_64-linux-gnu/libc.so.6\n",
                                      so, NULL, msg, sizeof msg),
                   0);
  assert_int_equal(kc_audit_maps_line("5600-5601 r-xp 00000000 08:01 12 /opt/kcage-worker\n", so,
                                      "/opt/kcage-worker", msg, sizeof msg),
                   0);
  assert_int_equal(
      kc_audit_maps_line("7ffd-7ffe r-xp 00000000 00:00 0 [vdso]\n", so, NULL, msg, sizeof msg), 0);
  assert_int_equal(
      kc_audit_maps_line("7f00-7f01 rw-p 00000000 00:00 0 /memfd:x\n", so, NULL, msg, sizeof msg),
      0);
  assert_int_equal(kc_audit_maps_line("garbage\n", so, NULL, msg, sizeof msg), 0);
}

/* A minimal ELF64 image with the given segment flags. */
static size_t elf_image(unsigned char *buf, size_t cap, uint32_t type, uint32_t flags) {
  memset(buf, 0, cap);
  Elf64_Ehdr eh = {0};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_phoff = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 2;
  Elf64_Phdr ph[2] = {{.p_type = PT_LOAD, .p_flags = PF_R | PF_X},
                      {.p_type = type, .p_flags = flags}};
  memcpy(buf, &eh, sizeof eh);
  memcpy(buf + sizeof eh, ph, sizeof ph);
  return sizeof eh + sizeof ph;
}

static void test_elf_segments(void **state) {
  (void)state;
  unsigned char img[512];
  char msg[512];
  size_t n = elf_image(img, sizeof img, PT_LOAD, PF_R | PF_W | PF_X);
  assert_int_equal(kc_audit_elf_image(img, n, msg, sizeof msg), -1);
  assert_non_null(strstr(msg, "writable and executable"));
  n = elf_image(img, sizeof img, PT_GNU_STACK, PF_R | PF_W | PF_X);
  assert_int_equal(kc_audit_elf_image(img, n, msg, sizeof msg), -1);
  n = elf_image(img, sizeof img, PT_LOAD, PF_R | PF_W);
  assert_int_equal(kc_audit_elf_image(img, n, msg, sizeof msg), 0);
  /* headers that point past the image, and non-ELF data: left to the loader */
  assert_int_equal(kc_audit_elf_image(img, n - 8, msg, sizeof msg), 0);
  assert_int_equal(kc_audit_elf_image((const unsigned char *)"not an elf", 10, msg, sizeof msg), 0);
}

static const char *build(const char *src) {
  static char art[4][4096];
  static int k;
  kc_build_opts o = {.cache_dir = cache};
  kc_build_result r;
  kc_error err = {0};
  if (kc_build_kernel(&o, src, &r, &err) < 0 ||
      (r.status != KC_BUILD_OK && r.status != KC_BUILD_CACHED))
    fail_msg("build %s: %s %s", src, err.msg, r.message);
  k = (k + 1) % 4;
  snprintf(art[k], sizeof art[k], "%s", r.artifact);
  return art[k];
}

/* The compiler's own output: a section flagged "awx" becomes an RWX segment. */
static void test_elf_real(void **state) {
  (void)state;
  char msg[512];
  assert_int_equal(kc_audit_elf(build(KC_EXAMPLES_DIR "/rwx_segment.c"), msg, sizeof msg), -1);
  assert_int_equal(kc_audit_elf(build(KC_EXAMPLES_DIR "/tiled.c"), msg, sizeof msg), 0);
}

static volatile uint64_t counter;

/* Stopped means stopped: no CPU, memory that holds still, read from outside. */
static void test_observe(void **state) {
  (void)state;
  size_t big_len = (17u << 20) + 64;
  unsigned char *big = malloc(big_len);
  assert_non_null(big);
  memset(big, 0x11, big_len);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    for (;;)
      counter++;
  }
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  assert_int_equal(kc_observe_stop(pid), 0);
  int64_t c0 = kc_observe_cpu_ns(pid);
  uint64_t v0, v1;
  kc_error err = {0};
  assert_int_equal(kc_observe_read(pid, (uint64_t)(uintptr_t)&counter, &v0, sizeof v0, &err), 0);
  nanosleep(&ts, NULL);
  assert_int_equal(kc_observe_read(pid, (uint64_t)(uintptr_t)&counter, &v1, sizeof v1, &err), 0);
  int64_t c1 = kc_observe_cpu_ns(pid);
  assert_true(v0 > 0);
  assert_true(v0 == v1);
  assert_true(c0 >= 0 && c1 == c0);
  /* its memory poisoned from outside, as a round in pieces does: more than one batch of
   * the pattern, an odd length, nothing past it */
  size_t len = (17u << 20) + 5;
  unsigned char *back = malloc(len + 8);
  assert_non_null(back);
  uint64_t word = 0x0123456789abcdefull;
  assert_int_equal(kc_observe_poison(pid, (uint64_t)(uintptr_t)big, len, word, &err), 0);
  assert_int_equal(kc_observe_read(pid, (uint64_t)(uintptr_t)big, back, len + 8, &err), 0);
  assert_true(kc_poison_equal(back, len, word));
  for (size_t i = len; i < len + 8; i++)
    assert_int_equal(back[i], 0x11);
  free(back);
  assert_int_equal(kc_observe_poison(pid, 8, 64, word, &err), -1);
  assert_int_equal(err.code, EFAULT);
  /* continued, it runs again */
  kc_observe_cont(pid);
  for (int i = 0; i < 200 && v1 == v0; i++) {
    nanosleep(&ts, NULL);
    assert_int_equal(kc_observe_read(pid, (uint64_t)(uintptr_t)&counter, &v1, sizeof v1, &err), 0);
  }
  assert_true(v1 > v0);
  /* an address that is not mapped there is the process's doing: EFAULT */
  assert_int_equal(kc_observe_read(pid, 8, &v1, sizeof v1, &err), -1);
  assert_int_equal(err.code, EFAULT);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  assert_int_equal(kc_observe_stop(pid), -1);
  free(big);
}

/* Before a round the parent reads every output region back from the worker: the poison
 * its prepare request asked for, or the round does not start.  Regions of an odd size,
 * over more than one batch of the reading; a region that differs in its last byte only,
 * in the last batch; an area that is not mapped at all. */
static pid_t area_child(void) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed assertion never leaves it behind */
    for (;;)
      pause();
  }
  return pid;
}

static void test_area_poison_checked(void **state) {
  (void)state;
  kc_round_view v = {
      .region = (300u << 10) + 12, .number = 8, .poison_seed = 0x5eed, .timed = true};
  unsigned char *area = malloc(v.region * v.number);
  assert_non_null(area);
  for (uint64_t i = 0; i < v.number; i++)
    kc_poison_fill(area + i * v.region, v.region, kc_poison_word(v.poison_seed, i));
  v.base = (uint64_t)(uintptr_t)area;
  kc_error err = {0};
  kc_kmeasure m = {0};
  v.pid = area_child();
  assert_int_equal(kc_verify_poisoned(&m, &v, &err), 1);
  assert_int_equal(m.status, KC_MEASURE_OK);
  kill(v.pid, SIGKILL);
  waitpid(v.pid, NULL, 0);

  area[7 * v.region + v.region - 1] ^= 1; /* call 7's last byte: an earlier round's */
  v.pid = area_child();
  assert_int_equal(kc_verify_poisoned(&m, &v, &err), 0);
  assert_int_equal(m.status, KC_MEASURE_SUSPICIOUS);
  assert_non_null(strstr(m.message, "call 7 did not hold the poison"));

  kc_kmeasure gone = {0};
  v.base = 8;
  assert_int_equal(kc_verify_poisoned(&gone, &v, &err), 0);
  assert_int_equal(gone.status, KC_MEASURE_SUSPICIOUS);
  assert_non_null(strstr(gone.message, "gone from the worker's memory"));
  kill(v.pid, SIGKILL);
  waitpid(v.pid, NULL, 0);
  free(area);
}

/* Where a round runs: the worker pinned to each CPU in turn is seen there; the parent
 * moves onto a CPU only when its own set holds it and another to leave to; continuing
 * the worker leaves the parent on `leave`, and the worker runs again.  Everything is
 * observed first and asserted once the spinning child is gone. */
static void test_observe_placement(void **state) {
  (void)state;
  cpu_set_t home;
  assert_int_equal(sched_getaffinity(0, sizeof home, &home), 0);
  if (CPU_COUNT(&home) < 2)
    skip();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    for (;;)
      counter++;
  }
  struct timespec ts = {0, 1000 * 1000};
  bool pinned = true;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &home))
      continue;
    pinned = pinned && kc_observe_pin(pid, c) == 0;
    for (int i = 0; i < 2000 && kc_observe_last_cpu(pid) != c; i++)
      nanosleep(&ts, NULL);
    pinned = pinned && kc_observe_last_cpu(pid) == c;
  }
  int c = kc_observe_last_cpu(pid);
  cpu_set_t one, leave = home, now;
  CPU_ZERO(&one);
  CPU_SET(c, &one);
  CPU_CLR(c, &leave);
  bool outside = kc_observe_move_to(CPU_SETSIZE, &home);
  bool alone = kc_observe_move_to(c, &one); /* nowhere to leave to */
  bool stopped = kc_observe_stop(pid) == 0;
  bool moved = kc_observe_move_to(c, &home);
  kc_arrival arr;
  kc_observe_arrival_base(pid, &arr);
  double cont_s;
  kc_observe_cont_arrived(&arr, &leave, &cont_s);
  bool left = sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &leave);
  uint64_t v0 = 0, v1 = 0;
  kc_error err = {0};
  kc_observe_read(pid, (uint64_t)(uintptr_t)&counter, &v0, sizeof v0, &err);
  v1 = v0;
  for (int i = 0; i < 2000 && v1 == v0; i++) {
    nanosleep(&ts, NULL);
    kc_observe_read(pid, (uint64_t)(uintptr_t)&counter, &v1, sizeof v1, &err);
  }
  sched_setaffinity(0, sizeof home, &home);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  assert_true(pinned);
  assert_false(outside);
  assert_false(alone);
  assert_true(stopped && moved);
  assert_true(left);
  assert_true(v1 > v0);
  assert_int_equal(kc_observe_last_cpu(pid), -1);
}

static json_t *run(kc_measure_config *cfg, const char *const *k, size_t n) {
  json_t *recs = NULL;
  kc_error err = {0};
  if (kc_measure_run_batch(cfg, k, n, &recs, &err) < 0)
    fail_msg("batch: %s", err.msg);
  return recs;
}

static void init_cfg(kc_measure_config *cfg, const char *args) {
  kc_measure_config_init(cfg);
  cfg->args = args;
  cfg->timeout_s = 60; /* generous: 2 loaded vCPUs */
  cfg->memory_bytes = 512u << 20;
  cfg->repeat = 3;
  cfg->min_repeat_ms = 5;
  cfg->build.cache_dir = cache;
}

/* --no-isolation forks the caller: the code it had loaded from outside /usr (a Python
 * caller's extension modules, a library user's own .so) is inherited, not foreign, and
 * an honest kernel stays `ok`. */
static void test_plain_inherits_caller_code(void **state) {
  (void)state;
  char dir[] = "/tmp/kc-inherit.XXXXXX", cmd[512], so[256];
  assert_non_null(mkdtemp(dir));
  snprintf(so, sizeof so, "%s/libcaller.so", dir);
  snprintf(cmd, sizeof cmd,
           "echo 'int kc_caller_code(void) { return 7; }' > %s/c.c && "
           "cc -shared -fPIC -o %s %s/c.c",
           dir, so, dir);
  assert_int_equal(system(cmd), 0);
  void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  assert_non_null(dl);
  kc_measure_config cfg;
  init_cfg(&cfg, "f32[32,32] f32[32,32] f32[32,32]:out");
  cfg.reference = KC_EXAMPLES_DIR "/reference.c";
  cfg.no_isolation = true;
  const char *k[] = {KC_EXAMPLES_DIR "/tiled.c"};
  json_t *recs = run(&cfg, k, 1);
  json_t *r = json_array_get(recs, 0);
  if (strcmp(json_string_value(json_object_get(r, "status")), "ok"))
    fail_msg("%s: %s", json_string_value(json_object_get(r, "status")),
             json_string_value(json_object_get(r, "message")));
  json_decref(recs);
  dlclose(dl);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* The input budget: sets that --sets would keep in half of L1 or L2 stay within half of
 * that level (never fewer than those sets), larger ones get 8 MiB, as they do when the
 * caches are unknown. */
static void test_input_budget(void **state) {
  (void)state;
  uint64_t l1 = kc_cache_bytes(1) / 2, l2 = kc_cache_bytes(2) / 2, big = 8ull << 20;
  assert_int_equal(kc_round_input_budget(8ull << 20, 4), big);
  assert_int_equal(kc_round_input_budget(512ull << 10, 4),
                   l2 && 4 * (512ull << 10) <= l2 ? l2 : big);
  if (l1 >= 4 * 2048)
    assert_int_equal(kc_round_input_budget(2048, 4), l1);
  if (l2 >= 4 * (8ull << 10) && l1 < 4 * (8ull << 10))
    assert_int_equal(kc_round_input_budget(8ull << 10, 4), l2);
  if (!l1 && !l2)
    assert_int_equal(kc_round_input_budget(64, 4), big);
  for (uint64_t in = 64; in <= (64ull << 20); in *= 4)
    for (uint32_t sets = 1; sets <= 64; sets *= 4)
      assert_true(kc_round_input_budget(in, sets) >= (in * sets <= big ? in * sets : 0));
}

/* The sets the inputs file holds: the budget over one set, never fewer than --sets and
 * never more than 4096 (or --sets, when that is more). */
static void test_input_slots(void **state) {
  (void)state;
  for (uint64_t in = 1; in <= (256ull << 20); in *= 8)
    for (uint32_t sets = 1; sets <= 8192; sets *= 8) {
      uint64_t want = kc_round_input_budget(in, sets) / in;
      want = want > 4096 ? 4096 : want;
      want = want < sets ? sets : want;
      assert_int_equal(kc_round_input_slots(in, sets), want);
    }
  assert_int_equal(kc_round_input_slots(0, 4), 4096);
}

/* Where a timed round is cut into pieces.  An explicit piece size holds as many calls as
 * their tensors fit (one at least); otherwise only calls of a millisecond or more whose
 * output fits half of L2 go in pieces, by that half, one call a piece if need be, and
 * every other round runs whole, however large its outputs. */
static void test_piece_calls(void **state) {
  (void)state;
  assert_int_equal(kc_round_piece_calls(100, 4096, 0, 1e-6, 40960), 10);
  assert_int_equal(kc_round_piece_calls(100, 4096, 4096, 1e-6, 40960), 5);
  assert_int_equal(kc_round_piece_calls(100, 1u << 20, 0, 1e-6, 1), 1);
  assert_int_equal(kc_round_piece_calls(5, 4096, 0, 1e-6, 1u << 30), 5);
  /* short calls run whole, outputs of any size */
  assert_int_equal(kc_round_piece_calls(16000, 4096, 8192, 1.3e-6, 0), 16000);
  assert_int_equal(kc_round_piece_calls(70, 4u << 20, 4, 3e-4, 0), 70);
  assert_int_equal(kc_round_piece_calls(50, 4u << 20, 8u << 20, 4e-4, 0), 50);
  uint64_t l2 = kc_cache_bytes(2) / 2;
  if (l2 >= (256u << 10)) {
    uint64_t out = l2 / 4; /* by L2: a call of 1 ms whose tensors outgrow half of L2 */
    assert_int_equal(kc_round_piece_calls(20, out, l2, 1.1e-3, 0), 1);
    assert_int_equal(kc_round_piece_calls(20, out, 0, 1.1e-3, 0), 4);
    assert_int_equal(kc_round_piece_calls(3, out, 0, 1.1e-3, 0), 3); /* fits: whole */
    /* the same call under a millisecond runs whole; so does a longer one whose output
     * outgrows the half */
    assert_int_equal(kc_round_piece_calls(20, out, 0, 0.9e-3, 0), 20);
    assert_int_equal(kc_round_piece_calls(20, 2 * l2, 0, 1.1e-3, 0), 20);
  }
  for (uint64_t n = 1; n <= 100000; n *= 10)
    for (uint64_t out = 64; out <= (64ull << 20); out *= 16) {
      uint64_t k = kc_round_piece_calls(n, out, out / 2, 1e-5, 0);
      assert_true(k >= 1 && k <= n);
    }
  /* Poisoned again before each piece: never in a whole round; always in pieces cut for
   * warm outputs; in pieces cut by the input slots only while their outputs fit half of
   * L2 (a 32x32 matmul's 128 calls), never a 1M vector add's four 4 MiB outputs. */
  assert_false(kc_round_repoison(100, 100, 100, 4096));
  assert_true(kc_round_repoison(100, 4, 4, 4u << 20));
  assert_false(kc_round_repoison(21, 4, 21, 4u << 20));
  assert_int_equal(kc_round_repoison(13622, 128, 13622, 4096), l2 >= (512u << 10));
}

/* A round's inputs: fresh per round, and the last set a near-copy of set 0 (about one
 * element in 4096 of each input differs, at least one), the same for the same round. */
static void test_round_inputs(void **state) {
  (void)state;
  kc_args_spec spec;
  kc_error err = {0};
  assert_int_equal(kc_args_parse("f32[20000] i8[3] f32[20000]:out", &spec, &err), 0);
  uint64_t in = kc_args_region_bytes(&spec, false);
  unsigned char *a = calloc(3, in), *b = calloc(3, in);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(kc_round_inputs(&spec, a, in, 3, 42, 7, false), 2);
  assert_int_equal(kc_round_inputs(&spec, b, in, 3, 42, 7, false), 2);
  assert_memory_equal(a, b, 3 * in);
  for (uint32_t t = 0; t < 2; t++) {
    uint64_t off = kc_args_offset(&spec, t), n = spec.t[t].numel;
    size_t es = (size_t)(spec.t[t].nbytes / n);
    uint64_t differ = 0, fresh = 0;
    for (uint64_t e = 0; e < n; e++) {
      differ += memcmp(a + off + e * es, a + 2 * in + off + e * es, es) != 0;
      fresh += memcmp(a + off + e * es, a + in + off + e * es, es) != 0;
    }
    uint64_t k = n / 4096 ? n / 4096 : 1;
    assert_true(differ >= 1 && differ <= k);
    assert_true(fresh > n / 2 || n < 16); /* set 1 is its own data */
  }
  assert_int_equal(kc_round_inputs(&spec, b, in, 3, 42, 8, false), 2);
  assert_memory_not_equal(a, b, in); /* the next round: other data */
  free(a);
  free(b);
}

/* A timed round's layout: 40 calls over 8 slots, written a piece of 8 at a time (as
 * run_calls writes them), meet 40 different inputs, none the same as an earlier call's,
 * though every slot comes back five times; the near-copy differs from call 0 in a few
 * elements only; and a call's inputs written again (for the reference) are the same
 * bytes. */
static void test_round_no_repeats(void **state) {
  (void)state;
  kc_args_spec spec;
  kc_error err = {0};
  assert_int_equal(kc_args_parse("f32[64,64] f32[64,64] f32[64,64]:out", &spec, &err), 0);
  uint64_t in = kc_args_region_bytes(&spec, false), number = 40;
  kc_round_layout l = {.spec = &spec,
                       .in_region = in,
                       .seed = 9,
                       .round = 3,
                       .n_data = number,
                       .n_slots = 8,
                       .dup = 17};
  unsigned char *map = calloc(8, in), *seen = calloc(number, in), *again = malloc(in);
  assert_non_null(map);
  assert_non_null(seen);
  assert_non_null(again);
  for (uint64_t c0 = 0; c0 < number; c0 += 8) {
    kc_round_write(&l, map, c0, 8, false);
    for (uint64_t c = c0; c < c0 + 8; c++)
      memcpy(seen + c * in, map + c % 8 * in, in);
  }
  for (uint64_t c = 1; c < number; c++)
    for (uint64_t e = 0; e < c; e++)
      assert_memory_not_equal(seen + c * in, seen + e * in, in);
  uint64_t differ = 0;
  for (uint64_t i = 0; i < in / 4; i++)
    differ += memcmp(seen + 17 * in + 4 * i, seen + 4 * i, 4) != 0;
  assert_true(differ >= 1 && differ <= 2); /* one element in 4096 of each input */
  for (uint64_t c = 0; c < number; c += 7) {
    kc_round_data(&l, again, c);
    assert_memory_equal(again, seen + c * in, in);
  }
  free(map);
  free(seen);
  free(again);
}

/* The keyed function is ChaCha20 (DJB's 64-bit nonce): block 0 under the zero key and
 * nonce starts 76 b8 e0 ad a0 f1 3d 90, read little-endian.  Any input changed gives
 * another output; two draw streams under fresh keys differ. */
static void test_keyed(void **state) {
  (void)state;
  assert_true(kc_keyed64(0, 0, 0) == 0x903df1a0ade0b876ull);
  uint64_t base = kc_keyed64(9, 3, 1);
  assert_true(kc_keyed64(9, 3, 1) == base);
  assert_true(kc_keyed64(8, 3, 1) != base && kc_keyed64(9, 2, 1) != base &&
              kc_keyed64(9, 3, 2) != base);
  kc_draws a, b;
  kc_error err = {0};
  assert_int_equal(kc_draws_init(&a, &err), 0);
  assert_int_equal(kc_draws_init(&b, &err), 0);
  int same = 0;
  uint64_t prev = kc_draws_next(&a);
  for (int i = 0; i < 40; i++) { /* across several blocks */
    uint64_t x = kc_draws_next(&a);
    same += x == kc_draws_next(&b) || x == prev;
    prev = x;
  }
  assert_int_equal(same, 0);
}

/* A worker sees its own kernel and the inputs, nothing else: the probe returns
 * non-zero (status `error`) when it sees more, next to two other candidates. */
static void test_view(void **state) {
  (void)state;
  kc_measure_config cfg;
  init_cfg(&cfg, "f32[32,32] f32[32,32] f32[32,32]:out");
  cfg.reference = KC_EXAMPLES_DIR "/reference.c";
  const char *k[] = {KC_EXAMPLES_DIR "/tiled.c", KC_PROBES_DIR "/view_probe.c",
                     KC_EXAMPLES_DIR "/naive.c"};
  json_t *recs = run(&cfg, k, 3);
  json_t *r = json_array_get(recs, 1);
  const char *msg = json_string_value(json_object_get(r, "message"));
  assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
  (void)msg;
  json_decref(recs);
}

/* A memoiser keyed on a sample of the content, honest until the untimed round is over,
 * in rounds of one call (--number 1, no growth): each timed round still holds a
 * near-copy of its first input, so it is caught in every run, not only when the untimed
 * round happens to fool its sample. */
static void test_memo_one_call_rounds(void **state) {
  (void)state;
  kc_measure_config cfg;
  init_cfg(&cfg, "f32[4096] f32[4096] f32[4096]:out");
  cfg.reference = KC_HONEST_DIR "/vadd_f32.c";
  cfg.number = 1;
  cfg.min_repeat_ms = 0;
  const char *k[] = {KC_PROBES_DIR "/late_memo.c", KC_PROBES_DIR "/late_memo.c",
                     KC_PROBES_DIR "/late_memo.c", KC_PROBES_DIR "/late_memo.c",
                     KC_PROBES_DIR "/late_memo.c"};
  json_t *recs = run(&cfg, k, 5);
  for (size_t i = 0; i < 5; i++) {
    json_t *r = json_array_get(recs, i);
    const char *st = json_string_value(json_object_get(r, "status"));
    const char *msg = json_string_value(json_object_get(r, "message"));
    printf("late_memo run %zu: %s  %s\n", i, st, msg ? msg : "");
    assert_string_equal(st, "suspicious");
    assert_non_null(strstr(msg, "timed run"));
  }
  json_decref(recs);
}

/* seed ("secret" unless given), isolation, and the verified calls out of the timed ones. */
static void test_record_fields(void **state) {
  (void)state;
  kc_measure_config cfg;
  init_cfg(&cfg, "f32[16,16] f32[16,16] f32[16,16]:out");
  cfg.reference = KC_EXAMPLES_DIR "/reference.c";
  const char *k[] = {KC_EXAMPLES_DIR "/tiled.c"};
  json_t *recs = run(&cfg, k, 1);
  json_t *r = json_array_get(recs, 0);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
  assert_string_equal(json_string_value(json_object_get(r, "seed")), "secret");
  const char *dev = json_string_value(json_object_get(r, "device"));
  const char *iso = json_string_value(json_object_get(r, "isolation"));
  assert_string_equal(iso, strstr(dev, "[sandbox]") ? "sandbox" : "none");
  json_t *cc = json_object_get(r, "checked_calls");
  json_int_t verified = json_integer_value(json_object_get(cc, "verified"));
  json_int_t timed = json_integer_value(json_object_get(cc, "timed"));
  assert_true(verified >= 3 && verified <= timed); /* at least one per round */
  assert_true(timed >= json_integer_value(json_object_get(r, "number")));
  json_decref(recs);

  cfg.seed = 7;
  cfg.seed_set = true;
  cfg.no_isolation = true;
  recs = run(&cfg, k, 1);
  r = json_array_get(recs, 0);
  assert_string_equal(json_string_value(json_object_get(r, "status")), "ok");
  assert_int_equal(json_integer_value(json_object_get(r, "seed")), 7);
  assert_string_equal(json_string_value(json_object_get(r, "isolation")), "none");
  assert_non_null(strstr(json_string_value(json_object_get(r, "device")), "[plain]"));
  json_decref(recs);
}

/* No false alarms: every honest kernel of tests/measure/honest/MANIFEST, its own
 * reference (a separate worker), `ok` in each of three batches. */
static void test_honest(void **state) {
  (void)state;
  FILE *f = fopen(KC_HONEST_DIR "/MANIFEST", "r");
  assert_non_null(f);
  char line[512];
  int bad = 0, runs = 0;
  while (fgets(line, sizeof line, f)) {
    char name[128], args[384];
    if (line[0] == '#' || sscanf(line, "%127s %383[^\n]", name, args) != 2)
      continue;
    char path[700];
    snprintf(path, sizeof path, "%s/%s", KC_HONEST_DIR, name);
    for (int rep = 0; rep < 3; rep++) {
      kc_measure_config cfg;
      init_cfg(&cfg, args);
      cfg.reference = path;
      const char *k[] = {path};
      json_t *recs = run(&cfg, k, 1);
      json_t *r = json_array_get(recs, 0);
      const char *st = json_string_value(json_object_get(r, "status"));
      const char *msg = json_string_value(json_object_get(r, "message"));
      printf("%-14s %-44s %-10s median %.3g s  %s\n", name, args, st,
             json_number_value(json_object_get(r, "median_s")), msg ? msg : "");
      bad += strcmp(st, "ok") != 0;
      runs++;
      json_decref(recs);
    }
  }
  fclose(f);
  assert_true(runs >= 30);
  assert_int_equal(bad, 0);
}

int main(void) {
  snprintf(cache, sizeof cache, "%s/integrity", KC_TEST_CACHE_DIR);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_maps_lines),
      cmocka_unit_test(test_elf_segments),
      cmocka_unit_test(test_elf_real),
      cmocka_unit_test(test_observe),
      cmocka_unit_test(test_area_poison_checked),
      cmocka_unit_test(test_view),
      cmocka_unit_test(test_record_fields),
      cmocka_unit_test(test_honest),
      cmocka_unit_test(test_memo_one_call_rounds),
      cmocka_unit_test(test_round_inputs),
      cmocka_unit_test(test_plain_inherits_caller_code),
      cmocka_unit_test(test_round_no_repeats),
      cmocka_unit_test(test_keyed),
      cmocka_unit_test(test_input_budget),
      cmocka_unit_test(test_input_slots),
      cmocka_unit_test(test_piece_calls),
      cmocka_unit_test(test_observe_placement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
