/* kc_measure_run_batch: the whole `kcage bench` job.  Inputs generated once per batch
 * into a read-only file, builds in parallel (content-addressed cache), the reference's
 * outputs computed in their own worker, then every kernel measured in a fresh worker,
 * one after another (parallel measurements on a small machine would time each other). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kcage/cgroup.h"
#include "kcage/cleanup.h"

/* Paths are built from directories whose length was checked when they were made; a
 * truncated name fails at open(), never silently. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "measure_internal.h"
#include "measure_kernel.h"

const char *kc_measure_status_name(kc_measure_status s) {
  static const char *const names[] = {"ok",    "build_error", "wrong_result", "timeout",   "memory",
                                      "crash", "syscall",     "error",        "suspicious"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "error";
}

int kc_measure_status_parse(const char *name, kc_measure_status *out) {
  for (int s = KC_MEASURE_OK; s <= KC_MEASURE_SUSPICIOUS; s++)
    if (!strcmp(name, kc_measure_status_name((kc_measure_status)s))) {
      *out = (kc_measure_status)s;
      return 0;
    }
  return -1;
}

void kc_measure_config_init(kc_measure_config *c) {
  memset(c, 0, sizeof *c);
  c->rtol = -1;
  c->atol = -1;
  c->min_repeat_ms = -1;
}

/* ---- one kernel's bookkeeping ------------------------------------------------------- */
typedef struct item {
  const char *path;
  bool is_source;
  kc_build_result build; /* status, artifact, build_s, message */
  bool build_done;
  int dup_of; /* index of the item with identical source, or -1 */
  char *src;  /* contents (sources only) */
  size_t src_len;
  char staged[PATH_MAX]; /* the artifact's copy in the session dir */
  char sha256[65];       /* of the bytes built or staged; "" until known */
  kc_kmeasure m;
  bool measured;
  kc_measure_status status;
  char message[2048];
  struct timespec started, ended; /* wall clock, for the record */
  json_t *rec;                    /* once final */
} item;

/* Builds run in helper processes, one per --workers slot, forked (glibc fork) while
 * this process may have threads: each helper is single-threaded, so the sandbox's raw
 * clone3 never copies a lock some other thread held (it would deadlock the child
 * before exec).  Helpers are kcage's own code; they answer with the result struct. */

/* One build, its machinery failure (not the kernel's build error) as a failed result. */
static void build_one(const kc_build_opts *opts, const char *path, kc_build_result *res) {
  kc_error err = {0};
  if (kc_build_kernel(opts, path, res, &err) < 0) {
    memset(res, 0, sizeof *res);
    res->status = KC_BUILD_FAILED;
    snprintf(res->message, sizeof res->message, "%s", err.msg);
  }
}

static void build_helper(int fd, const item *items, size_t total, const kc_build_opts *opts) {
  for (;;) {
    uint32_t i;
    if (kc_io_all(fd, &i, sizeof i, false) < 0 || i >= total)
      _exit(0);
    kc_build_result res;
    build_one(opts, items[i].path, &res);
    if (kc_io_all(fd, &res, sizeof res, true) < 0)
      _exit(0);
  }
}

#define KC_MAX_BUILD_HELPERS 64

/* The builds of one batch: the sources to build (jobs, each an index into items) and
 * the helpers building them. */
typedef struct {
  const kc_measure_config *cfg;
  kc_build_opts build; /* cfg's, with the tenant's settings */
  item *items;
  size_t total;
  size_t *jobs, nj;  /* jobs[next..nj) are still to hand out */
  size_t next, done; /* handed out; answered */
  size_t nh, alive;  /* helpers started; helpers still reachable */
  struct {
    pid_t pid;
    int fd;
    long job; /* index into items, -1 when idle */
  } h[KC_MAX_BUILD_HELPERS];
} build_pool;

static bool needs_build(const item *it) {
  return it->is_source && it->dup_of < 0;
}

static void build_progress(const build_pool *b, size_t n) {
  if (b->cfg->progress)
    b->cfg->progress(b->cfg->progress_ctx, "build", n, b->nj);
}

/* Every source still unbuilt fails alike, with why. */
static void fail_unbuilt(item *items, size_t total, const char *why) {
  for (size_t i = 0; i < total; i++)
    if (needs_build(&items[i]) && !items[i].build_done) {
      items[i].build.status = KC_BUILD_FAILED;
      snprintf(items[i].build.message, sizeof items[i].build.message, "%s", why);
      items[i].build_done = true;
    }
}

static void start_helpers(build_pool *b) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  b->nh = b->cfg->workers ? b->cfg->workers : (size_t)(ncpu > 0 ? ncpu : 1);
  if (b->nh > b->nj)
    b->nh = b->nj;
  if (b->nh > KC_MAX_BUILD_HELPERS)
    b->nh = KC_MAX_BUILD_HELPERS;
  fflush(NULL); /* nothing buffered may be written twice */
  for (size_t k = 0; k < b->nh; k++) {
    int sv[2];
    b->h[k].pid = -1;
    b->h[k].fd = -1;
    b->h[k].job = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
      continue;
    pid_t pid = fork();
    if (pid == 0) {
      close(sv[0]);
      /* A Ctrl-C reaches the whole process group: the helper dies of it (and its
       * compiler's sandbox with it, by its death signal) instead of running on. */
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      build_helper(sv[1], b->items, b->total, &b->build);
      _exit(0);
    }
    close(sv[1]);
    if (pid < 0) {
      close(sv[0]);
      continue;
    }
    b->h[k].pid = pid;
    b->h[k].fd = sv[0];
    b->alive++;
  }
}

