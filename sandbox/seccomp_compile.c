/* Compiling a policy's seccomp rules with libseccomp and installing them.
 *
 * "kill" becomes SCMP_ACT_NOTIFY rather than SCMP_ACT_KILL_PROCESS: a seccomp kill is
 * only a SIGSYS in the wait status (which the program can raise itself) and the
 * kernel does not say which syscall it was.  With NOTIFY the offending task blocks in
 * the syscall and the kernel hands its number to the holder of the listener fd: the
 * supervising parent records the name and kills the tree; the syscall never runs.
 * See kcage/seccomp.h for the supervisor's side and what happens if the listener
 * is closed early.
 *
 * Notes that shaped this file:
 * - seccomp evaluates every stacked filter and takes the most severe action
 *   (KILL_PROCESS > KILL_THREAD > TRAP > ERRNO > USER_NOTIF > TRACE > LOG > ALLOW), so
 *   an "errno" rule of a later filter beats our NOTIFY; and only one filter per task
 *   chain may own a listener (a second fails with EBUSY).
 * - A rule with no argument conditions that resolves to ALLOW is served by the
 *   kernel's per-syscall action cache without running BPF (~8 ns/syscall, against
 *   ~25 ns once the BPF runs; reference/environment.md §2.1).  So policies keep hot
 *   syscalls (read, write, futex, mmap...) unconditional.
 * - libseccomp compares all 64 bits of an argument; the kernel truncates int
 *   arguments (socket's domain, unshare's flags).  A deny rule "arg0 == X" could be
 *   dodged by setting the upper bits, so the shipped policies deny with bit masks
 *   ("arg0 & CLONE_NEWUSER") or allow with "==" under a denying default.
 * - Foreign-arch syscalls (i386 int 0x80 from an x86_64 process) get the bad-arch
 *   action: NOTIFY when we have a listener (the verdict then names "i386:..."), else
 *   KILL_PROCESS. */
#include "kcage/seccomp.h"
#include "policy_internal.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "kcage/cleanup.h"

static uint32_t scmp_action(kc_sc_action a, int e) {
  switch (a) {
  case KC_SC_ALLOW:
    return SCMP_ACT_ALLOW;
  case KC_SC_ERRNO:
    return SCMP_ACT_ERRNO((uint32_t)e);
  case KC_SC_KILL:
  case KC_SC_NOTIFY:
    break;
  }
  return SCMP_ACT_NOTIFY;
}

bool kc_policy_needs_listener(const kc_policy *p) {
  if (p->has_default && (p->default_action == KC_SC_KILL || p->default_action == KC_SC_NOTIFY))
    return true;
  for (size_t i = 0; i < p->n_rules; i++)
    if (p->rules[i].action == KC_SC_KILL || p->rules[i].action == KC_SC_NOTIFY)
      return true;
  return false;
}

static bool has_filter(const kc_policy *p) {
  return p->n_rules > 0 || (p->has_default && p->default_action != KC_SC_ALLOW);
}

/* sysinfo(2) tells the host's uptime, loads, free memory and process count, which no
 * file system can mask.  Where the policy lets a program call it unconditionally, a
 * sandbox's filter hands it to the supervisor instead, which answers with the
 * sandbox's own figures (kc_seccomp_notify_sysinfo).  A conditional rule or another
 * action is the policy's own decision and stays as written. */
bool kc_policy_views_sysinfo(const kc_policy *p) {
  bool ruled = false;
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    if (r->nr != SCMP_SYS(sysinfo))
      continue;
    if (r->n_conds || r->action != KC_SC_ALLOW)
      return false;
    ruled = true;
  }
  return ruled || !p->has_default || p->default_action == KC_SC_ALLOW;
}

bool kc_seccomp_is_sysinfo_view(const kc_policy *p, const kc_seccomp_event *ev) {
  return ev->arch == seccomp_arch_native() && ev->nr == SCMP_SYS(sysinfo) &&
         kc_policy_views_sysinfo(p);
}

static enum scmp_compare scmp_op(kc_sc_op op) {
  switch (op) {
  case KC_SC_EQ:
    return SCMP_CMP_EQ;
  case KC_SC_NE:
    return SCMP_CMP_NE;
  case KC_SC_LT:
    return SCMP_CMP_LT;
  case KC_SC_LE:
    return SCMP_CMP_LE;
  case KC_SC_GT:
    return SCMP_CMP_GT;
  case KC_SC_GE:
    return SCMP_CMP_GE;
  case KC_SC_MASKED:
  case KC_SC_ANYBIT:
    break;
  }
  return SCMP_CMP_MASKED_EQ;
}

