#!/bin/sh
# Installs the Debian packages kcage needs that are missing (only as root; otherwise
# it names what is missing and leaves the decision to the user).
set -eu
pkgs="build-essential cmake pkg-config clang libseccomp-dev libcap-dev
libcmocka-dev libjansson-dev libdlpack-dev nettle-dev libmicrohttpd-dev help2man bubblewrap
qemu-system-x86 busybox-static cpio xz-utils jq clang-format python3 python3-venv libpython3-dev
abigail-tools"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "kcage: missing Debian packages:$missing (run as root, or apt-get install them)" >&2
  exit 1
fi
echo "kcage: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
