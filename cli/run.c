/* `kcage run [OPTIONS] -- PROGRAM [ARG...]`: one program in a fresh sandbox, with the
 * result record of DESIGN.md §3.1. */
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
    "  -h, --help           this text\n"
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
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int bad(const char *opt, const char *val) {
  kc_cli_error("run", "invalid value for --%s: '%s' (see `kcage run --help`)", opt, val);
  return KC_EXIT_RUN_FAILED;
}

int kc_cmd_run(int argc, char **argv) {
  const char *policy_name = "exec", *report = NULL;
  kc_sandbox_config cfg;
  kc_sandbox_config_init(&cfg);
  kc_mount *mounts = calloc((size_t)argc, sizeof *mounts);
  char **env = calloc((size_t)argc + 4, sizeof *env);
  if (!mounts || !env) {
    kc_cli_error("run", "out of memory");
    return KC_EXIT_RUN_FAILED;
  }
  size_t n_mounts = 0, n_env = 0;
  int rc = KC_EXIT_RUN_FAILED;
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "+h", long_opts, NULL)) != -1) {
    uint64_t u;
    double d;
    switch (c) {
    case 'h':
      fputs(usage_text, stdout);
      rc = 0;
      goto done;
    case OPT_POLICY:
      policy_name = optarg;
      break;
    case OPT_MEMORY:
      if (kc_cli_parse_size(optarg, &u) < 0 || u == 0) {
        rc = bad("memory", optarg);
        goto done;
      }
      cfg.limits.memory_bytes = u;
      break;
    case OPT_TIME:
    case OPT_WALL:
      if (kc_cli_parse_seconds(optarg, &d) < 0 || d <= 0) {
        rc = bad(c == OPT_TIME ? "time" : "wall", optarg);
        goto done;
      }
      *(c == OPT_TIME ? &cfg.limits.cpu_s : &cfg.limits.wall_s) = d;
      break;
    case OPT_PIDS:
      if (kc_cli_parse_uint(optarg, 1, 1u << 22, &u) < 0) {
        rc = bad("pids", optarg);
        goto done;
      }
      cfg.limits.pids = (uint32_t)u;
      break;
    case OPT_CPUS:
      if (kc_cli_parse_seconds(optarg, &d) < 0 || d <= 0 || d > 4096) {
        rc = bad("cpus", optarg);
        goto done;
      }
      cfg.limits.cpus = d;
      break;
    case OPT_OUTPUT:
      if (kc_cli_parse_size(optarg, &u) < 0) {
        rc = bad("output", optarg);
        goto done;
      }
      cfg.limits.output_bytes = u;
      break;
    case OPT_RO_BIND:
    case OPT_BIND: {
      kc_mount *m = &mounts[n_mounts++];
      m->kind = c == OPT_RO_BIND ? KC_MOUNT_RO_BIND : KC_MOUNT_BIND;
      char *colon = strchr(optarg, ':');
      if (colon)
        *colon = '\0';
      m->src = optarg;
      m->dst = colon ? colon + 1 : optarg;
      if (!*m->src || m->dst[0] != '/') {
        rc = bad(c == OPT_RO_BIND ? "ro-bind" : "bind", optarg);
        goto done;
      }
      break;
    }
    case OPT_TMPFS: {
      kc_mount *m = &mounts[n_mounts++];
      m->kind = KC_MOUNT_TMPFS;
      char *colon = strchr(optarg, ':');
      if (colon) {
        *colon = '\0';
        if (kc_cli_parse_size(colon + 1, &m->size) < 0 || m->size == 0) {
          rc = bad("tmpfs", colon + 1);
          goto done;
        }
      }
      m->dst = optarg;
      if (m->dst[0] != '/') {
        rc = bad("tmpfs", optarg);
        goto done;
      }
      break;
    }
    case OPT_CWD:
      if (optarg[0] != '/') {
        rc = bad("cwd", optarg);
        goto done;
      }
      cfg.cwd = optarg;
      break;
    case OPT_ENV:
      if (!strchr(optarg, '=') || optarg[0] == '=') {
        rc = bad("env", optarg);
        goto done;
      }
      env[n_env++] = optarg;
      break;
    case OPT_REPORT:
      report = optarg;
      break;
    case OPT_LIMITS_FALLBACK:
      if (kc_cli_limits_fallback("run", optarg) < 0) {
        rc = KC_EXIT_USAGE;
        goto done;
      }
      break;
    default:
      kc_cli_error("run", "unknown or incomplete option '%s' (see `kcage run --help`)",
                   argv[optind - 1]);
      rc = KC_EXIT_RUN_FAILED;
      goto done;
    }
  }
  if (optind >= argc) {
    kc_cli_error("run", "no program given (usage: kcage run [OPTIONS] -- PROGRAM [ARG...])");
    rc = KC_EXIT_RUN_FAILED;
    goto done;
  }
  /* The default environment, unless --env replaced a variable of it. */
  static const char *const defaults[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                         "LANG=C.UTF-8"};
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
    size_t klen = strchr(defaults[i], '=') - defaults[i] + 1;
    bool set = false;
    for (size_t j = 0; j < n_env; j++)
      if (!strncmp(env[j], defaults[i], klen))
        set = true;
    if (!set)
      env[n_env++] = (char *)defaults[i];
  }

  kc_policy *policy = NULL;
  kc_error err = {0};
  if (kc_policy_load(policy_name, &policy, &err) < 0) {
    kc_cli_error("run", "%s", err.msg); /* the loader names the policy */
    rc = KC_EXIT_RUN_FAILED;
    goto done;
  }
  cfg.policy = policy;
  cfg.mounts = mounts;
  cfg.n_mounts = n_mounts;
  cfg.argv = argv + optind;
  cfg.envp = env;
  cfg.stdin_fd = 0;
  cfg.stdout_fd = 1;
  cfg.stderr_fd = 2;
  /* Interrupted: kill the tree and clean up (cgroups, mounts) rather than die and leave
   * it to PDEATHSIG and the next start's reaping; then exit as killed by that signal. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigprocmask(SIG_BLOCK, &stop, NULL);
  /* A closed stdout (e.g. `| head`) must not kill kcage before it cleaned up; the
   * program itself gets default signal dispositions back. */
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
  cfg.cancel_fd = sfd;
  kc_result res;
  kc_sandbox *sb = NULL;
  if (kc_sandbox_spawn(&cfg, &sb, &err) < 0) {
    kc_result_init(&res);
    res.status = KC_STATUS_SETUP_ERROR;
    snprintf(res.message, sizeof res.message, "%.*s", (int)sizeof res.message - 1, err.msg);
  } else {
    /* Leftovers of a kcage that was SIGKILLed, reaped while the sandbox sets itself up
     * (off the start-up path: the child builds its file system meanwhile; our own
     * cgroup's owner is alive). */
    kc_error ignored;
    kc_cgroup_reap_stale(&ignored);
    int wrc = kc_sandbox_wait(sb, &res, &err);
    kc_sandbox_free(sb);
    if (wrc < 0) {
      kc_cli_error("run", "%s", err.msg);
      kc_policy_free(policy);
      rc = KC_EXIT_RUN_FAILED;
      goto done;
    }
  }
  kc_policy_free(policy);
  rc = kc_result_exit_status(&res);
  struct signalfd_siginfo ssi;
  if (sfd >= 0 && read(sfd, &ssi, sizeof ssi) == (ssize_t)sizeof ssi)
    rc = 128 + (int)ssi.ssi_signo;
  if (sfd >= 0)
    close(sfd);
  if (res.status == KC_STATUS_SETUP_ERROR)
    kc_cli_error("run", "%s", res.message);
  if (report) {
    char *json = NULL;
    if (kc_result_to_json(&res, &json, &err) < 0) {
      kc_cli_error("run", "report: %s", err.msg);
      rc = KC_EXIT_RUN_FAILED;
      goto done;
    }
    char *with = kc_cli_record_with_limits(json, cfg.limits.memory_bytes, cfg.limits.pids,
                                           cfg.limits.cpus > 0);
    if (with) {
      free(json);
      json = with;
    }
    FILE *f = strcmp(report, "-") ? fopen(report, "w") : stdout;
    if (!f) {
      kc_cli_error("run", "report %s: %s", report, strerror(errno));
      free(json);
      rc = KC_EXIT_RUN_FAILED;
      goto done;
    }
    fprintf(f, "%s\n", json);
    if (f != stdout ? fclose(f) != 0 : fflush(f) != 0) {
      kc_cli_error("run", "report %s: %s", report, strerror(errno));
      rc = KC_EXIT_RUN_FAILED;
    }
    free(json);
  }
done:
  free(mounts);
  free(env);
  return rc;
}
