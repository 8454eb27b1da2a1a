//! DMA ownership, as the fault checks see it: what the lender maps for a
//! device (debugfs `devlend/lender_maps`), what the borrower pinned and
//! quarantined (debugfs `devlend/borrower`), and where a marker written
//! into the lender's drive turned up in the borrower's RAM file.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;

use crate::fabric::{self, parse_kv, sh};
use crate::fixture::Scope;
use crate::{lending, lockdep, twohost};

/// Bytes of a page of the hosts.
pub const PAGE: u64 = 4096;
/// Bytes of a sector of the marker.
const SECTOR: u64 = 512;

/// Borrower pages (physical page numbers) the lender maps for its lent
/// devices: every page of every mapping's borrower range.
pub fn lender_mapped_pages(lender: &AgentClient) -> anyhow::Result<BTreeSet<u64>> {
    let text = sh(lender, "cat /sys/kernel/debug/devlend/lender_maps")?;
    let mut pages = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("m ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        ensure!(f.len() == 4, "lender_maps line {line:?}");
        let (addr, len) = (hex(f[2])?, hex(f[3])?);
        pages.extend((addr / PAGE)..(addr + len).div_ceil(PAGE));
    }
    Ok(pages)
}

/// What a borrower holds, from debugfs `devlend/borrower`.
#[derive(Debug, Default)]
pub struct BorrowerPages {
    /// Pages pinned by all its mdevs.
    pub pinned: u64,
    /// Pages QEMU unmapped that the lender still maps until the re-pin
    /// finds them again (held by the borrower, not pinned), now.
    pub kept: u64,
    /// Kept pages the re-pin found again on the same page, ever (all
    /// mdevs, removed ones too): the device never lost them.
    pub kept_same: u64,
    /// Kept pages that had moved or never came back, ever: unmapped.
    pub kept_unmapped: u64,
    /// Pages in quarantine now (the borrower's own count).
    pub quarantined: u64,
    /// Leases settled by the release work, ever.
    pub returned_late: u64,
    /// Devices returned at close, ever.
    pub returned: u64,
    /// Mdevs that lost their device, ever.
    pub lost: u64,
    /// The quarantined physical page numbers, from the listing.
    pub quarantine: BTreeSet<u64>,
    /// The raw text, for messages.
    pub text: String,
}

/// Reads a borrower's pins and quarantine.
pub fn borrower_pages(borrower: &AgentClient) -> anyhow::Result<BorrowerPages> {
    let text = sh(borrower, "cat /sys/kernel/debug/devlend/borrower")?;
    let mut r = BorrowerPages::default();
    for line in text.lines() {
        let kv = parse_kv(line);
        let num = |k: &str| -> anyhow::Result<u64> {
            kv.get(k)
                .with_context(|| format!("no {k} in {line:?}"))?
                .parse()
                .with_context(|| format!("{k} in {line:?}"))
        };
        if line.starts_with("borrower ") {
            r.quarantined += num("quarantined")?;
            r.returned_late += num("returned_late")?;
            r.returned += num("returned")?;
            r.lost += num("lost")?;
            r.kept_same += num("kept_same")?;
            r.kept_unmapped += num("kept_moved")? + num("kept_dropped")?;
        } else if line.starts_with("mdev ") {
            r.pinned += num("pinned")?;
            r.kept += num("kept")?;
        } else if let Some(rest) = line.strip_prefix("q ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            ensure!(f.len() == 2, "quarantine line {line:?}");
            let (start, n) = (hex(f[0])? / PAGE, f[1].parse::<u64>()?);
            r.quarantine.extend(start..start + n);
        }
    }
    ensure!(
        r.quarantine.len() as u64 == r.quarantined,
        "the borrower counts {} quarantined pages but lists {}:\n{text}",
        r.quarantined,
        r.quarantine.len()
    );
    r.text = text;
    Ok(r)
}

