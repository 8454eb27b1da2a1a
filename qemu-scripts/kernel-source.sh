# Sourced by build-ntb.sh, build-host-kernel.sh and build-p2p-guest-kernel.sh:
# Debian's kernel source
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

# kernel_build_tools: installs what building a whole kernel needs (root).
kernel_build_tools() {
	local p missing=()
	for p in flex bison libelf-dev libssl-dev bc kmod cpio; do
		dpkg-query -W -f='${db:Status-Abbrev}\n' "$p" 2>/dev/null | grep -q '^ii' || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	step "installing the kernel's build tools: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		"${missing[@]}" >/dev/null || die "cannot install ${missing[*]}"
}

# kernel_config_took <fragment> <.config>: dies unless every option the
# fragment asks for survived Kconfig's dependency resolution.
kernel_config_took() {
	local fragment=$1 config=$2 line opt
	while IFS= read -r line; do
		case "$line" in
		CONFIG_*=*) grep -qxF "$line" "$config" || die "$(basename "$fragment"): '$line' did not take" ;;
		"# CONFIG_"*" is not set")
			opt=${line#\# }
			opt=${opt%% *}
			! grep -q "^$opt=" "$config" || die "$(basename "$fragment"): $opt is still set" ;;
		esac
	done <"$fragment"
}
