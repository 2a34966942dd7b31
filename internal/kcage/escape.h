/* Text from a kernel, a compiler or a network peer on its way to a terminal. */
#ifndef KCAGE_ESCAPE_H
#define KCAGE_ESCAPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies IN to OUT (always NUL-terminated, never cut inside an escape) with every
 * control character escaped, so no escape sequence, carriage return or backspace
 * reaches a terminal: \n \r \t \\e as such, other C0 bytes, DEL, C1 controls
 * (U+0080-U+009F) and bytes that are not UTF-8 as \xNN; printable ASCII and other valid
 * UTF-8 pass.  A backslash stays as it is.  Returns OUT. */
char *kc_escape(const char *in, char *out, size_t outlen);

/* The same for a byte string of known length (it may hold NULs). */
char *kc_escape_n(const char *in, size_t inlen, char *out, size_t outlen);

#ifdef __cplusplus
}
#endif
#endif
