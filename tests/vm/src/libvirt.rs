//! Debian's libvirt daemon inside a host, as an operator would run it, in a
//! writable root ([`RwRoot`]) so that its configuration, state and logs
//! live in a tmpfs that goes away with it.

use std::path::Path;
use std::time::Duration;

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

/// A running `libvirtd` (with `systemd-udevd`, whose events tell libvirt's
/// node device driver about mdevs that mdevctl creates).
#[derive(Debug)]
pub struct Libvirt {
    /// The writable root the daemons run in.
    pub rw: RwRoot,
}

impl Libvirt {
    /// Mounts a writable root and starts udevd and libvirtd in it; returns
    /// once `virsh` gets an answer.
    pub fn start(agent: &AgentClient) -> anyhow::Result<Self> {
        let rw = RwRoot::mount(agent)?;
        let lv = Libvirt { rw };
        let setup = format!(
            "set -e
grep -q '^libvirt-qemu:' /etc/passwd ||
    echo 'libvirt-qemu:x:64055:64055:libvirt qemu:/var/lib/libvirt:/usr/sbin/nologin' >>/etc/passwd
grep -q '^libvirt-qemu:' /etc/group || echo 'libvirt-qemu:x:64055:' >>/etc/group
mkdir -p /etc/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
cat >/etc/libvirt/qemu.conf <<'EOF'
{QEMU_CONF}EOF
/lib/systemd/systemd-udevd --daemon
udevadm settle -t 60
/usr/sbin/libvirtd --daemon
for i in $(seq 300); do [ -S /run/libvirt/libvirt-sock ] && break; sleep 0.2; done
virsh -c qemu:///system version"
        );
        if let Err(e) = lv.rw.sh_timeout(agent, &setup, Duration::from_secs(180)) {
            let log = lv
                .rw
                .sh(agent, "tail -n 20 /var/log/libvirt/libvirtd.log")
                .unwrap_or_default();
            let _ = lv.stop(agent);
            return Err(e.context(format!("starting libvirtd; its log ends:\n{log}")));
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

    /// Destroys every running domain, stops the daemons and takes the
    /// writable root down.
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
        self.rw.take_down(agent)
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
