#!/usr/bin/env bash
# Build the devlend boot images from installed Debian packages only:
#   vmlinuz           copy of /boot/vmlinuz-$KVER
#   host-initrd.img   busybox + host /init (host-init.sh) + 9p modules
#   guest-initrd.img  busybox + guest /init (guest-init.sh) + nvme modules
#                     (and disk, network, display modules loaded on demand)
#   kver              the kernel release
#   inputs            what the cache key was computed from
# into ${DEVLEND_CACHE:-/var/cache/devlend}/images/<sha256 of the inputs>/.
#
# Usage: guest-images/build.sh [KVER]
#   DEVLEND_KERNEL_DIR=<dir> guest-images/build.sh <release>
#     with a kernel of no package: <dir>/vmlinuz, modules in
#     /lib/modules/<release> (the debug kernel, docs/testing.md)
#   IMAGES=$(guest-images/build.sh | tail -1)
# Progress goes to stderr; the output directory is the last line of stdout.
# The build is reproducible: the same inputs give the same bytes.
set -euo pipefail
export LC_ALL=C
umask 022

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUSYBOX=/bin/busybox
HOST_MODULES=(netfs 9pnet 9pnet_virtio 9p)
# 9p: a guest can mount the outer machine (through its host) to run tools
# such as fio from there (bench.sh).
GUEST_MODULES=(nvme_core nvme netfs 9pnet 9pnet_virtio 9p)
# Loaded by a guest only when it has a SCSI or SATA controller (class
# 0x0100, 0x0106) at boot: the MSI check lends an AHCI controller, the
# peer-to-peer check an LSI 53C895A, the virtio check a virtio-blk (class
# 0x0100; virtio-pci is built in) (docs/testing.md).
GUEST_DISK_MODULES=(ahci sym53c8xx sd_mod virtio_blk)
# Loaded only with an Ethernet controller (class 0x0200): the NIC check
# lends an igb (82576), the SR-IOV check its VFs (igbvf), the INTx check an
# e1000 (82540EM).
GUEST_NET_MODULES=(igb igbvf e1000)
# Loaded only with a display controller (class 0x03xx) or an audio one
# (0x0403): the group check lends a virtio-gpu with an intel-hda at its
# function 1 (docs/groups.md). The HDA controller's driver loads its
# codec's driver by request_module(), which the guest cannot serve (no
# modules.dep in the initramfs): hda-duplex's is the generic codec
# driver, loaded before the controller's so that the codec finds it.
GUEST_DISPLAY_MODULES=(virtio_gpu snd_hda_codec_generic snd_hda_intel)
# Fixed timestamp for every file in the archives (reproducibility).
SOURCE_DATE_EPOCH=0
export SOURCE_DATE_EPOCH

step() { printf '==> %s\n' "$*" >&2; }
die() {
	printf 'guest-images/build.sh: error: %s\n' "$*" >&2
	exit 1
}

pkg_version() { # package -> version, or empty if not installed
	dpkg-query -W -f='${db:Status-Abbrev}|${Version}\n' "$1" 2>/dev/null |
		awk -F'|' '$1 ~ /^ii/ { print $2 }'
}

need_pkg() { # package [why]
	local v
	v=$(pkg_version "$1")
	[ -n "$v" ] || die "package $1 is not installed${2:+ ($2)}; run qemu-scripts/setup-host.sh or apt-get install $1"
	printf '%s\n' "$v"
}

need_cmd() { # command package
	command -v "$1" >/dev/null 2>&1 || die "command $1 not found; install package $2"
}

# --- inputs -------------------------------------------------------------------
KVER=${1:-}
if [ -z "$KVER" ]; then
	KVER=$(find /usr/src -maxdepth 1 -name 'linux-headers-6.12.*-amd64' -printf '%f\n' 2>/dev/null |
		sed 's|^linux-headers-||' | sort -V | tail -n 1)
	[ -n "$KVER" ] || die "no /usr/src/linux-headers-6.12.*-amd64 installed (package linux-headers-6.12.<n>+deb12-amd64 from bookworm-backports); run qemu-scripts/setup-host.sh, or pass KVER"
