/* The `kcage` command: dispatches to one file per subcommand (cli/<name>.c, each
 * defining kc_cmd_<name>, declared in cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#define KC_SUBCOMMANDS(X)                                                                          \
  X(run, "run one program in a fresh sandbox")                                                     \
  X(bench, "build and time candidate kernels (the main job)")                                      \
  X(policy, "check or show sandbox policies")                                                      \
  X(tracker, "run a TVM-compatible RPC tracker")                                                   \
  X(agent, "serve kcage sessions for a tracker (a device agent)")                                  \
  X(query, "print a tracker's queue status, like TVM's query_rpc_tracker")

struct subcommand {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
};

static void usage(FILE *out, const struct subcommand *cmds, size_t n) {
  fprintf(out, "usage: kcage <command> [OPTIONS]\n\ncommands:\n");
  for (size_t i = 0; i < n; i++)
    fprintf(out, "  %-8s %s\n", cmds[i].name, cmds[i].help);
  fprintf(out, "\n`kcage <command> --help` describes each command.\n");
}

int main(int argc, char **argv) {
  const struct subcommand cmds[] = {
#define X(name, help) {#name, kc_cmd_##name, help},
      KC_SUBCOMMANDS(X)
#undef X
  };
  size_t n = sizeof cmds / sizeof cmds[0];
  if (argc < 2) {
    usage(stderr, cmds, n);
    return KC_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout, cmds, n);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    kc_cli_print_version();
    return 0;
  }
  for (size_t i = 0; i < n; i++)
    if (!strcmp(argv[1], cmds[i].name))
      return cmds[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "kcage: %s: unknown command (see `kcage --help`)\n", argv[1]);
  return KC_EXIT_USAGE;
}
