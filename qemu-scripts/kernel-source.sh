# Sourced by build-ntb.sh and build-debug-kernel.sh: Debian's kernel source
# of the very version the hosts' headers are. Debian keeps one
# linux-source-6.12 package, whatever its version, so it is installed at
# the headers' version when it differs (needs root then).
#
#   kernel_source <kver>   sets SRC_TARBALL and SRC_VER
kernel_source() {
	local kver=$1 hdr_ver srcpkg
	hdr_ver=$(dpkg-query -W -f='${Version}' "linux-headers-$kver") ||
		die "linux-headers-$kver is not installed"
	srcpkg="linux-source-$(echo "$kver" | cut -d. -f1-2)"
	SRC_VER=$(dpkg-query -W -f='${Version}' "$srcpkg" 2>/dev/null || true)
	if [ "$SRC_VER" != "$hdr_ver" ]; then
		step "installing $srcpkg $hdr_ver (the sources of the hosts' kernel, ~150 MB)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			"$srcpkg=$hdr_ver" >/dev/null ||
			die "cannot install $srcpkg=$hdr_ver"
		SRC_VER=$hdr_ver
	fi
	SRC_TARBALL=/usr/src/$srcpkg.tar.xz
	[ -f "$SRC_TARBALL" ] || die "$SRC_TARBALL is missing"
}
