#!/bin/sh
# libkcage's boundary: every symbol it exports starts with kc_ and is declared in a
# public header (include/kcage); nothing else leaks out of the hidden-by-default build.
#   exports.sh LIBKCAGE.so INCLUDE_DIR
set -eu
lib=$1 inc=$2
syms=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}')
[ -n "$syms" ] || { echo "FAIL: $lib exports nothing"; exit 1; }
bad=0
for s in $syms; do
  case $s in
  _init | _fini) continue ;;
  kc_*) ;;
  *) echo "FAIL: $s is exported but is not a kc_ name"; bad=1; continue ;;
  esac
  grep -qw "$s" "$inc"/kcage/*.h || { echo "FAIL: $s is exported but no public header declares it"; bad=1; }
done
n=$(echo "$syms" | wc -l)
[ $bad = 0 ] && echo "$n exported symbols, each a kc_ name declared in $inc/kcage"
exit $bad
