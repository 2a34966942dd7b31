/* kc_log: one line per event, written with one write(2) so lines from several
 * threads or processes never interleave. */
#include "kcage/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int g_level = KC_LOG_INFO;

void kc_log_set_level(kc_log_level level) {
  atomic_store(&g_level, (int)level);
}

kc_log_level kc_log_get_level(void) {
  return (kc_log_level)atomic_load(&g_level);
}

int kc_log_enabled(kc_log_level level) {
  return (int)level <= atomic_load(&g_level);
}

/* Control bytes (and DEL) as \xNN: a message may carry a peer's text. */
static size_t escape_into(char *out, size_t cap, const char *in) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < cap; p++) {
    if (*p < 0x20 || *p == 0x7f) {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    } else {
      out[o++] = (char)*p;
    }
  }
  out[o] = '\0';
  return o;
}

void kc_log(kc_log_level level, const char *who, const char *fmt, ...) {
  if (!kc_log_enabled(level))
    return;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  static const int prio[] = {3, 4, 6, 7}; /* syslog: err, warning, info, debug */
  char msg[1024], line[4200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t n;
  const char *js = secure_getenv("JOURNAL_STREAM"); /* only the line's format */
  if (js && *js) {
    n = (size_t)snprintf(line, sizeof line, "<%d>%s: ", prio[level], who);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char t[32];
    strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    n = (size_t)snprintf(line, sizeof line, "%s.%03ldZ %s %s: ", t, ts.tv_nsec / 1000000,
                         names[level], who);
  }
  if (n >= sizeof line)
    n = sizeof line - 1;
  n += escape_into(line + n, sizeof line - n - 1, msg);
  line[n++] = '\n';
  for (size_t off = 0; off < n;) {
    ssize_t w = write(STDERR_FILENO, line + off, n - off);
    if (w <= 0)
      break;
    off += (size_t)w;
  }
}
