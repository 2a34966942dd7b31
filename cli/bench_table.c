/* The table `kcage bench` prints on stdout: one row per kernel, columns aligned by the
 * width a terminal gives each character, then one summary line.  Every string in a row
 * comes from a kernel, a compiler or a file name: escaped before it is measured or
 * printed, so nothing in it can redraw the table. */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "cli.h"
#include "kcage/escape.h"

#define KW_MAX 40    /* widest kernel column, in terminal cells */
#define NOTE_MAX 100 /* widest note, in terminal cells */

/* Terminal cells of the UTF-8 text s (kc_escape leaves only printable characters):
 * measured under C.UTF-8 whatever the caller's locale, since the names are UTF-8.
 * A byte that does not decode counts one cell. */
static size_t cells_upto(const char *s, size_t max_cells, size_t *bytes) {
  static locale_t utf8;
  if (!utf8)
    utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  locale_t old = utf8 ? uselocale(utf8) : (locale_t)0;
  size_t cells = 0, i = 0, n = strlen(s);
  mbstate_t st = {0};
  while (i < n) {
    wchar_t wc;
    size_t l = mbrtowc(&wc, s + i, n - i, &st);
    int w = 1;
    if (l == (size_t)-1 || l == (size_t)-2 || l == 0) {
      l = 1;
      memset(&st, 0, sizeof st);
    } else if ((w = wcwidth(wc)) < 0) {
      w = 1;
    }
    if (cells + (size_t)w > max_cells)
      break;
    cells += (size_t)w;
    i += l;
  }
  if (old)
    uselocale(old);
  if (bytes)
    *bytes = i;
  return cells;
}

size_t kc_cli_display_width(const char *s) {
  return cells_upto(s, SIZE_MAX, NULL);
}

/* s, then spaces up to width cells (left-aligned) or before it (right-aligned), with an
 * optional colour around the text only. */
static void put_cell(FILE *out, const char *s, size_t width, bool right, const char *sgr) {
  size_t w = kc_cli_display_width(s), pad = w < width ? width - w : 0;
  if (right)
    fprintf(out, "%*s", (int)pad, "");
  fprintf(out, "%s%s%s", sgr ? sgr : "", s, sgr ? "\033[0m" : "");
  if (!right)
    fprintf(out, "%*s", (int)pad, "");
}

/* The last cells of s (escaped text) fitting max cells, "..." in front when cut. */
static void tail_fit(const char *s, size_t max, char *out, size_t cap) {
  size_t w = kc_cli_display_width(s);
  if (w <= max) {
    snprintf(out, cap, "%.*s", (int)(cap - 1), s);
    return;
  }
  const char *p = s;
  while (*p && kc_cli_display_width(p) > max - 3)
    do
      p++;
    while ((*p & 0xc0) == 0x80);
  snprintf(out, cap, "...%.*s", (int)(cap - 4), p);
}

/* The first max cells of s (escaped text), "..." at the end when cut. */
static void head_fit(char *s, size_t max) {
  if (kc_cli_display_width(s) <= max)
    return;
  size_t bytes;
  cells_upto(s, max - 3, &bytes);
  strcpy(s + bytes, "...");
}

static void fmt_time(char *buf, size_t len, json_t *v) {
  if (!json_is_number(v)) {
    snprintf(buf, len, "-");
    return;
  }
  kc_cli_fmt_seconds(buf, len, json_number_value(v));
}

void kc_cli_fmt_seconds(char *buf, size_t len, double s) {
  if (s >= 1)
    snprintf(buf, len, "%.3f s", s);
  else if (s >= 1e-3)
    snprintf(buf, len, "%.3f ms", s * 1e3);
  else if (s >= 1e-6)
    snprintf(buf, len, "%.3f us", s * 1e6);
  else
    snprintf(buf, len, "%.1f ns", s * 1e9);
}

static const char *str(json_t *r, const char *key) {
  const char *s = json_string_value(json_object_get(r, key));
  return s ? s : "";
}

