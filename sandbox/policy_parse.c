/* The policy language (docs/contracts.md).  One statement per line, words separated by
 * blanks, `#` starts a comment.  The full grammar is in policies/README.policy-syntax
 * (and the top of policies/base.policy); in short:
 *
 *   include NAME|PATH              read another policy first (once; cycles are errors)
 *   namespaces user pid mount ipc uts cgroup net | all | none
 *   ro-bind SRC [DST] [optional]   bind SRC: DST read-only / read-write ("optional":
 *   bind SRC [DST] [optional]        a missing SRC is skipped)
 *   tmpfs DST [SIZE]   proc [DST]   dev [DST]   symlink TARGET LINK
 *   limit memory|cpu|wall|pids|cpus|output VALUE|none
 *   rlimit NAME SOFT [HARD]        e.g. rlimit nofile 256, rlimit core 0
 *   cwd DIR
 *   default allow|kill|notify|errno E
 *   allow|kill|notify SYSCALL...   errno E SYSCALL...
 *   allow|kill|notify SYSCALL COND [and COND]...   errno E SYSCALL COND...
 *     COND: argN OP VALUE (OP: == != < <= > >=), argN & MASK (any bit set),
 *           argN & MASK == VALUE; VALUE: numbers or names (AF_UNIX, PROT_EXEC, ...)
 *           joined with |.
 *
 * Overrides: a file that writes a rule for a syscall replaces every rule its includes
 * wrote for that syscall; within one file, rules on a syscall must not contradict.
 * Later namespaces/limit/rlimit/cwd/default lines replace earlier ones; a mount on a
 * DST already mounted replaces that mount in place. */
#include "kcage/units.h"
#include "policy_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <seccomp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kcage/cleanup.h"

#define KC_INCLUDE_DEPTH_MAX 16
#define KC_WORDS_MAX 64
#define KC_POLICY_FILE_MAX (1 << 20)

typedef struct parse_ctx {
  kc_policy *p;
  kc_error *err;
  char *stack[KC_INCLUDE_DEPTH_MAX + 1]; /* real paths of the files being read */
  int depth;
  char **seen; /* real paths already read (include once) */
  size_t n_seen;
} parse_ctx;

typedef struct loc {
  const char *file;
  int line;
  int file_idx;
} loc;

__attribute__((format(printf, 3, 4))) static int perr(parse_ctx *c, const loc *l, const char *fmt,
                                                      ...) {
  char msg[KC_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (l)
    return kc_error_set(c->err, 0, "%s:%d: %s", l->file, l->line, msg);
  return kc_error_set(c->err, 0, "%s", msg);
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return 0;
  size_t nc = *cap ? *cap * 2 : 8;
  void *na = realloc(*arr, nc * elem);
  if (!na)
    return -1;
  *arr = na;
  *cap = nc;
  return 0;
}

/* ---- values ---------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out) {
  if (!isdigit((unsigned char)s[0]))
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end)
    return -1;
  *out = v;
  return 0;
}

/* NAME|NAME|0x10 */
static int parse_value(parse_ctx *c, const loc *l, const char *s, uint64_t *out) {
  uint64_t acc = 0;
  char buf[128];
  if (strlen(s) >= sizeof buf || !*s)
    return perr(c, l, "bad value '%s'", s);
  strcpy(buf, s);
  char *save = NULL;
  int parts = 0;
  for (char *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save), parts++) {
    uint64_t v;
    if (isdigit((unsigned char)t[0])) {
      if (parse_u64(t, &v) < 0)
        return perr(c, l, "bad number '%s'", t);
    } else if (t[0] == '-' && isdigit((unsigned char)t[1])) { /* -1: fd/pid sentinels */
      if (parse_u64(t + 1, &v) < 0 || v > (uint64_t)INT64_MAX)
        return perr(c, l, "bad number '%s'", t);
      v = (uint64_t)(-(int64_t)v);
    } else if (kc_policy_const_lookup(t, &v) < 0) {
      return perr(c, l, "unknown constant '%s'", t);
    }
    acc |= v;
  }
  if (!parts || s[strlen(s) - 1] == '|' || s[0] == '|' || strstr(s, "||"))
    return perr(c, l, "bad value '%s'", s);
  *out = acc;
  return 0;
}

