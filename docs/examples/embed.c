/* A small program that embeds libkcage (docs/api.md): one tenant's settings, one
 * sandboxed run, a pool of workers and, given a kernel, a bench batch.
 *
 *   cc -o embed embed.c $(pkg-config --cflags --libs kcage)
 *   ./embed [KERNEL.c ARGS]        e.g. ./embed naive.c 'f32[64,64] f32[64,64] f32[64,64]:out'
 *
 * Exit status 0 when every step did what it should. */
#include <kcage/kcage.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors are values: a failing call returns -1 and fills a kc_error with one line. */
static int fail(const char *what, const kc_error *err) {
  fprintf(stderr, "embed: %s: %s\n", what, err->msg);
  return 1;
}

/* One program in a fresh sandbox, under the built-in "exec" policy. */
static int one_run(const kc_settings *tenant) {
  kc_error err = {0};
  kc_policy *policy = NULL;
  if (kc_policy_load_in(tenant, "exec", &policy, &err) < 0)
    return fail("policy", &err);
  kc_sandbox_config cfg;
  kc_sandbox_config_init(&cfg);
  cfg.settings = *tenant;
  cfg.policy = policy;
  cfg.limits.wall_s = 10;
  cfg.limits.memory_bytes = 256u << 20;
  char *argv[] = {"/bin/echo", "hello from a sandbox", NULL};
  cfg.argv = argv;
  cfg.stdout_fd = 1;
  kc_result res;
  int rc = kc_sandbox_run(&cfg, &res, &err);
  kc_policy_free(policy);
  if (rc < 0)
    return fail("run", &err);
  printf("run: %s (%s), memory held by %s\n", kc_status_name(res.status), res.message,
         kc_cgroup_enforcement(tenant, "memory") ? kc_cgroup_enforcement(tenant, "memory")
                                                 : "nothing");
  return res.status == KC_STATUS_OK ? 0 : 1;
}

/* Workers: TVM's PopenPoolExecutor.  "echo" is a built-in handler; a handler of your
 * own is "lib.so:symbol" (kcage/worker.h). */
static int pool(const kc_settings *tenant) {
  kc_error err = {0};
  kc_pool_opts o;
  kc_pool_opts_init(&o);
  o.max_workers = 2;
  o.timeout_s = 5;
  o.worker.settings = *tenant;
  kc_pool *p = NULL;
  if (kc_pool_new(&o, &p, &err) < 0)
    return fail("pool", &err);
  const char *words[] = {"one", "two", "three"};
  kc_future *f[3] = {0};
  int bad = 0;
  for (int i = 0; i < 3 && !bad; i++)
    if (!(f[i] = kc_pool_submit(p, "echo", words[i], strlen(words[i]), &err)))
      bad = fail("submit", &err);
  for (int i = 0; i < 3 && f[i]; i++) {
    kc_call_result r;
    kc_call_result_init(&r);
    if (kc_future_wait(f[i], -1, &r) == 1 && r.status == KC_CALL_COMPLETE)
      printf("pool: %.*s\n", (int)r.value_len, (const char *)r.value);
    else
      bad = 1;
    kc_call_result_clear(&r);
    kc_future_free(f[i]);
  }
  kc_pool_shutdown(p, true);
  return bad;
}

/* A bench batch: build the kernel in a sandbox, check it, time it. */
static int batch(const kc_settings *tenant, const char *kernel, const char *args) {
  kc_error err = {0};
  kc_measure_config cfg;
  kc_measure_config_init(&cfg);
  cfg.settings = *tenant;
  cfg.args = args;
  cfg.repeat = 3;
  json_t *records = NULL; /* jansson: one record per kernel */
  if (kc_measure_run_batch(&cfg, &kernel, 1, &records, &err) < 0)
    return fail("bench", &err);
  char *line = kc_measure_record_dumps(json_array_get(records, 0));
  printf("bench: %s\n", line ? line : "?");
  const char *st = json_string_value(json_object_get(json_array_get(records, 0), "status"));
  int ok = st && !strcmp(st, "ok");
  free(line);
  json_decref(records);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  /* All zero is the defaults: the host's best cgroup mode, limits refused rather than
   * weakened, kcage's id range and policies.  Each tenant may have its own. */
  kc_settings tenant = {0};
  kc_error err = {0};
  if (kc_settings_check(&tenant, &err) < 0)
    return fail("settings", &err);
  int bad = one_run(&tenant) | pool(&tenant);
  if (argc == 3)
    bad |= batch(&tenant, argv[1], argv[2]);
  printf("embed: %s\n", bad ? "FAIL" : "ok");
  return bad;
}
