/* `kcage bench [OPTIONS] KERNEL...` (docs/contracts.md): build and time candidate kernels,
 * a table on stdout, JSON Lines with --json. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "env_path.h"
#include "kcage/cgroup.h"
#include "kcage/escape.h"
#include "kcage/measure.h"
#include "kcage/policy.h"
#include "kcage/tracker.h"
#include "signame.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: kcage bench [OPTIONS] KERNEL...\n"
          "\n"
          "Build (inside a `build` sandbox, cached) and time (in `measure` workers) kernels\n"
          "exporting `int kernel(DLTensor *args, int32_t num_args)`, or TVM-FFI functions\n"
          "(--abi tvm-ffi).  KERNEL is a .c source or a .so.  Prints a table; exit 0 when\n"
          "the batch ran, whatever the kernels did.\n"
          "\n"
          "problem:\n"
          "  --args SPEC          tensors, e.g. 'f32[512,512] f32[512,512] f32[512,512]:out'\n"
          "                       (dtypes f32 f64 i32 i64 i8 u8 f16 bf16; ':out' = output)\n"
          "  --seed N             seed of the random inputs (default: a secret one per run;\n"
          "                       with --seed the inputs are predictable and the records\n"
          "                       say so)\n"
          "  --reference FILE     trusted kernel whose outputs are the truth\n"
          "  --rtol X, --atol X   tolerances against the reference (default 1e-4, 1e-5)\n"
          "  --entry SYMBOL       the kernel's entry point (default kernel; with --abi\n"
          "                       tvm-ffi the function's name, default main)\n"
          "  --abi ABI            how every kernel and the reference are called: dlpack\n"
          "                       (default) or tvm-ffi (a module TVM exported: the packed\n"
          "                       function __tvm_ffi_ENTRY, each tensor a DLTensor pointer)\n"
          "timing (TVM's time evaluator):\n"
          "  --number N           calls per round to start from (default 1), grown until a\n"
          "                       round lasts --min-repeat-ms\n"
          "  --repeat N           rounds, one time each (default 5)\n"
          "  --min-repeat-ms MS   shortest round (default 20)\n"
          "  --cooldown-ms MS     sleep between rounds (default 0)\n"
          "  --flush-cache        evict the tensors from the CPU caches before each round\n"
          "  --sets N             input sets of the untimed round (default 4)\n"
          "  --checks N           timed calls verified per round, drawn after it (default 2)\n"
          "  --no-isolation       run the kernels in a plain process, with no namespaces and\n"
          "                       no cgroup: only for code you trust (records say\n"
          "                       \"isolation\": \"none\")\n"
          "  --cpu N              run each measuring worker's rounds on CPU N alone; kcage\n"
          "                       waits there asleep while a round runs (default: wherever\n"
          "                       the scheduler puts it); the record's \"cpu\" is N, or null\n"
          "  --max-cv X           mark a kernel unstable (record \"unstable\": true, '!' in the\n"
          "                       table) when the CV of its rounds is above X (default 0.1)\n"
          "resources:\n"
          "  --workers N          parallel builds (default: CPUs online)\n"
          "  --timeout SEC        limit on ONE kernel call (default 10); a call past it is\n"
          "                       `timeout` with \"timeout\": \"call\" in the record\n"
          "  --budget SEC         limit on one kernel's WHOLE measurement: load, checks,\n"
          "                       warm-up and every round (default 300; 0 = none); past it:\n"
          "                       `timeout` with \"timeout\": \"budget\"\n"
          "  --memory SIZE        per measuring worker (default 1G)\n"
          "  --cc CC              compiler (default $CC or cc)\n"
          "  --cflags FLAGS       compiler flags (default '-O2 -march=native -fPIC -shared')\n"
          "  --build-timeout SEC  per build (default 60)\n"
          "  --build-memory SIZE  per build (default 1G)\n"
          "  --cache-dir DIR      build cache (default $XDG_CACHE_HOME/kcage)\n"
          "  --no-cache           compile even when a build is cached\n"
          "  --limits-fallback rlimit\n"
          "                       without a delegated cgroup, hold memory and the builds'\n"
          "                       process limit as rlimits instead of refusing to run\n"
          "  --sandbox-ids BASE:COUNT\n"
          "                       as root, the host ids the sandboxes run as (default\n"
          "                       1500000000:65536); no account may use them\n"
          "output:\n"
          "  --json FILE          one JSON record per kernel (JSON Lines; '-' = stdout),\n"
          "                       each written as soon as its kernel is done; on SIGINT or\n"
          "                       SIGTERM the finished ones stay and kcage exits 130/143\n"
          "  --quiet              no table (nor progress)\n"
          "  --version            print kcage's version\n"
          "remote devices:\n"
          "  --tracker HOST:PORT --key KEY [--priority N] [--session-timeout SEC]\n"
          "  --session-constructor NAME[,ARG...]\n"
          "                       TVM's session_constructor_args: NAME is the constructor\n"
          "                       the agent makes the session with (e.g. kcage.sandbox),\n"
          "                       the ARGs its arguments (strings, no commas); an agent\n"
          "                       that does not acknowledge them is refused\n"
          "  --auth-key FILE      run only on agents that prove this shared key (and\n"
          "                       prove it to them); see `kcage agent --auth-key`\n"
          "\n"
          "statuses: ok build_error wrong_result timeout memory crash syscall error suspicious\n"
          "\n"
          "exit status: 0 the batch ran (whatever the kernels did); 2 bad usage or input (an\n"
          "option, --args, a missing kernel, a reference that refuses the tensors); 3 kcage\n"
          "could not run the batch (a limit this host cannot hold, such as no delegated\n"
          "cgroup for a plain user; cache dir, compiler, policies, sandbox, tracker or agent:\n"
          "all checked before any work)\n"
          "or could not write the --json records (e.g. a full disk);\n"
          "130/143 interrupted by SIGINT/SIGTERM (the finished records stay).\n");
}

enum {
  O_ARGS = 256,
  O_SEED,
  O_REF,
  O_RTOL,
  O_ATOL,
  O_ENTRY,
  O_ABI,
  O_NUMBER,
  O_REPEAT,
  O_MINMS,
  O_COOL,
  O_FLUSH,
  O_WORKERS,
  O_TIMEOUT,
  O_MEMORY,
  O_JSON,
  O_CC,
  O_CFLAGS,
  O_BTIMEOUT,
  O_CACHE,
  O_NOCACHE,
  O_BMEMORY,
  O_TRACKER,
  O_KEY,
  O_PRIO,
  O_STIMEOUT,
  O_SETS,
  O_CHECKS,
  O_QUIET,
  O_AUTHKEY,
  O_BUDGET,
  O_MAXCV,
  O_SCTOR,
  O_HELP,
  O_LFALLBACK,
  O_NO_ISOLATION,
  O_SANDBOX_IDS,
  O_CPU,
};

static const struct option opts[] = {{"args", 1, 0, O_ARGS},
                                     {"seed", 1, 0, O_SEED},
                                     {"no-isolation", 0, 0, O_NO_ISOLATION},
                                     {"reference", 1, 0, O_REF},
                                     {"rtol", 1, 0, O_RTOL},
                                     {"atol", 1, 0, O_ATOL},
                                     {"entry", 1, 0, O_ENTRY},
                                     {"abi", 1, 0, O_ABI},
                                     {"number", 1, 0, O_NUMBER},
                                     {"repeat", 1, 0, O_REPEAT},
                                     {"min-repeat-ms", 1, 0, O_MINMS},
                                     {"cooldown-ms", 1, 0, O_COOL},
                                     {"flush-cache", 0, 0, O_FLUSH},
                                     {"workers", 1, 0, O_WORKERS},
                                     {"timeout", 1, 0, O_TIMEOUT},
                                     {"memory", 1, 0, O_MEMORY},
                                     {"json", 1, 0, O_JSON},
                                     {"cc", 1, 0, O_CC},
                                     {"cflags", 1, 0, O_CFLAGS},
                                     {"build-timeout", 1, 0, O_BTIMEOUT},
                                     {"cache-dir", 1, 0, O_CACHE},
                                     {"no-cache", 0, 0, O_NOCACHE},
                                     {"build-memory", 1, 0, O_BMEMORY},
                                     {"tracker", 1, 0, O_TRACKER},
                                     {"key", 1, 0, O_KEY},
                                     {"priority", 1, 0, O_PRIO},
                                     {"session-timeout", 1, 0, O_STIMEOUT},
                                     {"session-constructor", 1, 0, O_SCTOR},
                                     {"sets", 1, 0, O_SETS},
                                     {"checks", 1, 0, O_CHECKS},
                                     {"quiet", 0, 0, O_QUIET},
                                     {"auth-key", 1, 0, O_AUTHKEY},
                                     {"budget", 1, 0, O_BUDGET},
                                     {"max-cv", 1, 0, O_MAXCV},
                                     {"cpu", 1, 0, O_CPU},
                                     {"help", 0, 0, O_HELP},
                                     KC_OPTION_VERSION,
                                     {"limits-fallback", 1, 0, O_LFALLBACK},
                                     {"sandbox-ids", 1, 0, O_SANDBOX_IDS},
                                     {0, 0, 0, 0}};

/* --json: each record written and flushed the moment its kernel is done, so an
 * interrupted batch keeps every finished record. */
