//! What the fault and fuzz suites share on the two-host cluster: the
//! lender's NVMe lent and listed by the borrower, our programs as a host
//! sees them, verified I/O through the userspace driver, the lender's
//! counters, and the kernel logs checked for trouble.

use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};

use crate::fabric::{self, sh};
use crate::lending::{self, PciDev};
use crate::ownership;

/// The lender's host name in `two-host.toml`.
pub const LENDER: &str = "lender";
/// The borrower's host name in `two-host.toml`.
pub const BORROWER: &str = "borrower";
/// The mdev type the checks use.
pub const MDEV_TYPE: &str = "devlend-nvme";
/// How long the checks wait for a state to be reached.
pub const WAIT: Duration = Duration::from_secs(60);

/// Boots `two-host.toml`.
pub fn boot() -> anyhow::Result<Cluster> {
    crate::boot_topology("two-host")
}

/// The lender's NVMe, lent (again, after a lender reboot), with the module
/// up on both hosts and the borrower listing it.
pub fn lent_nvme(c: &Cluster) -> anyhow::Result<PciDev> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    lending::ensure_module(l)?;
    lending::ensure_module(b)?;
    let nvme = lending::find_by_class(l, lending::NVME_CLASS)?;
    lending::ensure_lent(l, &nvme.addr)?;
    lending::wait_remote_listed(b, &nvme.addr, "remote NVMe on the borrower")?;
    Ok(nvme)
}

/// `<lender>/<pci address>`: how an mdev names the remote NVMe.
pub fn remote_name(nvme: &PciDev) -> String {
    format!("{LENDER}/{}", nvme.addr)
}

/// One of our programs, as a host sees it (over its 9p view of the outer
/// machine).
pub fn host_bin(name: &str, env: &str) -> anyhow::Result<String> {
    Ok(devlend_cluster::host_view(&tools::our_binary(name, env)?)
        .display()
        .to_string())
}

/// A verified run of the userspace driver on a new mdev of the remote
/// NVMe: the device works for its next user.
pub fn verified_io(c: &Cluster, nvme: &PciDev) -> anyhow::Result<()> {
    let b = c.agent(BORROWER)?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(nvme)))?;
    let out = b.sh(
        &format!("{drv} --mdev {uuid} --blocks 64 --ios 200"),
        Duration::from_secs(300),
    );
    let removed = lending::remove_mdev(b, &uuid);
    let out = out?;
    removed?;
    ensure!(
        out.exit_code == Some(0),
        "verified I/O on the device failed: {out:?}"
    );
    Ok(())
}

/// The lent device's line of the lender's debugfs, by key.
pub fn lender_device(
    l: &AgentClient,
    nvme: &PciDev,
) -> anyhow::Result<std::collections::HashMap<String, String>> {
    let text = sh(l, "cat /sys/kernel/debug/devlend/lender")?;
    text.lines()
        .map(fabric::parse_kv)
        .find(|kv| kv.get("name") == Some(&nvme.addr))
        .with_context(|| format!("{} not in the lender's debugfs:\n{text}", nvme.addr))
}

/// A counter of the lent device, from the lender's debugfs.
pub fn lender_counter(l: &AgentClient, nvme: &PciDev, key: &str) -> anyhow::Result<u64> {
    fabric::counter(&lender_device(l, nvme)?, key)
}

/// Where each host's kernel log stands (lender, borrower), before a check.
pub fn log_marks(c: &Cluster) -> anyhow::Result<[usize; 2]> {
    Ok([
        ownership::kernel_log_lines(c.agent(LENDER)?)?,
        ownership::kernel_log_lines(c.agent(BORROWER)?)?,
    ])
}

/// Neither host logged a WARN, BUG, oops, lockup or stall since `marks`;
/// for the `frozen` host (if any), its own reports of its clock jumping
/// are not counted.
pub fn no_kernel_trouble(
    c: &Cluster,
    marks: [usize; 2],
    frozen: Option<&str>,
) -> anyhow::Result<()> {
    for (host, since) in [LENDER, BORROWER].into_iter().zip(marks) {
        let t = ownership::kernel_trouble(c.agent(host)?, since, frozen == Some(host))?;
        ensure!(t.is_empty(), "{host}'s kernel log:\n{}", t.join("\n"));
    }
    Ok(())
}

/// A count a check runs by default (`default`), or the one the environment
/// variable `name` sets, for a longer run (or a shorter one while
/// debugging); a value that is not a number is an error, not ignored.
pub fn env_count(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v:?}")),
        Err(_) => Ok(default),
    }
}

/// A fuzzer's seed: `DEVLEND_FUZZ_SEED` (decimal or 0x hex), else random.
pub fn fuzz_seed() -> anyhow::Result<u64> {
    match std::env::var("DEVLEND_FUZZ_SEED") {
        Ok(v) => match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse(),
        }
        .with_context(|| format!("DEVLEND_FUZZ_SEED={v:?}")),
        Err(_) => Ok(rand::random()),
    }
}
