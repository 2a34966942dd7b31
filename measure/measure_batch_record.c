/* A batch kernel's record: kc_mrecord's fields from the batch's configuration and the
 * kernel's build and measurement, plus the host's device, limits and --cpu. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kcage/cgroup.h"

#include "measure_batch.h"

void kc_batch_device_name(char *buf, size_t len) {
  char host[256] = "localhost", model[256] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
        char *v = strchr(line, ':') + 1;
        while (*v == ' ')
          v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(model, sizeof model, "%s", v);
        break;
      }
    fclose(f);
  }
  snprintf(buf, len, "local:%s%s%s", host, model[0] ? " " : "", model);
}

/* How this host holds the measuring workers' memory limit and the builds' process
 * limit: "cgroup", or "rlimit" where the caller allowed that fallback. */
static json_t *limits_record(const kc_settings *s) {
  json_t *o = json_object();
  const char *mem = kc_cgroup_enforcement(s, "memory"), *pids = kc_cgroup_enforcement(s, "pids");
  json_object_set_new(o, "memory", mem ? json_string(mem) : json_null());
  json_object_set_new(o, "pids", pids ? json_string(pids) : json_null());
  return o;
}

/* The hash of a kernel's bytes: those its build read (a source), else those read when
 * planning the batch; a .so's are set as it is staged. */
void kc_batch_source_hash(item *it) {
  if (it->sha256[0] || !it->is_source)
    return;
  if (it->build_done && it->build.source_sha256[0])
    memcpy(it->sha256, it->build.source_sha256, sizeof it->sha256);
  else if (it->src)
    kc_sha256_hex(it->src, it->src_len, it->sha256);
}

/* 1 when the kernel's build came from the cache (or from an identical source's build
 * in this batch), 0 when it was compiled here, -1 when nothing was built. */
static int cached(const item *it) {
  if (!it->is_source || !it->build_done)
    return -1;
  return it->build.status == KC_BUILD_CACHED;
}

json_t *kc_batch_record(const kc_measure_config *cfg, const item *it, const char *device,
                        const char *isolation, double ref_median, const char *ref_sha) {
  kc_build_opts bo = cfg->build;
  if (!bo.cc)
    bo.cc = kc_build_default_cc();
  if (!bo.cflags)
    bo.cflags = KC_BUILD_DEFAULT_CFLAGS;
  kc_mrecord_in in = {
      .kernel = it->path,
      .status = it->status,
      .message = it->message,
      .m = it->measured ? &it->m : NULL,
      .build_s = cached(it) == 0 && it->build.status != KC_BUILD_FAILED ? it->build.build_s : NAN,
      .device = device,
      .reference_median_s = ref_median,
      .max_cv = cfg->max_cv,
      .seed = cfg->seed,
      .seed_set = cfg->seed_set,
      .isolation = isolation,
      .abi = cfg->abi,
      .cc = it->is_source ? bo.cc : NULL,
      .cflags = it->is_source ? bo.cflags : NULL,
      .started = it->started,
      .ended = it->ended,
      .args = cfg->args,
      .entry = cfg->entry ? cfg->entry : kc_abi_default_entry(cfg->abi),
      .reference = cfg->reference,
      .reference_sha256 = cfg->reference && ref_sha && ref_sha[0] ? ref_sha : NULL,
      .rtol = cfg->reference ? (cfg->rtol < 0 ? 1e-4 : cfg->rtol) : NAN,
      .atol = cfg->reference ? (cfg->atol < 0 ? 1e-5 : cfg->atol) : NAN,
      .sha256 = it->sha256[0] ? it->sha256 : NULL,
      .cached = cached(it),
  };
  json_t *o = kc_mrecord(&in);
  json_object_set_new(o, "limits", limits_record(&cfg->settings));
  json_object_set_new(o, "cpu", cfg->pin_cpu ? json_integer(cfg->cpu) : json_null());
  return o;
}
