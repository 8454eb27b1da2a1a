#!/usr/bin/env bash
# Boot the images for real and check them (TCG; about 1-2 minutes, more with
# --nested). One VM at a time, each under a timeout, stopped by its PID.
#
# Usage: guest-images/selftest.sh [--nested] [KVER]
#   1. guest-initrd.img under TCG with devlend.cmd: markers, "42", power-off;
#   2. a host booted like the launcher does (minus the fabric devices) whose
#      agent loads kvm_amd, shows /dev/kvm and qemu's version and writes a
#      file into devlend-share, which must appear here;
#   3. with --nested: the guest image run under KVM inside that host.
set -euo pipefail
export LC_ALL=C

NESTED=0
if [ "${1:-}" = --nested ]; then
	NESTED=1
	shift
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IMAGES=$("$HERE/build.sh" "$@" | tail -n 1)
KVER=$(cat "$IMAGES/kver")
STATE=$(mktemp -d /var/tmp/devlend-selftest.XXXXXX)
SHM=/dev/shm/$(basename "$STATE")
SHARE=$STATE/share
mkdir -p "$SHARE" "$SHM"
QPID=
cleanup() {
	if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then
		kill "$QPID" 2>/dev/null || true
		wait "$QPID" 2>/dev/null || true
	fi
	rm -rf "$SHM"
	[ "${KEEP:-0}" = 1 ] || rm -rf "$STATE"
}
trap cleanup EXIT
step() { printf '==> %s\n' "$*" >&2; }
fail() {
	printf 'selftest: FAIL: %s (logs: %s, kept)\n' "$*" "$STATE" >&2
	KEEP=1
	exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
b64() { printf '%s\n' "$1" | base64 -w0; }

# --- 1. guest image under TCG ----------------------------------------------------
step "guest image under TCG"
t0=$(now)
timeout 120 qemu-system-x86_64 -machine q35,accel=tcg -cpu max -smp 1 -m 256 \
	-kernel "$IMAGES/vmlinuz" -initrd "$IMAGES/guest-initrd.img" \
	-append "console=ttyS0 panic=-1 devlend.cmd=$(b64 'echo $((6*7)); uname -r')" \
	-display none -nodefaults -serial "file:$STATE/guest.log" -no-reboot ||
	fail "guest QEMU exited with $? (timeout or crash)"
tr -d '\r' <"$STATE/guest.log" | sed -n '/^DEVLEND-CMD-BEGIN$/,/^DEVLEND-CMD-END/p' >"$STATE/guest.out"
printf 'DEVLEND-CMD-BEGIN\n42\n%s\nDEVLEND-CMD-END rc=0\n' "$KVER" | cmp -s - "$STATE/guest.out" ||
	fail "guest output differs: $(cat "$STATE/guest.out")"
step "guest ok: markers, 42, powered off by itself after $(since "$t0") s"

# --- 2. host, launcher style --------------------------------------------------
cat >"$SHARE/agent.sh" <<EOF
#!/bin/sh
up() { cut -d' ' -f1 /proc/uptime; }
echo "AGENT-STARTED \$(uname -r) host=\$(hostname) t=\$(up)"
for m in irqbypass ccp kvm kvm_amd; do modprobe \$m || echo "MODPROBE-FAILED \$m"; done
ls -l /dev/kvm
qemu-system-x86_64 --version | head -n 1
echo "hello from \$(hostname) \$(uname -r)" >$SHARE/hello.txt
if [ $NESTED = 1 ]; then
	t0=\$(up)
	timeout 300 qemu-system-x86_64 -accel kvm -cpu host -m 256 -smp 1 -nodefaults \\
		-kernel $IMAGES/vmlinuz -initrd $IMAGES/guest-initrd.img \\
		-append "console=ttyS0 panic=-1 quiet devlend.cmd=$(b64 'echo $((6*7)); grep -c ^processor /proc/cpuinfo')" \\
		-display none -serial file:/tmp/nested.log -no-reboot
	echo "NESTED-EXIT rc=\$? took \$(awk -v a=\$t0 -v b=\$(up) 'BEGIN { print b - a }') s"
	cp /tmp/nested.log $SHARE/nested.log
fi
echo "AGENT-DONE t=\$(up)"
exec sleep 3600
EOF
chmod 755 "$SHARE/agent.sh"

step "host under TCG (1 vCPU, 1 GiB)"
t0=$(now)
timeout 600 qemu-system-x86_64 -machine q35,accel=tcg,memory-backend=ram -cpu max -smp 1 -m 1G \
	-object "memory-backend-file,id=ram,size=1G,mem-path=$SHM/h0.ram,share=on" \
	-kernel "$IMAGES/vmlinuz" -initrd "$IMAGES/host-initrd.img" \
	-append "console=ttyS0 panic=-1 devlend.agent=$SHARE/agent.sh devlend.share=$SHARE devlend.hostname=selftest-h0" \
	-display none -serial "file:$STATE/host.log" -no-reboot \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on \
	-virtfs "local,path=$SHARE,mount_tag=devlend-share,security_model=none" \
	-device virtio-serial-pci \
	-chardev "socket,id=agent,path=$STATE/h0.agent.sock,server=on,wait=off" \
	-device virtserialport,chardev=agent,name=org.devlend.agent \
	-qmp "unix:$STATE/h0.qmp.sock,server=on,wait=off" >"$STATE/host.qemu.out" 2>&1 &
QPID=$!
while ! grep -qa 'AGENT-DONE\|FATAL' "$STATE/host.log" 2>/dev/null; do
	kill -0 "$QPID" 2>/dev/null || fail "host QEMU exited early: $(cat "$STATE/host.qemu.out")"
	sleep 1
done
took=$(since "$t0")
kill "$QPID"
wait "$QPID" 2>/dev/null || true
QPID=
log=$(tr -d '\r' <"$STATE/host.log")
grep -a 'devlend-init:\|AGENT\|NESTED\|QEMU emulator\|/dev/kvm' <<<"$log" >&2 || true
grep -q "^AGENT-STARTED $KVER host=selftest-h0" <<<"$log" || fail "agent did not start"
grep -q 'MODPROBE-FAILED' <<<"$log" && fail "modprobe failed in the host"
grep -q ' /dev/kvm$' <<<"$log" || fail "no /dev/kvm in the host"
grep -q '^QEMU emulator version' <<<"$log" || fail "qemu-system-x86_64 did not run in the host"
[ "$(cat "$SHARE/hello.txt" 2>/dev/null)" = "hello from selftest-h0 $KVER" ] ||
	fail "the file written to devlend-share did not arrive"
step "host ok: agent ran in /hostroot, kvm_amd loaded, /dev/kvm, qemu ran, share written; $took s"

if [ $NESTED = 1 ]; then
	grep -q '^NESTED-EXIT rc=0' <<<"$log" || fail "nested QEMU failed"
	tr -d '\r' <"$SHARE/nested.log" | sed -n '/^DEVLEND-CMD-BEGIN$/,/^DEVLEND-CMD-END/p' >"$STATE/nested.out"
	printf 'DEVLEND-CMD-BEGIN\n42\n1\nDEVLEND-CMD-END rc=0\n' | cmp -s - "$STATE/nested.out" ||
		fail "nested guest output differs: $(cat "$STATE/nested.out")"
	step "nested guest ok: $(grep '^NESTED-EXIT' <<<"$log")"
fi
echo "selftest: PASS ($IMAGES)"
