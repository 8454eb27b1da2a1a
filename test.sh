#!/usr/bin/env bash
# Sets everything up and runs all of devlend's tests: style gates, hermetic
# unit tests, then the VM tests that boot the emulated cluster.
# Usage: ./test.sh [FILTER...]   (filters select VM checks by name)
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
. "$top/qemu-scripts/common.sh"
cd "$top"
start=$(date +%s)

# Each step's elapsed seconds, printed when it ends and again, all
# together, when the run ends (passed or not): where CI time goes.
timings=()
t_name="" t_start=0
end_step() {
	[ -n "$t_name" ] || return 0
	local secs=$(($(date +%s) - t_start))
	printf '==> %d s: %s\n' "$secs" "$t_name"
	timings+=("$(printf '%6d s  %s' "$secs" "$t_name")")
	t_name=""
}
# timed NAME: the next step, called NAME in the timings.
timed() {
	end_step
	t_name=$1 t_start=$(date +%s)
}
print_timings() {
	end_step
	printf '\nelapsed per step:\n'
	printf '%s\n' "${timings[@]}"
	printf '%6d s  total\n' $(($(date +%s) - start))
}
trap print_timings EXIT

timed "setup and build"
devlend_setup_and_build "$top"

timed "p2p guest kernel"
devlend_p2p_guest_images "$top"

timed "mig host kernel"
devlend_mig_kernel "$top"

timed "style"
step "style: rustfmt, clippy, checkpatch --strict, no call loops between a module's files"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
make -C mdev-kmod KVER="$KVER" checkpatch
# From the objects just built: fails on a loop, or when
# docs/architecture.md's layer table and code map no longer match.
make -C mdev-kmod callgraph

timed "dkms install"
step "installing devlend's modules through DKMS for $HOST_KVER (the dkms check loads them; the hosts boot from this machine's root)"
make -C mdev-kmod dkms-install KVER="$HOST_KVER" >/dev/null

timed "unit tests"
step "unit tests (hermetic, no VMs)"
cargo test --workspace --exclude devlend-vmtests
# The VM harness's own pure helpers (no VM is booted).
cargo test -p devlend-vmtests --lib
make -C mdev-kmod unit

timed "debian package"
step "building the Debian package of the tools (cargo-deb, installed once; the lending check installs it on the hosts)"
DEVLEND_DEB=$(vmm-glue/devlend/package/build-deb.sh | tail -n 1)
export DEVLEND_DEB

# The suites: fabric (the foundation), lending (a remote NVMe used by a
# KVM guest, end to end), ntb (Linux's NTB clients over the emulated
# adapter), isolation (hosts frozen and killed mid-I/O: DMA never reaches
# memory the borrower gave back) and the fuzzers (a malicious fabric peer
# and a malicious guest) share one two-host cluster: `twohost` runs their
# checks in turn, each suite's reset before each of its checks. window
# (devlend's NTB backend with 256 MiB windows behind the adapters' IOMMUs,
# hosts with RAM above 4 GiB), devices (devices besides the NVMe: an AHCI
# controller with MSI, an e1000 with INTx, an igb NIC and its VFs) and
# multihost (four hosts) boot their own, and so does migrate (live
# migration between two borrowers), whose hosts boot the mig kernel
# (devlend_mig_kernel) while the others keep Debian's. Arguments select
# checks by name in every suite (`./test.sh window`).
VM_SUITES=(twohost window devices multihost migrate)
for suite in "${VM_SUITES[@]}"; do
	timed "VM suite $suite"
	step "VM tests: $suite (boots the emulated cluster under TCG; a few minutes)"
	if [ "$suite" = migrate ]; then
		# Only this suite's hosts boot the mig kernel.
		(
			devlend_use_mig_kernel
			cargo test -p devlend-vmtests --test "$suite" -- "$@"
		)
	else
		cargo test -p devlend-vmtests --test "$suite" -- "$@"
	fi
done

end_step
printf '\nALL TESTS PASSED in %d s\n' $(( $(date +%s) - start ))
