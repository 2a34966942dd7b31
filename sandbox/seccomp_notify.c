/* Supervisor side of the seccomp listener: see kcage/seccomp.h for the protocol.
 * Raw ioctls rather than libseccomp's seccomp_notify_receive(): no allocation per
 * event (a loading worker may send several), and the kernel ABI structs are fixed. */
#include "kcage/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "fdio.h"
#include "policy_internal.h"
#include "sysname.h"

#ifndef SECCOMP_USER_NOTIF_FLAG_CONTINUE
#define SECCOMP_USER_NOTIF_FLAG_CONTINUE (1UL << 0)
#endif

const char *kc_syscall_name_arch(uint32_t arch, int nr, char *buf, size_t len) {
  return kc_syscall_lookup(arch, nr, buf, len);
}

int kc_seccomp_notify_receive(int listener, kc_seccomp_event *ev, kc_error *err) {
  struct seccomp_notif req;
  memset(&req, 0, sizeof req); /* the kernel insists on a zeroed struct */
  for (;;) {
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) == 0)
      break;
    if (errno == EINTR)
      continue;
    /* ENOENT: the task was killed/interrupted before we read the event. */
    return kc_error_set(err, errno, "seccomp listener: receive");
  }
  memset(ev, 0, sizeof *ev);
  ev->id = req.id;
  ev->pid = (pid_t)req.pid;
  ev->nr = req.data.nr;
  ev->arch = req.data.arch;
  ev->ip = req.data.instruction_pointer;
  memcpy(ev->args, req.data.args, sizeof ev->args);
  kc_syscall_label(ev->arch, ev->nr, ev->name, sizeof ev->name);
  return 0;
}

bool kc_seccomp_notify_id_valid(int listener, uint64_t id) {
  return ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

static int respond(int listener, const kc_seccomp_event *ev, int error, uint32_t flags,
                   kc_error *err) {
  struct seccomp_notif_resp resp = {.id = ev->id, .error = error, .flags = flags};
  while (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0) {
    if (errno == EINTR)
      continue;
    /* ENOENT: the task died or was interrupted meanwhile; nothing to answer. */
    return kc_error_set(err, errno, "seccomp listener: answer %s", ev->name);
  }
  return 0;
}

int kc_seccomp_notify_continue(int listener, const kc_seccomp_event *ev, kc_error *err) {
  return respond(listener, ev, 0, SECCOMP_USER_NOTIF_FLAG_CONTINUE, err);
}

int kc_seccomp_notify_errno(int listener, const kc_seccomp_event *ev, int errnum, kc_error *err) {
  if (errnum <= 0)
    return kc_error_set(err, EINVAL, "seccomp listener: errno must be positive");
  return respond(listener, ev, -errnum, 0, err);
}

/* Is [addr, addr+len) inside writable mappings of the task?  /proc/PID/mem writes
 * with the kernel's force, past a page's protection: without this check a program
 * could have its read-only (or executable) pages written through us, which it could
 * not do itself.  A mapping another of its threads swaps in after the check gets at
 * most its private copy written: the kernel never force-writes a shared mapping. */
static bool writable(int dirfd, uint64_t addr, size_t len) {
  int fd = openat(dirfd, "maps", O_RDONLY | O_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0)
      close(fd);
    return false;
  }
  uint64_t want = addr, end = addr + len;
  char line[512];
  bool at_start = true; /* a line's own start: the rest of a long one is a path it chose */
  while (want < end && fgets(line, sizeof line, f)) {
    bool start = at_start;
    at_start = strchr(line, '\n') != NULL;
    unsigned long lo, hi;
    char perm[5];
    if (!start)
      continue;
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perm) != 3)
      break;
    if (lo <= want && want < hi && perm[1] == 'w')
      want = hi; /* covered up to hi; maps is sorted, so the rest follows */
  }
  fclose(f);
  return end > addr && want >= end;
}

int kc_seccomp_notify_sysinfo(int listener, const kc_seccomp_event *ev, const struct sysinfo *si,
                              kc_error *err) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d", (int)ev->pid);
  /* The directory and mem are bound to the task that has this pid now; the pending
   * notification, checked after, proves that it is the one that asked. */
  int dir = ev->pid > 0 ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  int mem = dir >= 0 ? openat(dir, "mem", O_WRONLY | O_CLOEXEC) : -1;
  int rc;
  if (!kc_seccomp_notify_id_valid(listener, ev->id))
    rc = 0; /* gone: nothing to answer */
  else if (mem < 0)
    rc = respond(listener, ev, -EPERM, 0, err);
  else if (!writable(dir, ev->args[0], sizeof *si) ||
           pwrite(mem, si, sizeof *si, (off_t)ev->args[0]) != (ssize_t)sizeof *si)
    rc = respond(listener, ev, -EFAULT, 0, err);
  else
    rc = respond(listener, ev, 0, 0, err);
  if (mem >= 0)
    close(mem);
  if (dir >= 0)
    close(dir);
  return rc;
}

