/* Blocking socket I/O with deadlines (internal to tracker/): nothing here waits
 * forever unless the caller passes a negative timeout. */
#ifndef KC_TRACKER_NETIO_H
#define KC_TRACKER_NETIO_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "kcage/error.h"

/* deadline = kc_now_s() + timeout, or a negative value for "no deadline". */
double kc_deadline(double timeout_s);
int kc_write_all(int fd, const void *buf, size_t len, double deadline, kc_error *err);
/* -1 with err (ETIMEDOUT on deadline, ECONNRESET on EOF). */
int kc_read_exact(int fd, void *buf, size_t len, double deadline, kc_error *err);
int kc_write_u32(int fd, uint32_t v, double deadline, kc_error *err);
int kc_read_u32(int fd, uint32_t *v, double deadline, kc_error *err);
/* Silent peers (no FIN/RST) are dropped after about `seconds`. */
void kc_tcp_keepalive(int fd, double seconds);
/* A listening TCP socket (backlog SOMAXCONN, SO_REUSEADDR, close-on-exec plus
 * sock_flags) on host at the first free port of [first, end): TVM's servers take the
 * first free port of a range.  *port_out is the port it got (first may be 0: any). */
int kc_listen_first_free(const char *host, unsigned first, unsigned end, int sock_flags,
                         int *fd_out, uint16_t *port_out, kc_error *err);

/* (session.c) kc_session_upload_file, and the SHA-256 of the bytes sent into sha256 (64
 * hex digits and a NUL): what a record of the batch names, known without asking the
 * agent. */
typedef struct kc_session kc_session;
int kc_session_upload_file_hashed(kc_session *s, const char *name, const char *path,
                                  char sha256[65], kc_error *err);

#endif
