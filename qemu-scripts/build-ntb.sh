#!/usr/bin/env bash
# Build Linux's NTB core (ntb.ko) and its test clients for the hosts' kernel.
#
# Debian's kernel has no CONFIG_NTB, so nothing of drivers/ntb ships with
# it. This builds, out of tree from Debian's linux-source package of the
# same version as the headers, ntb.ko, ntb_transport.ko, the clients
# ntb_tool, ntb_pingpong and ntb_perf, and the hardware drivers Debian's
# config can build (Intel, AMD, IDT), so that devlend's emulated adapter
# can be driven by Linux's own NTB clients, and users with real adapters
# get the drivers too.
#
#   build-ntb.sh <kver>    prints, last, the directory with the .ko files
#                          and Module.symvers
#
# Output is cached in ${DEVLEND_CACHE:-/var/cache/devlend}/ntb/<key>/, the
# key a hash of the kernel version, the source package version and this
# script. Needs root the first time (apt-get install linux-source-6.12).
set -euo pipefail

step() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build-ntb: %s\n' "$*" >&2; exit 2; }

KVER=${1:-}
[ -n "$KVER" ] || die "usage: $0 <kernel version, e.g. 6.12.117+deb12-amd64>"
KDIR=/lib/modules/$KVER/build
[ -d "$KDIR" ] || die "no kernel build tree at $KDIR: install linux-headers-$KVER"

. "$(dirname "${BASH_SOURCE[0]}")/kernel-source.sh"
kernel_source "$KVER"
src_ver=$SRC_VER
tarball=$SRC_TARBALL

CACHE=${DEVLEND_CACHE:-/var/cache/devlend}
key=$( { echo "$KVER $src_ver"; cat "$0"; } | sha256sum | cut -c1-16)
OUT=$CACHE/ntb/$key
if [ -f "$OUT/Module.symvers" ] && [ -f "$OUT/ntb.ko" ]; then
	step "reusing NTB modules for $KVER in $OUT"
	echo "$OUT"
	exit 0
fi

step "building Linux's NTB core and clients for $KVER from $(basename "$tarball") $src_ver"
mkdir -p "$CACHE/ntb" || die "cannot create $CACHE/ntb (set DEVLEND_CACHE)"
work=$(mktemp -d "$CACHE/ntb/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work" --strip-components=1 --wildcards '*/drivers/ntb/*'
make -s -C "$KDIR" M="$work/drivers/ntb" \
	CONFIG_NTB=m CONFIG_NTB_TRANSPORT=m \
	CONFIG_NTB_TOOL=m CONFIG_NTB_PINGPONG=m CONFIG_NTB_PERF=m \
	CONFIG_NTB_INTEL=m CONFIG_NTB_AMD=m CONFIG_NTB_IDT=m \
	modules >&2

rm -rf "$OUT.new"
mkdir -p "$OUT.new"
find "$work/drivers/ntb" -name '*.ko' -exec cp {} "$OUT.new/" \;
cp "$work/drivers/ntb/Module.symvers" "$OUT.new/"
rm -rf "$OUT"
mv "$OUT.new" "$OUT"
echo "$OUT"
