/* Private to tracker/agent*.c: the agent's state, shared by its tracker side and
 * handshakes (agent.c) and its sessions and their standby (agent_session.c). */
#ifndef KC_TRACKER_AGENT_INTERNAL_H
#define KC_TRACKER_AGENT_INTERNAL_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "kcage/tracker.h"
#include "tvm_session.h"

struct FTW;

/* TVM's handshake, read without blocking: every connection has its own deadline, so
 * idle ones cost a slot each and delay nobody. */
#define MAX_HANDSHAKES 64
#define HANDSHAKE_S 2.0
#define HANDSHAKE_MAX_KEY 4096
struct handshake {
  int fd;
  double deadline;
  size_t got;
  char buf[8 + HANDSHAKE_MAX_KEY + 1];
};

struct kc_agent {
  kc_agent_opts o;
  int lfd;
  uint16_t port;
  int stop_pipe[2];
  kc_tracker_conn *trk;
  double next_connect, backoff;
  char matchkey[KC_TRACKER_MAX_MATCHKEY];
  bool put_pending; /* a fresh matchkey still has to be PUT */
  double next_check, missing_since;
  pid_t child;
  bool child_reaped;
  int child_status; /* its wait status, once reaped */
  int child_pidfd;
  double child_deadline;
  char child_dir[512];
  char base_dir[300]; /* $TMPDIR/kcage-agent-<pid>: every session's scratch lives here */
  char device[KC_TRACKER_MAX_KEY + 300];
  struct handshake hs[MAX_HANDSHAKES]; /* connections still in TVM's handshake */
  size_t nhs;
  kc_tvm_python *python; /* NULL: TVM RPC sessions are refused, for python_why */
  char python_why[KC_ERROR_MSG_MAX];
  /* The next session's process, started while the agent is idle with TVM's server loop
   * already imported in a fresh sandbox: it is handed the next client's socket. */
  pid_t standby;
  int standby_ctl;
  char standby_dir[512];
  double standby_next, standby_backoff;
  /* The standby is started as soon as the last one is handed its session, its cgroup
   * idle meanwhile; false once the host showed it cannot be (then only while idle). */
  bool standby_ahead;
  /* The TVM zygote (tvm_hub.c): TVM imported once, a session a fork; while it runs, no
   * standby is started.  Off for good when it cannot start (no shared libpython). */
  pid_t hub;
  int hub_ctl;
  kc_policy *tvm_first; /* the first TVM policy, parsed once: sessions read its limits */
  bool hub_off;
  double hub_next, hub_backoff;
};

/* agent.c */
extern int kc__agent_chld_fd; /* SIGCHLD's self-pipe; -1 in a session's process */
void kc__agent_log(kc_agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kc__agent_new_matchkey(kc_agent *a);
void kc__agent_back_in_pool(kc_agent *a);
int kc__agent_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw);

/* agent_session.c: one session at a time in its own process, and the standby that
 * the next TVM session is handed to. */
void kc__agent_reap(kc_agent *a);
void kc__agent_end_session(kc_agent *a);
void kc__agent_start_session(kc_agent *a, int fd, double asked_s);
bool kc__agent_standby_due(const kc_agent *a);
void kc__agent_start_standby(kc_agent *a);
void kc__agent_kill_standby(kc_agent *a);
void kc__agent_start_hub(kc_agent *a);
void kc__agent_kill_hub(kc_agent *a);

#endif
