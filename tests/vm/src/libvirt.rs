//! Debian's libvirt daemon inside a host, as an operator would run it, in a
//! writable root ([`RwRoot`]) so that its configuration, state and logs
//! live in a tmpfs that goes away with it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use devlend_agent::AgentClient;

use crate::guest;
use crate::rwroot::RwRoot;

/// libvirt's QEMU driver configured for a host without a system bus or
/// cgroups, running QEMU as root. Debian's libvirt looks the user
/// `libvirt-qemu` up before it reads this file, so the setup adds it.
const QEMU_CONF: &str = "user = \"root\"
group = \"root\"
swtpm_user = \"root\"
swtpm_group = \"root\"
dynamic_ownership = 0
remember_owner = 0
security_driver = \"none\"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = \"file\"
";

/// Where libvirt keeps what it probed of each QEMU binary.
const CAPS_DIR: &str = "/var/cache/libvirt/qemu/capabilities";

/// libvirt's QEMU capability cache as the last run left it, on the outer
/// machine: `${DEVLEND_CACHE:-/var/cache/devlend}/libvirt-qemu-caps`. A
/// fresh daemon with no cache probes qemu-system-x86_64 and -i386, each
/// with KVM and with TCG, by starting QEMU under the host's TCG: minutes
/// of every run. libvirt checks each cached entry itself (the binary's and
/// the daemon's times, the kernel, KVM, the CPU) and probes again when one
/// is stale, so a stale or missing cache costs time, never a wrong answer.
/// One per host kernel release (`kver`): the migrate suite's hosts run
/// another kernel than the others', and one cache for both would be
/// probed again, and rewritten, by each in turn.
fn caps_cache(kver: &str) -> PathBuf {
    std::env::var_os("DEVLEND_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/devlend"), PathBuf::from)
        .join("libvirt-qemu-caps")
        .join(kver)
}

/// A running `libvirtd` (with `systemd-udevd`, whose events tell libvirt's
/// node device driver about mdevs that mdevctl creates).
#[derive(Debug)]
pub struct Libvirt {
    /// The writable root the daemons run in.
    pub rw: RwRoot,
    /// The cluster's writable share (the same path on the outer machine
    /// and in the host): how the capability cache comes back out.
    share: PathBuf,
    /// The host's kernel release: which capability cache is its.
    kver: String,
}

impl Libvirt {
    /// Mounts a writable root and starts udevd and libvirtd in it, given the
    /// QEMU capability cache of earlier runs ([`caps_cache`]); returns once
    /// `virsh` gets an answer. `share` is the cluster's writable share.
    pub fn start(agent: &AgentClient, share: &Path) -> anyhow::Result<Self> {
        Self::start_with(agent, share, None)
    }

    /// [`Libvirt::start`], with libvirtd also listening on TCP at
    /// `addr`:16509 with no authentication (a closed test network), so
    /// that another host's libvirt can migrate a domain here
    /// (`qemu+tcp://<addr>/system`).
    pub fn start_listening(agent: &AgentClient, share: &Path, addr: &str) -> anyhow::Result<Self> {
        Self::start_with(agent, share, Some(addr))
    }

