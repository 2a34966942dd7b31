/* `kcage run [OPTIONS] -- PROGRAM [ARG...]`: one program in a fresh sandbox, with the
 * result record of docs/contracts.md. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"
#include "kcage/cgroup.h"
#include "kcage/cleanup.h"
#include "kcage/policy.h"
#include "kcage/sandbox.h"

static const char usage_text[] =
    "usage: kcage run [OPTIONS] -- PROGRAM [ARG...]\n"
    "\n"
    "Run PROGRAM in a fresh sandbox (user, pid, mount, ipc, uts, cgroup and network\n"
    "namespaces; tmpfs root with read-only /usr; no capabilities; seccomp policy) and\n"
    "report exactly how it ended.\n"
    "\n"
    "options:\n"
    "  --policy NAME|FILE   sandbox policy (default: exec)\n"
    "  --memory SIZE        memory limit, swap off (K/M/G suffixes)\n"
    "  --time SEC           CPU time limit of the whole process tree (fractional)\n"
    "  --wall SEC           wall-clock limit (fractional)\n"
    "  --pids N             process/thread limit\n"
    "  --cpus X             CPU bandwidth, in CPUs (e.g. 0.5)\n"
    "  --output SIZE        cap on captured stdout+stderr\n"
    "  --ro-bind SRC[:DST]  bind a host path read-only\n"
    "  --bind SRC[:DST]     bind a host path read-write\n"
    "  --tmpfs DST[:SIZE]   a tmpfs at DST\n"
    "  --cwd DIR            working directory inside (default /)\n"
    "  --env K=V            add an environment variable (repeatable; the environment\n"
    "                       is otherwise PATH, HOME=/tmp, LANG=C.UTF-8)\n"
    "  --report FILE|-      write the result record as one JSON object ('-' = stdout,\n"
    "                       after the program's own output)\n"
    "  --limits-fallback rlimit\n"
    "                       where no delegated cgroup can hold --memory/--pids, enforce\n"
    "                       them as rlimits (RLIMIT_AS per process, RLIMIT_NPROC) instead\n"
    "                       of refusing to run; the record's \"limits\" names which\n"
    "  --cgroup MODE        cgroup layout to use: auto (default: the best the host has),\n"
    "                       v1, v2, hybrid or none (no cgroup: --memory/--pids/--cpus are\n"
    "                       refused unless --limits-fallback rlimit); a mode the host\n"
    "                       cannot provide is an error\n"
    "  --sandbox-ids BASE:COUNT\n"
    "                       as root, the host ids sandboxes run as (default\n"
    "                       1500000000:65536); no account may use them\n"
    "  -h, --help           this text\n"
    "  --version            print kcage's version\n"
    "\n"
    "exit status: the program's own; 128+N when killed by signal N; 124 when a time\n"
    "limit fired; 125 when kcage failed (bad usage included); 126/127 program not\n"
    "executable / not found; 137 for a memory/pids/output/syscall verdict of a\n"
    "program that itself exited 0.\n"
    "The result record: status (ok exited signaled timeout memory syscall pids output\n"
    "setup_error), exit_code, signal, signal_name, syscall, limit, cpu_s, wall_s,\n"
    "peak_memory_bytes, message.\n";

enum {
  OPT_POLICY = 256,
  OPT_MEMORY,
  OPT_TIME,
  OPT_WALL,
  OPT_PIDS,
  OPT_CPUS,
  OPT_OUTPUT,
  OPT_RO_BIND,
  OPT_BIND,
  OPT_TMPFS,
  OPT_CWD,
  OPT_ENV,
  OPT_REPORT,
  OPT_LIMITS_FALLBACK,
  OPT_CGROUP,
  OPT_SANDBOX_IDS,
};

static const struct option long_opts[] = {
    {"policy", required_argument, NULL, OPT_POLICY},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"time", required_argument, NULL, OPT_TIME},
    {"wall", required_argument, NULL, OPT_WALL},
    {"pids", required_argument, NULL, OPT_PIDS},
    {"cpus", required_argument, NULL, OPT_CPUS},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"ro-bind", required_argument, NULL, OPT_RO_BIND},
    {"bind", required_argument, NULL, OPT_BIND},
    {"tmpfs", required_argument, NULL, OPT_TMPFS},
    {"cwd", required_argument, NULL, OPT_CWD},
    {"env", required_argument, NULL, OPT_ENV},
    {"report", required_argument, NULL, OPT_REPORT},
    {"limits-fallback", required_argument, NULL, OPT_LIMITS_FALLBACK},
    {"cgroup", required_argument, NULL, OPT_CGROUP},
    {"sandbox-ids", required_argument, NULL, OPT_SANDBOX_IDS},
    {"help", no_argument, NULL, 'h'},
    KC_OPTION_VERSION,
    {NULL, 0, NULL, 0},
};

static int bad(const char *opt, const char *val) {
  kc_cli_error("run", "invalid value for --%s: '%s' (see `kcage run --help`)", opt, val);
  return KC_EXIT_RUN_FAILED;
}

typedef struct run_args {
  kc_sandbox_config cfg;
  const char *policy_name, *report;
  kc_mount *mounts;
  char **env;
  size_t n_mounts, n_env;
} run_args;

/* --ro-bind/--bind SRC[:DST] and --tmpfs DST[:SIZE]. */
static int parse_mount(run_args *a, int c, char *arg) {
  const char *opt = c == OPT_RO_BIND ? "ro-bind" : c == OPT_BIND ? "bind" : "tmpfs";
  kc_mount *m = &a->mounts[a->n_mounts++];
  char *colon = strchr(arg, ':');
  if (colon)
    *colon = '\0';
  if (c == OPT_TMPFS) {
    m->kind = KC_MOUNT_TMPFS;
    if (colon && (kc_parse_size(colon + 1, &m->size) < 0 || m->size == 0))
      return bad(opt, colon + 1);
    m->dst = arg;
    return m->dst[0] == '/' ? 0 : bad(opt, arg);
  }
  m->kind = c == OPT_RO_BIND ? KC_MOUNT_RO_BIND : KC_MOUNT_BIND;
  m->src = arg;
  m->dst = colon ? colon + 1 : arg;
  return *m->src && m->dst[0] == '/' ? 0 : bad(opt, arg);
}

