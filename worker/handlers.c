/* Handler names -> functions, inside the worker: built-ins and "lib.so:symbol". */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker_internal.h"

static int h_echo(kc_call *c) {
  if (c->arg_len > c->out_cap) {
    snprintf(c->error, c->error_cap, "echo: %zu bytes do not fit the result slot", c->arg_len);
    return 1;
  }
  memcpy(c->out, c->arg, c->arg_len);
  c->out_len = c->arg_len;
  return 0;
}

/* argv as NUL-terminated strings back to back; result = wait status (int32). */
static int h_exec(kc_call *c) {
  const char *p = c->arg, *end = p + c->arg_len;
  char *argv[256];
  int n = 0;
  while (p < end && n < 255) {
    const char *z = memchr(p, 0, (size_t)(end - p));
    if (!z)
      break;
    argv[n++] = (char *)p;
    p = z + 1;
  }
  argv[n] = NULL;
  if (!n) {
    snprintf(c->error, c->error_cap, "exec: empty argv");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(c->error, c->error_cap, "exec: fork: %s", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    execvp(argv[0], argv);
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      snprintf(c->error, c->error_cap, "exec: waitpid: %s", strerror(errno));
      return 1;
    }
  int32_t v = st;
  if (c->out_cap < sizeof v)
    return 1;
  memcpy(c->out, &v, sizeof v);
  c->out_len = sizeof v;
  return 0;
}

/* The program's own built-ins (kc_worker_program_main), looked up after the ones of
 * this layer; set once, before the zygote forks any worker. */
static const kc_builtin *g_builtins;

void kc_handlers_set_builtins(const kc_builtin *builtins) {
  g_builtins = builtins;
}

/* "@init:lib.so:symbol": the pool's initializer, called once per worker. */
static int h_init(kc_call *c);

static void *lookup(const char *spec, size_t len, char *error, size_t cap) {
  char buf[KC_RING_FN_MAX + 1];
  memcpy(buf, spec, len);
  buf[len] = 0;
  char *colon = strrchr(buf, ':');
  if (!colon || colon == buf || !colon[1]) {
    snprintf(error, cap, "unknown handler '%s' (built-ins: echo, exec, python%s; or lib.so:symbol)",
             buf, g_builtins && g_builtins->name ? ", measure" : "");
    return NULL;
  }
  *colon = 0;
  /* RTLD_NODELETE: handlers are cached by pointer for the life of the worker. */
  void *lib = dlopen(buf, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char *e = dlerror();
    snprintf(error, cap, "dlopen %s: %s", buf, e ? e : "failed");
    return NULL;
  }
  dlerror();
  void *sym = dlsym(lib, colon + 1);
  if (!sym) {
    const char *e = dlerror();
    snprintf(error, cap, "dlsym %s in %s: %s", colon + 1, buf, e ? e : "not found");
    return NULL;
  }
  return sym;
}

static int h_init(kc_call *c) {
  /* The spec travels as the first NUL-terminated string of the argument, initargs after
   * it, so one cached handler serves any initializer. */
  const char *spec = c->arg;
  const char *z = memchr(spec, 0, c->arg_len);
  if (!z) {
    snprintf(c->error, c->error_cap, "initializer: malformed request");
    return 1;
  }
  kc_initializer_fn f = (kc_initializer_fn)lookup(spec, (size_t)(z - spec), c->error, c->error_cap);
  if (!f)
    return 1;
  size_t off = (size_t)(z - spec) + 1;
  return f((const char *)c->arg + off, c->arg_len - off, c->error, c->error_cap);
}

kc_handler_fn kc_handlers_resolve(const char *name, size_t len, char *error, size_t cap) {
#define IS(s) (len == sizeof(s) - 1 && !memcmp(name, s, len))
  if (IS("echo"))
    return h_echo;
  if (IS("exec"))
    return h_exec;
  if (IS("@init"))
    return h_init;
  if (IS("python"))
    return kc_handler_python;
#undef IS
  for (const kc_builtin *b = g_builtins; b && b->name; b++)
    if (strlen(b->name) == len && !memcmp(name, b->name, len))
      return b->fn;
  return (kc_handler_fn)lookup(name, len, error, cap);
}
