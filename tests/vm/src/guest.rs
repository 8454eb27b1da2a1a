//! Nested KVM guests inside a host: the guest initramfs runs one command
//! given on its kernel command line and prints its output between markers.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use devlend_agent::AgentClient;

use crate::fabric;

/// What a guest printed.
#[derive(Debug)]
pub struct GuestRun {
    /// The whole console.
    pub console: String,
    /// The command's output (between the markers).
    pub output: String,
    /// The command's exit status.
    pub rc: i32,
    /// Wall time from QEMU start to its exit.
    pub elapsed: Duration,
}

/// Boots a KVM guest in `host` (whose `/dev/kvm` must exist) with the guest
/// images in `images`, runs `cmd` in it and returns what it printed.
/// `extra_qemu_args` go on the QEMU command line (e.g. a vfio-pci device).
pub fn run(
    agent: &AgentClient,
    images: &Path,
    cmd: &str,
    extra_qemu_args: &str,
) -> anyhow::Result<GuestRun> {
    let t0 = Instant::now();
    let console = fabric::sh_timeout(
        agent,
        &format!(
            "timeout 300 qemu-system-x86_64 -accel kvm -cpu host -m 256 -smp 1 -nodefaults \
             -display none -no-reboot -serial stdio \
             -kernel {img}/vmlinuz -initrd {img}/guest-initrd.img \
             -append 'console=ttyS0 quiet panic=-1 devlend.cmd={b64}' {extra_qemu_args}",
            img = devlend_cluster::host_view(images).display(),
            b64 = base64(cmd.as_bytes())
        ),
        Duration::from_secs(320),
    )?;
    let elapsed = t0.elapsed();
    let begin = console
        .find("DEVLEND-CMD-BEGIN")
        .with_context(|| format!("guest never ran its command; console:\n{console}"))?;
    let rest = &console[begin + "DEVLEND-CMD-BEGIN".len()..];
    let end = rest
        .find("DEVLEND-CMD-END rc=")
        .with_context(|| format!("guest command did not finish; console:\n{console}"))?;
    let rc = rest[end + "DEVLEND-CMD-END rc=".len()..]
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no exit status in console:\n{console}"))?;
    Ok(GuestRun {
        output: rest[..end].trim_matches(['\r', '\n']).to_owned(),
        console,
        rc,
        elapsed,
    })
}

/// Standard base64 (RFC 4648, with padding), for the kernel command line.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(T[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(i.as_bytes()), o);
        }
    }
}