    fn start_with(agent: &AgentClient, share: &Path, listen: Option<&str>) -> anyhow::Result<Self> {
        let kver = crate::fabric::sh(agent, "uname -r")?.trim().to_owned();
        let rw = RwRoot::mount(agent)?;
        let lv = Libvirt {
            rw,
            share: share.to_owned(),
            kver,
        };
        // A host UUID of its own: the hosts share the outer machine's
        // root, and libvirt refuses a migration between hosts whose UUIDs
        // match ("Attempt to migrate guest to the same host").
        let r: [u32; 4] = rand::random();
        let mut conf = format!(
            "host_uuid = \"{:08x}-{:04x}-4{:03x}-8{:03x}-{:04x}{:08x}\"\n",
            r[0],
            r[1] >> 16,
            r[1] & 0xfff,
            r[2] >> 20,
            r[2] & 0xffff,
            r[3]
        );
        let mut flag = "";
        if let Some(addr) = listen {
            conf.push_str(&format!(
                "listen_tls = 0\nlisten_tcp = 1\nlisten_addr = \"{addr}\"\nauth_tcp = \"none\"\n"
            ));
            flag = " --listen";
        }
        let started = Instant::now();
        // The writable root's lower layer is the outer root: the outer
        // cache directory is read there as it is, and whatever the outer
        // machine's own libvirtd left in CAPS_DIR is hidden first, so the
        // count printed is of the cache's files.
        let setup = format!(
            "set -e
mkdir -p {CAPS_DIR}
rm -f {CAPS_DIR}/*.xml
cp {cache}/*.xml {CAPS_DIR}/ 2>/dev/null || true
given=$(ls {CAPS_DIR} | grep -c '[.]xml$' || true)
grep -q '^libvirt-qemu:' /etc/passwd ||
    echo 'libvirt-qemu:x:64055:64055:libvirt qemu:/var/lib/libvirt:/usr/sbin/nologin' >>/etc/passwd
grep -q '^libvirt-qemu:' /etc/group || echo 'libvirt-qemu:x:64055:' >>/etc/group
mkdir -p /etc/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
cat >/etc/libvirt/qemu.conf <<'EOF'
{QEMU_CONF}EOF
printf '{conf}' >/etc/libvirt/libvirtd.conf
/lib/systemd/systemd-udevd --daemon
udevadm settle -t 60
/usr/sbin/libvirtd --daemon{flag}
for i in $(seq 300); do [ -S /run/libvirt/libvirt-sock ] && break; sleep 0.2; done
virsh -c qemu:///system version >/dev/null
echo $given",
            cache = caps_cache(&lv.kver).display()
        );
        match lv.rw.sh_timeout(agent, &setup, Duration::from_secs(180)) {
            Ok(given) => println!(
                "  libvirtd answered in {:.1} s ({} cached QEMU capability files given)",
                started.elapsed().as_secs_f64(),
                given.trim()
            ),
            Err(e) => {
                let log = lv
                    .rw
                    .sh(agent, "tail -n 20 /var/log/libvirt/libvirtd.log")
                    .unwrap_or_default();
                let _ = lv.stop(agent);
                return Err(e.context(format!("starting libvirtd; its log ends:\n{log}")));
            }
        }
        Ok(lv)
    }

    /// `virsh -c qemu:///system ARGS`.
    pub fn virsh(&self, agent: &AgentClient, args: &str) -> anyhow::Result<String> {
        self.rw
            .sh_timeout(
                agent,
                &format!("virsh -c qemu:///system {args}"),
                Duration::from_secs(240),
            )
            .with_context(|| format!("virsh {args}"))
    }

    /// Destroys every running domain, stops the daemons, keeps libvirt's
    /// QEMU capability cache for the next run ([`caps_cache`]) and takes
    /// the writable root down.
    pub fn stop(&self, agent: &AgentClient) -> anyhow::Result<()> {
        let _ = self.rw.sh(
            agent,
            "for d in $(virsh -c qemu:///system list --name 2>/dev/null); do
                 virsh -c qemu:///system destroy \"$d\"; done
             if [ -f /run/libvirtd.pid ]; then
                 p=$(cat /run/libvirtd.pid); kill \"$p\"
                 for i in $(seq 100); do kill -0 \"$p\" 2>/dev/null || break; sleep 0.1; done
             fi
             udevadm control --exit 2>/dev/null; true",
        );
        if let Err(e) = self.keep_caps(agent) {
            // Only time is lost: the next run probes QEMU again.
            eprintln!("  libvirt's QEMU capability cache not kept: {e:#}");
        }
        self.rw.take_down(agent)
    }

    /// Copies the capability cache out of the writable root through the
    /// share into [`caps_cache`] on the outer machine, each file written
    /// aside and renamed so that a run reading it never sees half a file.
    fn keep_caps(&self, agent: &AgentClient) -> anyhow::Result<()> {
        let out = self.share.join("libvirt-qemu-caps");
        crate::fabric::sh(
            agent,
            &format!(
                "rm -rf {o} && mkdir -p {o} && cp {caps}/*.xml {o}/",
                o = out.display(),
                caps = self.rw.path(CAPS_DIR)
            ),
        )?;
        let cache = caps_cache(&self.kver);
        std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
        for entry in
            std::fs::read_dir(&out).with_context(|| format!("reading {}", out.display()))?
        {
            let from = entry?.path();
            let Some(name) = from.file_name() else {
                continue;
            };
            let to = cache.join(name);
            let aside = cache.join(format!(".{}.new", name.to_string_lossy()));
            std::fs::copy(&from, &aside)
                .and_then(|_| std::fs::rename(&aside, &to))
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        }
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))
    }
}

/// `domain` (a domain from `devlend libvirt-xml --domain`) made to boot the
/// guest images with `cmd` (as [`guest::run`] does), its serial console
/// written to `console` inside the writable root, and destroyed rather
/// than rebooted when the guest ends. `images` is the outer machine's path:
/// the writable root sees the outer root unmasked. Fails when `cmd` does
/// not fit the guest kernel's command line ([`guest::kernel_cmdline`]).
pub fn boot_guest_domain(
    domain: &str,
    images: &Path,
    cmd: &str,
    console: &str,
) -> anyhow::Result<String> {
    let img = images.display();
    let cmdline = guest::kernel_cmdline(cmd)?;
    Ok(domain
        .replacen(
            "  </os>\n",
            &format!(
                "    <kernel>{img}/vmlinuz</kernel>\n    <initrd>{img}/guest-initrd.img</initrd>\n    \
                 <cmdline>{cmdline}</cmdline>\n  </os>\n  \
                 <on_reboot>destroy</on_reboot>\n  <cpu mode='host-passthrough'/>\n"
            ),
            1,
        )
        .replacen(
            "  </devices>\n",
            &format!(
                "    <serial type='file'><source path='{console}'/></serial>\n    \
                 <memballoon model='none'/>\n  </devices>\n"
            ),
            1,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_guest_domain_adds_kernel_console_and_no_reboot() {
        let d = "<domain type='kvm'>\n  <os>\n    <type>hvm</type>\n  </os>\n  <devices>\n    <hostdev/>\n  </devices>\n</domain>\n";
        let x = boot_guest_domain(d, Path::new("/img"), "echo hi", "/tmp/c").unwrap();
        assert!(x.contains("<kernel>/img/vmlinuz</kernel>"));
        assert!(x.contains(&format!("devlend.cmd={}", guest::base64(b"echo hi"))));
        assert!(x.contains("<on_reboot>destroy</on_reboot>"));
        assert!(x.contains(
            "<source path='/tmp/c'/></serial>\n    <memballoon model='none'/>\n  </devices>"
        ));
        assert!(x.contains("<hostdev/>"));
    }

    #[test]
    fn boot_guest_domain_refuses_a_command_the_kernel_would_not_keep() {
        let d = "<domain type='kvm'>\n  <os>\n  </os>\n  <devices>\n  </devices>\n</domain>\n";
        // Random bytes do not compress: too long even gzipped.
        let cmd: String = (0..3000)
            .map(|_| char::from(b'!' + rand::random::<u8>() % 90))
            .collect();
        let err = boot_guest_domain(d, Path::new("/img"), &cmd, "/tmp/c").unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
    }
}
