/* `kcage policy show`: the resolved policy (includes expanded, overrides applied) in
 * policy syntax, so the output is itself a valid policy file. */
#include "policy_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void put_size(FILE *f, uint64_t v) {
  static const char suf[] = "TGMK";
  for (int i = 0; i < 4; i++) {
    unsigned shift = (unsigned)(40 - 10 * i);
    if (v && v % (1ull << shift) == 0) {
      fprintf(f, "%" PRIu64 "%c", v >> shift, suf[i]);
      return;
    }
  }
  fprintf(f, "%" PRIu64, v);
}

static void put_rlim(FILE *f, rlim_t v) {
  if (v == RLIM_INFINITY)
    fputs("unlimited", f);
  else
    fprintf(f, "%" PRIu64, (uint64_t)v);
}

static void put_action(FILE *f, kc_sc_action a, int e) {
  switch (a) {
  case KC_SC_ALLOW:
    fputs("allow", f);
    break;
  case KC_SC_KILL:
    fputs("kill", f);
    break;
  case KC_SC_NOTIFY:
    fputs("notify", f);
    break;
  case KC_SC_ERRNO: {
    const char *n = kc_policy_errno_name(e);
    if (n)
      fprintf(f, "errno %s", n);
    else
      fprintf(f, "errno %d", e);
    break;
  }
  }
}

static const char *op_text(kc_sc_op op) {
  switch (op) {
  case KC_SC_EQ:
    return "==";
  case KC_SC_NE:
    return "!=";
  case KC_SC_LT:
    return "<";
  case KC_SC_LE:
    return "<=";
  case KC_SC_GT:
    return ">";
  case KC_SC_GE:
    return ">=";
  case KC_SC_MASKED:
  case KC_SC_ANYBIT:
    break;
  }
  return "&";
}

static void dump_namespaces(const kc_policy *p, FILE *f) {
  const kc_policy_namespaces *ns = &p->spec.ns;
  fputs("namespaces", f);
  if (!(ns->user || ns->pid || ns->mount || ns->ipc || ns->uts || ns->cgroup || ns->net))
    fputs(" none", f);
  const struct {
    bool on;
    const char *name;
  } nss[] = {{ns->user, "user"}, {ns->pid, "pid"},       {ns->mount, "mount"}, {ns->ipc, "ipc"},
             {ns->uts, "uts"},   {ns->cgroup, "cgroup"}, {ns->net, "net"}};
  for (size_t i = 0; i < sizeof nss / sizeof nss[0]; i++)
    if (nss[i].on)
      fprintf(f, " %s", nss[i].name);
  fputs("\n", f);
}

static void dump_mounts(const kc_policy *p, FILE *f) {
  for (size_t i = 0; i < p->n_mounts; i++) {
    const kc_policy_mount *m = &p->mounts[i];
    switch (m->kind) {
    case KC_POLICY_MOUNT_RO:
    case KC_POLICY_MOUNT_RW:
      fprintf(f, "%s %s", m->kind == KC_POLICY_MOUNT_RO ? "ro-bind" : "bind", m->src);
      if (strcmp(m->src, m->dst))
        fprintf(f, " %s", m->dst);
      fputs(m->optional ? " optional\n" : "\n", f);
      break;
    case KC_POLICY_MOUNT_TMPFS:
      fprintf(f, "tmpfs %s", m->dst);
      if (m->size) {
        fputc(' ', f);
        put_size(f, m->size);
      }
      fputc('\n', f);
      break;
    case KC_POLICY_MOUNT_PROC:
      fprintf(f, "proc %s\n", m->dst);
      break;
    case KC_POLICY_MOUNT_DEV:
      fprintf(f, "dev %s\n", m->dst);
      break;
    case KC_POLICY_MOUNT_SYMLINK:
      fprintf(f, "symlink %s %s\n", m->src, m->dst);
      break;
    }
  }
}

/* The resource limits, the rlimits and the working directory. */
static void dump_limits(const kc_policy *p, FILE *f) {
  const kc_policy_spec *s = &p->spec;
  if (s->memory_bytes) {
    fputs("limit memory ", f);
    put_size(f, s->memory_bytes);
    fputc('\n', f);
  }
  if (s->cpu_s > 0)
    fprintf(f, "limit cpu %.17g\n", s->cpu_s);
  if (s->wall_s > 0)
    fprintf(f, "limit wall %.17g\n", s->wall_s);
  if (s->pids)
    fprintf(f, "limit pids %" PRIu32 "\n", s->pids);
  if (s->cpus > 0)
    fprintf(f, "limit cpus %.17g\n", s->cpus);
  if (s->output_bytes) {
    fputs("limit output ", f);
    put_size(f, s->output_bytes);
    fputc('\n', f);
  }
  for (size_t i = 0; i < p->n_rlimits; i++) {
    fprintf(f, "rlimit %s ", kc_policy_rlimit_name(p->rlimits[i].resource));
    put_rlim(f, p->rlimits[i].soft);
    fputc(' ', f);
    put_rlim(f, p->rlimits[i].hard);
    fputc('\n', f);
  }
  if (p->cwd)
    fprintf(f, "cwd %s\n", p->cwd);
}

/* The seccomp default and every rule, with the FILE:LINE it came from. */
static void dump_rules(const kc_policy *p, FILE *f) {
  if (p->has_default) {
    fputs("default ", f);
    put_action(f, p->default_action, p->default_errno);
    fputc('\n', f);
  }
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    put_action(f, r->action, r->errno_val);
    fprintf(f, " %s", r->name);
    for (unsigned j = 0; j < r->n_conds; j++) {
      const kc_sc_cond *c = &r->conds[j];
      fprintf(f, "%s arg%u %s ", j ? " and" : "", c->arg, op_text(c->op));
      if (c->op == KC_SC_MASKED)
        fprintf(f, "0x%" PRIx64 " == 0x%" PRIx64, c->mask, c->value);
      else if (c->op == KC_SC_ANYBIT)
        fprintf(f, "0x%" PRIx64, c->mask);
      else
        fprintf(f, "0x%" PRIx64, c->value);
    }
    fprintf(f, "  # %s:%d%s\n", p->files[r->file], r->line,
            r->nr < 0 ? " (no such syscall on this architecture: no effect)" : "");
  }
}

int kc_policy_dump(const kc_policy *p, FILE *f, kc_error *err) {
  fprintf(f, "# policy %s, resolved from:", p->name ? p->name : "?");
  for (size_t i = 0; i < p->n_files; i++)
    fprintf(f, " %s", p->files[i]);
  fputs("\n", f);
  dump_namespaces(p, f);
  dump_mounts(p, f);
  dump_limits(p, f);
  dump_rules(p, f);
  if (ferror(f))
    return kc_error_set(err, EIO, "policy %s: write", p->name);
  return 0;
}