/// Every page in `mapped` (what a lender that may still write maps) is in
/// the borrower's quarantine: none was given back to its allocator.
pub fn all_quarantined(mapped: &BTreeSet<u64>, held: &BorrowerPages) -> anyhow::Result<()> {
    let exposed: Vec<u64> = mapped.difference(&held.quarantine).copied().collect();
    ensure!(
        exposed.is_empty(),
        "{} of {} pages the lender maps were given back to the borrower's allocator (first {:#x}):\n{}",
        exposed.len(),
        mapped.len(),
        exposed[0] * PAGE,
        held.text
    );
    Ok(())
}

/// Waits up to `timeout` until the borrower quarantines nothing; how long
/// that took. `what` says what should have emptied it.
pub fn wait_quarantine_empty(
    borrower: &AgentClient,
    what: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    lending::wait_until(
        &format!("quarantine released {what}"),
        timeout,
        || Ok(borrower_pages(borrower)?.quarantined.to_string()),
        "0",
    )
}

/// The userspace driver reading at queue depth 32 from `remote` (`<lender>/<pci
/// address>`) on a new mdev of `host` until it fails, in the background
/// (see [`spawn_bg`], output in `log`); the mdev, which `s` removes when
/// it ends.
pub fn start_reader(
    s: &mut Scope<'_>,
    host: &str,
    remote: &str,
    log: &str,
) -> anyhow::Result<String> {
    let drv = twohost::host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let uuid = s.mdev(host, twohost::MDEV_TYPE, Some(remote))?;
    spawn_bg(
        s.agent(host)?,
        &format!("{drv} --mdev {uuid} --blocks 64 --ios 1000000 --queue-depth 32 --timeout 10"),
        log,
    )?;
    Ok(uuid)
}

/// What [`stall_lender`] saw.
#[derive(Debug)]
pub struct Stalled {
    /// When the lender was frozen.
    pub at: std::time::Instant,
    /// How long the borrower took to declare it down.
    pub down: Duration,
    /// The driver's exit status.
    pub rc: i32,
    /// What the borrower held once the driver had stopped.
    pub held: BorrowerPages,
}

/// The steps every lender-stall check shares: with the driver of
/// [`start_reader`] (output in `log`) reading on `borrower` from `lender`,
/// freezes `lender` (through `s`: thawed when it ends, if not before),
/// and waits for what a stalled lender must cause: the borrower declares
/// it down within `down_within`, the driver stops with an error, and the
/// borrower pins nothing (what the lender mapped is then quarantined or
/// was never the borrower's; the caller judges that).
pub fn stall_lender(
    s: &mut Scope<'_>,
    lender: &str,
    borrower: &str,
    log: &str,
    down_within: Duration,
) -> anyhow::Result<Stalled> {
    let lender_id = fabric::host_id(s.agent(lender)?)?;
    s.freeze(lender)?;
    let at = std::time::Instant::now();
    let b = s.agent(borrower)?;
    let down = fabric::wait_peer_state(b, lender_id, "down", down_within)?;
    println!(
        "  {borrower} saw {lender} down after {:.1} s",
        down.as_secs_f64()
    );
    let (rc, out) = wait_bg(b, log, Duration::from_secs(60))?;
    ensure!(
        rc != 0,
        "the driver did not notice the lender stalled:\n{out}"
    );
    println!("  driver stopped with exit status {rc}");
    let held = borrower_pages(b)?;
    ensure!(
        held.pinned == 0,
        "pins left after the driver exited:\n{}",
        held.text
    );
    Ok(Stalled { at, down, rc, held })
}

/// What [`watch_release`] saw between a stalled lender's resume and the
/// end of its mappings.
#[derive(Debug, Default)]
pub struct ReleaseWatch {
    /// Samples taken.
    pub samples: u32,
    /// Samples in which the lender still mapped pages (all of them then
    /// in the borrower's quarantine).
    pub while_mapped: u32,
    /// The most pages the lender mapped in one such sample.
    pub max_mapped: usize,
}