/* A limit option into cfg.limits; 0, or the exit status of a bad value. */
static int parse_limit(run_args *a, int c, const char *arg) {
  kc_limits *l = &a->cfg.limits;
  uint64_t u;
  double d;
  switch (c) {
  case OPT_MEMORY:
    if (kc_parse_size(arg, &u) < 0 || u == 0)
      return bad("memory", arg);
    l->memory_bytes = u;
    return 0;
  case OPT_TIME:
  case OPT_WALL:
    if (kc_parse_decimal(arg, &d) < 0 || d <= 0)
      return bad(c == OPT_TIME ? "time" : "wall", arg);
    *(c == OPT_TIME ? &l->cpu_s : &l->wall_s) = d;
    return 0;
  case OPT_PIDS:
    if (kc_cli_parse_uint(arg, 1, 1u << 22, &u) < 0)
      return bad("pids", arg);
    l->pids = (uint32_t)u;
    return 0;
  case OPT_CPUS:
    if (kc_parse_decimal(arg, &d) < 0 || d <= 0 || d > 4096)
      return bad("cpus", arg);
    l->cpus = d;
    return 0;
  default: /* OPT_OUTPUT */
    if (kc_parse_size(arg, &u) < 0)
      return bad("output", arg);
    l->output_bytes = u;
    return 0;
  }
}

