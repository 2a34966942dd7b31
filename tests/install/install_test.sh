#!/usr/bin/env bash
# install_test.sh SOURCE_DIR CC: clone SOURCE_DIR (with its uncommitted changes),
# configure it for a prefix that does not exist, then install it twice: `make install`
# with DESTDIR staging and `cmake --install --prefix`.  The source and build trees are
# removed (and a hostile policy planted where the source tree was) before the installed
# copies are used: kcage run, kcage bench, and consumers of every public header built
# through pkg-config and through find_package(kcage).
set -euo pipefail
src=$1
cc=${2:-cc}
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }
[ -d "$src/.git" ] || [ -f "$src/.git" ] || { echo "SKIP: $src is not a git checkout"; exit 77; }

tmp=$(mktemp -d /tmp/kcage-install-test.XXXXXX)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The clone, plus what the working tree has that HEAD has not.
git clone -q "$src" "$tmp/src"
git -C "$src" diff HEAD --binary | (cd "$tmp/src" && git apply --allow-empty)
(cd "$src" && git ls-files --others --exclude-standard -z) |
  (cd "$src" && xargs -0 -r cp --parents -t "$tmp/src")
cp -r "$src/examples/kernels" "$tmp/kernels"
# The embedder's example (docs/api.md) and the two-tenant test, built below against the
# installed package only.
mkdir "$tmp/embed"
cp "$tmp/src/docs/examples/embed.c" "$tmp/src/tests/api/test_tenants.c" "$tmp/embed/"

nowhere=/nonexistent/kcage-configured-prefix
cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
  -DKC_BUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$nowhere" >/dev/null
echo "== make install, DESTDIR staging"
DESTDIR="$tmp/stage" make -s -C "$tmp/src" install BUILD="$tmp/build" JOBS=2 >/dev/null
[ -x "$tmp/stage$nowhere/bin/kcage" ] || fail "DESTDIR staging: no $tmp/stage$nowhere/bin/kcage"
[ ! -e "$nowhere" ] || fail "DESTDIR staging wrote to $nowhere"
echo "== cmake --install --prefix"
cmake --install "$tmp/build" --prefix "$tmp/prefix" >/dev/null

# Nothing of the build remains; where the source tree was, a policy that would make
# every run fail: the installed kcage must not look there.
rm -rf "$tmp/src" "$tmp/build"
mkdir -p "$tmp/src/policies"
printf 'this is not a policy\n' >"$tmp/src/policies/exec.policy"
cp "$tmp/src/policies/exec.policy" "$tmp/src/policies/measure.policy"
cp "$tmp/src/policies/exec.policy" "$tmp/src/policies/build.policy"

unset KCAGE_POLICY_DIR KCAGE_WORKER
export XDG_CACHE_HOME="$tmp/cache"
for p in "$tmp/prefix" "$tmp/stage$nowhere"; do
  echo "== $p: kcage run -- /bin/true"
  "$p/bin/kcage" run -- /bin/true || fail "kcage run -- /bin/true from $p: exit $?"
  shown=$("$p/bin/kcage" policy show exec) || fail "kcage policy show exec from $p"
  [[ $(printf '%s\n' "$shown" | head -1) == *"$p/share/kcage/policies/exec.policy"* ]] ||
    fail "kcage policy show exec from $p: not the installed policy"
done

p=$tmp/prefix
echo "== kcage bench"
args=$(cat "$tmp/kernels/ARGS")
"$p/bin/kcage" bench --args "$args" --reference "$tmp/kernels/reference.c" --repeat 2 \
  --timeout 30 --json "$tmp/bench.json" "$tmp/kernels/naive.c" "$tmp/kernels/segfault.c"
python3 - "$tmp/bench.json" <<'PY'
import json, sys
got = {json.loads(l)["kernel"].rsplit("/", 1)[1]: json.loads(l)["status"] for l in open(sys.argv[1])}
want = {"naive.c": "ok", "segfault.c": "crash"}
sys.exit(0 if got == want else f"kcage bench verdicts {got}, want {want}")
PY

