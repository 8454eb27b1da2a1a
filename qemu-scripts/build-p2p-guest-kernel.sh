#!/usr/bin/env bash
# Build the kernel that the peer-to-peer checks' guests boot: Debian's
# kernel source of the hosts' version, configured from x86_64_defconfig and
# kvm_guest.config with PCI peer-to-peer DMA on and the lent devices'
# drivers built in (p2p-guest-kernel/p2p.config). Debian's kernels have no
# CONFIG_PCI_P2PDMA (docs/p2p.md), and a guest's nvme driver keeps its
# submission queues in a controller memory buffer only with it.
#
#   build-p2p-guest-kernel.sh <kver>   prints, last, the output directory:
#     vmlinuz     the kernel image
#     release     its release (uname -r), e.g. 6.12.117-dlp2p
#     modules/    modules_install output; /lib/modules/<release> links
#                 to modules/lib/modules/<release>, where
#                 guest-images/build.sh looks for modules.dep
#
# Cached in ${DEVLEND_CACHE:-/var/cache/devlend}/p2p-guest-kernel/<key>/,
# the key a hash of what makes the kernel: the source version, the
# compiler, p2p.config and how this script builds (LAYOUT). The first
# build takes 20 to 40 minutes on two cores. Needs root (apt-get,
# /lib/modules).
set -euo pipefail

step() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build-p2p-guest-kernel: %s\n' "$*" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KVER=${1:-}
[ -n "$KVER" ] || die "usage: $0 <kernel version, e.g. 6.12.117+deb12-amd64>"
FRAGMENT=$HERE/p2p-guest-kernel/p2p.config

. "$HERE/kernel-source.sh"
kernel_build_tools
kernel_source "$KVER"

# LAYOUT changes when this script builds differently.
LAYOUT=1
CACHE=${DEVLEND_CACHE:-/var/cache/devlend}
key=$({
	echo "layout $LAYOUT $SRC_VER"
	gcc --version | head -n 1
	cat "$FRAGMENT"
} | sha256sum | cut -c1-16)
OUT=$CACHE/p2p-guest-kernel/$key

link_modules() {
	local rel
	rel=$(cat "$OUT/release")
	ln -sfn "$OUT/modules/lib/modules/$rel" "/lib/modules/$rel" ||
		die "cannot link /lib/modules/$rel (needs root)"
}

if [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/release" ]; then
	step "reusing the peer-to-peer guest kernel $(cat "$OUT/release") in $OUT"
	link_modules
	echo "$OUT"
	exit 0
fi

mkdir -p "$CACHE/p2p-guest-kernel" || die "cannot create $CACHE/p2p-guest-kernel (set DEVLEND_CACHE)"
work=$CACHE/p2p-guest-kernel/$key.build
if [ ! -f "$work/.devlend-configured" ]; then
	rm -rf "$work"
	mkdir -p "$work"
	step "unpacking $(basename "$SRC_TARBALL") $SRC_VER"
	tar -xJf "$SRC_TARBALL" -C "$work" --strip-components=1
	make -s -C "$work" x86_64_defconfig >&2
	"$work/scripts/kconfig/merge_config.sh" -m -O "$work" "$work/.config" \
		"$work/kernel/configs/kvm_guest.config" "$FRAGMENT" >/dev/null
	make -s -C "$work" olddefconfig >&2
	# Every option asked for must have survived the dependency resolution.
	kernel_config_took "$FRAGMENT" "$work/.config"
	touch "$work/.devlend-configured"
fi

step "building the peer-to-peer guest kernel (20 to 40 minutes on two cores the first time)"
nice make -s -C "$work" -j"$(nproc)" bzImage modules >&2
rel=$(make -s -C "$work" kernelrelease)

rm -rf "$OUT.new"
mkdir -p "$OUT.new/modules"
make -s -C "$work" INSTALL_MOD_PATH="$OUT.new/modules" INSTALL_MOD_STRIP=1 \
	DEPMOD=/sbin/depmod modules_install >&2
rm -f "$OUT.new/modules/lib/modules/$rel/build" "$OUT.new/modules/lib/modules/$rel/source"
cp "$work/arch/x86/boot/bzImage" "$OUT.new/vmlinuz"
echo "$rel" >"$OUT.new/release"
rm -rf "$OUT"
mv "$OUT.new" "$OUT"
rm -rf "$work"
link_modules
step "peer-to-peer guest kernel $rel ready in $OUT"
echo "$OUT"