static double num(json_t *r, const char *key) {
  json_t *v = json_object_get(r, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

/* A build_error's note: the compiler's first `error:` line (its first line is often
 * only "In function ..."), under the user's own path when it names the file by its
 * base name. */
static void build_error_note(const char *kernel, const char *msg, char *note, size_t cap) {
  const char *line = msg, *p = strstr(msg, "error:");
  if (p) {
    line = p;
    while (line > msg && line[-1] != '\n')
      line--;
  }
  size_t len = strcspn(line, "\n");
  const char *base = strrchr(kernel, '/');
  base = base ? base + 1 : kernel;
  size_t bl = strlen(base);
  if (base != kernel && len > bl && !strncmp(line, base, bl) && line[bl] == ':')
    snprintf(note, cap, "%.*s%.*s", (int)(base - kernel), kernel, (int)len, line);
  else
    snprintf(note, cap, "%.*s", (int)len, line);
}

/* The note of a row: the record's message (its first line, or the compiler's first
 * error), what `unstable` asks of the user, or that nothing checked an `ok`. */
static void row_note(json_t *r, bool verified, char *note, size_t cap) {
  const char *msg = json_string_value(json_object_get(r, "message"));
  bool unstable = json_is_true(json_object_get(r, "unstable"));
  note[0] = 0;
  if (msg && !strcmp(str(r, "status"), "build_error"))
    build_error_note(str(r, "kernel"), msg, note, cap);
  else if (msg)
    snprintf(note, cap, "%.*s", (int)strcspn(msg, "\n"), msg);
  else if (unstable)
    snprintf(note, cap, "unstable: rounds varied more than --max-cv; see below");
  else if (!verified && !strcmp(str(r, "status"), "ok"))
    snprintf(note, cap, "not verified (no --reference)");
}

/* SGR colour of a status: what worked green, what the kernel got wrong red, what
 * stopped it before it ran yellow. */
static const char *status_sgr(const char *status, bool unstable) {
  if (!strcmp(status, "ok"))
    return unstable ? "\033[33m" : "\033[32m";
  if (!strcmp(status, "build_error") || !strcmp(status, "error"))
    return "\033[33m";
  return "\033[31m";
}

typedef struct row {
  char kernel[4 * KW_MAX + 8], status[64], med[32], mn[32], cv[16], sp[16];
  char note[4 * (NOTE_MAX + 8) + 1];
  bool unstable;
} row;

static void make_row(json_t *r, double ref_med, bool verified, row *w) {
  char raw[2048], esc[4 * sizeof raw];
  kc_escape(str(r, "kernel"), esc, sizeof esc);
  tail_fit(esc, KW_MAX, w->kernel, sizeof w->kernel);
  kc_escape(str(r, "status"), w->status, sizeof w->status);
  fmt_time(w->med, sizeof w->med, json_object_get(r, "median_s"));
  fmt_time(w->mn, sizeof w->mn, json_object_get(r, "min_s"));
  w->unstable = json_is_true(json_object_get(r, "unstable"));
  double cv = num(r, "cv"), su = num(r, "speedup"), med = num(r, "median_s");
  snprintf(w->cv, sizeof w->cv, "-");
  if (isfinite(cv))
    snprintf(w->cv, sizeof w->cv, "%.1f%%%s", cv * 100, w->unstable ? "!" : "");
  if (!isfinite(su) && isfinite(ref_med) && med > 0)
    su = ref_med / med;
  snprintf(w->sp, sizeof w->sp, "-");
  if (isfinite(su))
    snprintf(w->sp, sizeof w->sp, "%.2fx", su);
  row_note(r, verified, raw, sizeof raw);
  kc_escape(raw, esc, sizeof esc);
  snprintf(w->note, sizeof w->note, "%.*s", (int)(sizeof w->note - 1), esc);
  head_fit(w->note, NOTE_MAX);
}

static void print_row(FILE *out, const row *w, size_t kw, bool colour) {
  put_cell(out, w->kernel, kw, false, NULL);
  fputs("  ", out);
  put_cell(out, w->status, 12, false, colour ? status_sgr(w->status, w->unstable) : NULL);
  fputs("  ", out);
  put_cell(out, w->med, 11, true, NULL);
  fputs("  ", out);
  put_cell(out, w->mn, 11, true, NULL);
  fputs("  ", out);
  put_cell(out, w->cv, 7, true, colour && w->unstable ? "\033[33m" : NULL);
  fputs("  ", out);
  put_cell(out, w->sp, 8, true, NULL);
  if (w->note[0])
    fprintf(out, "  %s", w->note);
  fputc('\n', out);
}

void kc_measure_table_print(FILE *out, json_t *recs, json_t *ref, const kc_measure_table_opts *o) {
  double ref_med = ref ? num(ref, "median_s") : NAN;
  size_t n = json_array_size(recs), kw = 6;
  row *rows = calloc(n ? n : 1, sizeof *rows);
  if (!rows)
    return;
  for (size_t i = 0; i < n; i++) {
    make_row(json_array_get(recs, i), ref_med, o->verified, &rows[i]);
    size_t w = kc_cli_display_width(rows[i].kernel);
    kw = w > kw ? w : kw;
  }
  row head = {.kernel = "kernel",
              .status = "status",
              .med = "median",
              .mn = "min",
              .cv = "CV",
              .sp = "speed-up",
              .note = "note"};
  print_row(out, &head, kw, false);
  for (size_t i = 0; i < n; i++)
    print_row(out, &rows[i], kw, o->colour);
  free(rows);
  kc_measure_summary_print(out, recs, o);
}
