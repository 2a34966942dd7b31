/* What libkcage exports.  The library is built with -fvisibility=hidden: a symbol is
 * exported only when a header of include/kcage declares it between KC_PUBLIC_BEGIN and
 * KC_PUBLIC_END (or marks it KC_PUBLIC) and cmake/libkcage.map lists it, so nothing
 * internal leaks by accident.  Headers under internal/ never use these. */
#ifndef KCAGE_VISIBILITY_H
#define KCAGE_VISIBILITY_H

#define KC_PUBLIC __attribute__((visibility("default")))
#define KC_PUBLIC_BEGIN _Pragma("GCC visibility push(default)")
#define KC_PUBLIC_END _Pragma("GCC visibility pop")

#endif
