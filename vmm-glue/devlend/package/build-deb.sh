#!/usr/bin/env bash
# Builds the Debian package of the devlend tools with cargo-deb: the
# release binary, manual pages generated from the command's own
# definition (`devlend man`), devlend-lend.service (enabled on install,
# not started: it lends nothing until /etc/devlend/lend.conf exists) and an
# example lend.conf. The kernel modules are not in it: DKMS builds them
# (docs/install.md).
#
# Usage: vmm-glue/devlend/package/build-deb.sh
# Installs cargo-deb first if missing. Progress goes to stderr; the last
# line of stdout is the path of the .deb.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
crate=$(dirname "$here")
top=$(cd "$crate/../.." && pwd)
CARGO_DEB_VERSION=3.8.0
step() { printf '==> %s\n' "$*" >&2; }

if [ "$(cargo deb --version 2>/dev/null | awk '{print $2}')" != "$CARGO_DEB_VERSION" ]; then
	step "installing cargo-deb $CARGO_DEB_VERSION (once; a few minutes)"
	cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION" >&2
fi

cd "$top"
step "building devlend (release)"
cargo build --quiet --release -p devlend >&2
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

step "manual pages from the command's definition"
rm -rf "$crate/man"
"$target/release/devlend" man "$crate/man" >/dev/null
gzip -9n "$crate/man"/*.1

step "packaging (cargo-deb)"
# Its output goes to our stderr through the descriptor we inherited, not
# `tee /dev/stderr`: that reopens the file behind stderr, and a log opened
# without O_APPEND (`./test.sh > log 2>&1`) would be cut at the offset 0.
deb_log=$(cargo deb --no-build -p devlend --output "$target/debian" 2>&1) || {
	printf '%s\n' "$deb_log" >&2
	echo "build-deb.sh: error: cargo deb failed" >&2
	exit 1
}
printf '%s\n' "$deb_log" >&2
out=$(printf '%s\n' "$deb_log" | tail -n 1)
[ -f "$out" ] || { echo "build-deb.sh: error: cargo deb printed no package path" >&2; exit 1; }
step "package: $out ($(du -h "$out" | cut -f1))"
printf '%s\n' "$out"