typedef struct sink {
  FILE *jf;
  kc_measure_progress *progress;
  json_t *done; /* the records so far, for the table of an interrupted batch */
  bool failed;  /* a record could not be written to --json */
  int errno_;   /* why */
} sink;

static void on_record(void *ctx, const json_t *rec) {
  sink *k = ctx;
  json_array_append(k->done, (json_t *)rec);
  if (k->progress)
    kc_measure_progress_record(k->progress, rec);
  if (!k->jf)
    return;
  char *line = kc_measure_record_dumps(rec);
  if (!k->failed && (!line || fprintf(k->jf, "%s\n", line) < 0 || fflush(k->jf) != 0)) {
    k->failed = true;
    k->errno_ = line ? errno : ENOMEM;
  }
  free(line);
}

static void on_signal(int sig) {
  kc_measure_interrupt(sig);
}

/* The long name of option c, for an error that names it. */
static const char *opt_name(int c) {
  for (const struct option *o = opts; o->name; o++)
    if (o->val == c)
      return o->name;
  return "option";
}

/* A memory limit: a size (K/M/G), and at least what a worker needs to start. */
static int parse_memory(const char *name, const char *a, uint64_t *out) {
  if (kc_parse_size(a, out) < 0) {
    kc_cli_error("bench", "--%s: bad value '%s' (want a size such as 256M or 1G)", name, a);
    return -1;
  }
  if (*out < (16u << 20)) {
    kc_cli_error("bench", "--%s %s: want a size of at least 16M", name, a);
    return -1;
  }
  return 0;
}

