//! Peer-to-peer checks' common part (docs/p2p.md): an NVMe's persistent
//! memory region, a BAR backed by a file on the outer machine, as the
//! target of another NVMe's reads, driven by the userspace driver holding
//! both through two mdevs of one process. Case 2 (both of one lender) is
//! in `tests/lending.rs`, case 3 (two lenders) in `tests/multihost.rs`.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;

use crate::fabric::sh;
use crate::twohost::host_bin;
use crate::{lending, ownership};

/// The PMR of the topologies' NVMe that have one (`pmr = "8M"`).
pub const PMR_BYTES: u64 = 8 << 20;
/// The ivshmem backend's parameter naming BARs shown to peers and the
/// windows onto them.
pub const BAR_WINDOWS_PARAM: &str = "/sys/module/devlend_ivshmem/parameters/bar_windows";
/// Where the userspace driver puts the target's PMR BAR for the other
/// NVMe's DMA: clear of its own buffer (0x10000000) and of the lender's
/// reserved regions.
pub const P2P_BAR_ADDR: u64 = 0x6000_0000;

/// The index of the BAR of `size` bytes of a host's PCI function.
pub fn bar_of_size(agent: &AgentClient, addr: &str, size: u64) -> anyhow::Result<u32> {
    let text = sh(agent, &format!("cat /sys/bus/pci/devices/{addr}/resource"))?;
    for (i, line) in text.lines().take(6).enumerate() {
        let v: Vec<u64> = line
            .split_whitespace()
            .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16))
            .collect::<Result<_, _>>()?;
        if v.len() >= 2 && v[1] > v[0] && v[1] - v[0] + 1 == size {
            return Ok(i as u32);
        }
    }
    anyhow::bail!("{addr} has no BAR of {size} bytes:\n{text}")
}

/// A host's `ivshmem-plain` (no MSI-X) whose BAR2 has `size` bytes: its
/// window onto another host's PMR file.
pub fn ivshmem_window_of_size(agent: &AgentClient, size: u64) -> anyhow::Result<String> {
    let out = sh(
        agent,
        "for d in /sys/bus/pci/devices/*; do \
           [ \"$(cat $d/vendor):$(cat $d/device)\" = 0x1af4:0x1110 ] || continue; \
           echo ${d##*/}; \
         done",
    )?;
    for addr in out.split_whitespace() {
        if bar_of_size(agent, addr, size).ok() == Some(2) {
            return Ok(addr.to_owned());
        }
    }
    anyhow::bail!("no ivshmem-plain of {size} bytes on this host:\n{out}")
}

/// Little-endian words of a file (a PMR's or a drive's backing file).
pub fn file_words(file: &Path, off: u64, n: usize) -> anyhow::Result<Vec<u32>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
    f.seek(SeekFrom::Start(off))?;
    let mut buf = vec![0u8; n * 4];
    f.read_exact(&mut buf)?;
    Ok(buf
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Writes little-endian words into a PMR's backing file.
pub fn pmr_write(file: &Path, off: u64, words: &[u32]) -> anyhow::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .with_context(|| format!("{}", file.display()))?;
    f.seek(SeekFrom::Start(off))?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    f.write_all(&bytes)?;
    f.sync_data()?;
    Ok(())
}

/// The DMA remapping faults a lender's kernel logged at one address so far.
pub fn dmar_faults_at(lender: &AgentClient, addr: u64) -> anyhow::Result<usize> {
    Ok(sh(
        lender,
        &format!("dmesg | grep -c 'DMAR:.*fault addr {addr:#x} ' || true"),
    )?
    .trim()
    .parse()
    .unwrap_or(0))
}

/// What one run of the driver found.
#[derive(Debug)]
pub struct PmrRead {
    /// The PMR file's first 4 KiB after the read into the BAR.
    pub landed: Vec<u32>,
    /// The same after the target was released and the read done again
    /// (a sentinel was written in between).
    pub after: Vec<u32>,
    /// The sentinel.
    pub sentinel: Vec<u32>,
    /// The driver's JSON report.
    pub report: serde_json::Value,
    /// What the caller's probe saw right after the first read, for a
    /// failure's message.
    pub probe: String,
}

