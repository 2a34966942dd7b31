/* File descriptors between kcage's own processes and files. */
#ifndef KCAGE_FDIO_H
#define KCAGE_FDIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Close *fd when it is open and mark it closed (-1). */
void kc_close_fd(int *fd);
/* Read (wr=false) or write exactly len bytes over a pipe or socket, EINTR retried;
 * -1 on an error or an early end. */
int kc_io_all(int fd, void *buf, size_t len, bool wr);

/* /proc/PID/NAME of another process, into buf (NUL-terminated, cut to len - 1 bytes):
 * its length, or -1 when it cannot be read (the process is gone). */
ssize_t kc_read_proc(pid_t pid, const char *name, char *buf, size_t len);

/* Descriptors over a unix socket (SCM_RIGHTS), with len bytes of message, at most
 * KC_MAX_FDS a message; EINTR retried, never SIGPIPE.  0, or -1 with errno (EIO for a
 * short send). */
#define KC_MAX_FDS 8
int kc_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* One message into buf and up to *nfds descriptors, received close-on-exec (*nfds is
 * set to the number received; more are closed; fds and nfds may be NULL for none).
 * Its length, or -1 with errno: EPROTO when the sender's descriptors did not fit the
 * buffer (MSG_CTRUNC: the message is refused, whatever came is closed). */
ssize_t kc_recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds);

#endif
