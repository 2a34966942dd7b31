/* An embedded CPython inside kcage-worker: the zygote starts it once (kc_python_boot),
 * every worker is a fork of that interpreter, and the "python" handler passes each
 * call's bytes to kcage._child.load, says that the task begins (the parent counts the
 * timeout from there, as TVM does: the function's unpickling and its module's import
 * are not the task), then hands the loaded call to kcage._child.run and its answer
 * back.
 *
 * libpython is dlopen'd at run time rather than linked: kcage-worker stays one binary
 * for every Python 3.8+ the caller may use (the parent names the libpython that
 * matches its own interpreter), and a worker without Python costs nothing.  Only
 * functions of CPython's stable ABI are used, declared here, so no Python headers are
 * needed to build kcage. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "worker_internal.h"

typedef struct py_object py_object;

static struct {
  void (*initialize_ex)(int);
  int (*run_simple_string)(const char *);
  py_object *(*import_module)(const char *);
  py_object *(*get_attr_string)(py_object *, const char *);
  py_object *(*call_obj_args)(py_object *, ...);
  py_object *(*bytes_from)(const char *, long);
  py_object *(*long_from)(long);
  int (*bytes_as)(py_object *, char **, long *);
  void (*dec_ref)(py_object *);
  void (*err_print)(void);
  void (*after_fork_child)(void);
  void *(*save_thread)(void);
  void (*restore_thread)(void *);
  py_object *load, *run, *set_pid; /* kcage._child's */
  void *released;                  /* thread state while no call runs (NULL: GIL held) */
  bool forked;                     /* PyOS_AfterFork_Child done in this process */
} g_py;

static int resolve(void *lib, kc_error *err) {
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
#define S(n, f) {n, offsetof(__typeof__(g_py), f)}
      S("Py_InitializeEx", initialize_ex),
      S("PyRun_SimpleString", run_simple_string),
      S("PyImport_ImportModule", import_module),
      S("PyObject_GetAttrString", get_attr_string),
      S("PyObject_CallFunctionObjArgs", call_obj_args),
      S("PyBytes_FromStringAndSize", bytes_from),
      S("PyLong_FromLong", long_from),
      S("PyBytes_AsStringAndSize", bytes_as),
      S("Py_DecRef", dec_ref),
      S("PyErr_Print", err_print),
      S("PyOS_AfterFork_Child", after_fork_child),
      S("PyEval_SaveThread", save_thread),
      S("PyEval_RestoreThread", restore_thread),
#undef S
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *p = dlsym(lib, syms[i].name);
    if (!p)
      return kc_error_set(err, 0, "python: %s not in libpython", syms[i].name);
    memcpy((char *)&g_py + syms[i].off, &p, sizeof p);
  }
  return 0;
}

static void abort_exit(int sig) {
  syscall(SYS_exit_group, 128 + sig);
}

int kc_python_boot(const char *lib_path, const char *boot, kc_error *err) {
  /* RTLD_GLOBAL: extension modules (numpy, tvm_ffi's Cython core) find the Py*
   * symbols in the global scope, as they do in a python executable. */
  void *lib = dlopen(lib_path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
  if (!lib) {
    const char *e = dlerror();
    return kc_error_set(err, 0, "python: dlopen %s: %s", lib_path, e ? e : "failed");
  }
  if (resolve(lib, err) < 0)
    return -1;
  g_py.initialize_ex(0); /* 0: no signal handlers, the parent decides about signals */
  if (g_py.run_simple_string(boot) != 0) /* its traceback went to our stderr */
    return kc_error_set(err, 0, "python: the boot code raised (traceback on stderr)");
  py_object *mod = g_py.import_module("kcage._child");
  py_object **fns[] = {&g_py.load, &g_py.run, &g_py.set_pid};
  const char *names[] = {"load", "run", "set_host_pid"};
  for (size_t i = 0; i < 3; i++)
    *fns[i] = mod ? g_py.get_attr_string(mod, names[i]) : NULL;
  if (mod)
    g_py.dec_ref(mod);
  if (!g_py.load || !g_py.run || !g_py.set_pid) {
    g_py.err_print();
    g_py.load = NULL;
    return kc_error_set(err, 0, "python: kcage._child.load/run not importable");
  }
  /* As pid 1 of its namespace a worker ignores the SIGABRT it raises itself, and
   * abort() then ends on a privileged instruction, a SIGSEGV.  The handler ends the
   * worker the way a shell reports that signal, 128 + SIGABRT, which the parent reads
   * as the worker's own word for an abort. */
  struct sigaction sa = {.sa_handler = abort_exit};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGABRT, &sa, NULL);
  /* The zygote keeps the GIL: PyOS_AfterFork_Child in each worker re-creates it and
   * needs the forking thread's state current. */
  return 0;
}

static int fail(kc_call *c, const char *what) {
  g_py.err_print();
  snprintf(c->error, c->error_cap, "python: %s", what);
  return 1;
}

/* kcage._child learns the pid the parent sees (os.getpid() gives it, as in TVM) */
static void tell_pid(void) {
  py_object *pid = g_py.long_from(kc_runtime_host_pid());
  py_object *r = pid ? g_py.call_obj_args(g_py.set_pid, pid, NULL) : NULL;
  if (!r)
    g_py.err_print();
  else
    g_py.dec_ref(r);
  if (pid)
    g_py.dec_ref(pid);
}

int kc_handler_python(kc_call *c) {
  if (!g_py.load) {
    snprintf(c->error, c->error_cap, "python: this worker has no interpreter");
    return 1;
  }
  if (!g_py.forked) {
    g_py.after_fork_child();
    g_py.forked = true;
    tell_pid();
  } else if (g_py.released) {
    g_py.restore_thread(g_py.released);
  }
  g_py.released = NULL;
  py_object *arg = g_py.bytes_from(c->arg, (long)c->arg_len);
  py_object *job = arg ? g_py.call_obj_args(g_py.load, arg, NULL) : NULL;
  if (arg)
    g_py.dec_ref(arg);
  kc_runtime_task_began();
  py_object *ret = job ? g_py.call_obj_args(g_py.run, job, NULL) : NULL;
  if (job)
    g_py.dec_ref(job);
  int rc = 0;
  char *p;
  long n;
  if (!ret)
    rc = fail(c, "kcage._child raised");
  else if (g_py.bytes_as(ret, &p, &n) < 0)
    rc = fail(c, "kcage._child.run returned no bytes");
  else if (n < 0 || (size_t)n > c->out_cap) {
    snprintf(c->error, c->error_cap,
             "python: a pickled result of %ld bytes is over the limit of %zu", n, c->out_cap);
    rc = 1;
  } else {
    memcpy(c->out, p, (size_t)n);
    c->out_len = (size_t)n;
  }
  if (ret)
    g_py.dec_ref(ret);
  /* Between calls other Python threads of the call's own (a runner's pool) may run.
   * The wait for the next request is the runtime's own: a longer spin here would take
   * the CPU from the parent (or from anyone) on a busy host, where blocking on the
   * futex is what keeps the round trip short. */
  g_py.released = g_py.save_thread();
  return rc;
}
