/* One escaper for every untrusted string kcage prints (kcage_escape.h says what). */
#include "kcage/escape.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at P (at most N bytes), 0 if invalid or a C1
 * control.  Overlong forms, surrogates and values past U+10FFFF are invalid. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  size_t len;
  uint32_t cp, min;
  if (p[0] >= 0xc2 && p[0] <= 0xdf)
    len = 2, cp = p[0] & 0x1f, min = 0x80;
  else if (p[0] >= 0xe0 && p[0] <= 0xef)
    len = 3, cp = p[0] & 0x0f, min = 0x800;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4)
    len = 4, cp = p[0] & 0x07, min = 0x10000;
  else
    return 0;
  if (len > n)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp <= 0x9f)
    return 0;
  return len;
}

char *kc_escape_n(const char *in, size_t inlen, char *out, size_t outlen) {
  if (!outlen)
    return out;
  const unsigned char *p = (const unsigned char *)(in ? in : "");
  if (!in)
    inlen = 0;
  size_t o = 0;
  for (size_t i = 0; i < inlen;) {
    char piece[8];
    size_t pl, take = 1;
    unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f) {
      piece[0] = (char)c, pl = 1;
    } else if (c == '\n' || c == '\r' || c == '\t' || c == 0x1b) {
      piece[0] = '\\';
      piece[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : 'e';
      pl = 2;
    } else if (c >= 0x80 && (take = utf8_len(p + i, inlen - i)) > 0) {
      memcpy(piece, p + i, take);
      pl = take;
    } else {
      take = 1;
      pl = (size_t)snprintf(piece, sizeof piece, "\\x%02x", c);
    }
    if (o + pl >= outlen)
      break;
    memcpy(out + o, piece, pl);
    o += pl;
    i += take;
  }
  out[o] = 0;
  return out;
}

char *kc_escape(const char *in, char *out, size_t outlen) {
  return kc_escape_n(in, in ? strlen(in) : 0, out, outlen);
}