static int parse_errno(parse_ctx *c, const loc *l, const char *s, int *out) {
  if (isdigit((unsigned char)s[0])) {
    uint64_t v;
    if (parse_u64(s, &v) < 0 || v < 1 || v > 4095)
      return perr(c, l, "bad errno '%s' (1..4095 or a name such as EPERM)", s);
    *out = (int)v;
    return 0;
  }
  int e = kc_policy_errno_lookup(s);
  if (e < 0)
    return perr(c, l, "unknown errno name '%s'", s);
  *out = e;
  return 0;
}

static bool is_abs_path(const char *s) {
  return s[0] == '/';
}

static int check_path(parse_ctx *c, const loc *l, const char *what, const char *s) {
  if (!is_abs_path(s))
    return perr(c, l, "%s '%s' must be an absolute path", what, s);
  for (const char *q = s; *q; q++)
    if (q[0] == '/' && q[1] == '.' && q[2] == '.' && (q[3] == '/' || q[3] == '\0'))
      return perr(c, l, "%s '%s' must not contain '..'", what, s);
  return 0;
}

/* ---- statements ------------------------------------------------------------- */

static int do_namespaces(parse_ctx *c, const loc *l, char **w, int n) {
  kc_policy_namespaces ns = {0};
  if (n < 2)
    return perr(c, l,
                "namespaces: expected names (user pid mount ipc uts cgroup net), "
                "'all' or 'none'");
  for (int i = 1; i < n; i++) {
    if (!strcmp(w[i], "all")) {
      ns = (kc_policy_namespaces){true, true, true, true, true, true, true};
    } else if (!strcmp(w[i], "none")) {
      if (n != 2)
        return perr(c, l, "namespaces: 'none' stands alone");
    } else if (!strcmp(w[i], "user")) {
      ns.user = true;
    } else if (!strcmp(w[i], "pid")) {
      ns.pid = true;
    } else if (!strcmp(w[i], "mount")) {
      ns.mount = true;
    } else if (!strcmp(w[i], "ipc")) {
      ns.ipc = true;
    } else if (!strcmp(w[i], "uts")) {
      ns.uts = true;
    } else if (!strcmp(w[i], "cgroup")) {
      ns.cgroup = true;
    } else if (!strcmp(w[i], "net")) {
      ns.net = true;
    } else {
      return perr(c, l, "namespaces: unknown namespace '%s'", w[i]);
    }
  }
  c->p->spec.ns = ns;
  return 0;
}

static int add_mount(parse_ctx *c, const loc *l, kc_policy_mount m) {
  kc_policy *p = c->p;
  for (size_t i = 0; i < p->n_mounts; i++)
    if (!strcmp(p->mounts[i].dst, m.dst)) {
      free(p->mounts[i].src);
      free(p->mounts[i].dst);
      p->mounts[i] = m;
      return 0;
    }
  if (grow((void **)&p->mounts, &p->cap_mounts, p->n_mounts, sizeof *p->mounts) < 0) {
    free(m.src);
    free(m.dst);
    return perr(c, l, "out of memory");
  }
  p->mounts[p->n_mounts++] = m;
  return 0;
}