/// Has the userspace driver on `b` read a block through mdev `ux` into
/// the PMR BAR `ybar` of mdev `uy`, put at [`P2P_BAR_ADDR`]; then, once
/// the first read's bytes are taken from `pmr` and a sentinel written
/// there, release `uy` and read again. `probe` runs right after the
/// first read.
pub fn read_into_pmr_then_release(
    b: &AgentClient,
    drv: &str,
    ux: &str,
    uy: &str,
    ybar: u32,
    pmr: &Path,
    probe: &dyn Fn() -> anyhow::Result<String>,
) -> anyhow::Result<PmrRead> {
    let log = "/tmp/devlend-p2p.log";
    let go = "/tmp/devlend-p2p.go";
    let sentinel = vec![0x5a5a_5a5a_u32; 1024];
    pmr_write(pmr, 0, &[0; 1024])?;
    sh(b, &format!("rm -f {go}"))?;
    ownership::spawn_bg(
        b,
        &format!(
            "{drv} --mdev {ux} --blocks 8 --ios 0 --p2p-mdev {uy} --p2p-bar {ybar} \
             --p2p-addr {P2P_BAR_ADDR:#x} --p2p-pmr --p2p-then-release {go} --json"
        ),
        log,
    )?;
    lending::wait_until(
        "the first read into the PMR",
        Duration::from_secs(300),
        || {
            let out = sh(b, &format!("cat {log}; cat {log}.rc 2>/dev/null || true"))?;
            Ok(if out.contains("p2p waiting") {
                "done"
            } else {
                "not yet"
            }
            .to_owned())
        },
        "done",
    )?;
    let landed = file_words(pmr, 0, 1024)?;
    let probe = probe().unwrap_or_else(|e| format!("probe failed: {e:#}"));
    pmr_write(pmr, 0, &sentinel)?;
    sh(b, &format!("touch {go}"))?;
    let (rc, out) = ownership::wait_bg(b, log, Duration::from_secs(300))?;
    ensure!(rc == 0, "the driver failed ({rc}):\n{out}");
    let json = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .with_context(|| format!("no report from the driver:\n{out}"))?;
    let report: serde_json::Value = serde_json::from_str(json)?;
    ensure!(report["passed"] == true, "the driver: {report}");
    Ok(PmrRead {
        landed,
        after: file_words(pmr, 0, 1024)?,
        sentinel,
        report,
        probe,
    })
}

/// Whether the userspace driver on `b` borrows remote NVMe `remote` (a
/// new mdev, removed afterwards) and does one verified I/O.
pub fn borrows(b: &AgentClient, remote: &str) -> anyhow::Result<bool> {
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let u = lending::create_mdev(b, "devlend-nvme", Some(remote))?;
    let rc = sh(
        b,
        &format!("{drv} --mdev {u} --blocks 1 --ios 1 >/dev/null 2>&1; echo $?"),
    );
    let removed = lending::remove_mdev(b, &u);
    let rc = rc?;
    removed?;
    Ok(rc.trim() == "0")
}

/// [`read_into_pmr_then_release`] through two new NVMe mdevs on `b`, of
/// the remote devices `remote_x` (the one that DMAs) and `remote_y` (the
/// PMR's), both removed afterwards whatever happened.
pub fn read_with_two_mdevs(
    b: &AgentClient,
    remote_x: &str,
    remote_y: &str,
    ybar: u32,
    pmr: &Path,
    probe: &dyn Fn() -> anyhow::Result<String>,
) -> anyhow::Result<PmrRead> {
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let ux = lending::create_mdev(b, "devlend-nvme", Some(remote_x))?;
    let r = lending::create_mdev(b, "devlend-nvme", Some(remote_y)).and_then(|uy| {
        let r = read_into_pmr_then_release(b, &drv, &ux, &uy, ybar, pmr, probe);
        let removed = lending::remove_mdev(b, &uy);
        let r = r?;
        removed?;
        Ok(r)
    });
    let removed = lending::remove_mdev(b, &ux);
    let r = r?;
    removed?;
    Ok(r)
}

/// Checks that the first read put the driver's block, as the DMAing
/// NVMe's backing file `drive` holds it, in the PMR file, and that the
/// read after the release left the sentinel there. Returns the block.
pub fn check_block_landed(r: &PmrRead, drive: &Path) -> anyhow::Result<u64> {
    let p2p = &r.report["p2p"];
    ensure!(p2p["first"] == "success", "the read into the BAR: {p2p}");
    let lba = p2p["lba"].as_u64().context("no p2p lba")?;
    let bs = r.report["identity"]["block_size"]
        .as_u64()
        .context("no block size")?;
    let want = file_words(drive, lba * bs, 1024)?;
    ensure!(
        want.iter().any(|&w| w != 0),
        "block {lba} holds zeros: the driver wrote nothing there"
    );
    ensure!(
        r.landed == want,
        "block {lba} of the DMAing NVMe is not in the PMR file after the read into its BAR \
         (the file's first words {:#x?}; seen then: {})",
        &r.landed[..4],
        r.probe
    );
    ensure!(
        r.after == r.sentinel,
        "a read into the BAR after its device went back landed in its PMR: {:?}",
        p2p["after_release"]
    );
    Ok(lba)
}
