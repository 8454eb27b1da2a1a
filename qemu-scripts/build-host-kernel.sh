#!/usr/bin/env bash
# Build a kernel for the emulated hosts: Debian's kernel of the hosts'
# version, from its linux-source package and Debian's own configuration,
# trimmed to the modules the hosts load (host-kernel/modules, by make
# localmodconfig), with a flavour's options on top:
#   debug  KASAN, lockdep (PROVE_LOCKING), kmemleak and Linux's NTB stack
#          (host-kernel/debug.config)
#   mig    IOMMUFD, whose iova_bitmap VFIO's device dirty logging needs
#          for live migration (host-kernel/mig.config); Debian's config
#          has none, so every DMA logging report fails there
#
#   build-host-kernel.sh <flavour> <kver>   prints, last, the output directory:
#     vmlinuz     the kernel image
#     release     its release (uname -r), e.g. 6.12.117-dldebug
#     build/      the configured, built tree (out-of-tree modules build
#                 against it)
#     modules/    modules_install output; /lib/modules/<release> links
#                 to modules/lib/modules/<release>, because the hosts
#                 boot with the outer machine's / as their root
#     ntb/        (debug) Linux's NTB modules of this kernel, with a
#                 Module.symvers of their symbols only, laid out as
#                 build-ntb.sh lays them out
#
# Cached in ${DEVLEND_CACHE:-/var/cache/devlend}/<flavour>-kernel/<key>/,
# the key a hash of what makes the kernel: the kernel version, the source
# version, Debian's config, the compiler and the module list and flavour
# fragment (LAYOUT below changes when this script builds differently).
# The first debug build takes about an hour on two cores, a mig build
# about half that. A build whose module list or fragment changed starts
# from a copy of the newest cached tree of the same flavour, source and
# compiler (its "seed" file says which), configured afresh: Kbuild then
# compiles only what the changed options touch, minutes instead of an
# hour. Needs root (apt-get, /lib/modules).
set -euo pipefail

step() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build-host-kernel: %s\n' "$*" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FLAVOUR=${1:-}
KVER=${2:-}
[ -n "$KVER" ] || die "usage: $0 <debug|mig> <kernel version, e.g. 6.12.117+deb12-amd64>"
FRAGMENT=$HERE/host-kernel/$FLAVOUR.config
[ -f "$FRAGMENT" ] || die "no flavour '$FLAVOUR' (host-kernel/$FLAVOUR.config)"
BASE_CONFIG=/boot/config-$KVER
[ -f "$BASE_CONFIG" ] || die "$BASE_CONFIG is missing: install linux-image-$KVER"

. "$HERE/kernel-source.sh"
kernel_build_tools
kernel_source "$KVER"

LAYOUT=1
CACHE=${DEVLEND_CACHE:-/var/cache/devlend}
# What a tree can be reused from: everything in the key but the module
# list and the fragment, whose changes Kbuild follows itself.
seed_key=$({
	echo "layout $LAYOUT $KVER $SRC_VER"
	sha256sum <"$BASE_CONFIG"
	gcc --version | head -n 1
	echo "flavour $FLAVOUR"
} | sha256sum | cut -c1-16)
key=$({
	echo "$seed_key"
	cat "$HERE/host-kernel/modules" "$FRAGMENT"
} | sha256sum | cut -c1-16)
OUT=$CACHE/$FLAVOUR-kernel/$key