/* "arg & MASK" (any bit) is not one libseccomp comparison: it is the union over the
 * bits of MASK of "arg & BIT == BIT".  Rules of one action on one syscall are OR'ed,
 * so each combination of chosen bits becomes one rule. */
static int add_expanded(scmp_filter_ctx ctx, uint32_t act, const kc_sc_rule *r, unsigned ci,
                        struct scmp_arg_cmp *cmp, unsigned *budget) {
  if (ci == r->n_conds) {
    if (!(*budget)--)
      return -E2BIG;
    return seccomp_rule_add_array(ctx, act, r->nr, r->n_conds, cmp);
  }
  const kc_sc_cond *c = &r->conds[ci];
  if (c->op != KC_SC_ANYBIT) {
    cmp[ci] = (struct scmp_arg_cmp){.arg = c->arg, .op = scmp_op(c->op)};
    if (c->op == KC_SC_MASKED) {
      cmp[ci].datum_a = c->mask;
      cmp[ci].datum_b = c->value;
    } else {
      cmp[ci].datum_a = c->value;
    }
    return add_expanded(ctx, act, r, ci + 1, cmp, budget);
  }
  for (unsigned b = 0; b < 64; b++) {
    uint64_t bit = 1ull << b;
    if (!(c->mask & bit))
      continue;
    cmp[ci] = (struct scmp_arg_cmp){
        .arg = c->arg, .op = SCMP_CMP_MASKED_EQ, .datum_a = bit, .datum_b = bit};
    int rc = add_expanded(ctx, act, r, ci + 1, cmp, budget);
    if (rc < 0)
      return rc;
  }
  return 0;
}

static int set_attrs(scmp_filter_ctx ctx, bool listener, kc_error *err) {
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
                            listener ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS);
  /* Filter every thread of the caller, not only the calling one.  With a listener
   * this needs API level 6 (TSYNC_ESRCH); callers of kcage are single-threaded at this
   * point anyway (a forked child). */
  /* A binary tree over syscall numbers rather than a linear list: loading costs the
   * kernel one filter walk per syscall number (it precomputes the action cache), so a
   * shorter path per number makes the child's seccomp() call ~40% cheaper (measure:
   * ~200 -> ~120 us here, bench_policy); the per-call cost does not get worse. */
  if (rc == 0)
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc == 0 && (!listener || seccomp_api_get() >= 6))
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
  return rc < 0 ? kc_error_set(err, -rc, "seccomp_attr_set") : 0;
}

/* The policy's rules, but those the default action already does; with a view (an
 * action, 0 for none), sysinfo gets it instead of the policy's allow. */
static int add_rules(scmp_filter_ctx ctx, const kc_policy *p, uint32_t def, uint32_t view,
                     kc_error *err) {
  if (view && def != view) {
    int rc = seccomp_rule_add(ctx, view, SCMP_SYS(sysinfo), 0);
    if (rc < 0)
      return kc_error_set(err, -rc, "seccomp: sysinfo view rule");
  }
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    uint32_t act = scmp_action(r->action, r->errno_val);
    if (act == def || (view && r->nr == SCMP_SYS(sysinfo)))
      continue; /* the default already does it; libseccomp refuses such rules */
    struct scmp_arg_cmp cmp[KC_SC_MAX_CONDS];
    unsigned budget = 256;
    int rc = add_expanded(ctx, act, r, 0, cmp, &budget);
    if (rc == -E2BIG)
      return kc_error_set(err, 0, "%s:%d: %s: bit masks expand to more than 256 rules",
                          p->files[r->file], r->line, r->name);
    if (rc < 0)
      return kc_error_set(err, -rc, "%s:%d: %s: libseccomp rejected the rule", p->files[r->file],
                          r->line, r->name);
  }
  return 0;
}

/* The hand-off (kc_seccomp_install_and_send) runs under the filter: it sends on
 * `handoff` and then closes the listener and may close the socket. */