static int do_mount(parse_ctx *c, const loc *l, char **w, int n) {
  kc_policy_mount m = {0};
  const char *kw = w[0];
  const char *src = NULL, *dst = NULL;
  if (!strcmp(kw, "ro-bind") || !strcmp(kw, "bind")) {
    m.kind = kw[0] == 'r' ? KC_POLICY_MOUNT_RO : KC_POLICY_MOUNT_RW;
    int i = 1;
    if (i >= n)
      return perr(c, l, "%s: expected SRC [DST] [optional]", kw);
    src = w[i++];
    if (i < n && is_abs_path(w[i]))
      dst = w[i++];
    if (i < n && !strcmp(w[i], "optional")) {
      m.optional = true;
      i++;
    }
    if (i < n)
      return perr(c, l, "%s: unexpected '%s' (expected SRC [DST] [optional])", kw, w[i]);
    if (check_path(c, l, "source", src) < 0)
      return -1;
    if (!dst)
      dst = src;
  } else if (!strcmp(kw, "tmpfs")) {
    m.kind = KC_POLICY_MOUNT_TMPFS;
    if (n < 2 || n > 3)
      return perr(c, l, "tmpfs: expected DST [SIZE]");
    dst = w[1];
    if (n == 3 && (kc_parse_size(w[2], &m.size) < 0 || m.size == 0))
      return perr(c, l, "tmpfs: bad size '%s' (e.g. 64M)", w[2]);
  } else if (!strcmp(kw, "proc") || !strcmp(kw, "dev")) {
    m.kind = kw[0] == 'p' ? KC_POLICY_MOUNT_PROC : KC_POLICY_MOUNT_DEV;
    if (n > 2)
      return perr(c, l, "%s: expected [DST]", kw);
    dst = n == 2 ? w[1] : kw[0] == 'p' ? "/proc" : "/dev";
  } else { /* symlink */
    m.kind = KC_POLICY_MOUNT_SYMLINK;
    if (n != 3)
      return perr(c, l, "symlink: expected TARGET LINK");
    src = w[1];
    dst = w[2];
    if (!*src)
      return perr(c, l, "symlink: empty target");
  }
  if (check_path(c, l, "destination", dst) < 0)
    return -1;
  m.dst = strdup(dst);
  m.src = src ? strdup(src) : NULL;
  if (!m.dst || (src && !m.src)) {
    free(m.src);
    free(m.dst);
    return perr(c, l, "out of memory");
  }
  return add_mount(c, l, m);
}

static int do_limit(parse_ctx *c, const loc *l, char **w, int n) {
  if (n != 3)
    return perr(c, l, "limit: expected NAME VALUE (memory cpu wall pids cpus output)");
  kc_policy_spec *s = &c->p->spec;
  const char *v = w[2];
  bool none = !strcmp(v, "none");
  if (!strcmp(w[1], "memory") || !strcmp(w[1], "output")) {
    uint64_t b = 0;
    if (!none && kc_parse_size(v, &b) < 0)
      return perr(c, l, "limit %s: bad size '%s' (e.g. 256M)", w[1], v);
    if (w[1][0] == 'm')
      s->memory_bytes = b;
    else
      s->output_bytes = b;
  } else if (!strcmp(w[1], "cpu") || !strcmp(w[1], "wall") || !strcmp(w[1], "cpus")) {
    double d = 0;
    if (!none && kc_parse_decimal(v, &d) < 0)
      return perr(c, l, "limit %s: bad number '%s'", w[1], v);
    if (!strcmp(w[1], "cpu"))
      s->cpu_s = d;
    else if (!strcmp(w[1], "wall"))
      s->wall_s = d;
    else
      s->cpus = d;
  } else if (!strcmp(w[1], "pids")) {
    uint64_t x = 0;
    if (!none && (parse_u64(v, &x) < 0 || x > UINT32_MAX))
      return perr(c, l, "limit pids: bad number '%s'", v);
    s->pids = (uint32_t)x;
  } else {
    return perr(c, l, "limit: unknown limit '%s' (memory cpu wall pids cpus output)", w[1]);
  }
  return 0;
}

