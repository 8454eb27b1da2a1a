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
	if [ "${DEVLEND_DEBUG_KERNEL:-0}" = 1 ]; then
		# Nested guests keep Debian's kernel: a KASAN guest under nested
		# KVM in TCG is too slow.
		export DEVLEND_GUEST_IMAGES=$DEVLEND_IMAGES
		devlend_use_debug_kernel "$top"
	fi
	export DEVLEND_IMAGES
	echo "images: $DEVLEND_IMAGES"

	step "building the Rust workspace"
	(cd "$top" && cargo build --workspace --all-targets --quiet)
}

# DEVLEND_DEBUG_KERNEL=1: the hosts (and their guests) boot a debug kernel
# of the same version (KASAN, lockdep, kmemleak; build-host-kernel.sh debug),
# with Linux's NTB modules and devlend's modules built against it. The
# style gates and unit tests still use Debian's headers (KVER).
devlend_use_debug_kernel() {
	local top=$1 dk rel
	step "building the debug kernel for the hosts (cached by its inputs; about an hour the first time)"
	dk=$(bash "$top/qemu-scripts/build-host-kernel.sh" debug "$KVER" | tail -n 1)
	rel=$(cat "$dk/release")
	echo "debug kernel: $rel in $dk"
	export HOST_KVER=$rel
	export DEVLEND_NTB_DIR=$dk/ntb
	# With 5-level paging (TCG's `-cpu max` has LA57), the lender's first
	# interrupt, during CPU identification, trips KASAN's shadow of the
	# direct map ("wild-memory-access in do_raw_spin_lock"); that report
	# turned lockdep off for the whole run. Four levels avoid it.
	export DEVLEND_HOST_APPEND=no5lvl
	# Pinning a guest's memory on the debug kernel takes about a minute:
	# guests wait that long for their NVMe (guest-init.sh).
	export DEVLEND_GUEST_NVME_WAIT=300

	# The module sources are built in a copy, so the checkout's own
	# modules (for Debian's kernel) stay as they are.
	step "building the kernel modules (mdev-kmod, W=1, against $rel)"
	export DEVLEND_KMOD_DIR=$dk/devlend-kmod
	mkdir -p "$DEVLEND_KMOD_DIR"
	(cd "$top/mdev-kmod" && git ls-files -z -- . 2>/dev/null || find . -type f -print0) |
		(cd "$top/mdev-kmod" && xargs -0 cp -p --parents -t "$DEVLEND_KMOD_DIR")
	# Its ntb.ko is in tree: its symbols are in the kernel's Module.symvers.
	make -C "$DEVLEND_KMOD_DIR" KDIR="$dk/build" W=1 NTB_IN_TREE=1 >/dev/null

	step "building host and guest images for $rel (cached by their inputs)"
	DEVLEND_IMAGES=$(DEVLEND_KERNEL_DIR=$dk bash "$top/guest-images/build.sh" "$rel" | tail -n 1)
}

# The migrate suite's hosts boot the "mig" kernel: Debian's of the same
# version with IOMMUFD, which VFIO's device dirty logging needs for live
# migration (build-host-kernel.sh mig). Only that suite: this exports
# DEVLEND_MIG_HOST_KVER, DEVLEND_MIG_KMOD_DIR (devlend's modules built
# against it) and DEVLEND_MIG_IMAGES (host images for its release), and
# devlend_use_mig_kernel maps them onto HOST_KVER, DEVLEND_KMOD_DIR and
# DEVLEND_IMAGES in the migrate suite's own subshell (test.sh) or for the
# migration benchmark (bench.sh); the nested guests keep Debian's kernel
# (DEVLEND_GUEST_IMAGES), the other suites all of Debian's.
devlend_mig_kernel() {
	local top=$1 mk rel
	step "building the mig host kernel for the migrate suite (cached by its inputs; about half an hour the first time)"
	mk=$(bash "$top/qemu-scripts/build-host-kernel.sh" mig "$KVER" | tail -n 1)
	rel=$(cat "$mk/release")
	echo "mig kernel: $rel in $mk"
	export DEVLEND_MIG_HOST_KVER=$rel

	# A copy of the module sources per checkout (the kernel's cache is
	# shared), built afresh, so the checkout's own modules stay built for
	# Debian's kernel. The mig kernel has no NTB: no devlend_ntb.
	step "building the kernel modules (mdev-kmod, W=1, against $rel)"
	export DEVLEND_MIG_KMOD_DIR=$top/target/mig-kmod
	rm -rf "$DEVLEND_MIG_KMOD_DIR"
	mkdir -p "$DEVLEND_MIG_KMOD_DIR"
	(cd "$top/mdev-kmod" && git ls-files -z -- . 2>/dev/null || find . -type f -print0) |
		(cd "$top/mdev-kmod" && xargs -0 cp -p --parents -t "$DEVLEND_MIG_KMOD_DIR")
	make -C "$DEVLEND_MIG_KMOD_DIR" KDIR="$mk/build" W=1 >/dev/null

	step "building host images for $rel (cached by their inputs)"
	DEVLEND_MIG_IMAGES=$(DEVLEND_KERNEL_DIR=$mk bash "$top/guest-images/build.sh" "$rel" | tail -n 1)
	export DEVLEND_MIG_IMAGES
	echo "mig host images: $DEVLEND_MIG_IMAGES"
}

# From here on the hosts boot the mig kernel, with devlend's modules built
# for it (after devlend_mig_kernel); the nested guests keep Debian's
# kernel. DEVLEND_HOST_APPEND is the debug kernel's.
devlend_use_mig_kernel() {
	export DEVLEND_GUEST_IMAGES=${DEVLEND_GUEST_IMAGES:-$DEVLEND_IMAGES}
	export HOST_KVER=$DEVLEND_MIG_HOST_KVER
	export DEVLEND_KMOD_DIR=$DEVLEND_MIG_KMOD_DIR
	export DEVLEND_IMAGES=$DEVLEND_MIG_IMAGES
	unset DEVLEND_HOST_APPEND
}

# The guest images of the peer-to-peer checks (DEVLEND_P2P_GUEST_IMAGES):
# a kernel with PCI peer-to-peer DMA, which Debian's kernels lack, so that
# a guest's nvme driver keeps its submission queues in a controller memory
# buffer (build-p2p-guest-kernel.sh), and the guest initramfs for it.
devlend_p2p_guest_images() {
	local top=$1 pk
	step "building the peer-to-peer guest kernel (cached by its inputs; 20 to 40 minutes the first time)"
	pk=$(bash "$top/qemu-scripts/build-p2p-guest-kernel.sh" "$KVER" | tail -n 1)
	step "building guest images for $(cat "$pk/release") (cached by their inputs)"
	DEVLEND_P2P_GUEST_IMAGES=$(DEVLEND_KERNEL_DIR=$pk bash "$top/guest-images/build.sh" "$(cat "$pk/release")" | tail -n 1)
	export DEVLEND_P2P_GUEST_IMAGES
	echo "peer-to-peer guest images: $DEVLEND_P2P_GUEST_IMAGES"
}
