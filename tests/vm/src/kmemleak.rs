//! kmemleak, where the hosts' kernel has it (the debug kernel of
//! `qemu-scripts/build-host-kernel.sh`): the leak checks ask it for objects
//! that devlend allocated and nothing references any more. Debian's kernel
//! has no kmemleak; there the checks say so and rely on their counters.

use std::time::Duration;

use devlend_agent::AgentClient;

use crate::fabric::{sh, sh_timeout};

const KMEMLEAK: &str = "/sys/kernel/debug/kmemleak";
/// A scan walks all of a host's memory; under TCG with KASAN that is slow.
const SCAN_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether lockdep still validates on the host (`debug_locks` in
/// `/proc/lockdep_stats`): it turns itself off at the first problem it
/// reports, anywhere in the kernel. `None` without lockdep.
pub fn lockdep_on(agent: &AgentClient) -> anyhow::Result<Option<bool>> {
    let out = sh(
        agent,
        "awk '/debug_locks:/ {print $2}' /proc/lockdep_stats 2>/dev/null; true",
    )?;
    Ok(match out.trim() {
        "" => None,
        v => Some(v == "1"),
    })
}

/// Whether the host's kernel has kmemleak on.
pub fn available(agent: &AgentClient) -> anyhow::Result<bool> {
    let out = sh(agent, &format!("[ -w {KMEMLEAK} ] && echo yes || echo no"))?;
    Ok(out.trim() == "yes")
}

/// Forgets the objects reported or suspected so far, so that a later
/// [`devlend_leaks`] tells only of what leaked after this.
pub fn clear(agent: &AgentClient) -> anyhow::Result<()> {
    sh(agent, &format!("echo clear > {KMEMLEAK}")).map(drop)
}

/// Scans (twice: an object is reported once it has stayed unreferenced
/// for 5 s) and returns the reports whose allocation backtrace runs
/// through a devlend module.
pub fn devlend_leaks(agent: &AgentClient) -> anyhow::Result<Vec<String>> {
    let report = sh_timeout(
        agent,
        &format!("echo scan > {KMEMLEAK}; sleep 6; echo scan > {KMEMLEAK}; cat {KMEMLEAK}"),
        SCAN_TIMEOUT,
    )?;
    Ok(ours(&report))
}

/// The entries of a kmemleak report that name a devlend module.
fn ours(report: &str) -> Vec<String> {
    report
        .split("unreferenced object")
        .filter(|e| e.contains("[devlend_"))
        .map(|e| format!("unreferenced object{}", e.trim_end()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_entries_naming_devlend_are_ours() {
        let report = "unreferenced object 0xffff888001 (size 64):\n  comm \"insmod\"\n  \
            backtrace (crc 1):\n    [<0>] __kmalloc+0x1/0x2\n    [<0>] dl_peer_add+0x3/0x4 \
            [devlend_fabric]\nunreferenced object 0xffff888002 (size 32):\n  backtrace:\n    \
            [<0>] kmalloc_trace+0x1/0x2\n    [<0>] virtio_dev_probe+0x5/0x6\n";
        let got = ours(report);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("unreferenced object 0xffff888001"));
        assert!(got[0].contains("dl_peer_add"));
        assert!(ours("").is_empty());
    }
}