static int parse_rlim(parse_ctx *c, const loc *l, const char *s, rlim_t *out) {
  if (!strcmp(s, "unlimited") || !strcmp(s, "infinity")) {
    *out = RLIM_INFINITY;
    return 0;
  }
  uint64_t v;
  if (kc_parse_size(s, &v) < 0 || v >= (uint64_t)RLIM_INFINITY)
    return perr(c, l, "rlimit: bad value '%s' (a number, 64M, or unlimited)", s);
  *out = v;
  return 0;
}

static int do_rlimit(parse_ctx *c, const loc *l, char **w, int n) {
  if (n != 3 && n != 4)
    return perr(c, l, "rlimit: expected NAME SOFT [HARD]");
  int res = kc_policy_rlimit_lookup(w[1]);
  if (res < 0)
    return perr(c, l, "rlimit: unknown resource '%s'", w[1]);
  kc_policy_rlimit r = {.resource = res};
  if (parse_rlim(c, l, w[2], &r.soft) < 0)
    return -1;
  r.hard = r.soft;
  if (n == 4 && parse_rlim(c, l, w[3], &r.hard) < 0)
    return -1;
  if (r.hard != RLIM_INFINITY && (r.soft == RLIM_INFINITY || r.soft > r.hard))
    return perr(c, l, "rlimit %s: soft limit above hard limit", w[1]);
  kc_policy *p = c->p;
  for (size_t i = 0; i < p->n_rlimits; i++)
    if (p->rlimits[i].resource == res) {
      p->rlimits[i] = r;
      return 0;
    }
  if (grow((void **)&p->rlimits, &p->cap_rlimits, p->n_rlimits, sizeof *p->rlimits) < 0)
    return perr(c, l, "out of memory");
  p->rlimits[p->n_rlimits++] = r;
  return 0;
}

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
      return perr(c, l, "errno: expected an errno (EPERM, 1, ...)");
    if (parse_errno(c, l, w[*i], e) < 0)
      return -1;
    (*i)++;
  } else
    return perr(c, l, "unknown action '%s' (allow kill notify errno)", s);
  return 0;
}

static int do_default(parse_ctx *c, const loc *l, char **w, int n) {
  if (n < 2)
    return perr(c, l, "default: expected allow, kill, notify or errno E");
  int i = 1, e = 0;
  kc_sc_action a;
  if (parse_action(c, l, w, n, &i, &a, &e) < 0)
    return -1;
  if (i != n)
    return perr(c, l, "default: unexpected '%s'", w[i]);
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
    return perr(c, l, "expected a value after %s on arg%u", after, arg);
  char save = *q;
  *q = '\0';
  int rc = parse_value(c, l, start, v);
  *q = save;
  *qp = q;
  return rc < 0 ? -1 : 0;
}

/* "argN" at *qp (N = 0..5, an argument with no condition yet): the rule's next
 * condition is started on it. */
static int cond_arg(parse_ctx *c, const loc *l, char **qp, kc_sc_rule *r) {
  char *q = skip_space(*qp);
  if (strncmp(q, "arg", 3) || q[3] < '0' || q[3] > '5' || isalnum((unsigned char)q[4]))
    return perr(c, l, "expected a condition argN (N = 0..5) at '%s'", q);
  if (r->n_conds == KC_SC_MAX_CONDS)
    return perr(c, l, "too many conditions");
  kc_sc_cond *cd = &r->conds[r->n_conds];
  *cd = (kc_sc_cond){.arg = (unsigned)(q[3] - '0')};
  for (unsigned j = 0; j < r->n_conds; j++)
    if (r->conds[j].arg == cd->arg)
      return perr(c, l,
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
  return perr(c, l, "expected an operator (== != < <= > >= &) after arg%u", cd->arg);
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
    return perr(c, l, "arg%u & 0: an empty mask never matches", cd->arg);
  char *q = skip_space(*qp);
  if (q[0] != '=' || q[1] != '=')
    return 0;
  *qp = q + 2;
  if (value_word(c, l, qp, false, "'=='", cd->arg, &cd->value) < 0)
    return -1;
  if (cd->value & ~cd->mask)
    return perr(c, l,
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
      return perr(c, l, "unexpected '%s' (conditions are joined with 'and')", q);
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
      return perr(c, l, "%s: contradicts the rule at line %d", x->name, x->line);
    }
    if (!x->n_conds || !r.n_conds) {
      int other = x->line;
      char *nm = x->name;
      perr(c, l,
           "%s: a rule without conditions cannot be combined with conditional rules "
           "for the same syscall (line %d); use conditions on both or the default",
           nm, other);
      free(r.name);
      return -1;
    }
  }
  if (grow((void **)&p->rules, &p->cap_rules, p->n_rules, sizeof *p->rules) < 0) {
    free(r.name);
    return perr(c, l, "out of memory");
  }
  p->rules[p->n_rules++] = r;
  return 0;
}