/* The limits every batch sets: the builds' memory and process limits (a build always
 * runs in its sandbox), the measuring workers' memory and process limits (unless
 * --no-isolation holds memory as an RLIMIT_AS of a plain process).  One this host cannot
 * hold is refused here, before any build or cached artifact or reference is touched:
 * the same answer whatever the batch holds. */
static int limits_preflight(const kc_measure_config *cfg, bool sources, kc_error *err) {
  if (!sources && cfg->no_isolation)
    return 0;
  static const char *const limits[] = {"memory", "pids"};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
    if (!kc_cgroup_enforcement(&cfg->settings, limits[i]))
      return kc_cgroup_refusal(&cfg->settings, limits[i], err);
  return 0;
}

/* The cache directory (root must not use one that others can write), the compiler
 * (when a kernel is a source), the sandbox policies and the worker binary of a local
 * batch (a $KCAGE_WORKER others could change is refused here, not once per kernel). */
static int preflight(const kc_measure_config *cfg, const char *const *kernels, size_t nk,
                     kc_error *err) {
  bool sources = false;
  for (size_t i = 0; i < nk; i++) {
    size_t kl = strlen(kernels[i]);
    sources = sources || (kl > 2 && !strcmp(kernels[i] + kl - 2, ".c"));
  }
  if (cfg->reference) {
    size_t rl = strlen(cfg->reference);
    sources = sources || (rl > 2 && !strcmp(cfg->reference + rl - 2, ".c"));
  }
  if (limits_preflight(cfg, sources, err) < 0)
    return -1;
  char path[4096];
  if (sources && (kc_build_cache_dir(&cfg->build, path, sizeof path, err) < 0 ||
                  kc_build_find_cc(&cfg->build, path, sizeof path, err) < 0))
    return -1;
  static const char *const needed[] = {"build", "measure"};
  for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
    kc_policy *p = NULL;
    if (kc_policy_load_in(&cfg->settings, needed[i], &p, err) < 0)
      return -1;
    kc_policy_free(p);
  }
  const char *worker;
  return kc_env_path("KCAGE_WORKER", KC_ENV_FILE, &worker, err);
}

