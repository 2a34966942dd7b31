/* A session's byte stream over a socket: plain until both hellos have crossed, then
 * every byte in sealed records (seal.h).  The session's frames (u32 LE length + JSON)
 * and the raw bytes of uploads run on top of it unchanged. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kcage/cleanup.h"
#include "netio.h"
#include "seal.h"

#define SESSION_MAX_FRAME (1u << 20)

void kc_chan_init(kc_chan *c, int fd) {
  memset(c, 0, sizeof *c);
  c->fd = fd;
}

void kc_chan_free(kc_chan *c) {
  free(c->plain);
  c->plain = NULL;
  c->off = c->len = 0;
  kc_seal_wipe(&c->seal);
}

void kc_chan_seal(kc_chan *c, const kc_seal *s) {
  c->seal = *s;
  c->sealed = true;
}

int kc_chan_write(kc_chan *c, const void *buf, size_t len, double deadline, kc_error *err) {
  if (!c->sealed)
    return kc_write_all(c->fd, buf, len, deadline, err);
  const uint8_t *p = buf;
  size_t chunk = len < KC_SEAL_MAX_PLAIN ? len : KC_SEAL_MAX_PLAIN;
  kc_cleanup_free uint8_t *rec = chunk ? malloc(kc_seal_wire_len(chunk)) : NULL;
  if (chunk && !rec)
    return kc_error_set(err, ENOMEM, "sealed session");
  while (len) {
    size_t n = len < chunk ? len : chunk;
    if (kc_seal_record(&c->seal, p, n, rec) < 0)
      return kc_error_set(err, EPROTO, "sealed session: no more records on this channel");
    if (kc_write_all(c->fd, rec, kc_seal_wire_len(n), deadline, err) < 0)
      return -1;
    p += n;
    len -= n;
  }
  return 0;
}

/* The next record, opened into c->plain. */
static int next_record(kc_chan *c, double deadline, kc_error *err) {
  uint8_t hdr[KC_SEAL_HDR];
  size_t body_len;
  if (kc_read_exact(c->fd, hdr, sizeof hdr, deadline, err) < 0 ||
      kc_seal_body_len(hdr, &body_len, err) < 0)
    return -1;
  kc_cleanup_free uint8_t *body = malloc(body_len);
  if (!body)
    return kc_error_set(err, ENOMEM, "sealed session");
  if (kc_read_exact(c->fd, body, body_len, deadline, err) < 0)
    return -1;
  free(c->plain);
  c->plain = malloc(body_len - KC_SEAL_TAG);
  c->off = c->len = 0;
  if (!c->plain)
    return kc_error_set(err, ENOMEM, "sealed session");
  if (kc_seal_open(&c->seal, hdr, body, body_len, c->plain, err) < 0)
    return -1;
  c->len = body_len - KC_SEAL_TAG;
  return 0;
}

int kc_chan_read(kc_chan *c, void *buf, size_t len, double deadline, kc_error *err) {
  if (!c->sealed)
    return kc_read_exact(c->fd, buf, len, deadline, err);
  uint8_t *p = buf;
  while (len) {
    if (c->off == c->len && next_record(c, deadline, err) < 0)
      return -1;
    size_t n = c->len - c->off < len ? c->len - c->off : len;
    memcpy(p, c->plain + c->off, n);
    c->off += n;
    p += n;
    len -= n;
  }
  return 0;
}

int kc_chan_send_text(kc_chan *c, const char *text, size_t len, double deadline, kc_error *err) {
  if (len > SESSION_MAX_FRAME)
    return kc_error_set(err, EMSGSIZE, "session: message of %zu bytes", len);
  kc_cleanup_free char *buf = malloc(len + 4);
  if (!buf)
    return kc_error_set(err, ENOMEM, "session");
  uint32_t le = htole32((uint32_t)len);
  memcpy(buf, &le, 4);
  memcpy(buf + 4, text, len);
  return kc_chan_write(c, buf, len + 4, deadline, err);
}

int kc_chan_recv_text(kc_chan *c, double deadline, char **text, size_t *len, kc_error *err) {
  uint32_t le;
  if (kc_chan_read(c, &le, sizeof le, deadline, err) < 0)
    return -1;
  size_t n = le32toh(le);
  if (n == 0 || n > SESSION_MAX_FRAME)
    return kc_error_set(err, EPROTO, "session: bad frame length %zu", n);
  char *buf = malloc(n);
  if (!buf)
    return kc_error_set(err, ENOMEM, "session");
  if (kc_chan_read(c, buf, n, deadline, err) < 0) {
    free(buf);
    return -1;
  }
  *text = buf;
  *len = n;
  return 0;
}

json_t *kc_session_parse(const char *text, size_t len) {
  json_error_t jerr;
  json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (v && json_is_object(v) && json_is_string(json_object_get(v, "op")))
    return v;
  json_decref(v);
  return NULL;
}

int kc_chan_send(kc_chan *c, const json_t *msg, double deadline, kc_error *err) {
  kc_cleanup_free char *t = json_dumps(msg, JSON_COMPACT | JSON_ENSURE_ASCII);
  if (!t)
    return kc_error_set(err, EINVAL, "session: cannot encode message");
  return kc_chan_send_text(c, t, strlen(t), deadline, err);
}

int kc_chan_recv(kc_chan *c, double deadline, json_t **msg, kc_error *err) {
  kc_cleanup_free char *t = NULL;
  size_t n = 0;
  if (kc_chan_recv_text(c, deadline, &t, &n, err) < 0)
    return -1;
  json_t *v = kc_session_parse(t, n);
  if (!v)
    return kc_error_set(err, EPROTO, "session: malformed message");
  *msg = v;
  return 0;
}