fi
case "$KVER" in
*/* | '' | .*) die "bad KVER: '$KVER'" ;;
esac

need_cmd dpkg-query dpkg
need_cmd cpio cpio
need_cmd zstd zstd
need_cmd xz xz-utils
need_cmd sha256sum coreutils

MODDIR=/lib/modules/$KVER
if [ -n "${DEVLEND_KERNEL_DIR:-}" ]; then
	# A kernel of no package: the debug kernel that
	# qemu-scripts/build-host-kernel.sh built, KVER its release.
	VMLINUZ=$DEVLEND_KERNEL_DIR/vmlinuz
	[ -f "$VMLINUZ" ] || die "$VMLINUZ is missing (DEVLEND_KERNEL_DIR=$DEVLEND_KERNEL_DIR)"
	[ -f "$MODDIR/modules.dep" ] || die "$MODDIR/modules.dep is missing; run qemu-scripts/build-host-kernel.sh"
	KPKG=local
	KPKG_VER=$DEVLEND_KERNEL_DIR
else
	VMLINUZ=/boot/vmlinuz-$KVER
	[ -f "$VMLINUZ" ] || die "$VMLINUZ is missing; install package linux-image-$KVER"
	[ -f "$MODDIR/modules.dep" ] || die "$MODDIR/modules.dep is missing; install package linux-image-$KVER"
	KPKG=$(dpkg-query -S "$VMLINUZ" 2>/dev/null | head -n 1 | cut -d: -f1) ||
		die "$VMLINUZ belongs to no package; install package linux-image-$KVER"
	[ -n "$KPKG" ] || die "$VMLINUZ belongs to no package; install package linux-image-$KVER"
	KPKG_VER=$(need_pkg "$KPKG" "kernel image")
fi
BB_VER=$(need_pkg busybox-static "a static busybox for the initramfs")
[ -x "$BUSYBOX" ] || die "$BUSYBOX is missing; reinstall package busybox-static"
CPIO_VER=$(need_pkg cpio)
ZSTD_VER=$(need_pkg zstd)
XZ_VER=$(need_pkg xz-utils)
for f in host-init.sh guest-init.sh; do
	[ -f "$HERE/$f" ] || die "$HERE/$f is missing"
done

# Module names (as modprobe spells them) -> paths relative to $MODDIR, every
# module after its dependencies. Built-in modules are skipped.
resolve_modules() {
	awk -v want="$*" -v builtin_file="$MODDIR/modules.builtin" '
	function norm(p,   n) {
		n = p; sub(/.*\//, "", n); sub(/\.ko(\.(xz|zst|gz))?$/, "", n)
		gsub(/-/, "_", n); return n
	}
	function visit(n,   i, cnt, d) {
		if (n in seen) return
		seen[n] = 1
		cnt = split(deps[n], d, " ")
		for (i = cnt; i >= 1; i--) visit(norm(d[i]))
		print path[n]
	}
	{
		p = $1; sub(/:$/, "", p); n = norm(p)
		path[n] = p; deps[n] = ""
		for (i = 2; i <= NF; i++) deps[n] = deps[n] " " $i
	}
	END {
		while ((getline line < builtin_file) > 0) builtin[norm(line)] = 1
		cnt = split(want, w, " ")
		for (i = 1; i <= cnt; i++) {
			n = w[i]; gsub(/-/, "_", n)
			if (n in path) visit(n)
			else if (n in builtin) continue
			else { print "missing module " n > "/dev/stderr"; exit 1 }
		}
	}' "$MODDIR/modules.dep"
}

# A kernel built here (build-host-kernel.sh's host kernels) has only the
# modules of its module list (qemu-scripts/host-kernel/modules), which
# the hosts use; its guests go without the disk and network drivers it
# lacks (the checks' nested guests boot Debian's kernel with its images).
if [ "$KPKG" = local ]; then
	for list in GUEST_DISK_MODULES GUEST_NET_MODULES; do
		declare -n names=$list
		keep=()
		for n in "${names[@]}"; do
			if resolve_modules "$n" >/dev/null 2>&1; then
				keep+=("$n")
			else
				step "no module $n in $KVER: its guests go without it"
			fi
		done
		names=("${keep[@]}")
		unset -n names
	done
fi
HOST_KOS=$(resolve_modules "${HOST_MODULES[@]}") ||
	die "a host module is missing from $MODDIR (package $KPKG)"
GUEST_KOS=$(resolve_modules "${GUEST_MODULES[@]}") ||
	die "a guest module is missing from $MODDIR (package $KPKG)"
GUEST_DISK_KOS=$(resolve_modules "${GUEST_DISK_MODULES[@]}") ||
	die "a guest disk module is missing from $MODDIR (package $KPKG)"
GUEST_NET_KOS=$(resolve_modules "${GUEST_NET_MODULES[@]}") ||
	die "a guest network module is missing from $MODDIR (package $KPKG)"
# A kernel built here for one check (the peer-to-peer guest kernel) has
# only what that check lends, so its guests go without display and audio.
if ! GUEST_DISPLAY_KOS=$(resolve_modules "${GUEST_DISPLAY_MODULES[@]}" 2>/dev/null); then
	[ "$KPKG" = local ] ||
		die "a guest display or audio module is missing from $MODDIR (package $KPKG)"
	step "no display or audio modules in $KVER: its guests drive no display or audio"
	GUEST_DISPLAY_KOS=
fi

inputs() {
	echo "devlend-images format 1"
	echo "kver $KVER"
	echo "linux-image $KPKG $KPKG_VER"
	echo "busybox-static $BB_VER"
	echo "cpio $CPIO_VER"
	echo "zstd $ZSTD_VER"
	echo "xz-utils $XZ_VER"
	echo "vmlinuz $(sha256sum <"$VMLINUZ" | cut -d' ' -f1)"
	echo "busybox $(sha256sum <"$BUSYBOX" | cut -d' ' -f1)"
	local ko
	for ko in $HOST_KOS; do echo "host-module $ko $(sha256sum <"$MODDIR/$ko" | cut -d' ' -f1)"; done
	for ko in $GUEST_KOS; do echo "guest-module $ko $(sha256sum <"$MODDIR/$ko" | cut -d' ' -f1)"; done
	for ko in $GUEST_DISK_KOS; do echo "guest-disk-module $ko $(sha256sum <"$MODDIR/$ko" | cut -d' ' -f1)"; done
	for ko in $GUEST_NET_KOS; do echo "guest-net-module $ko $(sha256sum <"$MODDIR/$ko" | cut -d' ' -f1)"; done
	for ko in $GUEST_DISPLAY_KOS; do echo "guest-display-module $ko $(sha256sum <"$MODDIR/$ko" | cut -d' ' -f1)"; done
	# Every script and init file here (not the docs, not the self-test).
	local f
	while IFS= read -r f; do
		echo "file $f $(sha256sum <"$HERE/$f" | cut -d' ' -f1)"
	done < <(cd "$HERE" && find . -type f ! -name '*.md' ! -name selftest.sh -printf '%P\n' | sort)
}

INPUTS=$(inputs)
HASH=$(printf '%s\n' "$INPUTS" | sha256sum | cut -d' ' -f1)
CACHE=${DEVLEND_CACHE:-/var/cache/devlend}
ROOT=$CACHE/images
OUT=$ROOT/$HASH
FILES=(vmlinuz host-initrd.img guest-initrd.img kver inputs)

complete() { # dir
	local f
	for f in "${FILES[@]}"; do [ -s "$1/$f" ] || return 1; done
}

if complete "$OUT"; then
	step "reusing cached images for $KVER in $OUT"
	printf '%s\n' "$OUT"
	exit 0
fi

mkdir -p "$ROOT" || die "cannot create $ROOT (set DEVLEND_CACHE to a writable directory)"
TMP=$(mktemp -d "$ROOT/.build-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
step "building images for $KVER ($KPKG $KPKG_VER, busybox-static $BB_VER) in $OUT"

# --- initramfs trees ------------------------------------------------------------
# Copies modules into the tree and lists them, in load order, in a file.
add_modules() { # dir kos list-file
	local dir=$1 kos=$2 list=$3 ko dst
	: >"$dir/$list"
	for ko in $kos; do
		dst=${ko%.xz}
		dst=${dst%.zst}
		dst=${dst%.gz}
		mkdir -p "$dir/lib/modules/$KVER/$(dirname "$dst")"
		case "$ko" in
		*.ko.xz) xz -dc "$MODDIR/$ko" >"$dir/lib/modules/$KVER/$dst" ;;
		*.ko.zst) zstd -q -dc "$MODDIR/$ko" >"$dir/lib/modules/$KVER/$dst" ;;
		*.ko.gz) gzip -dc "$MODDIR/$ko" >"$dir/lib/modules/$KVER/$dst" ;;
		*.ko) cp "$MODDIR/$ko" "$dir/lib/modules/$KVER/$dst" ;;
		*) die "unexpected module file $ko" ;;
		esac
		chmod 0644 "$dir/lib/modules/$KVER/$dst"
		echo "/lib/modules/$KVER/$dst" >>"$dir/$list"
	done
}

populate() { # dir init-script module-list [disk-module-list net-module-list display-module-list]
	local dir=$1 init=$2 kos=$3 disk_kos=${4:-} net_kos=${5:-} display_kos=${6:-} applet
	mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,etc/devlend,root} "$dir/lib/modules/$KVER"
	mkdir -m 1777 "$dir/tmp"
	chmod 700 "$dir/root"
	install -m 0755 "$BUSYBOX" "$dir/bin/busybox"
	while IFS= read -r applet; do
		case "$applet" in
		bin/busybox | linuxrc | sbin/init | '') continue ;;
		esac
		mkdir -p "$dir/$(dirname "$applet")"
		ln -s /bin/busybox "$dir/$applet"
	done < <("$BUSYBOX" --list-full | sort)
	install -m 0755 "$init" "$dir/init"
	add_modules "$dir" "$kos" etc/devlend/modules
	add_modules "$dir" "$disk_kos" etc/devlend/modules.disk
	add_modules "$dir" "$net_kos" etc/devlend/modules.net
	add_modules "$dir" "$display_kos" etc/devlend/modules.display
	echo "$KVER" >"$dir/etc/devlend/kver"
}

# newc cpio, sorted, owned by root, every mtime = SOURCE_DATE_EPOCH; zstd.
pack() { # dir output
	find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
	(cd "$1" && find . -mindepth 1 -printf '%P\n' | sort |
		cpio --quiet -o -H newc -R 0:0 --reproducible) |
		zstd -q -19 -T1 >"$2"
}

step "host initramfs: busybox, host-init.sh, modules: $(echo "$HOST_KOS" | sed 's|.*/||' | tr '\n' ' ')"
populate "$TMP/host" "$HERE/host-init.sh" "$HOST_KOS"
mkdir -p "$TMP/host/hostroot"
step "guest initramfs: busybox, guest-init.sh, modules: $(echo "$GUEST_KOS" | sed 's|.*/||' | tr '\n' ' ')"
populate "$TMP/guest" "$HERE/guest-init.sh" "$GUEST_KOS" "$GUEST_DISK_KOS" "$GUEST_NET_KOS" "$GUEST_DISPLAY_KOS"

mkdir "$TMP/out"
step "packing host-initrd.img"
pack "$TMP/host" "$TMP/out/host-initrd.img"
step "packing guest-initrd.img"
pack "$TMP/guest" "$TMP/out/guest-initrd.img"
cp "$VMLINUZ" "$TMP/out/vmlinuz"
echo "$KVER" >"$TMP/out/kver"
printf '%s\n' "$INPUTS" >"$TMP/out/inputs"
chmod 0644 "$TMP/out"/*
chmod 0755 "$TMP/out"

# Atomic publish; a concurrent build of the same inputs may have won the race.
if ! mv -T "$TMP/out" "$OUT" 2>/dev/null; then
	complete "$OUT" || die "cannot publish $OUT"
	step "another build published $OUT first; using it"
fi
step "images ready ($(du -sh "$OUT" | cut -f1)): $OUT"
printf '%s\n' "$OUT"
