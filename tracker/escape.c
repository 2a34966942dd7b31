/* Printing what a peer sent: control characters (C0, DEL and the C1 range as UTF-8)
 * could drive the terminal, so they are shown as \xNN instead. */
#include <stdio.h>
#include <string.h>

#include "kcage/tracker.h"

char *kc_escape_ctrl(const char *s, char *out, size_t len) {
  size_t o = 0;
  if (!len)
    return out;
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    unsigned c = *p;
    bool c1 = c == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      if (c1)
        c = *++p;
      if (o + 4 >= len)
        break;
      snprintf(out + o, 5, "\\x%02x", c);
      o += 4;
    } else {
      if (o + 1 >= len)
        break;
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
  return out;
}
