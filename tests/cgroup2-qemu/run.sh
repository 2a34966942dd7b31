#!/bin/sh
# Boot a Debian bookworm kernel under qemu (TCG) with cgroup v1 disabled and run the
# cgroup limit cases through kcage's pure-v2 code path (reference/environment.md §4.1).
#
#   run.sh WORKDIR PAYLOAD [KCAGE POLICY_DIR [WORKER KERNELS]]
#
# WORKDIR  scratch + cache (the kernel is downloaded once and kept in WORKDIR/cache;
#          $KCAGE_QEMU_CACHE overrides the cache directory).
# PAYLOAD  static binary printing "CG2 ..." lines (payload_main.c); also the hostile
#          programs (`payload hostile WHAT`).
# KCAGE    optional: the kcage binary; it is copied into the guest with its shared
#          libraries and ld.so, with POLICY_DIR as /policies, and guest-extra.sh runs
#          the hostile limit cases through `kcage run` ("KC2 ..." lines).
# WORKER   optional, with KERNELS (a directory of example kernels built as .so, the guest
#          has no compiler): kcage-worker, copied in the same way, and guest-rootless.sh
#          runs kcage run and kcage bench as a plain user with and without a delegated
#          cgroup ("KR2 ..." lines).
#
# What the host must offer is probed first: without root, qemu, busybox-static or a
# kernel package that apt can fetch, the test is skipped (exit 77) with the reason on
# stderr, never failed; once the guest boots, every case must pass.
set -eu