/* One option; 0, -1 for --help (printed), or the exit status of bad usage. */
static int parse_option(run_args *a, int c, char **argv) {
  switch (c) {
  case 'h':
    fputs(usage_text, stdout);
    return -1;
  case KC_OPT_VERSION:
    kc_cli_print_version();
    return -1;
  case OPT_POLICY:
    a->policy_name = optarg;
    return 0;
  case OPT_MEMORY:
  case OPT_TIME:
  case OPT_WALL:
  case OPT_PIDS:
  case OPT_CPUS:
  case OPT_OUTPUT:
    return parse_limit(a, c, optarg);
  case OPT_RO_BIND:
  case OPT_BIND:
  case OPT_TMPFS:
    return parse_mount(a, c, optarg);
  case OPT_CWD:
    if (optarg[0] != '/')
      return bad("cwd", optarg);
    a->cfg.cwd = optarg;
    return 0;
  case OPT_ENV:
    if (!strchr(optarg, '=') || optarg[0] == '=')
      return bad("env", optarg);
    a->env[a->n_env++] = optarg;
    return 0;
  case OPT_REPORT:
    a->report = optarg;
    return 0;
  case OPT_LIMITS_FALLBACK:
    return kc_cli_limits_fallback("run", optarg, &a->cfg.settings) < 0 ? KC_EXIT_RUN_FAILED : 0;
  case OPT_CGROUP:
    return kc_cli_cgroup_mode("run", optarg, &a->cfg.settings) < 0 ? KC_EXIT_RUN_FAILED : 0;
  case OPT_SANDBOX_IDS:
    return kc_cli_sandbox_ids("run", optarg, &a->cfg.settings) < 0 ? KC_EXIT_RUN_FAILED : 0;
  default:
    kc_cli_error("run", "unknown or incomplete option '%s' (see `kcage run --help`)",
                 argv[optind - 1]);
    return KC_EXIT_RUN_FAILED;
  }
}

/* The default environment, unless --env replaced a variable of it. */
static void default_env(run_args *a) {
  static const char *const defaults[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                         "LANG=C.UTF-8"};
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
    size_t klen = (size_t)(strchr(defaults[i], '=') - defaults[i]) + 1;
    bool set = false;
    for (size_t j = 0; j < a->n_env; j++)
      if (!strncmp(a->env[j], defaults[i], klen))
        set = true;
    if (!set)
      a->env[a->n_env++] = (char *)defaults[i];
  }
}

/* Spawn and wait.  Interrupted: the tree is killed and cleaned up (cgroups, mounts)
 * rather than left to PDEATHSIG and the next start's reaping; *sig is the signal.
 * Returns 0 with res filled, or -1 when waiting itself failed (err). */
static int run_sandbox(kc_sandbox_config *cfg, kc_result *res, int *sig, kc_error *err) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigprocmask(SIG_BLOCK, &stop, NULL);
  /* A closed stdout (e.g. `| head`) must not kill kcage before it cleaned up; the
   * program itself gets default signal dispositions back. */
  signal(SIGPIPE, SIG_IGN);
  kc_cleanup_close int sfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
  cfg->cancel_fd = sfd;
  /* The host's cgroup layout, read before the clone: after it, every page this
   * process writes is a copy-on-write fault (mountinfo parsing and its heap churn
   * cost ~40 of them), and the read of our mountinfo would contend with the child's
   * mounts for the kernel's namespace lock. */
  kc_cgroup_mode_for(&cfg->settings);
  kc_sandbox *sb = NULL;
  *sig = 0;
  if (kc_sandbox_spawn(cfg, &sb, err) < 0) {
    kc_result_init(res);
    res->status = KC_STATUS_SETUP_ERROR;
    snprintf(res->message, sizeof res->message, "%.*s", (int)sizeof res->message - 1, err->msg);
    return 0;
  }
  /* Leftovers of a kcage that was SIGKILLed, reaped while the sandbox sets itself up
   * (off the start-up path: the child builds its file system meanwhile; our own
   * cgroup's owner is alive). */
  kc_error ignored;
  kc_cgroup_reap_stale(&ignored);
  int wrc = kc_sandbox_wait(sb, res, err);
  kc_sandbox_free(sb);
  struct signalfd_siginfo ssi;
  if (sfd >= 0 && read(sfd, &ssi, sizeof ssi) == (ssize_t)sizeof ssi)
    *sig = (int)ssi.ssi_signo;
  return wrc;
}

