/* TVM RPC sessions on the agent (internal to tracker/): TVM's own server loop, from the
 * operator's Python and TVM, in a fresh sandbox per session. */
#ifndef KCAGE_TVM_SESSION_H
#define KCAGE_TVM_SESSION_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "kcage/error.h"
#include "kcage/policy.h"
#include "kcage/tracker.h"

#define KC_TVM_MAX_BINDS 16
#define KC_TVM_MAX_POLICIES 8

/* The interpreter that runs the server loop and what of it lies outside /usr, bound
 * read-only into each session's sandbox (a venv, its site-packages). */
typedef struct kc_tvm_python {
  char path[PATH_MAX];
  char libpython[PATH_MAX]; /* its shared libpython, "" when it has none */
  char sys_path[16384];     /* its sys.path as a JSON list, for an embedded interpreter */
  size_t nbinds;
  char binds[KC_TVM_MAX_BINDS][PATH_MAX];
} kc_tvm_python;

/* Find python (a path, or a name searched in PATH) and ask it for its prefix and import
 * path.  It runs unsandboxed, once: it is the operator's own interpreter. */
int kc_tvm_python_probe(const char *python, kc_tvm_python *out, kc_error *err);

typedef struct kc_tvm_serve_opts {
  const kc_tvm_python *python; /* NULL: TVM sessions are refused with `unavailable` */
  const char *unavailable;
  const char *dir;         /* the session's host work directory */
  double timeout_s;        /* after the operator's --max-session; 0 = none */
  double asked_timeout_s;  /* what the client's handshake asked for (0 = none) */
  double deadline;         /* for the agent's own steps before the sandbox starts */
  double session_deadline; /* when the agent ends the session (CLOCK_MONOTONIC s; < 0 =
                              none): the sandbox's wall limit ends no later */
  kc_run_caps caps;
  const char *const *policies; /* names a tenant may choose; [0] is the default */
  const kc_policy *first;      /* policies[0], parsed once by the agent (NULL: parse it) */
  size_t npolicies;
  bool verbose;
  bool ahead;           /* a standby started while a session runs: it must be able to run idle */
  kc_settings settings; /* the agent's (the operator's), never the client's */
} kc_tvm_serve_opts;

/* Peek (without consuming) exactly n bytes from fd by the deadline. */
int kc_tvm_peek(int fd, void *buf, size_t n, double deadline, kc_error *err);

/* One TVM RPC session on fd, whose kInitServer has not been read: the constructor
 * checked and applied, TVM's server loop run in its sandbox, the sandbox's verdict sent
 * to the client as an RPC exception when it ended any other way than the client's
 * shutdown.  Closes fd. */
int kc_tvm_session_serve(int fd, const kc_tvm_serve_opts *o, kc_error *err);

/* A sandbox started ahead of its session: TVM's server loop with TVM imported, under
 * the first policy and the operator's caps, waiting for its socket (fd 0 is a
 * socketpair), its cgroup idle (kc_cgroup_set_cpu_idle) until then, so that a standby
 * started while another session runs takes none of that session's CPU time; with
 * o->ahead, ENOTSUP when it cannot be idle.  o must live until the sandbox is handed
 * its session. */
typedef struct kc_tvm_standby kc_tvm_standby;
int kc_tvm_standby_start(const kc_tvm_serve_opts *o, kc_tvm_standby **out, kc_error *err);
int kc_tvm_standby_pid(const kc_tvm_standby *s); /* the sandbox's init, to watch */
/* Until fd is readable or the sandbox has ended (0), answer its program's sysinfo(2)
 * (Python calls it while it imports TVM); 1 when it made a forbidden call, -1 when
 * it cannot be watched (kc_sandbox_idle). */
int kc_tvm_standby_idle(kc_tvm_standby *s, int fd);
/* kc_tvm_session_serve through the standby (a kcage.sandbox request with settings gets a
 * fresh sandbox made for it instead); consumes s. */
int kc_tvm_standby_serve(kc_tvm_standby *s, int fd, const kc_tvm_serve_opts *o, kc_error *err);
void kc_tvm_standby_drop(kc_tvm_standby *s);

/* Send msg to a TVM client as an RPC exception and close fd. */
void kc_tvm_refuse(int fd, const char *msg);

#endif