static bool cond_true(const kc_sc_cond *c, uint64_t a) {
  switch (c->op) {
  case KC_SC_EQ:
    return a == c->value;
  case KC_SC_NE:
    return a != c->value;
  case KC_SC_LT:
    return a < c->value;
  case KC_SC_LE:
    return a <= c->value;
  case KC_SC_GT:
    return a > c->value;
  case KC_SC_GE:
    return a >= c->value;
  case KC_SC_MASKED:
    return (a & c->mask) == c->value;
  case KC_SC_ANYBIT:
    return (a & c->mask) != 0;
  }
  return false;
}

bool kc_sc_rule_matches(const kc_sc_rule *r, int nr, const uint64_t args[6]) {
  if (r->nr != nr)
    return false;
  for (unsigned i = 0; i < r->n_conds; i++)
    if (!cond_true(&r->conds[i], args[r->conds[i].arg]))
      return false;
  return true;
}

kc_notify_kind kc_policy_notify_kind(const kc_policy *p, const kc_seccomp_event *ev) {
  if (ev->arch != seccomp_arch_native() || (ev->nr & 0x40000000))
    return KC_NOTIFY_VIOLATION; /* another ABI (i386, x32): never asked about */
  /* A kill rule that also matches wins (it is the stricter reading). */
  bool notify = false;
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    if (!kc_sc_rule_matches(r, ev->nr, ev->args))
      continue;
    if (r->action == KC_SC_KILL)
      return KC_NOTIFY_VIOLATION;
    if (r->action == KC_SC_NOTIFY)
      notify = true;
  }
  if (notify)
    return KC_NOTIFY_ASK;
  if (p->has_default && p->default_action == KC_SC_NOTIFY)
    return KC_NOTIFY_ASK;
  return KC_NOTIFY_VIOLATION;
}

bool kc_policy_reports_syscall(const kc_policy *p, int nr, const uint64_t args[6]) {
  bool matched = false;
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    if (!kc_sc_rule_matches(r, nr, args))
      continue;
    if (r->action != KC_SC_KILL && r->action != KC_SC_NOTIFY)
      return false;
    matched = true;
  }
  if (matched)
    return true;
  return p->has_default && (p->default_action == KC_SC_KILL || p->default_action == KC_SC_NOTIFY);
}

bool kc_policy_always_reports(const kc_policy *p, int nr) {
  bool unconditional = false;
  for (size_t i = 0; i < p->n_rules; i++) {
    const kc_sc_rule *r = &p->rules[i];
    if (r->nr != nr)
      continue;
    if (r->action != KC_SC_KILL && r->action != KC_SC_NOTIFY)
      return false;
    if (r->n_conds == 0)
      unconditional = true;
  }
  return unconditional ||
         (p->has_default && (p->default_action == KC_SC_KILL || p->default_action == KC_SC_NOTIFY));
}

/* ---- hand-off ------------------------------------------------------------------ */

/* The hand-off: one byte, 'L' with the listener attached or 'N' without. */
static int send_listener(int sock, int listener) {
  char byte = listener >= 0 ? 'L' : 'N';
  int rc = kc_send_fds(sock, &byte, 1, &listener, listener >= 0 ? 1 : 0);
  int saved = errno;
  if (listener >= 0)
    close(listener); /* the child must never keep it */
  errno = saved;
  return rc;
}

int kc_seccomp_install_and_send(const kc_policy *p, int sock, kc_error *err) {
  int listener = -1;
  if (kc_seccomp_install(p, sock, &listener, err) < 0)
    return -1;
  if (send_listener(sock, listener) < 0)
    return kc_error_set(err, errno, "seccomp: send the listener");
  return 0;
}

int kc_seccomp_prog_load_and_send(const kc_seccomp_prog *prog, int sock) {
  int listener = -1;
  if (kc_seccomp_prog_load(prog, &listener) < 0)
    return -1;
  return send_listener(sock, listener);
}

int kc_seccomp_recv_listener(int sock, int timeout_ms, int *listener, kc_error *err) {
  *listener = -1;
  struct pollfd pfd = {.fd = sock, .events = POLLIN};
  int pr;
  do
    pr = poll(&pfd, 1, timeout_ms);
  while (pr < 0 && errno == EINTR);
  if (pr < 0)
    return kc_error_set(err, errno, "seccomp: wait for the listener");
  if (pr == 0)
    return kc_error_set(err, ETIMEDOUT, "seccomp: wait for the listener");
  char byte = 0;
  int fd = -1, nfd = 1;
  ssize_t n = kc_recv_fds(sock, &byte, 1, &fd, &nfd);
  if (n < 0 && errno == EPROTO)
    return kc_error_set(err, EPROTO, "seccomp: listener message truncated");
  if (n < 0)
    return kc_error_set(err, errno, "seccomp: receive the listener");
  if (n == 0) {
    if (nfd)
      close(fd);
    return kc_error_set(err, ECONNRESET,
                        "seccomp: the child closed before sending its "
                        "listener");
  }
  if (!nfd)
    fd = -1;
  if (byte == 'L' && fd < 0)
    return kc_error_set(err, EPROTO, "seccomp: listener announced but not received");
  if (byte != 'L') {
    if (fd >= 0)
      close(fd);
    fd = -1;
  }
  *listener = fd;
  return 0;
}