static int allow_handoff(scmp_filter_ctx ctx, const kc_policy *p, int handoff, kc_error *err) {
  const int nrs[] = {SCMP_SYS(sendmsg), SCMP_SYS(close)};
  for (size_t k = 0; k < 2; k++) {
    bool ruled = false;
    for (size_t i = 0; i < p->n_rules; i++) {
      const kc_sc_rule *r = &p->rules[i];
      if (r->nr != nrs[k])
        continue;
      ruled = true;
      if (!r->n_conds && scmp_action(r->action, r->errno_val) != SCMP_ACT_ALLOW)
        return kc_error_set(err, 0,
                            "%s:%d: %s: an unconditional rule other than allow leaves no "
                            "way to hand the listener to the supervisor",
                            p->files[r->file], r->line, r->name);
    }
    int rc;
    if (k == 0 && handoff == KC_HANDOFF_ANY)
      rc = ruled ? 0 : seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nrs[k], 0);
    else if (k == 0)
      rc = seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, nrs[k], 1,
          (struct scmp_arg_cmp){
              .arg = 0, .op = SCMP_CMP_EQ, .datum_a = (scmp_datum_t)handoff, .datum_b = 0});
    else if (!ruled)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nrs[k], 0);
    else
      rc = 0; /* the policy decides about close; it must allow the listener's */
    if (rc < 0 && rc != -EACCES && rc != -EEXIST)
      return kc_error_set(err, -rc, "seccomp: hand-off rule");
  }
  return 0;
}

/* Build the libseccomp context; *out = NULL when the policy filters nothing.
 * handoff >= 0: also allow sendmsg on that fd (see kc_seccomp_install_and_send);
 * KC_HANDOFF_ANY: allow sendmsg on any fd (kc_policy_install_seccomp, whose caller
 * sends the listener on a socket we do not know).  view: sysinfo's action (NOTIFY: to
 * the listener; TRAP: to the worker's own SIGSYS handler; 0: the policy's), already
 * checked against the policy (kc_policy_views_sysinfo, by prog_compile). */
static int build(const kc_policy *p, int handoff, uint32_t view, scmp_filter_ctx *out,
                 kc_error *err) {
  *out = NULL;
  if (!has_filter(p) && !view)
    return 0;
  bool listener = kc_policy_needs_listener(p) || view == SCMP_ACT_NOTIFY;
  uint32_t def = p->has_default ? scmp_action(p->default_action, p->default_errno) : SCMP_ACT_ALLOW;
  scmp_filter_ctx ctx = seccomp_init(def);
  if (!ctx)
    return kc_error_set(err, ENOMEM, "seccomp_init");
  bool handing_off = handoff != KC_HANDOFF_NONE && listener && def != SCMP_ACT_ALLOW;
  if (set_attrs(ctx, listener, err) < 0 || add_rules(ctx, p, def, view, err) < 0 ||
      (handing_off && allow_handoff(ctx, p, handoff, err) < 0)) {
    seccomp_release(ctx);
    return -1;
  }
  *out = ctx;
  return 0;
}

int kc_policy_check_seccomp(const kc_policy *p, FILE *out, kc_error *err) {
  scmp_filter_ctx ctx;
  if (build(p, KC_HANDOFF_NONE, 0, &ctx, err) < 0)
    return -1;
  if (!ctx)
    return 0;
  /* The BPF length, for `kcage policy check` (export needs an fd). */
  long insns = 0;
  FILE *t = tmpfile();
  if (t) {
    if (seccomp_export_bpf(ctx, fileno(t)) == 0) {
      off_t end = lseek(fileno(t), 0, SEEK_END);
      if (end > 0)
        insns = end / 8; /* sizeof(struct sock_filter) */
    }
    fclose(t);
  }
  int rc;
  if (out) {
    fflush(out);
    rc = seccomp_export_pfc(ctx, fileno(out));
    if (rc < 0) {
      seccomp_release(ctx);
      return kc_error_set(err, -rc, "seccomp_export_pfc");
    }
  }
  seccomp_release(ctx);
  return (int)insns;
}