/* A batch refused for what the caller gave it (a path, --args, the reference), rather
 * than for the machinery: the library says so with no errno, EINVAL or a missing
 * path. */
static bool input_error(const kc_error *err) {
  return err->code == 0 || err->code == EINVAL || err->code == ENOENT || err->code == ENOTDIR;
}

typedef struct bench_args {
  kc_measure_config cfg;
  const char *json_path, *auth_path;
  bool quiet;
  /* --session-constructor, split at its commas */
  char ctor_text[4096];
  const char *ctor[KC_SESSION_CTOR_MAX_ARGS];
} bench_args;

static int bad_value(int c, const char *a) {
  kc_cli_error("bench", "--%s: bad value '%s'", opt_name(c), a ? a : "");
  return KC_EXIT_USAGE;
}

/* --session-constructor NAME[,ARG...]: TVM's session_constructor_args, the first
 * element naming the constructor. */
static int session_constructor(bench_args *b, const char *a) {
  if (strlen(a) >= sizeof b->ctor_text) {
    kc_cli_error("bench", "--session-constructor: longer than %zu bytes", sizeof b->ctor_text - 1);
    return KC_EXIT_USAGE;
  }
  memcpy(b->ctor_text, a, strlen(a) + 1);
  size_t n = 0;
  for (char *p = b->ctor_text, *next; p; p = next) {
    next = strchr(p, ',');
    if (next)
      *next++ = '\0';
    if (n == KC_SESSION_CTOR_MAX_ARGS) {
      kc_cli_error("bench", "--session-constructor: more than %d elements",
                   KC_SESSION_CTOR_MAX_ARGS);
      return KC_EXIT_USAGE;
    }
    b->ctor[n++] = p;
  }
  kc_error err = {0};
  if (kc_session_ctor_check(b->ctor, n, &err) < 0) {
    kc_cli_error("bench", "--session-constructor: %s", err.msg);
    return KC_EXIT_USAGE;
  }
  b->cfg.session_constructor_args = b->ctor;
  b->cfg.n_session_constructor_args = n;
  return 0;
}

/* Each group of options below takes one option into b and returns 0, -1 for --help
 * (printed), the exit status of bad usage, or NOT_MINE for an option of another group. */
#define NOT_MINE 1000

/* The build's options and the remote device's. */
static int build_or_remote_option(bench_args *b, int c, const char *a) {
  uint64_t u;
  switch (c) {
  case O_CC:
    b->cfg.build.cc = a;
    return 0;
  case O_CFLAGS:
    b->cfg.build.cflags = a;
    return 0;
  case O_BTIMEOUT:
    if (kc_parse_decimal(a, &b->cfg.build.timeout_s) < 0 || b->cfg.build.timeout_s <= 0)
      return bad_value(c, a);
    return 0;
  case O_CACHE:
    b->cfg.build.cache_dir = a;
    return 0;
  case O_BMEMORY:
    if (parse_memory("build-memory", a, &b->cfg.build.memory_bytes) < 0)
      return KC_EXIT_USAGE;
    return 0;
  case O_NOCACHE:
    b->cfg.build.no_cache = true;
    return 0;
  case O_LFALLBACK:
    if (kc_cli_limits_fallback("bench", a, &b->cfg.settings) < 0)
      return KC_EXIT_USAGE;
    return 0;
  case O_SANDBOX_IDS:
    return kc_cli_sandbox_ids("bench", a, &b->cfg.settings) < 0 ? KC_EXIT_USAGE : 0;
  case O_TRACKER:
    b->cfg.tracker = a;
    return 0;
  case O_KEY:
    b->cfg.key = a;
    return 0;
  case O_PRIO:
    if (kc_cli_parse_uint(a, 0, 1000000, &u) < 0)
      return bad_value(c, a);
    b->cfg.priority = (int)u;
    return 0;
  case O_STIMEOUT:
    if (kc_parse_decimal(a, &b->cfg.session_timeout_s) < 0)
      return bad_value(c, a);
    return 0;
  case O_AUTHKEY:
    b->auth_path = a;
    return 0;
  case O_SCTOR:
    return session_constructor(b, a);
  }
  return NOT_MINE;
}

