/* The seccomp statements of the policy language: `default ACTION` and
 * `ACTION SYSCALL... [COND and COND...]`, their argument conditions, and how a rule
 * joins the ones already read (an includer's rule replaces its includes'; within one
 * file rules on a syscall must not contradict).  policy_parse.c has the grammar. */
#include "policy_parse.h"

#include <ctype.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int parse_action(parse_ctx *c, const loc *l, char **w, int n, int *i, kc_sc_action *a,
                        int *e) {
  const char *s = w[*i];
  (*i)++;
  if (!strcmp(s, "allow"))
    *a = KC_SC_ALLOW;
  else if (!strcmp(s, "kill"))
    *a = KC_SC_KILL;
  else if (!strcmp(s, "notify"))
    *a = KC_SC_NOTIFY;
  else if (!strcmp(s, "errno")) {
    *a = KC_SC_ERRNO;
    if (*i >= n)
      return kc__pol_err(c, l, "errno: expected an errno (EPERM, 1, ...)");
    if (kc__pol_errno(c, l, w[*i], e) < 0)
      return -1;
    (*i)++;
  } else
    return kc__pol_err(c, l, "unknown action '%s' (allow kill notify errno)", s);
  return 0;
}

int kc__pol_do_default(parse_ctx *c, const loc *l, char **w, int n) {
  if (n < 2)
    return kc__pol_err(c, l, "default: expected allow, kill, notify or errno E");
  int i = 1, e = 0;
  kc_sc_action a = KC_SC_KILL; /* set by parse_action; gcc -O2 cannot see that across files */
  if (parse_action(c, l, w, n, &i, &a, &e) < 0)
    return -1;
  if (i != n)
    return kc__pol_err(c, l, "default: unexpected '%s'", w[i]);
  c->p->has_default = true;
  c->p->default_action = a;
  c->p->default_errno = e;
  return 0;
}

static char *skip_space(char *q) {
  while (isspace((unsigned char)*q))
    q++;
  return q;
}

/* One value word at *qp: it ends at a space, or also at an operator when at_op.  Its
 * value into *v and *qp past it; `after` names what it follows, for the error. */
static int value_word(parse_ctx *c, const loc *l, char **qp, bool at_op, const char *after,
                      unsigned arg, uint64_t *v) {
  char *start = skip_space(*qp), *q = start;
  while (*q && !isspace((unsigned char)*q) && !(at_op && strchr("=!<>&", *q)))
    q++;
  if (q == start)
    return kc__pol_err(c, l, "expected a value after %s on arg%u", after, arg);
  char save = *q;
  *q = '\0';
  int rc = kc__pol_value(c, l, start, v);
  *q = save;
  *qp = q;
  return rc < 0 ? -1 : 0;
}

/* "argN" at *qp (N = 0..5, an argument with no condition yet): the rule's next
 * condition is started on it. */
static int cond_arg(parse_ctx *c, const loc *l, char **qp, kc_sc_rule *r) {
  char *q = skip_space(*qp);
  if (strncmp(q, "arg", 3) || q[3] < '0' || q[3] > '5' || isalnum((unsigned char)q[4]))
    return kc__pol_err(c, l, "expected a condition argN (N = 0..5) at '%s'", q);
  if (r->n_conds == KC_SC_MAX_CONDS)
    return kc__pol_err(c, l, "too many conditions");
  kc_sc_cond *cd = &r->conds[r->n_conds];
  *cd = (kc_sc_cond){.arg = (unsigned)(q[3] - '0')};
  for (unsigned j = 0; j < r->n_conds; j++)
    if (r->conds[j].arg == cd->arg)
      return kc__pol_err(c, l,
                         "two conditions on arg%u (libseccomp allows one per argument; "
                         "write a second rule)",
                         cd->arg);
  *qp = q + 4;
  return 0;
}

static int cond_op(parse_ctx *c, const loc *l, char **qp, kc_sc_cond *cd) {
  static const struct {
    const char *tok;
    kc_sc_op op;
  } ops[] = {{"==", KC_SC_EQ}, {"!=", KC_SC_NE}, {"<=", KC_SC_LE},   {">=", KC_SC_GE},
             {"<", KC_SC_LT},  {">", KC_SC_GT},  {"&", KC_SC_ANYBIT}};
  char *q = skip_space(*qp);
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    if (!strncmp(q, ops[k].tok, strlen(ops[k].tok))) {
      cd->op = ops[k].op;
      *qp = q + strlen(ops[k].tok);
      return 0;
    }
  return kc__pol_err(c, l, "expected an operator (== != < <= > >= &) after arg%u", cd->arg);
}

/* The value after the operator; after '&' a mask, and "== VALUE" when given. */
static int cond_value(parse_ctx *c, const loc *l, char **qp, kc_sc_cond *cd) {
  uint64_t v;
  if (value_word(c, l, qp, true, "the operator", cd->arg, &v) < 0)
    return -1;
  if (cd->op != KC_SC_ANYBIT) {
    cd->value = v;
    return 0;
  }
  cd->mask = v;
  if (!v)
    return kc__pol_err(c, l, "arg%u & 0: an empty mask never matches", cd->arg);
  char *q = skip_space(*qp);
  if (q[0] != '=' || q[1] != '=')
    return 0;
  *qp = q + 2;
  if (value_word(c, l, qp, false, "'=='", cd->arg, &cd->value) < 0)
    return -1;
  if (cd->value & ~cd->mask)
    return kc__pol_err(c, l,
                       "arg%u & MASK == VALUE: VALUE has bits outside MASK, never "
                       "matches",
                       cd->arg);
  cd->op = KC_SC_MASKED;
  return 0;
}

