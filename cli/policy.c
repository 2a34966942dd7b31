/* `kcage policy check FILE...` and `kcage policy show NAME|FILE` (docs/contracts.md). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kcage/policy.h"

static void usage(FILE *f) {
  fprintf(f, "usage: kcage policy check FILE|NAME...\n"
             "       kcage policy show [--filter] NAME|FILE\n"
             "\n"
             "check  parse each policy (includes too) and compile its seccomp filter;\n"
             "       prints `FILE: ok` or `FILE:LINE: message`; exit 1 if any is bad.\n"
             "show   print the resolved policy (includes expanded, overrides applied) in\n"
             "       policy syntax; --filter prints the compiled seccomp filter instead.\n"
             "\n"
             "NAME is a built-in profile (exec, build, measure, ...) looked up in\n"
             "$KCAGE_POLICY_DIR, then kcage's own policies (installed next to kcage); a value\n"
             "with a '/' or ending in .policy is a file.\n");
}

static int check(int argc, char **argv) {
  int bad = 0;
  for (int i = 0; i < argc; i++) {
    kc_error err = {0};
    kc_policy *p = NULL;
    /* check takes FILEs: an existing file is read as such even without a '/' or the
     * .policy suffix; anything else is looked up as a profile NAME. */
    int rc = access(argv[i], F_OK) == 0 ? kc_policy_parse_file(argv[i], &p, &err)
                                        : kc_policy_load(argv[i], &p, &err);
    if (rc < 0 || kc_policy_check_seccomp(p, NULL, &err) < 0) {
      /* Parse errors already read FILE:LINE: message. */
      fprintf(stderr, "%s\n", err.msg);
      bad = 1;
    } else {
      printf("%s: ok\n", argv[i]);
    }
    kc_policy_free(p);
  }
  return bad;
}

static int show(const char *name, int filter) {
  kc_error err = {0};
  kc_policy *p = NULL;
  if (kc_policy_load(name, &p, &err) < 0) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  int rc = filter ? kc_policy_check_seccomp(p, stdout, &err) : kc_policy_dump(p, stdout, &err);
  if (rc < 0)
    fprintf(stderr, "%s\n", err.msg);
  kc_policy_free(p);
  return rc < 0 ? 1 : 0;
}

int kc_cmd_policy(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return KC_EXIT_USAGE;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
    usage(stdout);
    return 0;
  }
  int filter = 0;
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'}, {"filter", no_argument, NULL, 'f'}, {0}};
  optind = 1;
  int c;
  /* getopt over "SUB ARGS...": argv + 1 so SUB plays argv[0] */
  while ((c = getopt_long(argc - 1, argv + 1, "+hf", opts, NULL)) != -1) {
    switch (c) {
    case 'h':
      usage(stdout);
      return 0;
    case 'f':
      if (strcmp(sub, "show")) {
        kc_cli_error("policy", "--filter only goes with show");
        return KC_EXIT_USAGE;
      }
      filter = 1;
      break;
    default:
      usage(stderr);
      return KC_EXIT_USAGE;
    }
  }
  int nargs = argc - 1 - optind;
  char **args = argv + 1 + optind;
  if (!strcmp(sub, "check")) {
    if (nargs < 1) {
      kc_cli_error("policy check", "expected at least one FILE");
      return KC_EXIT_USAGE;
    }
    return check(nargs, args);
  }
  if (!strcmp(sub, "show")) {
    if (nargs != 1) {
      kc_cli_error("policy show", "expected one NAME or FILE");
      return KC_EXIT_USAGE;
    }
    return show(args[0], filter);
  }
  kc_cli_error("policy", "unknown subcommand '%s' (check, show)", sub);
  return KC_EXIT_USAGE;
}
