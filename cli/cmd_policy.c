/* `kcage policy check FILE...`, `kcage policy show NAME|FILE` (docs/contracts.md) and
 * `kcage policy list` (the names --policy takes here; shell completion reads it). */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "env_path.h"
#include "install_dirs.h"
#include "kcage/policy.h"

static void usage(FILE *f) {
  fprintf(f, "usage: kcage policy check FILE|NAME...\n"
             "       kcage policy show [--filter] NAME|FILE\n"
             "       kcage policy list\n"
             "\n"
             "check  parse each policy (includes too) and compile its seccomp filter;\n"
             "       prints `FILE: ok` or `FILE:LINE: message`; exit 1 if any is bad.\n"
             "show   print the resolved policy (includes expanded, overrides applied) in\n"
             "       policy syntax; --filter prints the compiled seccomp filter instead.\n"
             "list   print the NAMEs found, one a line, sorted (what --policy NAME takes)\n"
             "\n"
             "NAME is a built-in profile (exec, build, measure, ...) looked up in\n"
             "$KCAGE_POLICY_DIR, then kcage's own policies (installed next to kcage); a value\n"
             "with a '/' or ending in .policy is a file.  --version prints kcage's version.\n");
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The NAME.policy files of dir appended to names (n of cap). */
static void names_in(const char *dir, char **names, size_t *n, size_t cap) {
  DIR *d = dir && *dir ? opendir(dir) : NULL;
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) && *n < cap) {
    size_t l = strlen(e->d_name);
    char *name = l > 7 && !strcmp(e->d_name + l - 7, ".policy") && e->d_name[0] != '.'
                     ? strndup(e->d_name, l - 7)
                     : NULL;
    if (name)
      names[(*n)++] = name;
  }
  closedir(d);
}

/* The names kc_policy_load finds: $KCAGE_POLICY_DIR (when it may be trusted), then
 * kcage's own; each once. */
static int list(void) {
  char own[4096] = "";
  const char *env = NULL;
  kc_error err = {0};
  if (kc_install_dir_get(KC_DIR_POLICIES, own, sizeof own) < 0)
    own[0] = '\0';
  if (kc_env_path("KCAGE_POLICY_DIR", KC_ENV_DIR, &env, &err) < 0) {
    kc_cli_error("policy list", "%s", err.msg);
    return 1;
  }
  char *names[512];
  size_t n = 0;
  names_in(env, names, &n, 512);
  names_in(own, names, &n, 512);
  qsort(names, n, sizeof *names, cmp_str);
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || strcmp(names[i], names[i - 1]))
      printf("%s\n", names[i]);
  }
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  return 0;
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
  if (!strcmp(sub, "--version")) {
    kc_cli_print_version();
    return 0;
  }
  int filter = 0;
  static const struct option opts[] = {
      {"help", no_argument, NULL, 'h'}, {"filter", no_argument, NULL, 'f'}, KC_OPTION_VERSION, {0}};
  optind = 1;
  int c;
  /* getopt over "SUB ARGS...": argv + 1 so SUB plays argv[0] */
  while ((c = getopt_long(argc - 1, argv + 1, "+hf", opts, NULL)) != -1) {
    switch (c) {
    case 'h':
      usage(stdout);
      return 0;
    case KC_OPT_VERSION:
      kc_cli_print_version();
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
  if (!strcmp(sub, "list")) {
    if (nargs != 0) {
      kc_cli_error("policy list", "takes no argument");
      return KC_EXIT_USAGE;
    }
    return list();
  }
  if (!strcmp(sub, "show")) {
    if (nargs != 1) {
      kc_cli_error("policy show", "expected one NAME or FILE");
      return KC_EXIT_USAGE;
    }
    return show(args[0], filter);
  }
  kc_cli_error("policy", "unknown subcommand '%s' (check, show, list)", sub);
  return KC_EXIT_USAGE;
}
