#!/bin/sh
# devlend guest /init (busybox sh, PID 1 of a nested KVM guest).
#
# Contract (docs/hosts.md, "Guest /init"):
#   devlend.cmd=<base64 of a shell command> on the kernel command line: run it
#   with sh, print DEVLEND-CMD-BEGIN, its output (stdout and stderr),
#   DEVLEND-CMD-END rc=<n> on the console, then power off.
#   Without it: a shell on the console.
#
# Before the command runs, the NVMe driver is loaded and, for every NVMe PCI
# function present, /init waits (devlend.nvme_wait=<seconds>, default 10)
# until its controller is live and its namespaces are visible.
# Unless the command line sets loglevel=, kernel messages below KERN_WARNING
# are kept off the console while the command runs (they stay in dmesg).
# The command's output reaches the console unchanged (onlcr off): lines end
# in \n, while kernel messages end in \r\n.
# The command line holds at most 2047 bytes in all (x86 COMMAND_LINE_SIZE;
# a longer one hangs the guest's kernel before it prints anything), so a
# longer command comes gzipped: devlend.cmdz=<base64 of its gzip>.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

uptime_s() { read -r up _ </proc/uptime 2>/dev/null && echo "$up" || echo "?"; }
log() { echo "devlend-init: [t=$(uptime_s)s] $*"; }

shell() {
	log "starting a shell on the console"
	while :; do
		setsid cttyhack /bin/sh
		sleep 1
	done
}

# Wait until the console's output buffer has gone out, then power off.
power_off() {
	stty -F /dev/console "$(stty -F /dev/console -g)" 2>/dev/null
	sleep 0.2
	sync
	poweroff -f
}

mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -sfn /proc/self/fd /dev/fd
ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout
ln -sfn /proc/self/fd/2 /dev/stderr
log "devlend guest init, kernel $(uname -r)"

CMD_B64=
CMD_GZ=
NVME_WAIT=10
LOGLEVEL_SET=
set -f
# shellcheck disable=SC2013 # word splitting is what we want here
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	devlend.cmd=*) CMD_B64=${arg#*=} ;;
	devlend.cmdz=*) CMD_B64=${arg#*=}; CMD_GZ=1 ;;
	devlend.nvme_wait=*) NVME_WAIT=${arg#*=} ;;
	loglevel=*) LOGLEVEL_SET=1 ;;
	esac
done
set +f

load_modules() { # list file
	while read -r ko; do
		[ -n "$ko" ] || continue
		insmod "$ko" || log "warning: insmod $ko failed"
	done <"$1"
}
load_modules /etc/devlend/modules
# Disk (SCSI, SATA), Ethernet, display and audio modules only for a guest
# given such a controller (class 0x0100, 0x0106, 0x0200; display 0x03xx,
# audio 0x0403).
disk= net= display=
for c in /sys/bus/pci/devices/*/class; do
	[ -r "$c" ] || continue
	case "$(cat "$c")" in
	0x0100*|0x0106*) disk=1 ;;
	0x0200*) net=1 ;;
	0x03*|0x0403*) display=1 ;;
	esac
done
[ -z "$disk" ] || load_modules /etc/devlend/modules.disk
[ -z "$net" ] || load_modules /etc/devlend/modules.net
[ -z "$display" ] || load_modules /etc/devlend/modules.display

# NVMe functions (class 0x0108xx) present on the PCI bus.
nvme_pci=0
for c in /sys/bus/pci/devices/*/class; do
	[ -r "$c" ] || continue
	case "$(cat "$c")" in 0x0108*) nvme_pci=$((nvme_pci + 1)) ;; esac
done
if [ "$nvme_pci" -gt 0 ]; then
	deadline=$(($(cut -d. -f1 /proc/uptime) + NVME_WAIT))
	while :; do
		ready=0
		for ctrl in /sys/class/nvme/nvme*; do
			[ -r "$ctrl/state" ] || continue
			[ "$(cat "$ctrl/state")" = live ] || continue
			set -- "$ctrl"/nvme*n*
			[ -e "$1" ] && ready=$((ready + 1))
		done
		[ "$ready" -ge "$nvme_pci" ] && break
		if [ "$(cut -d. -f1 /proc/uptime)" -ge "$deadline" ]; then
			log "warning: only $ready of $nvme_pci NVMe controllers are live with namespaces after ${NVME_WAIT}s"
			break
		fi
		sleep 0.1
	done
	for ctrl in /sys/class/nvme/nvme*; do
		[ -e "$ctrl" ] || continue
		log "${ctrl##*/}: state $(cat "$ctrl/state" 2>/dev/null), namespaces: $(cd /dev && echo "${ctrl##*/}"n*)"
	done
fi

[ -n "$CMD_B64" ] || shell

# devlend.cmdz: gzipped first, for commands that would not fit Linux's
# 2048-byte command line otherwise.
decode_cmd() {
	if [ -n "$CMD_GZ" ]; then
		echo "$CMD_B64" | base64 -d 2>/dev/null | gunzip 2>/dev/null
	else
		echo "$CMD_B64" | base64 -d 2>/dev/null
	fi
}

if ! decode_cmd >/tmp/devlend-cmd.sh; then
	log "error: devlend.cmd is not valid base64 (devlend.cmdz: of gzip)"
	echo "DEVLEND-CMD-BEGIN"
	echo "DEVLEND-CMD-END rc=255"
	power_off
fi
[ -n "$LOGLEVEL_SET" ] || echo 4 >/proc/sys/kernel/printk
log "running devlend.cmd ($(wc -c </tmp/devlend-cmd.sh) bytes)"
# From here on the console passes the bytes through as they are (no \n ->
# \r\n), so what lies between the markers is exactly the command's output.
# Kernel messages keep their \r\n.
stty -F /dev/console -onlcr 2>/dev/null || log "warning: cannot turn off onlcr on the console"
echo "DEVLEND-CMD-BEGIN"
# Output goes to the console as it comes; only its last byte is kept, so the
# end marker can be put on a line of its own.
rc=255
{
	(cd / && exec sh /tmp/devlend-cmd.sh) </dev/null 2>&1
	echo "$?" >/tmp/devlend-cmd.rc
} | tee /dev/console | tail -c 1 >/tmp/devlend-cmd.last
read -r rc </tmp/devlend-cmd.rc
# $(...) drops a trailing newline: non-empty means the output did not end in one.
[ -z "$(cat /tmp/devlend-cmd.last)" ] || echo
echo "DEVLEND-CMD-END rc=$rc"
power_off