/* Conditions: "arg0 == AF_UNIX and arg2 & PROT_EXEC" as one string. */
static int parse_conds(parse_ctx *c, const loc *l, char *s, kc_sc_rule *r) {
  char *q = s;
  for (;;) {
    if (cond_arg(c, l, &q, r) < 0)
      return -1;
    kc_sc_cond *cd = &r->conds[r->n_conds];
    if (cond_op(c, l, &q, cd) < 0 || cond_value(c, l, &q, cd) < 0)
      return -1;
    r->n_conds++;
    q = skip_space(q);
    if (!*q)
      return 0;
    if (strncmp(q, "and", 3) || !isspace((unsigned char)q[3]))
      return kc__pol_err(c, l, "unexpected '%s' (conditions are joined with 'and')", q);
    q += 3;
  }
}

static bool same_conds(const kc_sc_rule *a, const kc_sc_rule *b) {
  if (a->n_conds != b->n_conds)
    return false;
  for (unsigned i = 0; i < a->n_conds; i++) {
    const kc_sc_cond *x = &a->conds[i];
    bool found = false;
    for (unsigned j = 0; j < b->n_conds; j++) {
      const kc_sc_cond *y = &b->conds[j];
      if (x->arg == y->arg && x->op == y->op && x->mask == y->mask && x->value == y->value)
        found = true;
    }
    if (!found)
      return false;
  }
  return true;
}

static void rule_free(kc_sc_rule *r) {
  free(r->name);
  r->name = NULL;
}

static int add_rule(parse_ctx *c, const loc *l, kc_sc_rule r) {
  kc_policy *p = c->p;
  /* An includer's rule replaces what its includes said about this syscall. */
  bool fresh = r.nr >= 0 && r.nr < 1024 && !(p->nr_seen[r.nr / 64] & (1ull << (r.nr % 64)));
  if (r.nr >= 0 && r.nr < 1024)
    p->nr_seen[r.nr / 64] |= 1ull << (r.nr % 64);
  bool stale = false;
  for (size_t i = 0; i < p->n_rules && !stale && !fresh; i++)
    stale = p->rules[i].nr == r.nr && p->rules[i].file != r.file;
  if (stale) { /* compact only when needed: the rule structs are not small */
    size_t o = 0;
    for (size_t i = 0; i < p->n_rules; i++) {
      if (p->rules[i].nr == r.nr && p->rules[i].file != r.file)
        rule_free(&p->rules[i]);
      else if (o != i)
        p->rules[o++] = p->rules[i];
      else
        o++;
    }
    p->n_rules = o;
  }
  for (size_t i = 0; i < p->n_rules && !fresh; i++) {
    kc_sc_rule *x = &p->rules[i];
    if (x->nr != r.nr)
      continue;
    bool same_action =
        x->action == r.action && (r.action != KC_SC_ERRNO || x->errno_val == r.errno_val);
    if (same_conds(x, &r)) {
      if (same_action) {
        free(r.name); /* a harmless repeat */
        return 0;
      }
      free(r.name);
      return kc__pol_err(c, l, "%s: contradicts the rule at line %d", x->name, x->line);
    }
    if (!x->n_conds || !r.n_conds) {
      int other = x->line;
      char *nm = x->name;
      kc__pol_err(c, l,
                  "%s: a rule without conditions cannot be combined with conditional rules "
                  "for the same syscall (line %d); use conditions on both or the default",
                  nm, other);
      free(r.name);
      return -1;
    }
  }
  if (kc__pol_grow((void **)&p->rules, &p->cap_rules, p->n_rules, sizeof *p->rules) < 0) {
    free(r.name);
    return kc__pol_err(c, l, "out of memory");
  }
  p->rules[p->n_rules++] = r;
  return 0;
}

int kc__pol_do_rule(parse_ctx *c, const loc *l, char **w, int n) {
  int i = 0, e = 0;
  kc_sc_action a = KC_SC_KILL; /* set by parse_action; gcc -O2 cannot see that across files */
  if (parse_action(c, l, w, n, &i, &a, &e) < 0)
    return -1;
  if (i >= n)
    return kc__pol_err(c, l, "%s: expected syscall names", w[0]);
  /* Conditions start at the first word argN after the (single) syscall. */
  int cond_at = -1;
  for (int j = i; j < n; j++)
    if (!strncmp(w[j], "arg", 3) && w[j][3] >= '0' && w[j][3] <= '9') {
      cond_at = j;
      break;
    }
  if (cond_at == i)
    return kc__pol_err(c, l, "%s: expected a syscall name before '%s'", w[0], w[i]);
  if (cond_at > i + 1)
    return kc__pol_err(c, l, "conditions apply to one syscall; write one line per syscall");
  int last = cond_at < 0 ? n : cond_at;
  for (int j = i; j < last; j++) {
    int nr = seccomp_syscall_resolve_name(w[j]);
    if (nr == __NR_SCMP_ERROR)
      return kc__pol_err(c, l, "unknown syscall '%s'", w[j]);
    kc_sc_rule r = {.nr = nr, .action = a, .errno_val = e, .file = l->file_idx, .line = l->line};
    if (cond_at > 0) {
      char buf[1024] = "";
      for (int k = cond_at; k < n; k++) {
        if (strlen(buf) + strlen(w[k]) + 2 >= sizeof buf)
          return kc__pol_err(c, l, "conditions too long");
        strcat(buf, w[k]);
        strcat(buf, " ");
      }
      if (parse_conds(c, l, buf, &r) < 0)
        return -1;
    }
    r.name = strdup(w[j]);
    if (!r.name)
      return kc__pol_err(c, l, "out of memory");
    if (add_rule(c, l, r) < 0)
      return -1;
  }
  return 0;
}
