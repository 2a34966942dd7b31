/* What `kcage bench` says on stderr while it works: on a terminal one line redrawn in
 * place (the phase, a bar, the kernel being measured and an estimate of the time
 * left); elsewhere (a log, CI) one line per finished kernel, never a carriage return. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "kcage/escape.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void kc_measure_progress_init(kc_measure_progress *p, size_t kernels, bool tty) {
  memset(p, 0, sizeof *p);
  p->tty = tty;
  p->kernels = kernels;
  p->phase_t0 = now_s();
}

static void erase(kc_measure_progress *p) {
  if (p->tty && p->drawn)
    fprintf(stderr, "\r\033[K");
  p->drawn = false;
}

void kc_measure_progress_start(void *ctx, const char *kernel) {
  kc_measure_progress *p = ctx;
  char esc[4096];
  kc_escape(kernel, esc, sizeof esc);
  size_t l = strlen(esc);
  /* the end of a long path: its file name is what tells kernels apart */
  const char *tail = l > 40 ? esc + l - 37 : esc;
  while ((*tail & 0xc0) == 0x80)
    tail++;
  size_t cap = sizeof p->current - 4;
  snprintf(p->current, sizeof p->current, "%s%.*s", tail != esc ? "..." : "", (int)cap, tail);
}

void kc_measure_progress_step(void *ctx, const char *phase, size_t done, size_t total) {
  kc_measure_progress *p = ctx;
  if (strcmp(phase, p->phase)) {
    snprintf(p->phase, sizeof p->phase, "%s", phase);
    p->phase_t0 = now_s();
  }
  if (!p->tty)
    return;
  erase(p);
  if (!strcmp(phase, "done")) {
    fflush(stderr);
    return;
  }
  int width = 20, fill = total ? (int)(width * done / total) : width;
  fprintf(stderr, "%-7s [%.*s%*s] %zu/%zu", phase, fill, "####################", width - fill, "",
          done, total);
  double el = now_s() - p->phase_t0;
  if (done > 0 && done < total)
    fprintf(stderr, "  ETA %.0f s", ceil(el / (double)done * (double)(total - done)));
  if (!strcmp(phase, "measure") && p->current[0])
    fprintf(stderr, "  %s", p->current);
  p->drawn = true;
  fflush(stderr);
}

/* A finished kernel: off a terminal, its line ("[2/4] vadd.c: ok, 803.660 us"). */
void kc_measure_progress_record(kc_measure_progress *p, const json_t *rec) {
  p->done++;
  if (p->tty || p->quiet)
    return;
  char k[4096], m[2048];
  const char *st = json_string_value(json_object_get(rec, "status"));
  kc_escape(json_string_value(json_object_get(rec, "kernel")), k, sizeof k);
  kc_escape(st ? st : "?", m, sizeof m);
  json_t *med = json_object_get(rec, "median_s");
  char t[32];
  if (json_is_number(med)) {
    kc_cli_fmt_seconds(t, sizeof t, json_number_value(med));
    fprintf(stderr, "kcage bench: [%zu/%zu] %s: %s, %s\n", p->done, p->kernels, k, m, t);
  } else
    fprintf(stderr, "kcage bench: [%zu/%zu] %s: %s\n", p->done, p->kernels, k, m);
}

void kc_measure_progress_end(kc_measure_progress *p) {
  erase(p);
  fflush(stderr);
}