/// Follows a lender that may still map a borrower's pages until it maps
/// none, up to `timeout`, and checks the DMA ownership rule at every
/// step: whatever the lender maps, the borrower still holds (pinned or
/// quarantined). The borrower is read first, then the lender: a page the
/// borrower no longer holds that the lender maps afterwards was given
/// back while the lender could still reach it, never a race of the reads.
pub fn watch_release(
    lender: &AgentClient,
    borrower: &AgentClient,
    timeout: Duration,
) -> anyhow::Result<ReleaseWatch> {
    let t0 = std::time::Instant::now();
    let mut w = ReleaseWatch::default();
    loop {
        let held = borrower_pages(borrower)?;
        let mapped = lender_mapped_pages(lender)?;
        w.samples += 1;
        if mapped.is_empty() {
            return Ok(w);
        }
        // Pinned pages are the borrower's too; their runs are not
        // listed, so only a borrower with nothing pinned is judged.
        if held.pinned == 0 {
            let exposed: Vec<u64> = mapped.difference(&held.quarantine).copied().collect();
            ensure!(
                exposed.is_empty(),
                "the borrower gave back {} pages the lender still maps (first {:#x}):\n{}",
                exposed.len(),
                exposed[0] * PAGE,
                held.text
            );
        }
        w.while_mapped += 1;
        w.max_mapped = w.max_mapped.max(mapped.len());
        ensure!(
            t0.elapsed() < timeout,
            "the lender still maps {} pages {timeout:?} after it resumed",
            mapped.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The pages of a host's RAM file where a marker landed, which must be
/// some and all in `owned` (pages the borrower held while the lender could
/// reach them). None at all proves nothing, and fails as inconclusive:
/// the device never wrote, so the check could not have seen a page
/// written behind the borrower's back.
pub fn marker_landed_in(
    marker: &Marker,
    ram_file: &Path,
    owned: &BTreeSet<u64>,
) -> anyhow::Result<BTreeSet<u64>> {
    let landed = marker_landed_only_in(marker, ram_file, owned)?;
    ensure!(!landed.is_empty(), "{MARKER_INCONCLUSIVE}");
    Ok(landed)
}

/// Why a check that found no marker proves nothing.
pub const MARKER_INCONCLUSIVE: &str = "inconclusive: the drive wrote no marker into the \
     borrower's RAM, so nothing shows where a late DMA lands";

/// [`marker_landed_in`], but no marker at all is not an error: the
/// pages it landed in, none if it did not (a check that can run its
/// experiment again decides).
pub fn marker_landed_only_in(
    marker: &Marker,
    ram_file: &Path,
    owned: &BTreeSet<u64>,
) -> anyhow::Result<BTreeSet<u64>> {
    let landed = marker.pages_in_ram(ram_file)?;
    if landed.is_empty() {
        return Ok(landed);
    }
    let outside: Vec<u64> = landed.difference(owned).copied().collect();
    ensure!(
        outside.is_empty(),
        "the lender's drive wrote into {} borrower pages that were not quarantined (first at {:#x})",
        outside.len(),
        outside[0] * PAGE
    );
    Ok(landed)
}

/// A hex number as sysfs and the CLI print it (`0x` or not).
pub fn hex(s: &str) -> anyhow::Result<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).with_context(|| format!("hex {s:?}"))
}

/// A marker: 16 random bytes that start every sector written with it.
#[derive(Debug, Clone, Copy)]
pub struct Marker([u8; 16]);

impl Marker {
    /// A new marker, from the kernel's random source.
    pub fn new() -> anyhow::Result<Marker> {
        let mut m = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut m)?;
        Ok(Marker(m))
    }

    /// Overwrites every sector of `file` with the marker followed by the
    /// sector's number, and syncs it.
    pub fn fill(&self, file: &Path) -> anyhow::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .with_context(|| format!("open {}", file.display()))?;
        let len = f.metadata()?.len();
        let chunk = 1 << 20;
        let mut buf = vec![0u8; chunk as usize];
        let mut off = 0;
        while off < len {
            let n = chunk.min(len - off);
            for (i, s) in buf[..n as usize].chunks_mut(SECTOR as usize).enumerate() {
                s[..16].copy_from_slice(&self.0);
                s[16..24].copy_from_slice(&((off / SECTOR) + i as u64).to_le_bytes());
            }
            f.seek(SeekFrom::Start(off))?;
            f.write_all(&buf[..n as usize])?;
            off += n;
        }
        f.sync_all()?;
        Ok(())
    }

    /// The physical page numbers of a host's RAM file holding a sector
    /// that starts with the marker. The file must map physical addresses
    /// one to one (RAM below the PCI hole: up to 2 GiB on q35).
    pub fn pages_in_ram(&self, ram_file: &Path) -> anyhow::Result<BTreeSet<u64>> {
        let mut f = std::fs::File::open(ram_file)
            .with_context(|| format!("open {}", ram_file.display()))?;
        let len = f.metadata()?.len();
        if len > 2 << 30 {
            bail!(
                "{} is larger than 2 GiB: its offsets are not physical addresses",
                ram_file.display()
            );
        }
        let mut pages = BTreeSet::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            for (i, s) in buf[..n].chunks(SECTOR as usize).enumerate() {
                if s.len() >= 16 && s[..16] == self.0 {
                    pages.insert((off + i as u64 * SECTOR) / PAGE);
                }
            }
            off += n as u64;
        }
        Ok(pages)
    }
}

