#!/usr/bin/env bash
# Sets everything up and runs devlend's demo on the emulated cluster.
# Usage: ./demo.sh   (as root)
set -euo pipefail
top=$(cd "$(dirname "$0")" && pwd)
. "$top/qemu-scripts/common.sh"
cd "$top"

devlend_setup_and_build "$top"

step "demo on the emulated two-host cluster"
cargo run --quiet -p devlend-vmtests --bin devlend-demo