/* Without helpers (fork failed): build here, one after another. */
static void build_inline(build_pool *b) {
  for (; b->next < b->nj; b->next++) {
    item *it = &b->items[b->jobs[b->next]];
    build_one(&b->build, it->path, &it->build);
    it->build_done = true;
    build_progress(b, b->next + 1);
  }
}

static void drop_helper(build_pool *b, size_t k) {
  kc_close_fd(&b->h[k].fd);
  b->alive--;
}

/* Every idle helper gets the next job, or the end of the work. */
static void hand_out(build_pool *b) {
  for (size_t k = 0; k < b->nh; k++) {
    if (b->h[k].fd < 0 || b->h[k].job >= 0)
      continue;
    uint32_t idx = b->next < b->nj ? (uint32_t)b->jobs[b->next] : UINT32_MAX;
    if (b->next < b->nj)
      b->h[k].job = (long)b->jobs[b->next++];
    if (kc_io_all(b->h[k].fd, &idx, sizeof idx, true) < 0 || idx == UINT32_MAX) {
      if (b->h[k].job >= 0) { /* lost with its helper: try again elsewhere */
        b->jobs[--b->next] = (size_t)b->h[k].job;
        b->h[k].job = -1;
      }
      drop_helper(b, k);
    }
  }
}

static void collect(build_pool *b, size_t k) {
  item *it = &b->items[b->h[k].job];
  if (kc_io_all(b->h[k].fd, &it->build, sizeof it->build, false) < 0) {
    memset(&it->build, 0, sizeof it->build);
    it->build.status = KC_BUILD_FAILED;
    snprintf(it->build.message, sizeof it->build.message, "the build helper died");
    drop_helper(b, k);
  }
  it->build.message[sizeof it->build.message - 1] = 0;
  it->build.artifact[sizeof it->build.artifact - 1] = 0;
  it->build_done = true;
  b->h[k].job = -1;
  build_progress(b, ++b->done);
}

/* Hands out and collects until every job is answered, no helper is left, or Ctrl-C. */
static void run_helpers(build_pool *b) {
  for (;;) {
    hand_out(b);
    if (b->done == b->nj || !b->alive || kc_measure_interrupted())
      return;
    struct pollfd pfd[KC_MAX_BUILD_HELPERS];
    for (size_t k = 0; k < b->nh; k++)
      pfd[k] = (struct pollfd){b->h[k].fd >= 0 && b->h[k].job >= 0 ? b->h[k].fd : -1, POLLIN, 0};
    int pr = poll(pfd, (nfds_t)b->nh, 100); /* sliced: see kc_measure_interrupted */
    if (pr < 0 && errno != EINTR)
      return;
    for (size_t k = 0; pr > 0 && k < b->nh; k++)
      if (pfd[k].fd >= 0 && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
        collect(b, k);
  }
}

static void stop_helpers(build_pool *b) {
  for (size_t k = 0; k < b->nh; k++) {
    kc_close_fd(&b->h[k].fd);
    if (b->h[k].pid > 0 && kc_measure_interrupted())
      kill(b->h[k].pid, SIGKILL); /* its compiler dies with it (the sandbox's death signal) */
    if (b->h[k].pid > 0)
      waitpid(b->h[k].pid, NULL, 0);
  }
}

static void build_all(const kc_measure_config *cfg, item *items, size_t total) {
  build_pool b = {.cfg = cfg, .build = cfg->build, .items = items, .total = total};
  b.build.settings = cfg->settings;
  b.jobs = calloc(total + 1, sizeof *b.jobs);
  if (!b.jobs) { /* no memory for the plan: every build fails alike */
    fail_unbuilt(items, total, "out of memory");
    return;
  }
  for (size_t i = 0; i < total; i++)
    if (needs_build(&items[i]))
      b.jobs[b.nj++] = i;
  build_progress(&b, 0);
  start_helpers(&b);
  if (!b.alive)
    build_inline(&b);
  run_helpers(&b);
  stop_helpers(&b);
  fail_unbuilt(items, total, "no build helper could run"); /* when every helper died */
  free(b.jobs);
}

static bool has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* from copied to to; sha256 (when not NULL): the hash of the bytes copied. */
static int copy_file(const char *from, const char *to, char *sha256, kc_error *err) {
  kc_cleanup_free char *data = NULL;
  size_t len;
  if (kc_read_file(from, &data, &len, 1u << 30, err) < 0)
    return -1;
  if (sha256)
    kc_sha256_hex(data, len, sha256);
  return kc_write_file(to, data, len, 0444, err);
}

static void device_name(char *buf, size_t len) {
  char host[256] = "localhost", model[256] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
        char *v = strchr(line, ':') + 1;
        while (*v == ' ')
          v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(model, sizeof model, "%s", v);
        break;
      }
    fclose(f);
  }
  snprintf(buf, len, "local:%s%s%s", host, model[0] ? " " : "", model);
}

