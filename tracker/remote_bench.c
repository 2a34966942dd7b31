/* `kcage bench --tracker`: lease a device, upload the kernels, run the batch there, and
 * take back its records as hostile input (remote_records.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kcage/escape.h"
#include "kcage/measure.h"
#include "kcage/tracker.h"
#include "netio.h"
#include "remote_wait.h"

/* How long a key may be missing from the tracker before the batch gives up: agents
 * reconnecting to a restarted tracker are back within their backoff (5 s at most). */
#define KEY_GRACE_S 6.0

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Upload names: "k<i>-<basename>" with anything outside [A-Za-z0-9._-] replaced. */
static void upload_name(char *out, size_t len, const char *prefix, size_t i, const char *path) {
  int n = snprintf(out, len, "%s%zu-%s", prefix, i, base_name(path));
  for (int j = 0; j < n && (size_t)j < len; j++) {
    char c = out[j];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      out[j] = '_';
  }
  if (strlen(out) > 128)
    out[128] = '\0';
}

struct remote_ctx {
  const kc_measure_config *cfg;
  const kc_auth_key *auth;
  const char *const *kernels;
  size_t n;
  json_t *records;
  char (*sha256)[65]; /* of each kernel uploaded, then the reference's */
};

static int upload_all(kc_session *s, struct remote_ctx *x, json_t *names, char *refname,
                      size_t reflen, kc_error *err) {
  char name[160];
  for (size_t i = 0; i < x->n; i++) {
    upload_name(name, sizeof name, "k", i, x->kernels[i]);
    if (kc_session_upload_file_hashed(s, name, x->kernels[i], x->sha256[i], err) < 0)
      return -1;
    json_array_append_new(names, json_string(name));
  }
  if (x->cfg->reference) {
    upload_name(refname, reflen, "ref", 0, x->cfg->reference);
    if (kc_session_upload_file_hashed(s, refname, x->cfg->reference, x->sha256[x->n], err) < 0)
      return -1;
  }
  return 0;
}

/* What a record says about the problem and the bytes measured is the client's own
 * knowledge: the agent's names for the files and its word about them are replaced. */
static void own_problem(const struct remote_ctx *x) {
  const kc_measure_config *cfg = x->cfg;
  bool ref = cfg->reference != NULL;
  for (size_t i = 0; i < x->n; i++) {
    json_t *r = json_array_get(x->records, i);
    json_object_set_new(r, "args", json_string(cfg->args));
    json_object_set_new(r, "entry",
                        json_string(cfg->entry ? cfg->entry : kc_abi_default_entry(cfg->abi)));
    json_object_set_new(r, "reference", ref ? json_string(cfg->reference) : json_null());
    json_object_set_new(r, "reference_sha256", ref ? json_string(x->sha256[x->n]) : json_null());
    json_object_set_new(r, "rtol", ref ? json_real(cfg->rtol < 0 ? 1e-4 : cfg->rtol) : json_null());
    json_object_set_new(r, "atol", ref ? json_real(cfg->atol < 0 ? 1e-5 : cfg->atol) : json_null());
    json_object_set_new(r, "sha256", json_string(x->sha256[i]));
    json_t *c = json_object_get(r, "cached");
    if (c && !json_is_boolean(c))
      json_object_set_new(r, "cached", json_null());
  }
}

static int run_on(kc_session *s, struct remote_ctx *x, const char *peer, kc_error *err) {
  const kc_measure_config *cfg = x->cfg;
  json_t *names = json_array();
  char refname[160];
  if (upload_all(s, x, names, refname, sizeof refname, err) < 0) {
    json_decref(names);
    return -1;
  }
  json_t *m = json_pack("{s:s, s:o, s:o}", "op", "run", "kernels", names, "config",
                        kc_run_config_encode(cfg));
  json_object_set_new(m, "reference", cfg->reference ? json_string(refname) : json_null());
  double per = (cfg->budget_s > 0 ? cfg->budget_s : 300) + 70; /* build + measure */
  double wait = cfg->session_timeout_s > 0 ? cfg->session_timeout_s + 5 : 60 + per * (double)x->n;
  json_t *r = NULL;
  int rc = kc_session_call(s, m, wait, &r, err);
  json_decref(m);
  if (rc == 0)
    rc = kc_remote_records_decode(r, x->kernels, x->n, peer, &x->records, err);
  if (rc == 0)
    own_problem(x);
  json_decref(r);
  return rc;
}

static int remote_session(int fd, const kc_lease *lease, void *vctx, kc_error *err) {
  struct remote_ctx *x = vctx;
  char host[KC_TRACKER_MAX_ADDR], peer[KC_TRACKER_MAX_ADDR + 8];
  snprintf(peer, sizeof peer, "%s:%u", kc_escape(lease->host, host, sizeof host), lease->port);
  int dup_fd = dup(fd); /* the session owns its fd; request_and_run closes the original */
  if (dup_fd < 0)
    return kc_error_set(err, errno, "dup");
  kc_session *s;
  kc_session_open_opts so = {.timeout_s = 30,
                             .auth = x->auth,
                             .session_constructor_args = lease->session_constructor_args,
                             .n_session_constructor_args = lease->n_session_constructor_args};
  if (kc_session_open_with(dup_fd, &so, &s, NULL, err) < 0)
    return kc_error_prefix(err, "device agent %s", peer);
  int rc = run_on(s, x, peer, err);
  kc_session_close(s);
  return rc;
}

int kc_measure_remote_run(const kc_measure_config *cfg, const kc_auth_key *auth,
                          const char *const *kernels, size_t n, json_t **records, kc_error *err) {
  char host[KC_TRACKER_MAX_ADDR];
  uint16_t port;
  *records = NULL;
  if (!cfg->key || !*cfg->key)
    return kc_error_set(err, EINVAL, "--key is required with --tracker");
  if (kc_parse_hostport(cfg->tracker, KC_TRACKER_DEFAULT_PORT, host, sizeof host, &port, err) < 0)
    return kc_error_prefix(err, "--tracker");
  kc_request_opts o;
  kc_request_opts_init(&o);
  o.priority = cfg->priority;
  o.session_timeout_s = cfg->session_timeout_s;
  o.session_constructor_args = cfg->session_constructor_args;
  o.n_session_constructor_args = cfg->n_session_constructor_args;
  /* How long this client waits for a free device: its own patience, nothing about the
   * device's isolation (which only the agent's operator sets). */
  const char *w = secure_getenv("KCAGE_REQUEST_TIMEOUT");
  if (w && *w)
    o.wait_s = strtod(w, NULL);
  /* A key no agent serves is said within seconds, not after the request's whole wait. */
  double grace = o.wait_s > 0 && o.wait_s < KEY_GRACE_S ? o.wait_s : KEY_GRACE_S;
  if (kc_remote_key_check(host, port, cfg->key, grace, err) < 0)
    return -1;
  struct remote_ctx x = {cfg, auth && auth->len ? auth : NULL, kernels, n, NULL, NULL};
  x.sha256 = calloc(n + 1, sizeof *x.sha256);
  if (!x.sha256)
    return kc_error_set(err, ENOMEM, "batch");
  int rc = kc_tracker_request_and_run(host, port, cfg->key, &o, 2, remote_session, &x, err);
  free(x.sha256);
  if (rc < 0)
    return -1;
  *records = x.records;
  return 0;
}
