/* Shared by the subcommand files of the `kcage` command. */
#ifndef KCAGE_CLI_H
#define KCAGE_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kcage/error.h"
#include "kcage/settings.h"
#include "kcage/units.h"

/* Errors go to stderr as `kcage: <what>: <why>`; exit 2 on bad usage.  `kcage run`
 * is the exception: its program's own status 2 must stay distinguishable, so its usage
 * errors exit 125, like every other failure of kcage itself there. */
#define KC_EXIT_USAGE 2
#define KC_EXIT_RUN_FAILED 125
/* `kcage bench`: its own machinery could not run the batch (cache dir, compiler,
 * policies, sandbox, tracker or agent), as opposed to bad input (2). */
#define KC_EXIT_BENCH_FAILED 3

/* The subcommands, one file each (cli/cmd_<name>.c); argv[0] is the subcommand's name. */
int kc_cmd_run(int argc, char **argv);
int kc_cmd_bench(int argc, char **argv);
int kc_cmd_policy(int argc, char **argv);
int kc_cmd_tracker(int argc, char **argv);
int kc_cmd_agent(int argc, char **argv);
int kc_cmd_query(int argc, char **argv);

void kc_cli_error(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A TCP port option in [min, 65535]; on bad input prints `kcage: CMD: OPT VALUE: not a
 * port` and returns -1 (the caller exits KC_EXIT_USAGE). */
int kc_cli_parse_port(const char *cmd, const char *opt, const char *s, unsigned min, uint16_t *out);
/* Non-negative integer within [min, max].  Returns -1 on bad input. */
int kc_cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* limits.c: --limits-fallback rlimit|none (prints the usage error, returns -1), and
 * the record's "limits" object: how each requested limit is enforced ("cgroup",
 * "rlimit"; null when it would be refused). */
int kc_cli_limits_fallback(const char *cmd, const char *arg, kc_settings *s);
json_t *kc_cli_limits_json(const kc_settings *s, bool memory, bool pids, bool cpus);
/* --cgroup auto|v1|v2|hybrid|none (kcage run): the command's cgroup mode; a mode the
 * host cannot provide is refused, never replaced.  --sandbox-ids BASE:COUNT: the host
 * ids of root's sandboxes.  Each fills s, or prints its one-line error and returns -1. */
int kc_cli_cgroup_mode(const char *cmd, const char *arg, kc_settings *s);
int kc_cli_sandbox_ids(const char *cmd, const char *arg, kc_settings *s);
/* record (a JSON object's text) with "limits" added; malloc'd, NULL on failure. */
char *kc_cli_record_with_limits(const kc_settings *s, const char *record, bool memory, bool pids,
                                bool cpus);

/* cmd_daemon.c: a bound daemon (`kcage tracker`, `kcage agent`) served until SIGINT or
 * SIGTERM calls stop: prints `CMD listening on HOST:PORT`, serves --metrics HOST:PORT
 * (metrics: NULL for none) and runs.  0, or 1 with the error printed; the caller frees
 * obj. */
typedef struct kc_cli_daemon {
  const char *cmd, *host; /* host NULL: 0.0.0.0 */
  unsigned port;
  const char *metrics, *metrics_prefix;
  void *obj;
  void (*stop)(void *obj); /* from the signal handler: async-signal-safe */
  int (*run)(void *obj, kc_error *err);
} kc_cli_daemon;
int kc_cli_serve(const kc_cli_daemon *d);

/* --version, in every subcommand's option table: `kcage VERSION` on stdout. */
#define KC_OPT_VERSION 'V'
#define KC_OPTION_VERSION                                                                          \
  { "version", 0, 0, KC_OPT_VERSION }
void kc_cli_print_version(void);

/* The end of an option loop: -h/--help (ch 'h') prints usage on stdout and returns 0,
 * --version prints the version and returns 0; anything else prints usage on stderr and
 * returns KC_EXIT_USAGE. */
int kc_cli_help_or_usage(int ch, void (*usage)(FILE *out));
/* Operands left after the options of a command that takes none: the first is named and
 * KC_EXIT_USAGE returned; 0 when there are none. */
int kc_cli_no_operands(const char *cmd, int argc, char **argv);

/* bench_table.c, bench_summary.c: `kcage bench`'s table on out, one row per record,
 * then the summary line(s).  verified: the batch had a reference; colour: SGR colours
 * (a terminal, NO_COLOR unset). */
typedef struct kc_measure_table_opts {
  bool verified, colour;
} kc_measure_table_opts;
void kc_measure_table_print(FILE *out, json_t *recs, json_t *ref, const kc_measure_table_opts *o);
void kc_measure_summary_print(FILE *out, json_t *recs, const kc_measure_table_opts *o);
/* "803.660 us": s in the unit that suits it (s, ms, us, ns). */
void kc_cli_fmt_seconds(char *buf, size_t len, double s);
/* Terminal cells UTF-8 text takes (a byte that does not decode counts one). */
size_t kc_cli_display_width(const char *s);
/* Whether out gets colours: a terminal, NO_COLOR unset or empty, TERM not dumb. */
bool kc_cli_colour(FILE *out);

/* bench_progress.c: progress on stderr, redrawn on a terminal, one line per finished
 * kernel elsewhere.  start and step are kc_measure_config's on_start and progress. */
typedef struct kc_measure_progress {
  bool tty, quiet, drawn;
  size_t kernels, done;
  double phase_t0;
  char phase[16];
  char current[64];
} kc_measure_progress;
void kc_measure_progress_init(kc_measure_progress *p, size_t kernels, bool tty);
void kc_measure_progress_start(void *ctx, const char *kernel);
void kc_measure_progress_step(void *ctx, const char *phase, size_t done, size_t total);
void kc_measure_progress_record(kc_measure_progress *p, const json_t *rec);
void kc_measure_progress_end(kc_measure_progress *p);

#endif