/* How this host holds the measuring workers' memory limit and the builds' process
 * limit: "cgroup", or "rlimit" where the caller allowed that fallback. */
static json_t *limits_record(const kc_settings *s) {
  json_t *o = json_object();
  const char *mem = kc_cgroup_enforcement(s, "memory"), *pids = kc_cgroup_enforcement(s, "pids");
  json_object_set_new(o, "memory", mem ? json_string(mem) : json_null());
  json_object_set_new(o, "pids", pids ? json_string(pids) : json_null());
  return o;
}

/* The hash of a kernel's bytes: those its build read (a source), else those read when
 * planning the batch; a .so's are set as it is staged. */
static void source_hash(item *it) {
  if (it->sha256[0] || !it->is_source)
    return;
  if (it->build_done && it->build.source_sha256[0])
    memcpy(it->sha256, it->build.source_sha256, sizeof it->sha256);
  else if (it->src)
    kc_sha256_hex(it->src, it->src_len, it->sha256);
}

/* 1 when the kernel's build came from the cache (or from an identical source's build
 * in this batch), 0 when it was compiled here, -1 when nothing was built. */
static int cached(const item *it) {
  if (!it->is_source || !it->build_done)
    return -1;
  return it->build.status == KC_BUILD_CACHED;
}

static json_t *record(const kc_measure_config *cfg, const item *it, const char *device,
                      const char *isolation, double ref_median, const char *ref_sha) {
  kc_build_opts bo = cfg->build;
  if (!bo.cc)
    bo.cc = kc_build_default_cc();
  if (!bo.cflags)
    bo.cflags = KC_BUILD_DEFAULT_CFLAGS;
  kc_mrecord_in in = {
      .kernel = it->path,
      .status = it->status,
      .message = it->message,
      .m = it->measured ? &it->m : NULL,
      .build_s = cached(it) == 0 && it->build.status != KC_BUILD_FAILED ? it->build.build_s : NAN,
      .device = device,
      .reference_median_s = ref_median,
      .max_cv = cfg->max_cv,
      .seed = cfg->seed,
      .seed_set = cfg->seed_set,
      .isolation = isolation,
      .abi = cfg->abi,
      .cc = it->is_source ? bo.cc : NULL,
      .cflags = it->is_source ? bo.cflags : NULL,
      .started = it->started,
      .ended = it->ended,
      .args = cfg->args,
      .entry = cfg->entry ? cfg->entry : kc_abi_default_entry(cfg->abi),
      .reference = cfg->reference,
      .reference_sha256 = cfg->reference && ref_sha && ref_sha[0] ? ref_sha : NULL,
      .rtol = cfg->reference ? (cfg->rtol < 0 ? 1e-4 : cfg->rtol) : NAN,
      .atol = cfg->reference ? (cfg->atol < 0 ? 1e-5 : cfg->atol) : NAN,
      .sha256 = it->sha256[0] ? it->sha256 : NULL,
      .cached = cached(it),
  };
  json_t *o = kc_mrecord(&in);
  json_object_set_new(o, "limits", limits_record(&cfg->settings));
  json_object_set_new(o, "cpu", cfg->pin_cpu ? json_integer(cfg->cpu) : json_null());
  return o;
}

/* Map a finished build onto the kernel's status; true when it can be measured. */
static bool build_verdict(item *it) {
  switch (it->build.status) {
  case KC_BUILD_OK:
  case KC_BUILD_CACHED:
    return true;
  case KC_BUILD_ERROR:
    it->status = KC_MEASURE_BUILD_ERROR;
    snprintf(it->message, sizeof it->message, "%s", it->build.message);
    return false;
  case KC_BUILD_TIMEOUT:
  case KC_BUILD_MEMORY:
    it->status = KC_MEASURE_BUILD_ERROR;
    snprintf(it->message, sizeof it->message, "%s", it->build.message);
    return false;
  default:
    it->status = KC_MEASURE_ERROR;
    snprintf(it->message, sizeof it->message, "build: %s", it->build.message);
    return false;
  }
}

/* The session directory holds every staged .so; a worker sees only view/, which holds
 * the inputs file and the one kernel being loaded (kernel.so), nothing else: not the
 * other candidates, not the reference (removed once it is loaded), not its outputs
 * (those never leave the parent's memory). */
typedef struct session {
  char dir[PATH_MAX];
  char view[PATH_MAX + 8];
  char inputs[PATH_MAX + 32];
  char in_dir[PATH_MAX];    /* the inputs file's own directory, or "" (kc_inputs_file) */
  char in_at[PATH_MAX + 8]; /* where workers see it */
  char kernel[PATH_MAX + 32];
  int in_fd;
  unsigned char *in_map; /* the parent's read-write mapping of the inputs file */
  size_t in_len;
  kc_args_spec spec;
  uint32_t n_sets;
  uint32_t n_slots;
  uint64_t out_region;
  uint64_t max_calls;
  uint64_t data_seed;
} session;

