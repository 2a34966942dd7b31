#!/bin/sh
# libkcage's boundary: every symbol it exports starts with kc_, is declared in a public
# header (include/kcage) and listed in the linker map; at most 110 functions; the
# umbrella header includes every public header; no internal header is public.
#   exports.sh LIBKCAGE.so INCLUDE_DIR MAP
set -eu
lib=$1 inc=$2 map=$3
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {sub(/@.*/, "", $3); print $3}')
[ -n "$syms" ] || { echo "FAIL: $lib exports nothing"; exit 1; }
bad=0
for s in $syms; do
  case $s in
  _init | _fini | KCAGE_*) continue ;;
  kc_*) ;;
  *) echo "FAIL: $s is exported but is not a kc_ name"; bad=1; continue ;;
  esac
  grep -qw "$s" "$inc"/kcage/*.h || { echo "FAIL: $s is exported but no public header declares it"; bad=1; }
done
for s in $(sed -n 's/^ *\(kc_[a-z0-9_]*\);$/\1/p' "$map"); do
  echo "$syms" | grep -qx "$s" || { echo "FAIL: $s is in $map but not exported"; bad=1; }
done
n=$(nm -D --defined-only "$lib" | awk '$2 == "T"' | wc -l)
[ "$n" -le 110 ] || { echo "FAIL: $n exported functions (at most 110)"; bad=1; }
for h in "$inc"/kcage/*.h; do
  b=$(basename "$h")
  case $b in kcage.h | visibility.h) continue ;; esac
  grep -q "#include \"kcage/$b\"" "$inc/kcage/kcage.h" || { echo "FAIL: kcage.h does not include $b"; bad=1; }
done
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libkcage.so.1 ] || { echo "FAIL: soname '$soname', want libkcage.so.1"; bad=1; }
[ $bad = 0 ] && echo "$n exported functions, each a kc_ name declared in $inc/kcage and listed in $map"
exit $bad
