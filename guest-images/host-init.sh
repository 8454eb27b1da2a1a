#!/bin/sh
# devlend host /init (busybox sh, PID 1 of an emulated cluster host).
#
# Contract (docs/hosts.md, "Host /init"):
#   - mount the outer machine's / read-only (9p tag "hostroot") at /hostroot;
#   - tmpfs on /hostroot/{tmp,run,root,dev/shm}; devtmpfs, devpts, proc,
#     sysfs, debugfs (and tracefs) inside /hostroot;
#   - the writable 9p tag "devlend-share" at /hostroot<devlend.share>;
#   - hostname from devlend.hostname;
#   - forever: chroot /hostroot <devlend.agent>, respawned 1 s after it exits.
#     Without devlend.agent: a shell on the console.
#
# Kernel command line parameters read here:
#   devlend.agent=<abs path>     program to run (in the chroot) and respawn
#   devlend.share=<abs dir>      where the devlend-share tag is mounted
#   devlend.hostname=<name>      hostname
#   devlend.hostcache=<mode>     9p cache mode for hostroot (default: loose)
#
# Everything printed starts with "devlend-init:" so it stands out in the
# serial log the launcher keeps.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
HOSTROOT=/hostroot
# The path, inside the chroot, of the outer root as it is before the tmpfs
# mounts hide parts of it (/tmp, /run, /root, /dev/shm).
OUTER=/run/devlend/outer
P9_OPTS=trans=virtio,version=9p2000.L,msize=512000

uptime_s() { read -r up _ </proc/uptime 2>/dev/null && echo "$up" || echo "?"; }
log() { echo "devlend-init: [t=$(uptime_s)s] $*"; }

AGENT=
SHARE=
HOSTNAME_=
HOSTCACHE=loose

shell() {
	log "starting a shell on the console (outer root, if mounted, is at $HOSTROOT)"
	while :; do
		if grep -q " $HOSTROOT 9p " /proc/mounts; then
			setsid cttyhack env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
				HOME=/root TERM=linux TMPDIR=/tmp chroot "$HOSTROOT" /bin/sh -l
		else
			setsid cttyhack /bin/sh
		fi
		sleep 1
	done
}

# A failure that leaves the host useless. With an agent configured nobody
# is at the console: power off so QEMU exits and the launcher sees it at once.
fatal() {
	log "FATAL: $*"
	if [ -n "$AGENT" ]; then
		log "powering off"
		sync
		poweroff -f
	fi
	shell
}

mount_or_warn() { # mount args...; last arg is the mount point
	mount "$@" || log "warning: mount $* failed"
}

# --- early mounts in the initramfs ----------------------------------------
mkdir -p /proc /sys /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
exec </dev/console >/dev/console 2>&1
log "devlend host init, kernel $(uname -r)"