/// Runs `cmd` in the background on a host, in a session of its own, its
/// output in `log` and its exit status in `log`.rc; its PID.
pub fn spawn_bg(agent: &AgentClient, cmd: &str, log: &str) -> anyhow::Result<u32> {
    let pid = sh(
        agent,
        &format!("rm -f {log}.rc; setsid sh -c '{cmd} >{log} 2>&1; echo $? >{log}.rc' </dev/null >/dev/null 2>&1 & echo $!"),
    )?;
    pid.trim().parse().with_context(|| format!("pid {pid:?}"))
}

/// Waits up to `timeout` for a command of [`spawn_bg`] to end; its exit
/// status and output.
pub fn wait_bg(agent: &AgentClient, log: &str, timeout: Duration) -> anyhow::Result<(i32, String)> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < timeout {
        let rc = sh(agent, &format!("cat {log}.rc 2>/dev/null || true"))?;
        if let Ok(rc) = rc.trim().parse() {
            return Ok((rc, sh(agent, &format!("cat {log}"))?));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    bail!(
        "`{log}` still running after {timeout:?}: {}",
        sh(agent, &format!("tail -n 20 {log}")).unwrap_or_default()
    )
}

/// How many lines the kernel log has: where [`kernel_trouble`] starts.
pub fn kernel_log_lines(agent: &AgentClient) -> anyhow::Result<usize> {
    let n = sh(agent, "dmesg | wc -l")?;
    n.trim()
        .parse()
        .with_context(|| format!("dmesg | wc -l: {n:?}"))
}

/// Lines of the kernel log after the first `since` that say the kernel is in trouble: a WARN, a
/// BUG, an oops, a lockup, a hung task, an RCU stall. With `was_frozen`,
/// the reports that freezing the whole host causes by itself (its clock
/// jumps: RCU stalls and soft lockups) are not counted.
pub fn kernel_trouble(
    agent: &AgentClient,
    since: usize,
    was_frozen: bool,
) -> anyhow::Result<Vec<String>> {
    let log = sh(agent, &format!("dmesg | tail -n +{}", since + 1))?;
    let lines: Vec<&str> = log.lines().collect();
    let freeze_artifact = |l: &str| {
        was_frozen && (l.contains("rcu") || l.contains("soft lockup") || l.contains("watchdog"))
    };
    let known = |at: usize| {
        let yes = lockdep::is_vfio_type1_cycle(&lines, at);
        if yes {
            eprintln!(
                "  note: lockdep reported vfio_iommu_type1's own lock cycle (not counted; \
                 docs/testing.md, \"The debug kernel\"); lockdep is off on this host from here"
            );
        }
        yes
    };
    Ok(lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            [
                "WARNING:",
                "BUG:",
                "Oops",
                "soft lockup",
                "hung_task",
                "blocked for more than",
                "detected stall",
            ]
            .iter()
            .any(|p| l.contains(p))
        })
        .filter(|(at, l)| !freeze_artifact(l) && !known(*at))
        .map(|(_, l)| *l)
        .map(str::to_owned)
        .collect())
}
