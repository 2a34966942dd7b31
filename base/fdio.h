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

#endif