set -f
# shellcheck disable=SC2013 # word splitting is what we want here
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	devlend.agent=*) AGENT=${arg#*=} ;;
	devlend.share=*) SHARE=${arg#*=} ;;
	devlend.hostname=*) HOSTNAME_=${arg#*=} ;;
	devlend.hostcache=*) HOSTCACHE=${arg#*=} ;;
	esac
done
set +f

# Symlinks udev would make; the devtmpfs instance is shared with the chroot.
ln -sfn /proc/self/fd /dev/fd
ln -sfn /proc/self/fd/0 /dev/stdin
ln -sfn /proc/self/fd/1 /dev/stdout
ln -sfn /proc/self/fd/2 /dev/stderr

if [ -n "$HOSTNAME_" ]; then
	hostname "$HOSTNAME_" || log "warning: cannot set hostname $HOSTNAME_"
fi

# --- modules (9p stack), in dependency order -------------------------------
while read -r ko; do
	[ -n "$ko" ] || continue
	insmod "$ko" || fatal "insmod $ko failed"
done </etc/devlend/modules
log "modules loaded: $(sed 's|.*/||; s|\.ko$||' /etc/devlend/modules | tr '\n' ' ')"

# --- the outer machine's root over 9p --------------------------------------
mkdir -p "$HOSTROOT"
tries=0
until mount -t 9p -o "ro,$P9_OPTS,cache=$HOSTCACHE" hostroot "$HOSTROOT"; do
	tries=$((tries + 1))
	[ "$tries" -lt 20 ] || fatal "cannot mount 9p tag hostroot (is -virtfs ...,mount_tag=hostroot given?)"
	sleep 0.25
done
log "hostroot mounted read-only at $HOSTROOT (cache=$HOSTCACHE)"

mount -t proc proc "$HOSTROOT/proc" || fatal "mount proc in $HOSTROOT"
mount -t sysfs sysfs "$HOSTROOT/sys" || fatal "mount sysfs in $HOSTROOT"
mount_or_warn -t debugfs debugfs "$HOSTROOT/sys/kernel/debug"
mount_or_warn -t tracefs tracefs "$HOSTROOT/sys/kernel/tracing"
mount -t devtmpfs devtmpfs "$HOSTROOT/dev" || fatal "mount devtmpfs in $HOSTROOT"
mkdir -p "$HOSTROOT/dev/pts" "$HOSTROOT/dev/shm"
mount_or_warn -t devpts -o gid=5,mode=620,ptmxmode=666 devpts "$HOSTROOT/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$HOSTROOT/dev/shm" || fatal "tmpfs on /dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$HOSTROOT/tmp" || fatal "tmpfs on /tmp"
mount -t tmpfs -o mode=755 tmpfs "$HOSTROOT/run" || fatal "tmpfs on /run"
mount -t tmpfs -o mode=700 tmpfs "$HOSTROOT/root" || fatal "tmpfs on /root"
mkdir -p "$HOSTROOT/run/lock" "$HOSTROOT/run/user"
# The outer root without the tmpfs mounts on top (a non-recursive bind), for
# paths that live below /tmp, /run, /root or /dev/shm on the outer machine.
mkdir -p "$HOSTROOT$OUTER"
mount_or_warn --bind "$HOSTROOT" "$HOSTROOT$OUTER"

# The kernel's own module requests (request_module) must use the chroot's
# modprobe, which sees the whole module tree of the outer machine.
cat >/sbin/devlend-modprobe <<EOF
#!/bin/sh
exec /bin/chroot $HOSTROOT /sbin/modprobe "\$@"
EOF
chmod 755 /sbin/devlend-modprobe
echo /sbin/devlend-modprobe >/proc/sys/kernel/modprobe

# Named virtio-serial ports, as udev would link them.
for port in /sys/class/virtio-ports/*; do
	[ -r "$port/name" ] || continue
	name=$(cat "$port/name")
	[ -n "$name" ] || continue
	mkdir -p /dev/virtio-ports
	ln -sfn "../${port##*/}" "/dev/virtio-ports/$name"
	log "virtio port /dev/virtio-ports/$name -> /dev/${port##*/}"
done

# --- the shared, writable directory -----------------------------------------
if [ -n "$SHARE" ]; then
	case "$SHARE" in
	/*) ;;
	*) fatal "devlend.share must be an absolute path: $SHARE" ;;
	esac
	[ -d "$HOSTROOT$SHARE" ] || mkdir -p "$HOSTROOT$SHARE" ||
		fatal "no mount point $SHARE in $HOSTROOT (read-only, and not below a tmpfs)"
	mount -t 9p -o "$P9_OPTS,cache=none" devlend-share "$HOSTROOT$SHARE" ||
		fatal "cannot mount 9p tag devlend-share at $SHARE"
	log "devlend-share mounted read-write at $SHARE"
fi

log "host ready: hostname=$(hostname)"

# --- the agent ----------------------------------------------------------------
[ -n "$AGENT" ] || shell

agent_in_chroot=$AGENT
if [ ! -e "$HOSTROOT$AGENT" ] && [ -e "$HOSTROOT$OUTER$AGENT" ]; then
	agent_in_chroot=$OUTER$AGENT
	log "note: $AGENT is hidden by a tmpfs in the chroot; running $agent_in_chroot"
fi
while :; do
	if [ ! -e "$HOSTROOT$agent_in_chroot" ]; then
		log "agent $AGENT does not exist on the outer machine"
	else
		log "starting agent $agent_in_chroot"
		env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root TERM=linux TMPDIR=/tmp LANG=C.UTF-8 \
			chroot "$HOSTROOT" "$agent_in_chroot"
		log "agent exited with status $?"
	fi
	log "respawning the agent in 1 s"
	sleep 1
done
