#!/usr/bin/env bash
# Sets everything up and benchmarks devlend against local vfio-pci on the
# emulated cluster: each load on a lent drive and at once on an identical
# local one, in pairs (docs/performance.md). Not part of the test command:
# tests do not time things.
# Usage: ./bench.sh [--pairs N] [--rounds N] [--quick] [--backing-only]
#                   [--relay-irq | --direct-irq] [--out FILE]   (as root)
#        ./bench.sh --migration [--pairs N] [--out FILE]
# --migration: the downtime of a live migration with a borrowed NVMe
# against the same guest migrated without a device, in pairs, on the
# migrate cluster (docs/migration.md). The last line printed is the path
# of the JSON result.
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
. "$top/qemu-scripts/common.sh"
cd "$top"

devlend_setup_and_build "$top"

if [ "${1:-}" = --migration ]; then
	shift
	devlend_mig_kernel "$top"
	devlend_use_mig_kernel
	step "benchmark: migration downtime with a borrowed NVMe vs without a device, in pairs (boots the migrate cluster once; under TCG about 5 minutes a pair)"
	exec cargo run --quiet -p devlend-vmtests --bin devlend-mig-bench -- "$@"
fi

step "installing fio (the guests run it from the outer machine)"
if ! command -v fio >/dev/null 2>&1; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends fio >/dev/null
fi
fio --version

step "benchmark: devlend vs local vfio-pci in pairs (boots the cluster once; under TCG most of an hour, --quick less: docs/performance.md)"
cargo run --quiet -p devlend-vmtests --bin devlend-bench -- "$@"