int kc_seccomp_install(const kc_policy *p, int handoff, int *listener_fd, kc_error *err) {
  *listener_fd = -1;
  scmp_filter_ctx ctx;
  if (build(p, handoff, false, &ctx, err) < 0)
    return -1;
  if (!ctx)
    return 0;
  int rc = seccomp_load(ctx);
  if (rc < 0) {
    seccomp_release(ctx);
    return kc_error_set(err, -rc, "seccomp_load");
  }
  if (kc_policy_needs_listener(p)) {
    int fd = seccomp_notify_fd(ctx);
    if (fd < 0) {
      seccomp_release(ctx);
      return kc_error_set(err, fd == -EOPNOTSUPP ? EOPNOTSUPP : -fd, "seccomp_notify_fd");
    }
    *listener_fd = fd;
  }
  /* seccomp_release does not close the notify fd (libseccomp 2.5: it is the
   * caller's once returned by seccomp_notify_fd). */
  seccomp_release(ctx);
  return 0;
}

int kc_policy_install_seccomp(const kc_policy *p, int *listener_fd, kc_error *err) {
  return kc_seccomp_install(p, KC_HANDOFF_ANY, listener_fd, err);
}

/* ---- precompiled programs ------------------------------------------------------
 * Building the libseccomp context costs far more than loading the result, and
 * libseccomp allocates: neither belongs in a child forked from a possibly
 * multi-threaded parent on the spawn path.  So the parent compiles once and the child
 * only makes the seccomp() call. */

struct kc_seccomp_prog {
  struct sock_filter *insns;
  unsigned short len;
  bool listener;
};

/* The cache key: everything build() reads, as fixed-width fields (a growable buffer). */
typedef struct key_buf {
  unsigned char *v;
  size_t n, cap;
  bool failed;
} key_buf;

static void key_add(key_buf *k, const void *p, size_t n) {
  if (k->failed)
    return;
  if (k->n + n > k->cap) {
    size_t cap = k->cap ? k->cap * 2 : 4096;
    while (cap < k->n + n)
      cap *= 2;
    unsigned char *v = realloc(k->v, cap);
    if (!v) {
      k->failed = true;
      return;
    }
    k->v = v;
    k->cap = cap;
  }
  memcpy(k->v + k->n, p, n);
  k->n += n;
}

static void key_i64(key_buf *k, int64_t x) {
  key_add(k, &x, sizeof x);
}

static void key_str(key_buf *k, const char *s) {
  key_add(k, s, strlen(s) + 1);
}

/* This build of the compiler (its logic is in this file), libseccomp's version and
 * the kernel's seccomp features (the API level it probed, the kernel build), the
 * hand-off fd, and the policy's default and rules: all that the program depends on. */
static unsigned char *cache_key(const kc_policy *p, int handoff, uint32_t view, size_t *len) {
  key_buf k = {0};
  key_str(&k, "kcage seccomp program 1 " KC_VERSION " " __DATE__ " " __TIME__);
  const struct scmp_version *v = seccomp_version();
  key_i64(&k, v ? (int64_t)(v->major << 20 | v->minor << 10 | v->micro) : -1);
  key_i64(&k, (int64_t)seccomp_api_get());
  struct utsname u;
  if (uname(&u) < 0)
    k.failed = true;
  key_str(&k, u.release);
  key_str(&k, u.version);
  key_str(&k, u.machine);
  key_i64(&k, handoff);
  key_i64(&k, view);
  key_i64(&k, p->has_default);
  key_i64(&k, p->default_action);
  key_i64(&k, p->default_errno);
  key_i64(&k, (int64_t)p->n_rules);
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    key_i64(&k, r->nr);
    key_i64(&k, r->action);
    key_i64(&k, r->errno_val);
    key_i64(&k, r->n_conds);
    for (unsigned c = 0; c < r->n_conds && c < KC_SC_MAX_CONDS; c++) {
      key_i64(&k, r->conds[c].arg);
      key_i64(&k, r->conds[c].op);
      key_add(&k, &r->conds[c].mask, sizeof r->conds[c].mask);
      key_add(&k, &r->conds[c].value, sizeof r->conds[c].value);
    }
  }
  if (k.failed) {
    free(k.v);
    return NULL;
  }
  *len = k.n;
  return k.v;
}

static int compile_fresh(const kc_policy *p, int handoff, uint32_t view, kc_seccomp_prog *prog,
                         kc_error *err);

