/* Shared by the subcommand files of the `kcage` command. */
#ifndef KCAGE_CLI_H
#define KCAGE_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Errors go to stderr as `kcage: <what>: <why>`; exit 2 on bad usage.  `kcage run`
 * is the exception: its program's own status 2 must stay distinguishable, so its usage
 * errors exit 125, like every other failure of kcage itself there. */
#define KC_EXIT_USAGE 2
#define KC_EXIT_RUN_FAILED 125
/* `kcage bench`: its own machinery could not run the batch (cache dir, compiler,
 * policies, sandbox, tracker or agent), as opposed to bad input (2). */
#define KC_EXIT_BENCH_FAILED 3

/* The subcommands, one file each (cli/<name>.c); argv[0] is the subcommand's name. */
int kc_cmd_run(int argc, char **argv);
int kc_cmd_bench(int argc, char **argv);
int kc_cmd_policy(int argc, char **argv);
int kc_cmd_tracker(int argc, char **argv);
int kc_cmd_agent(int argc, char **argv);
int kc_cmd_query(int argc, char **argv);

void kc_cli_error(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "64M", "1G", "512K", "1048576" -> bytes.  Returns -1 on bad input. */
int kc_cli_parse_size(const char *s, uint64_t *out);
/* Non-negative decimal seconds, fractional allowed.  Returns -1 on bad input. */
int kc_cli_parse_seconds(const char *s, double *out);
/* A TCP port option in [min, 65535]; on bad input prints `kcage: CMD: OPT VALUE: not a
 * port` and returns -1 (the caller exits KC_EXIT_USAGE). */
int kc_cli_parse_port(const char *cmd, const char *opt, const char *s, unsigned min, uint16_t *out);
/* Non-negative integer within [min, max].  Returns -1 on bad input. */
int kc_cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* limits.c: --limits-fallback rlimit|none (prints the usage error, returns -1), and
 * the record's "limits" object: how each requested limit is enforced ("cgroup",
 * "rlimit"; null when it would be refused). */
int kc_cli_limits_fallback(const char *cmd, const char *arg);
json_t *kc_cli_limits_json(bool memory, bool pids, bool cpus);
/* record (a JSON object's text) with "limits" added; malloc'd, NULL on failure. */
char *kc_cli_record_with_limits(const char *record, bool memory, bool pids, bool cpus);

/* metrics.c: --metrics HOST:PORT for a daemon (NULL: none).  Prints
 * `metrics listening on HOST:PORT`; -1 (and the error printed) when it cannot. */
int kc_cli_metrics(const char *cmd, const char *hostport, const char *prefix);

#endif
