#!/bin/sh
# libkcage's ABI against the baseline kept in the repository (libabigail).
#   abi.sh LIBKCAGE.so INCLUDE_DIR BASELINE          compare (exit 0, 1, or 77 = skip)
#   abi.sh LIBKCAGE.so INCLUDE_DIR BASELINE update   write a new baseline (an ABI
#                                                    change made on purpose)
# The baseline is one compiler's view of the types (DWARF): a library built by another
# compiler (clang, another gcc) is not compared but skipped with the reason, as is a
# library without debug information.
set -eu
lib=$1 inc=$2 base=$3
# The compiler of the library's own code: clang when any part says so (its objects sit
# beside the C library's start files, which say GCC).
producer_of() {
  c=$(readelf -p .comment "$1" 2>/dev/null | sed -n 's/^ *\[ *[0-9a-f]*\] *//p')
  echo "$c" | grep -m1 clang || echo "$c" | grep -m1 GCC || true
}
for t in abidw abidiff readelf; do
  command -v $t >/dev/null || { echo "SKIP: no $t (apt-get install abigail-tools binutils)"; exit 77; }
done
readelf -S "$lib" | grep -q '\.debug_info' ||
  { echo "SKIP: $lib has no debug information (build with RelWithDebInfo or Debug)"; exit 77; }
dump() {
  abidw --headers-dir "$inc/kcage" --drop-private-types --drop-undefined-syms --no-show-locs \
    --no-corpus-path --no-comp-dir-path "$lib"
}
if [ "${4:-}" = update ]; then
  dump >"$base"
  producer_of "$lib" >"$base.producer"
  echo "wrote $base ($(cat "$base.producer"))"
  exit 0
fi
want=$(cat "$base.producer") have=$(producer_of "$lib")
[ "$want" = "$have" ] || { echo "SKIP: the baseline was made by '$want', $lib by '$have'"; exit 77; }
now=$(mktemp)
trap 'rm -f "$now"' EXIT
dump >"$now"
# Both sides as abidw sees them through the public headers; --harmless: any change
# counts (a member added at the end of a config the caller allocates is not harmless).
rc=0
abidiff --harmless "$base" "$now" || rc=$?
[ $rc = 0 ] && { echo "ABI of $lib: as in $base"; exit 0; }
echo "FAIL: the ABI of $lib differs from $base (abidiff exit $rc; 4 = changed, 8 = incompatible)."
echo "On purpose? A compatible addition: update the baseline (tests/api/abi.sh LIB include $base update)"
echo "and add the function to cmake/libkcage.map; an incompatible change also bumps KC_ABI_VERSION."
exit 1
