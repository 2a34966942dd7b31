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
void kc_tcp_keepalive(int fd, int seconds);

#endif
