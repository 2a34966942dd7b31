/* kc_escape: what may reach a terminal from a hostile string. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "kcage/escape.h"

static void test_controls_escaped(void **s) {
  (void)s;
  char out[256];
  assert_string_equal(kc_escape("\033[32mok\033[0m", out, sizeof out), "\\e[32mok\\e[0m");
  assert_string_equal(kc_escape("a\nb\rc\td", out, sizeof out), "a\\nb\\rc\\td");
  assert_string_equal(kc_escape("\b\a\x7f", out, sizeof out), "\\x08\\x07\\x7f");
  /* C1 CSI as UTF-8 (U+009B) and as a raw byte; an overlong ESC; a lone continuation. */
  assert_string_equal(kc_escape("\xc2\x9b"
                                "2J",
                                out, sizeof out),
                      "\\xc2\\x9b2J");
  assert_string_equal(kc_escape("\x9b", out, sizeof out), "\\x9b");
  assert_string_equal(kc_escape("\xc0\x9b", out, sizeof out), "\\xc0\\x9b");
  assert_string_equal(kc_escape("\xed\xa0\x80", out, sizeof out), "\\xed\\xa0\\x80");
  /* Printable text and valid UTF-8 pass. */
  assert_string_equal(kc_escape("naïve µs ok 1.5x", out, sizeof out), "naïve µs ok 1.5x");
  assert_string_equal(kc_escape(NULL, out, sizeof out), "");
  char nul[] = {'a', 0, 'b'};
  assert_string_equal(kc_escape_n(nul, 3, out, sizeof out), "a\\x00b");
}

/* The output is bounded and never ends inside an escape or a UTF-8 sequence. */
static void test_bounded(void **s) {
  (void)s;
  char out[6];
  assert_string_equal(kc_escape("ab\033cd", out, sizeof out), "ab\\ec");
  assert_string_equal(kc_escape("abcd\033", out, sizeof out), "abcd");
  assert_string_equal(kc_escape("abc\x01", out, sizeof out), "abc");
  assert_string_equal(kc_escape("abcµ", out, 5), "abc");
  char one[1];
  assert_string_equal(kc_escape("x", one, 1), "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_controls_escaped),
      cmocka_unit_test(test_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