/* Inputs of a round: distinct sets so that calls each get their own input where
 * kc_round_input_budget allows (never fewer than --sets); outputs: up to 128 MiB of
 * regions (and a quarter of the worker's memory), one per call of a round, never fewer
 * than two. */
#define KC_ROUND_OUTPUT_BYTES (128ull << 20)

/* What the worker holds besides the tensors: its code, libraries, ring and stack. */
#define KC_WORKER_OVERHEAD (48ull << 20)

/* The sets of inputs the file holds: a round uses up to this many. */
static uint32_t input_slots(const session *s) {
  return kc_round_input_slots(kc_args_region_bytes(&s->spec, false), s->n_sets);
}

/* Is the measuring worker's memory limit an RLIMIT_AS?  So it is without a memory
 * cgroup (--limits-fallback rlimit) and in a plain process (--no-isolation).  That
 * limit counts address space, not memory: the name of the option that chose it. */
static const char *address_space_limit(const kc_measure_config *cfg) {
  if (cfg->no_isolation)
    return "--no-isolation";
  const char *how = kc_cgroup_enforcement(&cfg->settings, "memory");
  return how && !strcmp(how, "rlimit") ? "--limits-fallback rlimit" : NULL;
}

/* The address space the inputs file takes in the worker (one mapping of it). */
static uint64_t input_views_bytes(const session *s) {
  uint64_t len = kc_args_region_bytes(&s->spec, false) * input_slots(s);
  return (len + 4095) / 4096 * 4096;
}

/* The output area of the largest round: at most a quarter of the worker's memory (the
 * area must never be what kills it) and KC_ROUND_OUTPUT_BYTES, never fewer than two
 * calls.  Under an RLIMIT_AS also no more than the address space the inputs and the
 * worker itself leave. */
static uint64_t area_calls(const kc_measure_config *cfg, const session *s) {
  uint64_t mem = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30);
  uint64_t budget = mem / 4 < KC_ROUND_OUTPUT_BYTES ? mem / 4 : KC_ROUND_OUTPUT_BYTES;
  if (address_space_limit(cfg)) {
    uint64_t used = input_views_bytes(s) + KC_WORKER_OVERHEAD;
    uint64_t left = mem > used ? mem - used : 0;
    budget = left < budget ? left : budget;
  }
  uint64_t calls = s->out_region ? budget / s->out_region : 1ull << 32;
  return calls > 2 ? calls : 2;
}

/* The largest tensor of the problem, formatted, for the refusals below. */
static uint32_t largest_tensor(const session *s, char *name, size_t len) {
  uint32_t big = 0;
  for (uint32_t i = 1; i < s->spec.n; i++)
    if (s->spec.t[i].nbytes > s->spec.t[big].nbytes)
      big = i;
  kc_args_spec one = {.n = 1};
  one.t[0] = s->spec.t[big];
  kc_args_format(&one, name, len);
  return big;
}

/* An RLIMIT_AS must also hold the inputs: refused up front, naming the limit,
 * rather than the worker failing to map its inputs ("Cannot allocate memory"). */
static int check_fits_address_space(const kc_measure_config *cfg, const session *s, kc_error *err) {
  const char *why = address_space_limit(cfg);
  if (!why)
    return 0;
  uint64_t limit = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30);
  uint64_t vb = input_views_bytes(s);
  uint64_t need = vb + 2 * s->out_region + KC_WORKER_OVERHEAD;
  if (need <= limit)
    return 0;
  char name[256];
  uint32_t big = largest_tensor(s, name, sizeof name);
  return kc_error_set(err, 0,
                      "--args: tensor %u (%s, %.1f MiB) does not fit: --memory %.1f MiB is held "
                      "as an RLIMIT_AS (%s), which counts address space, and the measuring "
                      "worker's %.1f MiB of inputs, the outputs of two calls "
                      "and its own mappings need %.1f MiB (raise --memory to at least %lluM)",
                      big, name, (double)s->spec.t[big].nbytes / (1 << 20),
                      (double)limit / (1 << 20), why, (double)vb / (1 << 20),
                      (double)need / (1 << 20), (unsigned long long)((need + (1 << 20) - 1) >> 20));
}

/* The measuring worker holds the inputs of a round and the outputs of its calls at
 * once: refuse, naming the largest tensor, a problem whose smallest round (the --sets
 * inputs, two calls' outputs) cannot fit its memory limit, rather than let the kernel
 * die of it.  Beyond that the round adapts: more input sets only up to 8 MiB, more
 * calls' outputs only up to a quarter of the limit. */
static int check_fits(const kc_measure_config *cfg, const session *s, kc_error *err) {
  uint64_t limit = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30);
  uint64_t in = kc_args_region_bytes(&s->spec, false) * s->n_sets;
  uint64_t need = in + 2 * s->out_region + KC_WORKER_OVERHEAD;
  if (need > limit) {
    char name[256];
    uint32_t big = largest_tensor(s, name, sizeof name);
    return kc_error_set(err, 0,
                        "--args: tensor %u (%s, %.1f MiB) does not fit: the inputs of %u sets "
                        "and the outputs of two calls need %.1f MiB in the measuring worker, "
                        "over its memory limit of %.1f MiB (raise --memory or lower --sets)",
                        big, name, (double)s->spec.t[big].nbytes / (1 << 20), s->n_sets,
                        (double)need / (1 << 20), (double)limit / (1 << 20));
  }
  return check_fits_address_space(cfg, s, err);
}