# The hosts see the outer machine's / as theirs, so modprobe in a host
# finds the host kernel's modules through this link. A kernel with Linux's
# NTB modules (debug) also gets them laid out as build-ntb.sh lays them
# out, for the ntb checks and for building devlend's NTB modules against
# them.
install_outputs() {
	local rel ntb
	rel=$(cat "$OUT/release")
	ln -sfn "$OUT/modules/lib/modules/$rel" "/lib/modules/$rel" ||
		die "cannot link /lib/modules/$rel (needs root)"
	ntb=$OUT/ntb
	[ -f "$ntb/Module.symvers" ] && return 0
	[ -d "$OUT/modules/lib/modules/$rel/kernel/drivers/ntb" ] || return 0
	rm -rf "$ntb.new"
	mkdir -p "$ntb.new"
	find "$OUT/modules/lib/modules/$rel/kernel/drivers/ntb" -name '*.ko' -exec cp {} "$ntb.new/" \;
	grep -P '\tdrivers/ntb/' "$OUT/build/Module.symvers" >"$ntb.new/Module.symvers" ||
		die "no NTB symbols in $OUT/build/Module.symvers"
	mv "$ntb.new" "$ntb"
}

if [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/release" ]; then
	step "reusing the $FLAVOUR host kernel $(cat "$OUT/release") in $OUT"
	install_outputs
	echo "$OUT"
	exit 0
fi

mkdir -p "$CACHE/$FLAVOUR-kernel" || die "cannot create $CACHE/$FLAVOUR-kernel (set DEVLEND_CACHE)"
work=$CACHE/$FLAVOUR-kernel/$key.build
# seed_tree: the newest cached tree of this flavour built from the same
# source, configuration and compiler (its seed-key file matches).
seed_tree() {
	local d
	for d in $(ls -td "$CACHE/$FLAVOUR-kernel"/*/ 2>/dev/null); do
		d=${d%/}
		if [ -d "$d/build" ] && [ "$(cat "$d/seed-key" 2>/dev/null)" = "$seed_key" ]; then
			echo "$d/build"
			return 0
		fi
	done
	return 1
}

if [ ! -f "$work/.devlend-configured" ]; then
	rm -rf "$work"
	if seed=$(seed_tree); then
		step "starting from the cached tree $seed (only what changed is compiled again)"
		cp -a "$seed" "$work"
		rm -f "$work/.devlend-configured"
	else
		mkdir -p "$work"
		step "unpacking $(basename "$SRC_TARBALL") $SRC_VER"
		tar -xJf "$SRC_TARBALL" -C "$work" --strip-components=1
	fi
	cp "$BASE_CONFIG" "$work/.config"
	# Debian's config, then only the modules the hosts use, then the flavour.
	sed '/^#/d; /^$/d; s/$/ 0 0/' "$HERE/host-kernel/modules" >"$work/lsmod"
	make -s -C "$work" olddefconfig >&2
	make -s -C "$work" LSMOD="$work/lsmod" localmodconfig </dev/null >&2 2>/dev/null
	"$work/scripts/kconfig/merge_config.sh" -m -O "$work" "$work/.config" \
		"$FRAGMENT" >/dev/null
	make -s -C "$work" olddefconfig >&2
	# Every option asked for must have survived the dependency resolution.
	kernel_config_took "$FRAGMENT" "$work/.config"
	touch "$work/.devlend-configured"
fi

step "building the $FLAVOUR host kernel (about an hour on two cores for debug, half that for mig)"
nice make -s -C "$work" -j"$(nproc)" bzImage modules >&2
rel=$(make -s -C "$work" kernelrelease)

rm -rf "$OUT.new"
mkdir -p "$OUT.new/modules"
make -s -C "$work" INSTALL_MOD_PATH="$OUT.new/modules" INSTALL_MOD_STRIP=1 \
	DEPMOD=/sbin/depmod modules_install >&2
# modules_install links build to the tree; the tree moves into $OUT.
ln -sfn "$OUT/build" "$OUT.new/modules/lib/modules/$rel/build"
rm -f "$OUT.new/modules/lib/modules/$rel/source"
cp "$work/arch/x86/boot/bzImage" "$OUT.new/vmlinuz"
echo "$rel" >"$OUT.new/release"
echo "$seed_key" >"$OUT.new/seed-key"
mv "$work" "$OUT.new/build"
rm -rf "$OUT"
mv "$OUT.new" "$OUT"
install_outputs
step "$FLAVOUR host kernel $rel ready in $OUT"
echo "$OUT"