static int prog_compile(const kc_policy *p, int handoff, bool cached, uint32_t view,
                        kc_seccomp_prog **out, kc_error *err) {
  *out = NULL;
  view = kc_policy_views_sysinfo(p) ? view : 0;
  kc_seccomp_prog *prog = calloc(1, sizeof *prog);
  if (!prog)
    return kc_error_set(err, ENOMEM, "seccomp program");
  if (!has_filter(p) && !view) { /* nothing to filter: loading is a no-op */
    *out = prog;
    return 0;
  }
  size_t klen = 0;
  kc_cleanup_free unsigned char *key = cached ? cache_key(p, handoff, view, &klen) : NULL;
  if (key && kc__bpf_cache_get(key, klen, &prog->insns, &prog->len) == 0) {
    prog->listener = kc_policy_needs_listener(p) || view == SCMP_ACT_NOTIFY;
    *out = prog;
    return 0;
  }
  if (compile_fresh(p, handoff, view, prog, err) < 0)
    return -1; /* prog freed */
  if (key && prog->len)
    kc__bpf_cache_put(key, klen, prog->insns, prog->len);
  *out = prog;
  return 0;
}

int kc_seccomp_prog_compile(const kc_policy *p, int handoff, kc_seccomp_prog **out, kc_error *err) {
  return prog_compile(p, handoff, true, 0, out, err);
}

int kc_seccomp_prog_compile_sandbox(const kc_policy *p, int handoff, kc_seccomp_prog **out,
                                    kc_error *err) {
  return prog_compile(p, handoff, true, SCMP_ACT_NOTIFY, out, err);
}

/* A pool worker's parent reads its listener only while it waits for one of its calls,
 * so sysinfo goes to a relay thread of the parent's that answers it at once
 * (worker/sysinfo_relay.c).  Not a trap that the worker's own SIGSYS handler answers: a
 * trap survives an exec and a program the worker exec'd has no handler for it (ld,
 * which calls sysinfo, would die of it), and a thread that blocks SIGSYS is killed by
 * the kernel at its first sysinfo, unnamed. */
bool kc_seccomp_worker_notifies_sysinfo(const kc_policy *p) {
  return kc_policy_views_sysinfo(p);
}

int kc_seccomp_prog_compile_worker(const kc_policy *p, int handoff, bool cached,
                                   kc_seccomp_prog **out, kc_error *err) {
  return prog_compile(p, handoff, cached, SCMP_ACT_NOTIFY, out, err);
}

/* libseccomp's compile and export into prog; on failure prog is freed. */
static int compile_fresh(const kc_policy *p, int handoff, uint32_t view, kc_seccomp_prog *prog,
                         kc_error *err) {
  scmp_filter_ctx ctx;
  if (build(p, handoff, view, &ctx, err) < 0) {
    free(prog);
    return -1;
  }
  if (!ctx) /* nothing to filter: loading is a no-op */
    return 0;
  int fd = memfd_create("kcage-bpf", MFD_CLOEXEC);
  int rc = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  off_t size = rc == 0 ? lseek(fd, 0, SEEK_END) : -1;
  if (rc < 0 || size <= 0 || size % sizeof(struct sock_filter) ||
      size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
    if (fd >= 0)
      close(fd);
    free(prog);
    return kc_error_set(err, rc < 0 ? -rc : EINVAL, "seccomp: export the filter");
  }
  prog->insns = malloc((size_t)size);
  if (!prog->insns || pread(fd, prog->insns, (size_t)size, 0) != size) {
    close(fd);
    kc_seccomp_prog_free(prog);
    return kc_error_set(err, EIO, "seccomp: read the exported filter");
  }
  close(fd);
  prog->len = (unsigned short)(size / sizeof(struct sock_filter));
  prog->listener = kc_policy_needs_listener(p) || view == SCMP_ACT_NOTIFY;
  return 0;
}

void kc_seccomp_prog_free(kc_seccomp_prog *prog) {
  if (!prog)
    return;
  free(prog->insns);
  free(prog);
}

size_t kc_seccomp_prog_len(const kc_seccomp_prog *prog) {
  return prog->len;
}

int kc_seccomp_prog_load(const kc_seccomp_prog *prog, int *listener) {
  *listener = -1;
  if (!prog->len)
    return 0;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return -1;
  struct sock_fprog fp = {.len = prog->len, .filter = prog->insns};
  long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                   prog->listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &fp);
  if (r < 0)
    return -1;
  if (prog->listener)
    *listener = (int)r; /* the kernel made it O_CLOEXEC */
  return 0;
}