static int make_session(const kc_measure_config *cfg, session *s, kc_error *err) {
  const char *tmp = secure_getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/kcage-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(s->dir))
    return kc_error_set(err, errno, "mkdtemp %s", s->dir);
  snprintf(s->view, sizeof s->view, "%s/view", s->dir);
  if (mkdir(s->view, 0755) < 0)
    return kc_error_set(err, errno, "mkdir %s", s->view);
  chmod(s->dir, 0711); /* the workers' ids reach view/ but cannot list the session */
  snprintf(s->kernel, sizeof s->kernel, "%s/kernel.so", s->view);
  uint64_t in_region = kc_args_region_bytes(&s->spec, false);
  s->n_slots = input_slots(s);
  s->max_calls = area_calls(cfg, s);
  if (cfg->seed_set)
    s->data_seed = cfg->seed;
  else if (getrandom(&s->data_seed, sizeof s->data_seed, 0) != sizeof s->data_seed)
    return kc_error_set(err, errno, "getrandom");
  s->in_len = (size_t)(in_region * s->n_slots);
  /* Read-only for the workers (mode, and the read-only bind); the parent writes each
   * round's data through its own mapping while the worker is stopped. */
  s->in_fd = kc_inputs_file(s->in_len, s->dir, s->view, s->in_dir, sizeof s->in_dir, s->inputs,
                            sizeof s->inputs, err);
  if (s->in_fd < 0)
    return -1;
  snprintf(s->in_at, sizeof s->in_at, "%s/in", s->dir);
  s->in_map =
      mmap(NULL, s->in_len ? s->in_len : 1, PROT_READ | PROT_WRITE, MAP_SHARED, s->in_fd, 0);
  if (s->in_map == MAP_FAILED) {
    s->in_map = NULL;
    return kc_error_set(err, errno, "map %s", s->inputs);
  }
  return 0;
}

/* Put one kernel alone into the view (replacing the previous one). */
static int show_kernel(const session *s, const char *staged, kc_error *err) {
  unlink(s->kernel);
  return copy_file(staged, s->kernel, NULL, err);
}

static void fill_ctx(kc_mctx *x, const kc_measure_config *cfg, const session *s, kc_mrunner *r,
                     const char *artifact, kc_mrunner *ref) {
  memset(x, 0, sizeof *x);
  x->runner = r;
  x->spec = &s->spec;
  x->args_text = cfg->args;
  x->artifact = artifact;
  x->abi = cfg->abi;
  x->entry = cfg->entry ? cfg->entry : kc_abi_default_entry(cfg->abi);
  x->inputs = s->inputs;
  x->n_sets = s->n_sets;
  x->n_slots = s->n_slots;
  x->max_calls = s->max_calls;
  x->in_map = s->in_map;
  x->data_seed = s->data_seed;
  x->ref = ref;
  x->rtol = cfg->rtol < 0 ? 1e-4 : cfg->rtol;
  x->atol = cfg->atol < 0 ? 1e-5 : cfg->atol;
  x->number = cfg->number ? cfg->number : 1;
  x->repeat = cfg->repeat ? cfg->repeat : 5;
  x->min_repeat_ms = cfg->min_repeat_ms < 0 ? 20 : cfg->min_repeat_ms;
  x->cooldown_ms = cfg->cooldown_ms;
  x->flush_cache = cfg->flush_cache;
  x->piece_bytes = cfg->piece_bytes;
  x->cpu = cfg->pin_cpu ? (int)cfg->cpu : -1;
  x->checks = cfg->checks ? cfg->checks : 2;
  x->call_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10;
  x->deadline = cfg->budget_s < 0 ? 0 : kc_now_s() + (cfg->budget_s > 0 ? cfg->budget_s : 300);
}

/* The user's own name for a kernel in a message that names the copy a worker loaded
 * (a loader's "…/view/kernel.so: file too short"): that path means nothing to them. */
static void own_name(char *msg, size_t cap, const char *copy, const char *user) {
  size_t cl = strlen(copy), ul = strlen(user);
  char *p = msg;
  while (cl && (p = strstr(p, copy))) {
    size_t rest = strlen(p + cl);
    if ((size_t)(p - msg) + ul + rest + 1 > cap)
      return;
    memmove(p + ul, p + cl, rest + 1);
    memcpy(p, user, ul);
    p += ul;
  }
}

/* The truth: the reference, loaded and sealed in its own worker, which stays up for
 * the whole batch and computes the outputs of whatever sets the parent picks after
 * each round.  A first evaluation (of all-zero inputs) finds a reference that does not
 * work with --args before any kernel is measured. */
