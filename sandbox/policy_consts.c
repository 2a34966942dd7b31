/* Constants a policy may write by name: flags compared in argument conditions,
 * errno names and rlimit names.  Only what policies actually test; anything else can
 * be written as a number. */
#include "policy_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <termios.h>

#define C(x)                                                                                       \
  { #x, (uint64_t)(x) }

static const struct {
  const char *name;
  uint64_t value;
} consts[] = {
    /* socket families and types */
    C(AF_UNSPEC),
    C(AF_UNIX),
    C(AF_LOCAL),
    C(AF_INET),
    C(AF_INET6),
    C(AF_NETLINK),
    C(AF_PACKET),
    C(AF_VSOCK),
    C(AF_BLUETOOTH),
    C(AF_ALG),
    C(AF_KEY),
    C(AF_XDP),
    C(SOCK_STREAM),
    C(SOCK_DGRAM),
    C(SOCK_RAW),
    C(SOCK_SEQPACKET),
    C(SOCK_NONBLOCK),
    C(SOCK_CLOEXEC),
    /* clone / unshare flags */
    C(CLONE_VM),
    C(CLONE_FS),
    C(CLONE_FILES),
    C(CLONE_SIGHAND),
    C(CLONE_PIDFD),
    C(CLONE_PTRACE),
    C(CLONE_VFORK),
    C(CLONE_PARENT),
    C(CLONE_THREAD),
    C(CLONE_NEWNS),
    C(CLONE_SYSVSEM),
    C(CLONE_SETTLS),
    C(CLONE_PARENT_SETTID),
    C(CLONE_CHILD_CLEARTID),
    C(CLONE_UNTRACED),
    C(CLONE_CHILD_SETTID),
    C(CLONE_NEWCGROUP),
    C(CLONE_NEWUTS),
    C(CLONE_NEWIPC),
    C(CLONE_NEWUSER),
    C(CLONE_NEWPID),
    C(CLONE_NEWNET),
    C(CLONE_IO),
    {"CLONE_NEWTIME", 0x00000080},
    /* memory protection and mapping */
    C(PROT_NONE),
    C(PROT_READ),
    C(PROT_WRITE),
    C(PROT_EXEC),
    C(PROT_GROWSDOWN),
    C(PROT_GROWSUP),
    C(MAP_SHARED),
    C(MAP_PRIVATE),
    C(MAP_FIXED),
    C(MAP_ANONYMOUS),
    C(MAP_ANON),
    C(MAP_NORESERVE),
    C(MAP_POPULATE),
    C(MAP_STACK),
    C(MAP_HUGETLB),
    C(MAP_FIXED_NOREPLACE),
    /* open flags */
    C(O_RDONLY),
    C(O_WRONLY),
    C(O_RDWR),
    C(O_ACCMODE),
    C(O_CREAT),
    C(O_EXCL),
    C(O_TRUNC),
    C(O_APPEND),
    C(O_NONBLOCK),
    C(O_DIRECTORY),
    C(O_NOFOLLOW),
    C(O_CLOEXEC),
    C(O_PATH),
    C(O_TMPFILE),
    /* ioctls worth naming: terminal injection and the harmless tty probes */
    C(TIOCSTI),
    C(TIOCLINUX),
    C(TCGETS),
    C(TCSETS),
    C(TIOCGWINSZ),
    C(FIONREAD),
    C(FIOCLEX),
    C(FIONBIO),
    /* prctl options */
    C(PR_SET_NAME),
    C(PR_GET_NAME),
    C(PR_SET_PDEATHSIG),
    C(PR_SET_DUMPABLE),
    C(PR_SET_NO_NEW_PRIVS),
    C(PR_SET_SECCOMP),
    C(PR_CAPBSET_DROP),
    C(PR_SET_MM),
    C(PR_SET_PTRACER),
};

int kc_policy_const_lookup(const char *name, uint64_t *out) {
  for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
    if (!strcmp(consts[i].name, name)) {
      *out = consts[i].value;
      return 0;
    }
  return -1;
}

static const struct {
  const char *name;
  int value;
} errnos[] = {
    C(EPERM),           C(ENOENT),   C(ESRCH),         C(EINTR),       C(EIO),
    C(ENXIO),           C(E2BIG),    C(ENOEXEC),       C(EBADF),       C(ECHILD),
    C(EAGAIN),          C(ENOMEM),   C(EACCES),        C(EFAULT),      C(EBUSY),
    C(EEXIST),          C(EXDEV),    C(ENODEV),        C(ENOTDIR),     C(EISDIR),
    C(EINVAL),          C(ENFILE),   C(EMFILE),        C(ENOTTY),      C(EFBIG),
    C(ENOSPC),          C(ESPIPE),   C(EROFS),         C(EMLINK),      C(EPIPE),
    C(ERANGE),          C(ENOSYS),   C(ENOTSUP),       C(EOPNOTSUPP),  C(EAFNOSUPPORT),
    C(EPROTONOSUPPORT), C(ENOTSOCK), C(EADDRNOTAVAIL), C(ENETUNREACH), C(ECONNREFUSED),
    C(ETIMEDOUT),
};

int kc_policy_errno_lookup(const char *name) {
  for (size_t i = 0; i < sizeof errnos / sizeof errnos[0]; i++)
    if (!strcmp(errnos[i].name, name))
      return errnos[i].value;
  return -1;
}

const char *kc_policy_errno_name(int e) {
  for (size_t i = 0; i < sizeof errnos / sizeof errnos[0]; i++)
    if (errnos[i].value == e)
      return errnos[i].name;
  return NULL;
}

static const struct {
  const char *name;
  int value;
} rlimits[] = {
    {"as", RLIMIT_AS},           {"core", RLIMIT_CORE},         {"cpu", RLIMIT_CPU},
    {"data", RLIMIT_DATA},       {"fsize", RLIMIT_FSIZE},       {"locks", RLIMIT_LOCKS},
    {"memlock", RLIMIT_MEMLOCK}, {"msgqueue", RLIMIT_MSGQUEUE}, {"nice", RLIMIT_NICE},
    {"nofile", RLIMIT_NOFILE},   {"nproc", RLIMIT_NPROC},       {"rss", RLIMIT_RSS},
    {"rtprio", RLIMIT_RTPRIO},   {"rttime", RLIMIT_RTTIME},     {"sigpending", RLIMIT_SIGPENDING},
    {"stack", RLIMIT_STACK},
};

int kc_policy_rlimit_lookup(const char *name) {
  for (size_t i = 0; i < sizeof rlimits / sizeof rlimits[0]; i++)
    if (!strcmp(rlimits[i].name, name))
      return rlimits[i].value;
  return -1;
}

const char *kc_policy_rlimit_name(int resource) {
  for (size_t i = 0; i < sizeof rlimits / sizeof rlimits[0]; i++)
    if (rlimits[i].value == resource)
      return rlimits[i].name;
  return "?";
}