static int do_rule(parse_ctx *c, const loc *l, char **w, int n) {
  int i = 0, e = 0;
  kc_sc_action a;
  if (parse_action(c, l, w, n, &i, &a, &e) < 0)
    return -1;
  if (i >= n)
    return perr(c, l, "%s: expected syscall names", w[0]);
  /* Conditions start at the first word argN after the (single) syscall. */
  int cond_at = -1;
  for (int j = i; j < n; j++)
    if (!strncmp(w[j], "arg", 3) && w[j][3] >= '0' && w[j][3] <= '9') {
      cond_at = j;
      break;
    }
  if (cond_at == i)
    return perr(c, l, "%s: expected a syscall name before '%s'", w[0], w[i]);
  if (cond_at > i + 1)
    return perr(c, l, "conditions apply to one syscall; write one line per syscall");
  int last = cond_at < 0 ? n : cond_at;
  for (int j = i; j < last; j++) {
    int nr = seccomp_syscall_resolve_name(w[j]);
    if (nr == __NR_SCMP_ERROR)
      return perr(c, l, "unknown syscall '%s'", w[j]);
    kc_sc_rule r = {.nr = nr, .action = a, .errno_val = e, .file = l->file_idx, .line = l->line};
    if (cond_at > 0) {
      char buf[1024] = "";
      for (int k = cond_at; k < n; k++) {
        if (strlen(buf) + strlen(w[k]) + 2 >= sizeof buf)
          return perr(c, l, "conditions too long");
        strcat(buf, w[k]);
        strcat(buf, " ");
      }
      if (parse_conds(c, l, buf, &r) < 0)
        return -1;
    }
    r.name = strdup(w[j]);
    if (!r.name)
      return perr(c, l, "out of memory");
    if (add_rule(c, l, r) < 0)
      return -1;
  }
  return 0;
}

/* ---- files and includes ----------------------------------------------------- */

static int parse_path(parse_ctx *c, const char *display, const loc *from);

static bool valid_name(const char *s) {
  if (!*s || *s == '.' || strlen(s) > 64)
    return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
      return false;
  return true;
}

static int do_include(parse_ctx *c, const loc *l, char **w, int n) {
  if (n != 2)
    return perr(c, l, "include: expected one NAME or PATH");
  const char *arg = w[1];
  char path[PATH_MAX];
  /* relative to the including file's directory */
  const char *slash = strrchr(l->file, '/');
  int dirlen = slash ? (int)(slash - l->file) : 0;
  bool is_path = strchr(arg, '/') || kc_policy_is_path(arg);
  if (is_path) {
    if (arg[0] == '/' || !slash)
      snprintf(path, sizeof path, "%s", arg);
    else
      snprintf(path, sizeof path, "%.*s/%s", dirlen, l->file, arg);
    if (access(path, R_OK) < 0)
      return perr(c, l, "include %s: %s", arg, strerror(errno));
  } else {
    if (!valid_name(arg))
      return perr(c, l, "include: bad policy name '%s'", arg);
    snprintf(path, sizeof path, "%.*s%s%s.policy", dirlen, l->file, slash ? "/" : "", arg);
    if (access(path, R_OK) < 0) {
      kc_error e2;
      if (kc_policy_resolve(arg, path, sizeof path, &e2) < 0)
        return perr(c, l, "include %s: no such policy", arg);
    }
  }
  return parse_path(c, path, l);
}