/* --report FILE|-: the record, with how each limit was held. */
static int write_report(const char *report, const kc_result *res, const kc_sandbox_config *cfg) {
  const kc_limits *lim = &cfg->limits;
  kc_error err = {0};
  kc_cleanup_free char *json = NULL;
  if (kc_result_to_json(res, &json, &err) < 0) {
    kc_cli_error("run", "report: %s", err.msg);
    return -1;
  }
  char *with =
      kc_cli_record_with_limits(&cfg->settings, json, lim->memory_bytes, lim->pids, lim->cpus > 0);
  if (with) {
    free(json);
    json = with;
  }
  FILE *f = strcmp(report, "-") ? fopen(report, "w") : stdout;
  if (!f) {
    kc_cli_error("run", "report %s: %s", report, strerror(errno));
    return -1;
  }
  fprintf(f, "%s\n", json);
  if (f != stdout ? fclose(f) != 0 : fflush(f) != 0) {
    kc_cli_error("run", "report %s: %s", report, strerror(errno));
    return -1;
  }
  return 0;
}

/* A limit or the policy ended the program: said on stderr in one line, with the exit
 * status it gives, whether or not --report asked for the record (an exit of 124 or 137
 * alone does not say which limit). */
static void say_verdict(const kc_result *res, int rc) {
  switch (res->status) {
  case KC_STATUS_TIMEOUT:
  case KC_STATUS_MEMORY:
  case KC_STATUS_SYSCALL:
  case KC_STATUS_PIDS:
  case KC_STATUS_OUTPUT:
    kc_cli_error("run", "%s: %s (exit %d)", kc_status_name(res->status),
                 res->message[0] ? res->message : "limit reached", rc);
    break;
  default:
    break;
  }
}

static int run_parsed(run_args *a, char **prog) {
  kc_policy *policy = NULL;
  kc_error err = {0};
  if (kc_policy_load_in(&a->cfg.settings, a->policy_name, &policy, &err) < 0) {
    kc_cli_error("run", "%s", err.msg); /* the loader names the policy */
    return KC_EXIT_RUN_FAILED;
  }
  a->cfg.policy = policy;
  a->cfg.mounts = a->mounts;
  a->cfg.n_mounts = a->n_mounts;
  a->cfg.argv = prog;
  a->cfg.envp = a->env;
  a->cfg.stdin_fd = 0;
  a->cfg.stdout_fd = 1;
  a->cfg.stderr_fd = 2;
  kc_result res;
  int sig;
  int wrc = run_sandbox(&a->cfg, &res, &sig, &err);
  kc_policy_free(policy);
  if (wrc < 0) {
    kc_cli_error("run", "%s", err.msg);
    return KC_EXIT_RUN_FAILED;
  }
  int rc = sig ? 128 + sig : kc_result_exit_status(&res);
  if (res.status == KC_STATUS_SETUP_ERROR)
    kc_cli_error("run", "%s", res.message);
  else if (!sig)
    say_verdict(&res, rc);
  if (a->report && write_report(a->report, &res, &a->cfg) < 0)
    rc = KC_EXIT_RUN_FAILED;
  return rc;
}

int kc_cmd_run(int argc, char **argv) {
  run_args a = {.policy_name = "exec"};
  kc_sandbox_config_init(&a.cfg);
  kc_cleanup_free kc_mount *mounts = calloc((size_t)argc, sizeof *mounts);
  kc_cleanup_free char **env = calloc((size_t)argc + 4, sizeof *env);
  if (!mounts || !env) {
    kc_cli_error("run", "out of memory");
    return KC_EXIT_RUN_FAILED;
  }
  a.mounts = mounts;
  a.env = env;
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "+h", long_opts, NULL)) != -1) {
    int rc = parse_option(&a, c, argv);
    if (rc)
      return rc < 0 ? 0 : rc;
  }
  if (optind >= argc) {
    kc_cli_error("run", "no program given (usage: kcage run [OPTIONS] -- PROGRAM [ARG...])");
    return KC_EXIT_RUN_FAILED;
  }
  default_env(&a);
  return run_parsed(&a, argv + optind);
}