/* The problem: the tensors, the reference and how its answer is compared. */
static int problem_option(bench_args *b, int c, const char *a) {
  uint64_t u;
  switch (c) {
  case O_ARGS:
    b->cfg.args = a;
    return 0;
  case O_SEED:
    if (kc_cli_parse_uint(a, 0, UINT64_MAX, &u) < 0)
      return bad_value(c, a);
    b->cfg.seed = u;
    b->cfg.seed_set = true;
    return 0;
  case O_NO_ISOLATION:
    b->cfg.no_isolation = true;
    fprintf(stderr, "kcage bench: warning: --no-isolation: the kernels run as this user with no "
                    "sandbox; use it only for code you trust\n");
    return 0;
  case O_REF:
    b->cfg.reference = a;
    return 0;
  case O_RTOL:
    if (kc_parse_decimal(a, &b->cfg.rtol) < 0)
      return bad_value(c, a);
    if (b->cfg.atol < 0)
      b->cfg.atol = 1e-5;
    return 0;
  case O_ATOL:
    if (kc_parse_decimal(a, &b->cfg.atol) < 0)
      return bad_value(c, a);
    if (b->cfg.rtol < 0)
      b->cfg.rtol = 1e-4;
    return 0;
  case O_ENTRY:
    if (!*a)
      return bad_value(c, a);
    b->cfg.entry = a;
    return 0;
  case O_ABI:
    if (kc_abi_parse(a, &b->cfg.abi) < 0) {
      kc_cli_error("bench", "--abi: bad value '%s' (want dlpack or tvm-ffi)", a);
      return KC_EXIT_USAGE;
    }
    return 0;
  }
  return NOT_MINE;
}

/* A whole number option in [min, max]. */
static int uint_option(int c, const char *a, uint64_t min, uint64_t max, uint32_t *out) {
  uint64_t u;
  if (kc_cli_parse_uint(a, min, max, &u) < 0)
    return bad_value(c, a);
  *out = (uint32_t)u;
  return 0;
}

/* How each kernel is timed, and the limits of its worker. */
static int timing_option(bench_args *b, int c, const char *a) {
  kc_measure_config *g = &b->cfg;
  switch (c) {
  case O_NUMBER:
    return uint_option(c, a, 1, UINT32_MAX, &g->number);
  case O_REPEAT:
    return uint_option(c, a, 1, 100000, &g->repeat);
  case O_MINMS:
    return kc_parse_decimal(a, &g->min_repeat_ms) < 0 ? bad_value(c, a) : 0;
  case O_COOL:
    return kc_parse_decimal(a, &g->cooldown_ms) < 0 ? bad_value(c, a) : 0;
  case O_FLUSH:
    g->flush_cache = true;
    return 0;
  case O_WORKERS:
    return uint_option(c, a, 1, 64, &g->workers);
  case O_TIMEOUT:
    if (kc_parse_decimal(a, &g->timeout_s) < 0 || g->timeout_s <= 0)
      return bad_value(c, a);
    return 0;
  case O_MEMORY:
    return parse_memory("memory", a, &g->memory_bytes) < 0 ? KC_EXIT_USAGE : 0;
  case O_SETS:
    return uint_option(c, a, 1, 64, &g->sets);
  case O_CHECKS:
    return uint_option(c, a, 1, 16, &g->checks);
  case O_BUDGET:
    if (kc_parse_decimal(a, &g->budget_s) < 0)
      return bad_value(c, a);
    if (g->budget_s == 0)
      g->budget_s = -1; /* none */
    return 0;
  case O_MAXCV:
    return kc_parse_decimal(a, &g->max_cv) < 0 || g->max_cv <= 0 ? bad_value(c, a) : 0;
  case O_CPU:
    g->pin_cpu = true;
    return uint_option(c, a, 0, 1u << 20, &g->cpu);
  }
  return NOT_MINE;
}

