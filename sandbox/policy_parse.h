/* Private to the policy parser (policy_parse.c, policy_rules.c, policy_values.c): the
 * state of one parse, where a statement was written, and the pieces the statement
 * files share.  Dependency is one-way: policy_parse.c -> policy_rules.c ->
 * policy_values.c. */
#ifndef KCAGE_POLICY_PARSE_H
#define KCAGE_POLICY_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "kcage/error.h"
#include "policy_internal.h"

#define KC_INCLUDE_DEPTH_MAX 16

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

/* policy_values.c */
/* "FILE:LINE: message" (just the message when l is NULL) into c->err; returns -1. */
int kc__pol_err(parse_ctx *c, const loc *l, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Room for element n in *arr (capacity *cap, doubled); -1 when out of memory. */
int kc__pol_grow(void **arr, size_t *cap, size_t n, size_t elem);
/* A plain unsigned number (decimal, 0x hex, 0 octal); -1 when it is not one. */
int kc__pol_u64(const char *s, uint64_t *out);
/* NAME|NAME|0x10: numbers and constant names joined with '|'. */
int kc__pol_value(parse_ctx *c, const loc *l, const char *s, uint64_t *out);
/* 1..4095 or a name such as EPERM. */
int kc__pol_errno(parse_ctx *c, const loc *l, const char *s, int *out);

/* policy_rules.c: the seccomp statements (w[0..n) are the line's words). */
int kc__pol_do_default(parse_ctx *c, const loc *l, char **w, int n);
int kc__pol_do_rule(parse_ctx *c, const loc *l, char **w, int n);

#endif
