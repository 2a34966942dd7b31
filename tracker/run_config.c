/* The remote run config: the kc_measure_config fields a client sends an agent, encoded and
 * decoded here only, so every option `kcage bench` takes reaches the device or is
 * refused.  The decoder reads a network peer's message: every number is range-checked
 * before any cast, every string is bounded, and the fields only the agent may choose
 * (workers, the build cache, where a tracker is) are never read. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kcage/measure.h"
#include "kcage/tracker.h"

#define MAX_CONFIG_STRING 4096

json_t *kc_run_config_encode(const kc_measure_config *cfg) {
  json_t *c = json_pack("{s:s, s:I, s:f, s:f, s:I, s:I, s:f, s:f, s:b, s:f, s:I, s:I, s:I}", "args",
                        cfg->args ? cfg->args : "", "seed", (json_int_t)cfg->seed, "rtol",
                        cfg->rtol, "atol", cfg->atol, "number", (json_int_t)cfg->number, "repeat",
                        (json_int_t)cfg->repeat, "min_repeat_ms", cfg->min_repeat_ms, "cooldown_ms",
                        cfg->cooldown_ms, "flush_cache", cfg->flush_cache, "timeout_s",
                        cfg->timeout_s, "memory_bytes", (json_int_t)cfg->memory_bytes, "sets",
                        (json_int_t)cfg->sets, "checks", (json_int_t)cfg->checks);
  if (!c)
    return NULL;
  if (!cfg->seed_set) /* the agent draws its own secret seed */
    json_object_del(c, "seed");
  if (cfg->entry)
    json_object_set_new(c, "entry", json_string(cfg->entry));
  json_object_set_new(c, "abi", json_string(kc_abi_name(cfg->abi)));
  if (cfg->build.cc)
    json_object_set_new(c, "cc", json_string(cfg->build.cc));
  if (cfg->build.cflags)
    json_object_set_new(c, "cflags", json_string(cfg->build.cflags));
  json_object_set_new(c, "build_timeout_s", json_real(cfg->build.timeout_s));
  json_object_set_new(c, "build_memory_bytes", json_integer((json_int_t)cfg->build.memory_bytes));
  json_object_set_new(c, "no_cache", json_boolean(cfg->build.no_cache));
  /* The agent's records then carry the same fields as local ones. */
  json_object_set_new(c, "budget_s", json_real(cfg->budget_s));
  json_object_set_new(c, "max_cv", json_real(cfg->max_cv));
  return c;
}

/* A number from the peer: absent or null = def; not finite or outside [lo, hi] =
 * refused (no out-of-range float-to-integer casts). */
static double num(const json_t *c, const char *k, double def, double lo, double hi,
                  const char **bad) {
  json_t *v = json_object_get(c, k);
  if (!v || json_is_null(v))
    return def;
  double x = json_is_number(v) ? json_number_value(v) : NAN;
  if (!isfinite(x) || x < lo || x > hi) {
    *bad = k;
    return def;
  }
  return x;
}

/* A string from the peer: absent or null = NULL; anything but a short string without
 * NUL bytes is refused. */
static const char *str(const json_t *c, const char *k, const char **bad) {
  json_t *v = json_object_get(c, k);
  if (!v || json_is_null(v))
    return NULL;
  if (!json_is_string(v) || json_string_length(v) > MAX_CONFIG_STRING ||
      strlen(json_string_value(v)) != json_string_length(v)) {
    *bad = k;
    return NULL;
  }
  return json_string_value(v);
}

static bool flag(const json_t *c, const char *k, const char **bad) {
  json_t *v = json_object_get(c, k);
  if (v && !json_is_boolean(v) && !json_is_null(v))
    *bad = k;
  return json_is_true(v);
}

static void decode_build(const json_t *c, kc_build_opts *b, const char **bad) {
  b->cc = str(c, "cc", bad);
  b->cflags = str(c, "cflags", bad);
  if (b->cc && !*b->cc)
    *bad = "cc";
  b->timeout_s = num(c, "build_timeout_s", 0, 0, 86400, bad);
  b->memory_bytes = (uint64_t)num(c, "build_memory_bytes", 0, 0, 1e15, bad);
  b->no_cache = flag(c, "no_cache", bad);
}

