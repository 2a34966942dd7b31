/* A consumer of every public header, linked against the installed libkcage only.  It
 * loads a built-in policy and runs a one-kernel batch: both go through the library's
 * own lookup of its policies and kcage-worker, relative to where it is installed. */
/* (the test puts an #include of every installed header above this line) */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: consumer KERNEL.c ARGS\n");
    return 2;
  }
  kc_error err = {0};
  kc_policy *p = NULL;
  if (kc_policy_load("measure", &p, &err) < 0) {
    fprintf(stderr, "consumer: %s\n", err.msg);
    return 1;
  }
  kc_policy_free(p);
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.args = argv[2];
  cfg.repeat = 2;
  cfg.min_repeat_ms = 1;
  const char *k[] = {argv[1]};
  json_t *rec = NULL; /* jansson: part of the public API */
  if (kc_measure_run_batch(&cfg, k, 1, &rec, &err) < 0) {
    fprintf(stderr, "consumer: %s\n", err.msg);
    return 1;
  }
  const char *st = json_string_value(json_object_get(json_array_get(rec, 0), "status"));
  printf("consumer: %s %s\n", argv[1], st ? st : "?");
  int ok = st && !strcmp(st, "ok");
  json_decref(rec);
  return ok ? 0 : 1;
}
