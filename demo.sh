#!/usr/bin/env bash
# Sets everything up and runs devlend's demo on the emulated cluster.
# Usage: ./demo.sh [--sriov]   (as root)
#   (none)   a remote NVMe used by a KVM guest, on two hosts
#   --sriov  two guests on two hosts share one NIC through its SR-IOV VFs
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
. "$top/qemu-scripts/common.sh"
cd "$top"

case "${1:-}" in
"") story="demo on the emulated two-host cluster" ;;
--sriov) story="demo on the emulated three-host cluster: one NIC shared through its VFs" ;;
*)
	echo "usage: ./demo.sh [--sriov]" >&2
	exit 2
	;;
esac

devlend_setup_and_build "$top"

step "$story"

cargo run --quiet -p devlend-vmtests --bin devlend-demo -- "$@"