static int tokenize(char *line, char **w, int max) {
  int n = 0;
  char *q = line;
  for (;;) {
    while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')
      q++;
    if (!*q || *q == '#')
      break;
    if (n == max)
      return -1;
    w[n++] = q;
    while (*q && *q != ' ' && *q != '\t' && *q != '\r' && *q != '\n')
      q++;
    if (*q)
      *q++ = '\0';
  }
  return n;
}

static int parse_stream(parse_ctx *c, FILE *f, const loc *base) {
  kc_cleanup_free char *line = NULL;
  size_t cap = 0;
  loc l = *base;
  l.line = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) >= 0) {
    l.line++;
    if (memchr(line, '\0', (size_t)len))
      return perr(c, &l, "NUL byte in policy");
    char *w[KC_WORDS_MAX];
    int n = tokenize(line, w, KC_WORDS_MAX);
    if (n < 0)
      return perr(c, &l, "too many words on one line (at most %d)", KC_WORDS_MAX);
    if (n == 0)
      continue;
    const char *kw = w[0];
    int rc;
    if (!strcmp(kw, "include"))
      rc = do_include(c, &l, w, n);
    else if (!strcmp(kw, "namespaces"))
      rc = do_namespaces(c, &l, w, n);
    else if (!strcmp(kw, "ro-bind") || !strcmp(kw, "bind") || !strcmp(kw, "tmpfs") ||
             !strcmp(kw, "proc") || !strcmp(kw, "dev") || !strcmp(kw, "symlink"))
      rc = do_mount(c, &l, w, n);
    else if (!strcmp(kw, "limit"))
      rc = do_limit(c, &l, w, n);
    else if (!strcmp(kw, "rlimit"))
      rc = do_rlimit(c, &l, w, n);
    else if (!strcmp(kw, "cwd")) {
      if (n != 2)
        rc = perr(c, &l, "cwd: expected one absolute path");
      else if ((rc = check_path(c, &l, "cwd", w[1])) == 0) {
        free(c->p->cwd);
        c->p->cwd = strdup(w[1]);
        rc = c->p->cwd ? 0 : perr(c, &l, "out of memory");
      }
    } else if (!strcmp(kw, "default"))
      rc = do_default(c, &l, w, n);
    else if (!strcmp(kw, "allow") || !strcmp(kw, "kill") || !strcmp(kw, "notify") ||
             !strcmp(kw, "errno"))
      rc = do_rule(c, &l, w, n);
    else
      rc = perr(c, &l, "unknown keyword '%s'", kw);
    if (rc < 0)
      return -1;
  }
  if (ferror(f))
    return perr(c, &l, "read error: %s", strerror(errno));
  return 0;
}