static int reference_load(const kc_measure_config *cfg, const session *s, kc_mrunner *r,
                          const char *staged, kc_error *err) {
  if (show_kernel(s, staged, err) < 0)
    return -1;
  kc_mctx x;
  fill_ctx(&x, cfg, s, r, s->kernel, NULL);
  unsigned char lbuf[4 * 4096 + 64];
  kc_mreq_load h = {KC_MPROTO_MAGIC, KC_MOP_LOAD, s->n_slots, (uint32_t)x.abi};
  size_t n = sizeof h;
  memcpy(lbuf, &h, n);
  const char *strs[4] = {s->kernel, x.entry, s->inputs, cfg->args};
  for (int i = 0; i < 4; i++) {
    size_t l = strlen(strs[i]) + 1;
    if (n + l > sizeof lbuf)
      return kc_error_set(err, ENAMETOOLONG, "reference load");
    memcpy(lbuf + n, strs[i], l);
    n += l;
  }
  kc_mcall c;
  /* Loading faults in the inputs file: time in proportion to its size. */
  int rc = kc_mrunner_call(r, lbuf, n, 30 + (double)s->in_len / 100e6, &c, err);
  unlink(s->kernel);
  if (rc < 0)
    return -1;
  if (c.status != KC_MCALL_OK) {
    if (c.status == KC_MCALL_DIED)
      kc_error_set(err, 0, "%s", c.verdict.message);
    else if (c.status == KC_MCALL_TIMEOUT)
      kc_error_set(err, 0, "timed out while loading");
    else {
      own_name(c.message, sizeof c.message, s->kernel, cfg->reference);
      kc_error_set(err, 0, "%s", !strncmp(c.message, "error: ", 7) ? c.message + 7 : c.message);
    }
    kc_mcall_clear(&c);
    return -1;
  }
  kc_mcall_clear(&c);
  kc_cleanup_free unsigned char *probe = malloc(s->out_region + 1);
  uint32_t set0 = 0;
  if (!probe)
    return kc_error_set(err, ENOMEM, "reference");
  double limit = (cfg->timeout_s > 10 ? cfg->timeout_s : 10) + (double)s->out_region / 100e6;
  if (kc_reference_eval(r, &set0, 1, s->out_region, limit, probe, err) < 0) {
    const char *m = err->msg, *p = strstr(m, "error: ");
    kc_error_set(err, 0, "%s", p ? p + 7 : m);
    return -1;
  }
  return 0;
}

/* One kernel, alone in the workers' view, in a fresh worker (a sealed worker cannot
 * load another). */
static void measure_one(const kc_measure_config *cfg, const session *s, kc_mrunner *runner,
                        kc_mrunner *ref, item *it, int *rc, kc_error *err) {
  clock_gettime(CLOCK_REALTIME, &it->started);
  *rc = 0;
  if (it->staged[0]) {
    kc_mctx x;
    fill_ctx(&x, cfg, s, runner, s->kernel, ref);
    *rc = show_kernel(s, it->staged, err);
    if (*rc == 0)
      *rc = kc_measure_kernel(&x, &it->m, err);
    kc_mrunner_reset(runner);
    unlink(s->kernel);
    if (*rc < 0)
      kc_error_prefix(err, "%s", it->path);
    it->measured = true;
    it->status = it->m.status;
    snprintf(it->message, sizeof it->message, "%s", it->m.message);
    own_name(it->message, sizeof it->message, s->kernel, it->path);
  }
  clock_gettime(CLOCK_REALTIME, &it->ended);
}

static int measure_all(const kc_measure_config *cfg, const session *s, kc_mrunner *runner,
                       kc_mrunner *ref, item *items, size_t n, size_t ref_index, const char *device,
                       const char *isolation, kc_error *err) {
  size_t total = n + (cfg->reference ? 1 : 0), to_measure = 0, measured = 0;
  for (size_t i = 0; i < total; i++)
    to_measure += items[i].staged[0] != 0;
  double ref_median = NAN;
  kc_cleanup_free size_t *order = calloc(total, sizeof *order);
  size_t no = 0;
  if (!order)
    return kc_error_set(err, ENOMEM, "batch");
  if (cfg->reference)
    order[no++] = ref_index;
  for (size_t i = 0; i < n; i++)
    if (!cfg->reference || i != ref_index)
      order[no++] = i;
  for (size_t k = 0; k < no; k++) {
    size_t i = order[k];
    if (kc_measure_interrupted())
      return kc_error_set(err, EINTR, "interrupted by %s",
                          kc_signal_name(kc_measure_interrupted()));
    item *it = &items[i];
    if (cfg->on_start && it->staged[0])
      cfg->on_start(cfg->progress_ctx, it->path);
    if (cfg->progress && it->staged[0])
      cfg->progress(cfg->progress_ctx, "measure", measured, to_measure);
    int rc;
    measure_one(cfg, s, runner, ref, it, &rc, err);
    if (rc < 0)
      return -1;
    measured += it->staged[0] != 0;
    if (cfg->reference && i == ref_index && it->status == KC_MEASURE_OK && it->m.repeat) {
      kc_mstats st;
      kc_mstats_of(it->m.run_secs, it->m.repeat, &st);
      ref_median = st.median;
    }
    source_hash(it);
    if (cfg->reference)
      source_hash(&items[ref_index]);
    it->rec = record(cfg, it, device, isolation, ref_median,
                     cfg->reference ? items[ref_index].sha256 : NULL);
    if (i < n && cfg->on_record)
      cfg->on_record(cfg->record_ctx, it->rec);
  }
  if (cfg->progress)
    cfg->progress(cfg->progress_ctx, "done", to_measure, to_measure);
  return 0;
}

