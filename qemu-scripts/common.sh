# Shared by demo.sh and test.sh: set the machine up and build everything.
# Sourced, not run. Prints `==>` lines for every long step.

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }

devlend_setup_and_build() {
	local top=$1
	[ "$(id -u)" -eq 0 ] || die "run as root: setup installs Debian packages, and hosts need /dev/shm and loop devices (try: sudo $0)"
	command -v cargo >/dev/null 2>&1 ||
		die "cargo not found: install Rust with rustup (https://rustup.rs), then run again"

	step "installing packages (QEMU 10, kernel 6.12 image and headers, tools)"
	KVER=$(bash "$top/qemu-scripts/setup-host.sh" | tail -n 1)
	export KVER
	# The kernel the hosts run: KVER, or the debug kernel's release.
	export HOST_KVER=$KVER
	echo "kernel for the emulated hosts: $KVER"

	step "building Linux's NTB core and clients for $KVER (cached by their inputs)"
	DEVLEND_NTB_DIR=$(bash "$top/qemu-scripts/build-ntb.sh" "$KVER" | tail -n 1)
	export DEVLEND_NTB_DIR
	echo "NTB modules: $DEVLEND_NTB_DIR"

	step "building the kernel modules (mdev-kmod, W=1, against $KVER)"
	make -C "$top/mdev-kmod" KVER="$KVER" W=1 NTB_SYMVERS="$DEVLEND_NTB_DIR/Module.symvers" >/dev/null
	export DEVLEND_KMOD_DIR="$top/mdev-kmod"

	step "building host and guest images (cached by their inputs)"
	DEVLEND_IMAGES=$(bash "$top/guest-images/build.sh" "$KVER" | tail -n 1)
	export DEVLEND_IMAGES
	echo "images: $DEVLEND_IMAGES"

	step "building the Rust workspace"
	(cd "$top" && cargo build --workspace --all-targets --quiet)
}
