#include "cli.h"

#include "kcage/escape.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Errors carry compiler, kernel and peer text: escaped, so they stay one line and
 * send nothing to the terminal. */
void kc_cli_error(const char *what, const char *fmt, ...) {
  char msg[4096], shown[4 * sizeof msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "kcage: %s: %s\n", what, kc_escape(msg, shown, sizeof shown));
}

int kc_cli_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !isdigit((unsigned char)*s))
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end != '\0' || v < min || v > max)
    return -1;
  *out = v;
  return 0;
}

int kc_cli_parse_port(const char *cmd, const char *opt, const char *s, unsigned min,
                      uint16_t *out) {
  uint64_t v;
  if (kc_cli_parse_uint(s, min, 65535, &v) < 0) {
    kc_cli_error(cmd, "%s %s: not a port", opt, s);
    return -1;
  }
  *out = (uint16_t)v;
  return 0;
}

void kc_cli_print_version(void) {
  printf("kcage %s\n", KC_VERSION);
}

int kc_cli_help_or_usage(int ch, void (*usage)(FILE *out)) {
  if (ch == KC_OPT_VERSION) {
    kc_cli_print_version();
    return 0;
  }
  usage(ch == 'h' ? stdout : stderr);
  return ch == 'h' ? 0 : KC_EXIT_USAGE;
}

int kc_cli_no_operands(const char *cmd, int argc, char **argv) {
  if (optind >= argc)
    return 0;
  kc_cli_error(cmd, "unexpected argument %s", argv[optind]);
  return KC_EXIT_USAGE;
}

bool kc_cli_colour(FILE *out) {
  const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
  if (nc && *nc)
    return false;
  if (term && !strcmp(term, "dumb"))
    return false;
  return isatty(fileno(out));
}