echo "== a consumer of every public header, through pkg-config"
mkdir "$tmp/consumer"
for h in "$p"/include/kcage/*.h; do echo "#include <kcage/$(basename "$h")>"; done \
  >"$tmp/consumer/consumer.c"
grep -q 'kcage/kcage.h' "$tmp/consumer/consumer.c" || fail "no headers installed"
cat "$(dirname "$0")/consumer.c" >>"$tmp/consumer/consumer.c"
pcdir=$(dirname "$(find "$p" -name kcage.pc)")
export PKG_CONFIG_PATH=$pcdir
pkg-config --print-requires kcage | grep -q jansson || fail "kcage.pc: jansson not in Requires"
libdir=$(pkg-config --variable=libdir kcage)
"$cc" -std=c17 -Wall -Wextra -Werror -o "$tmp/consumer/pc" "$tmp/consumer/consumer.c" \
  $(pkg-config --cflags --libs kcage) -Wl,-rpath,"$libdir"
"$tmp/consumer/pc" "$tmp/kernels/naive.c" "$args" || fail "pkg-config consumer"

echo "== the installed API: public headers only, libkcage.so.1"
for h in cgroup.h seccomp.h sandbox_parts.h log.h cleanup.h escape.h units.h; do
  [ ! -e "$p/include/kcage/$h" ] || fail "internal header kcage/$h installed"
done
! grep -rq include_next "$p/include/kcage" || fail "an installed header reaches for an internal one"
soname=$(readelf -d "$libdir/libkcage.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libkcage.so.1 ] || fail "soname '$soname', want libkcage.so.1"

echo "== docs/examples/embed.c and the two-tenant test, against the installed package"
"$cc" -std=c17 -Wall -Wextra -Werror -o "$tmp/embed/embed" "$tmp/embed/embed.c" \
  $(pkg-config --cflags --libs kcage) -Wl,-rpath,"$libdir"
(cd "$tmp/embed" && ./embed "$tmp/kernels/naive.c" "$args") || fail "embed"
"$cc" -std=c17 -Wall -Wextra -Werror -pthread -o "$tmp/embed/test_tenants" \
  "$tmp/embed/test_tenants.c" $(pkg-config --cflags --libs kcage) -Wl,-rpath,"$libdir"
rc=0
"$tmp/embed/test_tenants" "$tmp" || rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || fail "two tenants from the installed package"

echo "== the same consumer through find_package(kcage)"
cat >"$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.24)
project(consumer C)
find_package(kcage 0.1 REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE kcage::kcage)
CM
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$p" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
"$tmp/consumer/build/consumer" "$tmp/kernels/naive.c" "$args" || fail "find_package consumer"
[ -f "$p/share/doc/kcage/LICENSE" ] || fail "LICENSE not installed"

echo "== systemd units"
units=$p/lib/systemd/system
[ -f "$units/kcage-tracker.service" ] && [ -f "$units/kcage-agent@.service" ] || fail "no units"
grep -q "^ExecStart=$p/bin/kcage tracker" "$units/kcage-tracker.service" ||
  fail "the tracker unit does not run the installed kcage"
grep -q "^EnvironmentFile=-$p/etc/kcage/agent.conf" "$units/kcage-agent@.service" ||
  fail "the agent unit does not read the installed agent.conf"
[ -f "$p/etc/kcage/tracker.conf" ] && [ -f "$p/etc/kcage/agent.conf" ] || fail "no settings files"
if command -v systemd-analyze >/dev/null; then
  cp "$units/kcage-tracker.service" "$units/kcage-agent@.service" "$tmp/"
  cp "$units/kcage-agent@.service" "$tmp/kcage-agent@cpu.service"
  for u in kcage-tracker.service kcage-agent@cpu.service; do
    out=$(systemd-analyze verify --man=no "$tmp/$u" 2>&1) || fail "systemd-analyze verify $u: $out"
    [ -z "$out" ] || fail "systemd-analyze verify $u: $out"
  done
else
  echo "   (no systemd-analyze: units not verified)"
fi
echo "== man pages and bash completion"
if command -v help2man >/dev/null; then
  for sub in run bench policy tracker agent query; do
    page=$p/share/man/man1/kcage-$sub.1
    grep -q "^\.TH KCAGE-$(echo $sub | tr a-z A-Z) " "$page" || fail "no man page kcage-$sub.1"
  done
  grep -q 'limits\\-fallback' "$p/share/man/man1/kcage-run.1" || fail "kcage-run.1 lacks --limits-fallback"
  grep -q 'metrics' "$p/share/man/man1/kcage-tracker.1" || fail "kcage-tracker.1 lacks --metrics"
  for page in "$p"/share/man/man1/kcage*.1; do
    grep -q '^\.SH EXAMPLES' "$page" && grep -q '^\.SH "SEE ALSO"' "$page" ||
      fail "$page lacks EXAMPLES or SEE ALSO"
  done
else
  echo "   (no help2man: no man pages to check)"
fi
comp=$p/share/bash-completion/completions/kcage
[ -f "$comp" ] || fail "no bash completion installed"
complete_words() { # WORDS... -> the completions of the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
    COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; _kcage; printf "%s\n" "${COMPREPLY[@]}"' \
    _ "$comp" "$@"
}
complete_words "$p/bin/kcage" "r" | grep -qx run || fail "completion: kcage r -> run"
complete_words "$p/bin/kcage" run --mem | grep -qx -- --memory || fail "completion: --memory"
complete_words "$p/bin/kcage" tracker --met | grep -qx -- --metrics || fail "completion: --metrics"
# the installed policies, found next to the installed kcage
pols=$(cd "$tmp" && complete_words "$p/bin/kcage" run --policy "")
for pol in exec build measure; do
  grep -qx "$pol" <<<"$pols" || fail "completion: --policy does not offer $pol: $pols"
done
echo "install test: ok"
