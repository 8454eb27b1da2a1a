#!/usr/bin/env bash
# Install what devlend needs on a Debian 12 (bookworm) machine. Idempotent.
#
# QEMU 10 and the 6.12 kernel (image and matching headers) come from
# bookworm-backports; the module is built against exactly the kernel the
# emulated hosts boot, so both are pinned to one version here.
set -euo pipefail

KVER_FLAVOUR=amd64
need_root() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: must run as root (apt-get install); try: sudo $0" >&2
		exit 2
	fi
}

step() { printf '==> %s\n' "$*"; }

add_backports() {
	if grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		return
	fi
	step "adding bookworm-backports to apt sources"
	cat >/etc/apt/sources.list.d/devlend-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	rm -f /var/lib/apt/devlend-updated
}

apt_update_once() {
	# One update per day is enough; a fresh machine always gets one.
	local stamp=/var/lib/apt/devlend-updated
	if [ -f "$stamp" ] && [ -n "$(find "$stamp" -mmin -1440 2>/dev/null)" ]; then
		return
	fi
	step "apt-get update"
	apt-get update -q >/dev/null
	touch "$stamp"
}

# Newest 6.12 ABI in backports, e.g. 6.12.48+deb12-amd64.
pick_kernel() {
	apt-cache search --names-only "^linux-image-6\.12\.[0-9]+\+deb12-${KVER_FLAVOUR}\$" |
		awk '{print $1}' | sed "s/^linux-image-//" | sort -V | tail -n 1
}

# Debian packages no checkpatch.pl of its own; it ships in the kernel source.
# Put it where kernel developers look for it: beside the headers' scripts.
install_checkpatch() {
	local kver=$1 dest="/usr/src/linux-headers-$1/scripts"
	[ -x "$dest/checkpatch.pl" ] && return
	local srcpkg
	srcpkg="linux-source-$(echo "$kver" | cut -d. -f1-2)"
	if ! dpkg -s "$srcpkg" >/dev/null 2>&1; then
		step "installing $srcpkg (for checkpatch.pl, ~150 MB)"
		apt-get install -y -q --no-install-recommends -t bookworm-backports "$srcpkg" >/dev/null
	fi
	step "extracting checkpatch.pl from $srcpkg"
	local tarball tmp
	tarball=$(ls /usr/src/"$srcpkg".tar.xz)
	tmp=$(mktemp -d)
	tar -xJf "$tarball" -C "$tmp" --wildcards --no-anchored \
		'scripts/checkpatch.pl' 'scripts/spelling.txt' 'scripts/const_structs.checkpatch'
	install -m 0755 "$tmp"/*/scripts/checkpatch.pl "$dest/checkpatch.pl"
	install -m 0644 "$tmp"/*/scripts/spelling.txt "$tmp"/*/scripts/const_structs.checkpatch "$dest/"
	rm -rf "$tmp"
}

main() {
	need_root
	export DEBIAN_FRONTEND=noninteractive
	add_backports
	apt_update_once

	local base=(build-essential kmod busybox-static cpio xz-utils zstd
		socat python3 jq libvirt-clients libxml2-utils nvme-cli fio pciutils
		mdevctl util-linux e2fsprogs libclang-dev dkms
		libvirt-daemon libvirt-daemon-driver-qemu udev)
	local missing=()
	for p in "${base[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		step "installing ${missing[*]}"
		apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	fi

	if ! dpkg --compare-versions "$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || echo 0)" ge 1:10; then
		step "installing QEMU 10 from bookworm-backports"
		apt-get install -y -q --no-install-recommends -t bookworm-backports \
			qemu-system-x86 qemu-utils >/dev/null
	fi

	local kver
	kver=$(pick_kernel)
	if [ -z "$kver" ]; then
		echo "setup: no linux-image-6.12.*-${KVER_FLAVOUR} in bookworm-backports; cannot build the hosts' kernel" >&2
		exit 3
	fi
	if ! dpkg -s "linux-headers-$kver" >/dev/null 2>&1; then
		step "installing linux-headers-$kver (build target of mdev-kmod)"
		apt-get install -y -q --no-install-recommends -t bookworm-backports \
			"linux-headers-$kver" >/dev/null
	fi
	install_checkpatch "$kver"
	echo "$kver"
}

main "$@"