work=$1
payload=$2
kcage=${4:+$3}
policies=${4:-}
worker=${6:+$5}
kernels=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
cache=${KCAGE_QEMU_CACHE:-$work/cache}
mkdir -p "$work" "$cache"
log() { echo "cgroup2-qemu: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }
skip() { log "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (mknod in the initramfs)"
for tool in qemu-system-x86_64 cpio gzip xz dpkg-deb apt-get; do
  command -v $tool >/dev/null 2>&1 || skip "$tool not installed (scripts/install-deps.sh)"
done
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || skip "busybox not installed (busybox-static)"
# a dynamically linked busybox cannot run in the guest
if file "$busybox" 2>/dev/null | grep -q 'dynamically linked'; then
  skip "$busybox is dynamically linked; install busybox-static"
fi

# --- kernel: resolve, download (retried), extract; cached -------------------------
resolve() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}

# download + unpack $1 into $cache/$1.vmlinux (under a lock: one download at a time)
download() (
  pkg=$1
  k=$cache/$pkg.vmlinux
  flock 9
  [ -s "$k" ] && exit 0
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>"$tmp/apt.err") ||
    { log "apt-get download $pkg: $(tail -1 "$tmp/apt.err")"; exit 1; }
  deb=$(ls "$tmp"/*.deb)
  dpkg-deb --fsys-tarfile "$deb" | tar -x -O --wildcards './boot/vmlinuz-*' > "$tmp/vmlinuz"
  [ -s "$tmp/vmlinuz" ] || { log "no /boot/vmlinuz-* in $deb"; exit 1; }
  # The uncompressed ELF boots through PVH, skipping SeaBIOS and the in-guest XZ
  # decompression (~3 s faster under TCG).  xz complains about trailing data; the
  # output is complete.
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$tmp/vmlinuz" | head -1 | cut -d: -f1)
  if [ -n "$off" ]; then
    tail -c +$((off + 1)) "$tmp/vmlinuz" | xz -dc 2>/dev/null > "$tmp/vmlinux" || true
  fi
  if [ -s "$tmp/vmlinux" ] && head -c 4 "$tmp/vmlinux" | grep -q 'ELF'; then
    mv "$tmp/vmlinux" "$k"
  else
    mv "$tmp/vmlinuz" "$k" # bzImage: slower, still fine
  fi
) 9>"$cache/.lock"

fetch_kernel() {
  # The version behind linux-image-amd64 moves with bookworm point releases and the
  # security archive keeps only the newest: on a failure refresh the lists, resolve
  # again, retry with back-off.
  for delay in 0 2 5 10 20; do
    sleep $delay
    [ $delay = 0 ] || apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(resolve)
    if [ -z "$pkg" ]; then
      [ $delay = 0 ] && { apt-get update -qq >/dev/null 2>&1 || true; pkg=$(resolve); }
      [ -z "$pkg" ] && { log "linux-image-amd64 not resolvable (apt sources?)"; continue; }
    fi
    if [ -s "$cache/$pkg.vmlinux" ] || download "$pkg"; then
      echo "$cache/$pkg.vmlinux"
      return 0
    fi
  done
  # offline or mirror trouble: any bookworm kernel unpacked earlier serves as well
  old=$(ls -1 "$cache"/*.vmlinux 2>/dev/null | tail -1 || true)
  [ -n "$old" ] && { log "using the cached $(basename "$old")"; echo "$old"; return 0; }
  return 1
}

kernel=$(fetch_kernel) || skip "could not download the bookworm kernel (Debian mirror reachable? apt sources set?)"
log "kernel $(basename "$kernel")"

# --- initramfs -------------------------------------------------------------------
root=$work/root
rm -rf "$root"
mkdir -p "$root/bin" "$root/dev" "$root/proc" "$root/sys" "$root/tmp"
cp "$busybox" "$root/bin/busybox"
cp "$payload" "$root/payload"
chmod 755 "$root/payload"
# copy_in BINARY PATH: BINARY as /PATH, with its shared libraries and the dynamic
# loader at the paths ldd resolves them to
copy_in() {
  mkdir -p "$root/$(dirname "$2")"
  cp "$1" "$root/$2"
  for lib in $(ldd "$1" | awk '/=> \//{print $3} /^[ \t]*\//{print $1}'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
# the libraries where the host has them: with a merged /usr, /lib is a link into it
# (kcage bench trusts executable code from /usr only)
for d in lib lib32 lib64; do
  if [ -L "/$d" ]; then
    mkdir -p "$root/usr/$d"
    ln -s "usr/$d" "$root/$d"
  fi
done
if [ -n "$kcage" ]; then
  copy_in "$kcage" kcage
  mkdir -p "$root/policies" "$root/etc"
  cp "$policies"/*.policy "$root/policies/" 2>/dev/null || true
  echo 'root:x:0:0:root:/:/bin/sh' > "$root/etc/passwd"
  echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> "$root/etc/passwd"
  echo 'root:x:0:' > "$root/etc/group"
  cp "$here/guest-extra.sh" "$root/guest-extra.sh"
  chmod 755 "$root/guest-extra.sh"
fi
if [ -n "$worker" ]; then
  # an installed kcage (/usr prefix) for the plain user: it finds its policies and
  # worker from where it is, no environment variable involved
  copy_in "$kcage" usr/bin/kcage
  copy_in "$worker" usr/libexec/kcage/kcage-worker
  mkdir -p "$root/usr/share/kcage/policies"
  cp "$policies"/*.policy "$root/usr/share/kcage/policies/"
  mkdir -p "$root/kernels"
  cp "$kernels"/*.so "$root/kernels/"
  # the plain user (no useradd in busybox: its passwd and group lines)
  echo 'kcu:x:1000:1000:kcu:/home/kcu:/bin/sh' >> "$root/etc/passwd"
  echo 'kcu:x:1000:' >> "$root/etc/group"
  cp "$here/guest-rootless.sh" "$root/guest-rootless.sh"
  # the delegation recipe is run from the user documentation, as written
  cp "$here/../../docs/operating.md" "$root/operating.md"
  chmod 755 "$root/guest-rootless.sh"
fi
cat > "$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
# pivot_root (what kcage's sandbox does) refuses the initramfs rootfs as the old root:
# move everything onto a tmpfs first and switch_root there.
if [ ! -e /.stage2 ]; then
  mkdir -p /newroot
  mount -t tmpfs -o size=400m tmpfs /newroot
  for f in /*; do
    case $f in /newroot|/proc|/sys|/dev) ;; *) cp -a "$f" /newroot/ ;; esac
  done
  mkdir -p /newroot/proc /newroot/sys /newroot/dev
  mknod -m 600 /newroot/dev/console c 5 1
  touch /newroot/.stage2
  exec switch_root /newroot /init
fi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
echo "GUEST_UP kernel=$(uname -r) uptime=$(cut -d' ' -f1 /proc/uptime)"
/payload
echo "PAYLOAD_EXIT=$?"
if [ -x /guest-extra.sh ]; then
  /guest-extra.sh
  echo "EXTRA_EXIT=$?"
fi
if [ -x /guest-rootless.sh ]; then
  /guest-rootless.sh
  echo "ROOTLESS_EXIT=$?"
fi
poweroff -f
EOF
chmod 755 "$root/init"
# console for PID 1 before devtmpfs is mounted; mknod needs root, cpio keeps it
mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || skip "mknod /dev/console refused here"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$work/init.cpio.gz"

# --- boot ------------------------------------------------------------------------
console=$work/console.log
log "booting (TCG); console in $console"
set +e
timeout "${KCAGE_QEMU_TIMEOUT:-400}" qemu-system-x86_64 -accel tcg -cpu max -m 768 -smp 2 \
  -nographic -no-reboot -kernel "$kernel" -initrd "$work/init.cpio.gz" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init cgroup_no_v1=all" \
  </dev/null >"$console" 2>&1
qrc=$?
set -e
tr -d '\r' < "$console" | grep -aE '(GUEST_UP|^CG2 |^KC2 |^KR2 |^PAYLOAD_EXIT|^EXTRA_EXIT|^ROOTLESS_EXIT)' >&2 || true
[ $qrc = 0 ] || { tail -40 "$console" >&2; die "qemu exited with $qrc (124 = timeout)"; }
grep -q 'GUEST_UP' "$console" || die "guest did not start /init"
tr -d '\r' < "$console" | grep -aq '^CG2 MODE v2$' || die "guest did not detect pure cgroup v2"
tr -d '\r' < "$console" | grep -aqE '^CG2 DONE pass=[1-9][0-9]* fail=0$' || die "cgroup v2 cases failed"
if [ -n "$kcage" ]; then
  tr -d '\r' < "$console" | grep -aqE '^KC2 DONE pass=[1-9][0-9]* fail=0$' || die "kcage run cases failed in the guest"
fi
if [ -n "$worker" ]; then
  tr -d '\r' < "$console" | grep -aqE '^KR2 DONE pass=[1-9][0-9]* fail=0$' ||
    die "kcage as a plain user failed in the guest"
fi
log "PASS"