int kc_run_config_decode(const json_t *c, kc_measure_config *cfg, kc_error *err) {
  kc_measure_config_init(cfg);
  if (!json_is_object(c))
    return kc_error_set(err, EPROTO, "run: config must be an object");
  if (json_object_get(c, "no_isolation") || json_object_get(c, "isolation"))
    /* a tenant never chooses how it is isolated: every agent's kernels run sandboxed */
    return kc_error_set(err, EPERM, "run: this agent runs every kernel in its sandbox");
  const char *bad = NULL;
  cfg->args = str(c, "args", &bad);
  if (!cfg->args)
    return kc_error_set(err, EPROTO, "run: config.args must be a string");
  json_t *seed = json_object_get(c, "seed");
  if (seed && !json_is_integer(seed))
    bad = "seed";
  cfg->seed = (uint64_t)json_integer_value(seed);
  cfg->seed_set = json_is_integer(seed);
  cfg->entry = str(c, "entry", &bad);
  /* absent: an older client's, whose kernels are all DLPack ones */
  const char *abi = str(c, "abi", &bad);
  if (abi && kc_abi_parse(abi, &cfg->abi) < 0)
    bad = "abi";
  cfg->rtol = num(c, "rtol", cfg->rtol, -1, 1e6, &bad);
  cfg->atol = num(c, "atol", cfg->atol, -1, 1e6, &bad);
  cfg->number = (uint32_t)num(c, "number", cfg->number, 0, 1e9, &bad);
  cfg->repeat = (uint32_t)num(c, "repeat", cfg->repeat, 0, 1e6, &bad);
  cfg->min_repeat_ms = num(c, "min_repeat_ms", cfg->min_repeat_ms, -1, 1e6, &bad);
  cfg->cooldown_ms = num(c, "cooldown_ms", cfg->cooldown_ms, 0, 1e6, &bad);
  cfg->flush_cache = flag(c, "flush_cache", &bad);
  cfg->timeout_s = num(c, "timeout_s", cfg->timeout_s, 0, 86400, &bad);
  cfg->memory_bytes = (uint64_t)num(c, "memory_bytes", (double)cfg->memory_bytes, 0, 1e15, &bad);
  cfg->sets = (uint32_t)num(c, "sets", cfg->sets, 0, 1024, &bad);
  cfg->checks = (uint32_t)num(c, "checks", cfg->checks, 0, 1e6, &bad);
  cfg->budget_s = num(c, "budget_s", cfg->budget_s, -1, 86400, &bad);
  cfg->max_cv = num(c, "max_cv", cfg->max_cv, -1, 1e6, &bad);
  decode_build(c, &cfg->build, &bad);
  if (bad)
    return kc_error_set(err, EINVAL, "run: config value %s is out of range", bad);
  return 0;
}

/* One limit against its cap: `asked` is what the limit would be (0 = the batch's
 * default, given as def); above the cap it becomes the cap, and `clamped` says so. */
static void clamp_one(json_t *clamped, const char *name, double *v, double def, double cap) {
  double eff = *v > 0 ? *v : def;
  if (cap <= 0 || eff <= cap)
    return;
  json_object_set_new(clamped, name, json_pack("{s:f, s:f}", "asked", eff, "cap", cap));
  *v = cap;
}

static void clamp_bytes(json_t *clamped, const char *name, uint64_t *v, uint64_t cap) {
  double d = (double)*v;
  clamp_one(clamped, name, &d, (double)(1ull << 30), (double)cap);
  *v = (uint64_t)d;
}

json_t *kc_run_config_clamp(kc_measure_config *cfg, const kc_run_caps *caps) {
  json_t *clamped = json_object();
  clamp_bytes(clamped, "memory_bytes", &cfg->memory_bytes, caps->max_memory_bytes);
  clamp_bytes(clamped, "build_memory_bytes", &cfg->build.memory_bytes, caps->max_memory_bytes);
  clamp_one(clamped, "timeout_s", &cfg->timeout_s, 10, caps->max_timeout_s);
  clamp_one(clamped, "build_timeout_s", &cfg->build.timeout_s, 60, caps->max_timeout_s);
  return clamped;
}