/* What is printed: --help, --json, --quiet. */
static int output_option(bench_args *b, int c, const char *a) {
  switch (c) {
  case 'h':
  case O_HELP:
    usage(stdout);
    return -1;
  case KC_OPT_VERSION:
    kc_cli_print_version();
    return -1;
  case O_JSON:
    b->json_path = a;
    return 0;
  case O_QUIET:
    b->quiet = true;
    return 0;
  }
  return NOT_MINE;
}

static int bench_option(bench_args *b, int c, const char *a, char **argv) {
  static int (*const groups[])(bench_args *, int, const char *) = {
      problem_option, timing_option, build_or_remote_option, output_option};
  for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
    int rc = groups[i](b, c, a);
    if (rc != NOT_MINE)
      return rc;
  }
  if (optopt)
    kc_cli_error("bench", "option -%c: unknown or missing its value (see --help)", optopt);
  else
    kc_cli_error("bench", "%s: unknown option or missing value (see --help)", argv[optind - 1]);
  return KC_EXIT_USAGE;
}

/* What the options must hold together, and the kernels named: 0, or the exit status. */
static int check_usage(const bench_args *b, kc_auth_key *auth, int argc, char **argv) {
  const kc_measure_config *cfg = &b->cfg;
  if (!cfg->args) {
    kc_cli_error("bench",
                 "--args is required (e.g. --args 'f32[64,64] f32[64,64] f32[64,64]:out')");
    return KC_EXIT_USAGE;
  }
  kc_args_spec spec;
  kc_error err = {0};
  if (kc_args_parse(cfg->args, &spec, &err) < 0) {
    kc_cli_error("bench", "--args: %s", err.msg);
    return KC_EXIT_USAGE;
  }
  if (optind >= argc) {
    kc_cli_error("bench", "no KERNEL given (see --help)");
    return KC_EXIT_USAGE;
  }
  if (cfg->tracker && cfg->no_isolation) {
    kc_cli_error("bench", "--no-isolation is for local runs: an agent sandboxes every kernel");
    return KC_EXIT_USAGE;
  }
  if (cfg->tracker && cfg->pin_cpu) {
    kc_cli_error("bench", "--cpu is for local runs: an agent places its own workers");
    return KC_EXIT_USAGE;
  }
  if (cfg->tracker && !cfg->key) {
    kc_cli_error("bench", "--tracker needs --key");
    return KC_EXIT_USAGE;
  }
  if (cfg->n_session_constructor_args && !cfg->tracker) {
    kc_cli_error("bench", "--session-constructor is for remote devices (--tracker)");
    return KC_EXIT_USAGE;
  }
  if (b->auth_path && !cfg->tracker) {
    kc_cli_error("bench", "--auth-key is for remote devices (--tracker)");
    return KC_EXIT_USAGE;
  }
  if (b->auth_path && kc_auth_key_load(b->auth_path, auth, &err) < 0) {
    kc_cli_error("bench", "%s", err.msg);
    return KC_EXIT_USAGE;
  }
  for (int i = optind; i < argc; i++)
    if (access(argv[i], R_OK) < 0) {
      kc_cli_error("bench", "%s: %s", argv[i], strerror(errno));
      return KC_EXIT_USAGE;
    }
  return 0;
}

/* --json PATH ("-": stdout) opened for the records; NULL (and the error printed). */
static FILE *open_json(const char *path) {
  FILE *jf = strcmp(path, "-") ? fopen(path, "w") : stdout;
  if (!jf)
    kc_cli_error("bench", "--json %s: %s", path, strerror(errno));
  return jf;
}

static void close_json(FILE *jf) {
  if (jf && jf != stdout)
    fclose(jf);
}

/* The batch, here or on the tracker's device.  Local runs stop cleanly on a signal; a
 * remote run is left to the default action (the agent sees the session drop and kills
 * its own workers). */
static int run_batch(const kc_measure_config *cfg, const kc_auth_key *auth,
                     const char *const *kernels, size_t nk, json_t **recs, json_t **ref,
                     kc_error *err) {
  if (cfg->tracker)
    return kc_measure_remote_run(cfg, auth, kernels, nk, recs, err);
  struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int rc = kc_measure_run_batch_ex(cfg, kernels, nk, recs, ref, err);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  return rc;
}

