/* File descriptors between kcage's own processes and files. */
#ifndef KCAGE_FDIO_H
#define KCAGE_FDIO_H

#include <stdbool.h>
#include <stddef.h>

/* Close *fd when it is open and mark it closed (-1). */
void kc_close_fd(int *fd);
/* Read (wr=false) or write exactly len bytes over a pipe or socket, EINTR retried;
 * -1 on an error or an early end. */
int kc_io_all(int fd, void *buf, size_t len, bool wr);

#endif