int kc_measure_run_batch(const kc_measure_config *cfg, const char *const *kernels, size_t n,
                         json_t **records, kc_error *err) {
  return kc_measure_run_batch_ex(cfg, kernels, n, records, NULL, err);
}

/* One local batch: the kernels (then the reference, unless it is one of them), their
 * session and the two runners. */
typedef struct batch {
  const kc_measure_config *cfg;
  const char *const *kernels;
  size_t n, total;
  item *items;
  size_t ref_index; /* the reference's item; SIZE_MAX without one */
  session s;
  bool have_session;
  kc_mrunner *runner, *ref_runner;
  char device[512];
  const char *isolation;
} batch;

/* "0-3,6": the CPUs of a set, as the kernel lists them. */
static const char *cpu_list(const cpu_set_t *set, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && len < cap; c++) {
    if (!CPU_ISSET(c, set) || (c > 0 && CPU_ISSET(c - 1, set)))
      continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
      e++;
    int w = e > c ? snprintf(buf + len, cap - len, "%s%d-%d", len ? "," : "", c, e)
                  : snprintf(buf + len, cap - len, "%s%d", len ? "," : "", c);
    len += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

/* --cpu: a CPU the caller itself may run on (one outside its set would be a pin the
 * caller's own placement forbids, or no CPU at all). */
static int check_cpu_choice(const kc_measure_config *cfg, kc_error *err) {
  cpu_set_t mine;
  if (!cfg->pin_cpu)
    return 0;
  if (sched_getaffinity(0, sizeof mine, &mine) < 0)
    return kc_error_set(err, errno, "--cpu");
  if (cfg->cpu >= CPU_SETSIZE || !CPU_ISSET(cfg->cpu, &mine))
    return kc_error_set(err, 0, "--cpu %u: not one of the CPUs this process may run on (%s)",
                        cfg->cpu, cpu_list(&mine, (char[256]){0}, 256));
  return 0;
}

/* What can be refused before anything is read or built. */
static int check_batch(batch *b, kc_error *err) {
  const kc_measure_config *cfg = b->cfg;
  if (kc_args_parse(cfg->args, &b->s.spec, err) < 0)
    return kc_error_prefix(err, "--args");
  b->s.n_sets = cfg->sets ? cfg->sets : 4;
  if (b->s.n_sets > 64)
    return kc_error_set(err, 0, "too many input sets (at most 64)");
  b->s.out_region = kc_args_region_bytes(&b->s.spec, true);
  if (check_fits(cfg, &b->s, err) < 0 || check_cpu_choice(cfg, err) < 0)
    return -1;
  if (b->n == 0)
    return kc_error_set(err, 0, "no kernels given");
  for (size_t i = 0; i < b->n; i++)
    if (access(b->kernels[i], R_OK) < 0)
      return kc_error_set(err, errno, "%s", b->kernels[i]);
  if (cfg->reference && access(cfg->reference, R_OK) < 0)
    return kc_error_set(err, errno, "--reference %s", cfg->reference);
  return 0;
}

/* Items: the kernels, then the reference (built and measured like any kernel, for the
 * speed-up); a source read, and marked when an earlier one is the same text. */
static int plan_items(batch *b, kc_error *err) {
  item *items = b->items;
  for (size_t i = 0; i < b->total; i++) {
    item *it = &items[i];
    it->path = i < b->n ? b->kernels[i] : b->cfg->reference;
    it->dup_of = -1;
    if (has_suffix(it->path, ".so"))
      continue;
    if (!has_suffix(it->path, ".c"))
      return kc_error_set(err, 0, "%s: not a kernel (want a .c source or a .so shared object)",
                          it->path);
    it->is_source = true;
    if (kc_read_file(it->path, &it->src, &it->src_len, 16u << 20, err) < 0)
      return -1;
    for (size_t j = 0; j < i; j++)
      if (items[j].is_source && items[j].dup_of < 0 && items[j].src_len == it->src_len &&
          !memcmp(items[j].src, it->src, it->src_len)) {
        it->dup_of = (int)j;
        break;
      }
  }
  b->ref_index = SIZE_MAX;
  if (b->cfg->reference) { /* one of the kernels, or its own item */
    b->ref_index = b->n;
    char x[PATH_MAX], y[PATH_MAX];
    if (realpath(b->cfg->reference, x))
      for (size_t i = 0; i < b->n; i++)
        if (realpath(b->kernels[i], y) && !strcmp(x, y)) {
          b->ref_index = i;
          break;
        }
  }
  return 0;
}

/* Every source built once; a copy of another takes its build. */
static void build_items(batch *b) {
  build_all(b->cfg, b->items, b->total);
  for (size_t i = 0; i < b->total; i++) {
    item *it = &b->items[i];
    if (it->dup_of < 0)
      continue;
    it->build = b->items[it->dup_of].build;
    it->build_done = true;
    if (it->build.status == KC_BUILD_OK) { /* compiled once, for the other copy */
      it->build.status = KC_BUILD_CACHED;
      it->build.build_s = 0;
    }
  }
}

/* Each kernel that built (or came built) copied into the session. */
static int stage_items(batch *b, kc_error *err) {
  for (size_t i = 0; i < b->total; i++) {
    item *it = &b->items[i];
    const char *art = it->path;
    if (it->is_source) {
      if (!build_verdict(it))
        continue;
      art = it->build.artifact;
    }
    snprintf(it->staged, sizeof it->staged, "%s/k%zu.so", b->s.dir, i);
    /* a .so is hashed as it is staged: the bytes the worker loads */
    if (copy_file(art, it->staged, it->is_source ? NULL : it->sha256, err) < 0)
      return -1;
  }
  return 0;
}

/* The kernels' runner, and the reference's (its outputs are read from its memory too:
 * nothing large on the ring); the device line says how the kernels were isolated. */
static int start_runners(batch *b, kc_error *err) {
  const kc_measure_config *cfg = b->cfg;
  kc_mrunner_opts ro = {.bind_dir = b->s.view,
                        .inputs_dir = b->s.in_dir[0] ? b->s.in_dir : NULL,
                        .inputs_at = b->s.in_at,
                        .memory_bytes = cfg->memory_bytes ? cfg->memory_bytes : (1ull << 30),
                        .max_arg_bytes = 64 * 1024,
                        .max_result_bytes = 4096,
                        .plain = cfg->no_isolation,
                        .settings = cfg->settings};
  if (kc_mrunner_new(&ro, &b->runner, err) < 0)
    return -1;
  if (cfg->reference && kc_mrunner_new(&ro, &b->ref_runner, err) < 0)
    return -1;
  const char *kind = kc_mrunner_kind(b->runner);
  b->isolation = strcmp(kind, "sandbox") ? "none" : "sandbox";
  size_t dl = strlen(b->device);
  snprintf(b->device + dl, sizeof b->device - dl, " [%s]", kind);
  return 0;
}

/* The truth, from the reference in its own worker. */
static int load_reference(batch *b, kc_error *err) {
  const kc_measure_config *cfg = b->cfg;
  if (!cfg->reference)
    return 0;
  item *ri = &b->items[b->ref_index];
  if (!ri->staged[0])
    return kc_error_set(err, 0, "--reference %s: %s", cfg->reference, ri->message);
  if (reference_load(cfg, &b->s, b->ref_runner, ri->staged, err) < 0)
    return kc_error_prefix(err, "--reference %s (with --args '%s', %u tensors)", cfg->reference,
                           cfg->args, b->s.spec.n);
  return 0;
}

static int run_steps(batch *b, kc_error *err) {
  if (plan_items(b, err) < 0)
    return -1;
  build_items(b);
  if (kc_measure_interrupted())
    return kc_error_set(err, EINTR, "interrupted by %s", kc_signal_name(kc_measure_interrupted()));
  if (make_session(b->cfg, &b->s, err) < 0)
    return -1;
  b->have_session = true;
  if (stage_items(b, err) < 0 || start_runners(b, err) < 0 || load_reference(b, err) < 0)
    return -1;
  /* Measure, one kernel per fresh worker (a sealed worker cannot load another): the
   * reference first (its median is every record's speed-up), then the kernels in input
   * order, each record handed out as soon as it is final. */
  return measure_all(b->cfg, &b->s, b->runner, b->ref_runner, b->items, b->n, b->ref_index,
                     b->device, b->isolation, err);
}

static void free_batch(batch *b) {
  kc_mrunner_free(b->runner);
  kc_mrunner_free(b->ref_runner);
  for (size_t i = 0; i < b->total; i++) {
    free(b->items[i].src);
    kc_kmeasure_clear(&b->items[i].m);
    json_decref(b->items[i].rec);
  }
  free(b->items);
  if (b->have_session)
    kc_rm_rf(b->s.dir);
  if (b->s.in_dir[0])
    kc_rm_rf(b->s.in_dir);
  if (b->s.in_map)
    munmap(b->s.in_map, b->s.in_len ? b->s.in_len : 1);
  if (b->s.in_fd >= 0)
    close(b->s.in_fd);
}

int kc_measure_run_batch_ex(const kc_measure_config *cfg, const char *const *kernels, size_t n,
                            json_t **records, json_t **reference_record, kc_error *err) {
  *records = NULL;
  if (reference_record)
    *reference_record = NULL;
  if (cfg->tracker)
    return kc_error_set(err, EINVAL, "a batch for a tracker goes to kc_measure_remote_run");
  batch b = {.cfg = cfg, .kernels = kernels, .n = n};
  if (check_batch(&b, err) < 0)
    return -1;
  b.total = n + (cfg->reference ? 1 : 0);
  b.items = calloc(b.total, sizeof *b.items);
  if (!b.items)
    return kc_error_set(err, ENOMEM, "batch");
  b.s.in_fd = -1;
  device_name(b.device, sizeof b.device);
  int rc = run_steps(&b, err);
  if (rc == 0) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append(arr, b.items[i].rec);
    if (cfg->reference && reference_record) { /* for the speed-up column */
      json_t *r = json_deep_copy(b.items[b.ref_index].rec);
      json_object_set_new(r, "kernel", json_string(cfg->reference));
      *reference_record = r;
    }
    *records = arr;
  }
  free_batch(&b);
  return rc;
}