static int parse_path(parse_ctx *c, const char *display, const loc *from) {
  char real[PATH_MAX];
  if (!realpath(display, real))
    return from ? perr(c, from, "include %s: %s", display, strerror(errno))
                : kc_error_set(c->err, errno, "%s", display);
  for (int i = 0; i < c->depth; i++)
    if (!strcmp(c->stack[i], real)) {
      char chain[KC_ERROR_MSG_MAX / 2] = "";
      for (int j = i; j < c->depth; j++) {
        const char *b = strrchr(c->stack[j], '/');
        strncat(chain, b ? b + 1 : c->stack[j], sizeof chain - strlen(chain) - 1);
        strncat(chain, " -> ", sizeof chain - strlen(chain) - 1);
      }
      const char *b = strrchr(real, '/');
      strncat(chain, b ? b + 1 : real, sizeof chain - strlen(chain) - 1);
      return perr(c, from, "include cycle: %s", chain);
    }
  for (size_t i = 0; i < c->n_seen; i++)
    if (!strcmp(c->seen[i], real))
      return 0; /* included once already (a diamond, not a cycle) */
  if (c->depth >= KC_INCLUDE_DEPTH_MAX)
    return perr(c, from, "includes nested deeper than %d", KC_INCLUDE_DEPTH_MAX);

  kc_cleanup_fclose FILE *f = fopen(display, "re");
  if (!f)
    return from ? perr(c, from, "include %s: %s", display, strerror(errno))
                : kc_error_set(c->err, errno, "%s", display);

  /* `include /dev/zero` must not read forever: regular files of sane size only. */
  struct stat st;
  if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > KC_POLICY_FILE_MAX)
    return from ? perr(c, from, "include %s: not a regular file of at most %d bytes", display,
                       KC_POLICY_FILE_MAX)
                : kc_error_set(c->err, 0, "%s: not a regular file of at most %d bytes", display,
                               KC_POLICY_FILE_MAX);

  kc_policy *p = c->p;
  size_t cap_seen = c->n_seen; /* seen grows one at a time */
  char **ns = realloc(c->seen, (cap_seen + 1) * sizeof *ns);
  if (!ns)
    return perr(c, from, "out of memory");
  c->seen = ns;
  if (!(c->seen[c->n_seen] = strdup(real)))
    return perr(c, from, "out of memory");
  c->n_seen++;
  if (grow((void **)&p->files, &p->cap_files, p->n_files, sizeof *p->files) < 0 ||
      !(p->files[p->n_files] = strdup(display)))
    return perr(c, from, "out of memory");
  loc l = {.file = p->files[p->n_files], .file_idx = (int)p->n_files};
  p->n_files++;

  c->stack[c->depth++] = c->seen[c->n_seen - 1];
  int rc = parse_stream(c, f, &l);
  c->depth--;
  return rc;
}

static void finish_spec(kc_policy *p) {
  p->spec.name = p->name;
  p->spec.mounts = p->mounts;
  p->spec.n_mounts = p->n_mounts;
  p->spec.rlimits = p->rlimits;
  p->spec.n_rlimits = p->n_rlimits;
  p->spec.cwd = p->cwd;
}

static char *name_from_path(const char *path) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  size_t len = strlen(b);
  if (len > 7 && !strcmp(b + len - 7, ".policy"))
    len -= 7;
  return strndup(b, len);
}

int kc_policy_parse_file(const char *path, kc_policy **out, kc_error *err) {
  *out = NULL;
  kc_policy *p = calloc(1, sizeof *p);
  if (!p)
    return kc_error_set(err, ENOMEM, "policy");
  p->name = name_from_path(path);
  parse_ctx c = {.p = p, .err = err};
  int rc = p->name ? parse_path(&c, path, NULL) : kc_error_set(err, ENOMEM, "policy");
  for (size_t i = 0; i < c.n_seen; i++)
    free(c.seen[i]);
  free(c.seen);
  if (rc < 0) {
    kc_policy_free(p);
    return -1;
  }
  finish_spec(p);
  *out = p;
  return 0;
}

void kc_policy_free(kc_policy *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->n_mounts; i++) {
    free(p->mounts[i].src);
    free(p->mounts[i].dst);
  }
  free(p->mounts);
  free(p->rlimits);
  for (size_t i = 0; i < p->n_rules; i++)
    free(p->rules[i].name);
  free(p->rules);
  for (size_t i = 0; i < p->n_files; i++)
    free(p->files[i]);
  free(p->files);
  free(p->cwd);
  free(p->name);
  free(p);
}

const kc_policy_spec *kc_policy_get_spec(const kc_policy *p) {
  return &p->spec;
}
