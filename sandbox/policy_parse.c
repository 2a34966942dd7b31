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
#include "policy_parse.h"
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

#define KC_WORDS_MAX 64
#define KC_POLICY_FILE_MAX (1 << 20)

static bool is_abs_path(const char *s) {
  return s[0] == '/';
}

static int check_path(parse_ctx *c, const loc *l, const char *what, const char *s) {
  if (!is_abs_path(s))
    return kc__pol_err(c, l, "%s '%s' must be an absolute path", what, s);
  for (const char *q = s; *q; q++)
    if (q[0] == '/' && q[1] == '.' && q[2] == '.' && (q[3] == '/' || q[3] == '\0'))
      return kc__pol_err(c, l, "%s '%s' must not contain '..'", what, s);
  return 0;
}

/* ---- statements ------------------------------------------------------------- */

static int do_namespaces(parse_ctx *c, const loc *l, char **w, int n) {
  kc_policy_namespaces ns = {0};
  if (n < 2)
    return kc__pol_err(c, l,
                       "namespaces: expected names (user pid mount ipc uts cgroup net), "
                       "'all' or 'none'");
  for (int i = 1; i < n; i++) {
    if (!strcmp(w[i], "all")) {
      ns = (kc_policy_namespaces){true, true, true, true, true, true, true};
    } else if (!strcmp(w[i], "none")) {
      if (n != 2)
        return kc__pol_err(c, l, "namespaces: 'none' stands alone");
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
      return kc__pol_err(c, l, "namespaces: unknown namespace '%s'", w[i]);
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
  if (kc__pol_grow((void **)&p->mounts, &p->cap_mounts, p->n_mounts, sizeof *p->mounts) < 0) {
    free(m.src);
    free(m.dst);
    return kc__pol_err(c, l, "out of memory");
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
      return kc__pol_err(c, l, "%s: expected SRC [DST] [optional]", kw);
    src = w[i++];
    if (i < n && is_abs_path(w[i]))
      dst = w[i++];
    if (i < n && !strcmp(w[i], "optional")) {
      m.optional = true;
      i++;
    }
    if (i < n)
      return kc__pol_err(c, l, "%s: unexpected '%s' (expected SRC [DST] [optional])", kw, w[i]);
    if (check_path(c, l, "source", src) < 0)
      return -1;
    if (!dst)
      dst = src;
  } else if (!strcmp(kw, "tmpfs")) {
    m.kind = KC_POLICY_MOUNT_TMPFS;
    if (n < 2 || n > 3)
      return kc__pol_err(c, l, "tmpfs: expected DST [SIZE]");
    dst = w[1];
    if (n == 3 && (kc_parse_size(w[2], &m.size) < 0 || m.size == 0))
      return kc__pol_err(c, l, "tmpfs: bad size '%s' (e.g. 64M)", w[2]);
  } else if (!strcmp(kw, "proc") || !strcmp(kw, "dev")) {
    m.kind = kw[0] == 'p' ? KC_POLICY_MOUNT_PROC : KC_POLICY_MOUNT_DEV;
    if (n > 2)
      return kc__pol_err(c, l, "%s: expected [DST]", kw);
    dst = n == 2 ? w[1] : kw[0] == 'p' ? "/proc" : "/dev";
  } else { /* symlink */
    m.kind = KC_POLICY_MOUNT_SYMLINK;
    if (n != 3)
      return kc__pol_err(c, l, "symlink: expected TARGET LINK");
    src = w[1];
    dst = w[2];
    if (!*src)
      return kc__pol_err(c, l, "symlink: empty target");
  }
  if (check_path(c, l, "destination", dst) < 0)
    return -1;
  m.dst = strdup(dst);
  m.src = src ? strdup(src) : NULL;
  if (!m.dst || (src && !m.src)) {
    free(m.src);
    free(m.dst);
    return kc__pol_err(c, l, "out of memory");
  }
  return add_mount(c, l, m);
}

static int do_limit(parse_ctx *c, const loc *l, char **w, int n) {
  if (n != 3)
    return kc__pol_err(c, l, "limit: expected NAME VALUE (memory cpu wall pids cpus output)");
  kc_policy_spec *s = &c->p->spec;
  const char *v = w[2];
  bool none = !strcmp(v, "none");
  if (!strcmp(w[1], "memory") || !strcmp(w[1], "output")) {
    uint64_t b = 0;
    if (!none && kc_parse_size(v, &b) < 0)
      return kc__pol_err(c, l, "limit %s: bad size '%s' (e.g. 256M)", w[1], v);
    if (w[1][0] == 'm')
      s->memory_bytes = b;
    else
      s->output_bytes = b;
  } else if (!strcmp(w[1], "cpu") || !strcmp(w[1], "wall") || !strcmp(w[1], "cpus")) {
    double d = 0;
    if (!none && kc_parse_decimal(v, &d) < 0)
      return kc__pol_err(c, l, "limit %s: bad number '%s'", w[1], v);
    if (!strcmp(w[1], "cpu"))
      s->cpu_s = d;
    else if (!strcmp(w[1], "wall"))
      s->wall_s = d;
    else
      s->cpus = d;
  } else if (!strcmp(w[1], "pids")) {
    uint64_t x = 0;
    if (!none && (kc__pol_u64(v, &x) < 0 || x > UINT32_MAX))
      return kc__pol_err(c, l, "limit pids: bad number '%s'", v);
    s->pids = (uint32_t)x;
  } else {
    return kc__pol_err(c, l, "limit: unknown limit '%s' (memory cpu wall pids cpus output)", w[1]);
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
    return kc__pol_err(c, l, "rlimit: bad value '%s' (a number, 64M, or unlimited)", s);
  *out = v;
  return 0;
}

static int do_rlimit(parse_ctx *c, const loc *l, char **w, int n) {
  if (n != 3 && n != 4)
    return kc__pol_err(c, l, "rlimit: expected NAME SOFT [HARD]");
  int res = kc_policy_rlimit_lookup(w[1]);
  if (res < 0)
    return kc__pol_err(c, l, "rlimit: unknown resource '%s'", w[1]);
  kc_policy_rlimit r = {.resource = res};
  if (parse_rlim(c, l, w[2], &r.soft) < 0)
    return -1;
  r.hard = r.soft;
  if (n == 4 && parse_rlim(c, l, w[3], &r.hard) < 0)
    return -1;
  if (r.hard != RLIM_INFINITY && (r.soft == RLIM_INFINITY || r.soft > r.hard))
    return kc__pol_err(c, l, "rlimit %s: soft limit above hard limit", w[1]);
  kc_policy *p = c->p;
  for (size_t i = 0; i < p->n_rlimits; i++)
    if (p->rlimits[i].resource == res) {
      p->rlimits[i] = r;
      return 0;
    }
  if (kc__pol_grow((void **)&p->rlimits, &p->cap_rlimits, p->n_rlimits, sizeof *p->rlimits) < 0)
    return kc__pol_err(c, l, "out of memory");
  p->rlimits[p->n_rlimits++] = r;
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
    return kc__pol_err(c, l, "include: expected one NAME or PATH");
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
      return kc__pol_err(c, l, "include %s: %s", arg, strerror(errno));
  } else {
    if (!valid_name(arg))
      return kc__pol_err(c, l, "include: bad policy name '%s'", arg);
    snprintf(path, sizeof path, "%.*s%s%s.policy", dirlen, l->file, slash ? "/" : "", arg);
    if (access(path, R_OK) < 0) {
      kc_error e2;
      if (kc_policy_resolve(arg, path, sizeof path, &e2) < 0)
        return kc__pol_err(c, l, "include %s: no such policy", arg);
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
      return kc__pol_err(c, &l, "NUL byte in policy");
    char *w[KC_WORDS_MAX];
    int n = tokenize(line, w, KC_WORDS_MAX);
    if (n < 0)
      return kc__pol_err(c, &l, "too many words on one line (at most %d)", KC_WORDS_MAX);
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
        rc = kc__pol_err(c, &l, "cwd: expected one absolute path");
      else if ((rc = check_path(c, &l, "cwd", w[1])) == 0) {
        free(c->p->cwd);
        c->p->cwd = strdup(w[1]);
        rc = c->p->cwd ? 0 : kc__pol_err(c, &l, "out of memory");
      }
    } else if (!strcmp(kw, "default"))
      rc = kc__pol_do_default(c, &l, w, n);
    else if (!strcmp(kw, "allow") || !strcmp(kw, "kill") || !strcmp(kw, "notify") ||
             !strcmp(kw, "errno"))
      rc = kc__pol_do_rule(c, &l, w, n);
    else
      rc = kc__pol_err(c, &l, "unknown keyword '%s'", kw);
    if (rc < 0)
      return -1;
  }
  if (ferror(f))
    return kc__pol_err(c, &l, "read error: %s", strerror(errno));
  return 0;
}

static int parse_path(parse_ctx *c, const char *display, const loc *from) {
  char real[PATH_MAX];
  if (!realpath(display, real))
    return from ? kc__pol_err(c, from, "include %s: %s", display, strerror(errno))
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
      return kc__pol_err(c, from, "include cycle: %s", chain);
    }
  for (size_t i = 0; i < c->n_seen; i++)
    if (!strcmp(c->seen[i], real))
      return 0; /* included once already (a diamond, not a cycle) */
  if (c->depth >= KC_INCLUDE_DEPTH_MAX)
    return kc__pol_err(c, from, "includes nested deeper than %d", KC_INCLUDE_DEPTH_MAX);

  kc_cleanup_fclose FILE *f = fopen(display, "re");
  if (!f)
    return from ? kc__pol_err(c, from, "include %s: %s", display, strerror(errno))
                : kc_error_set(c->err, errno, "%s", display);

  /* `include /dev/zero` must not read forever: regular files of sane size only. */
  struct stat st;
  if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > KC_POLICY_FILE_MAX)
    return from ? kc__pol_err(c, from, "include %s: not a regular file of at most %d bytes",
                              display, KC_POLICY_FILE_MAX)
                : kc_error_set(c->err, 0, "%s: not a regular file of at most %d bytes", display,
                               KC_POLICY_FILE_MAX);

  kc_policy *p = c->p;
  size_t cap_seen = c->n_seen; /* seen grows one at a time */
  char **ns = realloc(c->seen, (cap_seen + 1) * sizeof *ns);
  if (!ns)
    return kc__pol_err(c, from, "out of memory");
  c->seen = ns;
  if (!(c->seen[c->n_seen] = strdup(real)))
    return kc__pol_err(c, from, "out of memory");
  c->n_seen++;
  if (kc__pol_grow((void **)&p->files, &p->cap_files, p->n_files, sizeof *p->files) < 0 ||
      !(p->files[p->n_files] = strdup(display)))
    return kc__pol_err(c, from, "out of memory");
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