static void print_table(const bench_args *b, json_t *recs, json_t *ref) {
  kc_measure_table_opts o = {.verified = b->cfg.reference != NULL, .colour = kc_cli_colour(stdout)};
  kc_measure_table_print(stdout, recs, ref, &o);
}

/* A batch that did not finish: interrupted (what finished is on the file already; the
 * table shows the same), or refused. */
static int batch_failed(const bench_args *b, const sink *k, size_t nk, const kc_error *err) {
  int sig = kc_measure_interrupted();
  kc_measure_progress_end(k->progress);
  if (sig) {
    if (!b->quiet && k->jf != stdout)
      print_table(b, k->done, NULL);
    kc_cli_error("bench", "interrupted by %s: %zu of %zu kernels done", kc_signal_name(sig),
                 json_array_size(k->done), nk);
    close_json(k->jf);
    return 128 + sig;
  }
  kc_cli_error("bench", "%s", err->msg);
  close_json(k->jf);
  return b->cfg.tracker || !input_error(err) ? KC_EXIT_BENCH_FAILED : KC_EXIT_USAGE;
}

/* The table, and the records of a remote run (not streamed: all at once).  Returns
 * the exit status: 0, or KC_EXIT_BENCH_FAILED when --json could not be written (a
 * caller reading the file must not take a truncated one for the whole batch). */
static int report(const bench_args *b, sink *k, json_t *recs, json_t *ref) {
  kc_measure_progress_end(k->progress);
  if (!b->quiet && k->jf != stdout)
    print_table(b, recs, ref);
  else if (!b->cfg.reference)
    fprintf(stderr, "kcage: bench: warning: no --reference: nothing was verified, `ok` means "
                    "only that a kernel ran\n");
  k->progress = NULL;
  if (k->jf && json_array_size(k->done) == 0) {
    size_t i;
    json_t *r;
    json_array_foreach(recs, i, r) on_record(k, r);
  }
  if (!k->jf)
    return 0;
  bool failed = k->failed;
  int e = k->errno_;
  if (k->jf != stdout ? fclose(k->jf) != 0 : fflush(k->jf) != 0) {
    e = failed ? e : errno;
    failed = true;
  }
  if (!failed)
    return 0;
  kc_cli_error("bench", "--json %s: cannot write the records: %s", b->json_path,
               strerror(e ? e : EIO));
  return KC_EXIT_BENCH_FAILED;
}

int kc_cmd_bench(int argc, char **argv) {
  bench_args b = {0};
  kc_measure_config_init(&b.cfg);
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    int rc = bench_option(&b, c, optarg, argv);
    if (rc)
      return rc < 0 ? 0 : rc;
  }
  static kc_auth_key auth;
  int rc = check_usage(&b, &auth, argc, argv);
  if (rc)
    return rc;
  FILE *jf = NULL;
  if (b.json_path && !(jf = open_json(b.json_path)))
    return KC_EXIT_USAGE;
  kc_measure_config *cfg = &b.cfg;
  const char *const *kernels = (const char *const *)argv + optind;
  size_t nk = (size_t)(argc - optind);
  kc_measure_progress prog;
  kc_measure_progress_init(&prog, nk, isatty(STDERR_FILENO));
  prog.quiet = b.quiet;
  if (prog.tty && !b.quiet) {
    cfg->progress = kc_measure_progress_step;
    cfg->on_start = kc_measure_progress_start;
    cfg->progress_ctx = &prog;
  }
  kc_error err = {0};
  /* What the machinery needs is checked once, up front: a failure is one line and exit
   * 3, not an error record per kernel. */
  if (!cfg->tracker && preflight(cfg, kernels, nk, &err) < 0) {
    kc_cli_error("bench", "%s", err.msg);
    close_json(jf);
    return KC_EXIT_BENCH_FAILED;
  }
  sink k = {.jf = jf, .progress = &prog, .done = json_array()};
  cfg->on_record = on_record;
  cfg->record_ctx = &k;
  json_t *recs = NULL, *ref = NULL;
  if (run_batch(cfg, &auth, kernels, nk, &recs, &ref, &err) < 0)
    rc = batch_failed(&b, &k, nk, &err);
  else
    rc = report(&b, &k, recs, ref);
  json_decref(k.done);
  json_decref(recs);
  json_decref(ref);
  return rc;
}
