//! Isolation when the fabric misbehaves (docs/lending.md, "DMA
//! ownership"): a host stalled past the peer timeout while the userspace
//! NVMe driver has reads queued at the lender's drive. The checks compare
//! what the lender maps with what the borrower still holds, and find a
//! marker written into the lender's drive during the stall in the
//! borrower's RAM file: it may land only in pages the borrower kept.
//!
//! The same for hosts killed mid-I/O: the survivor cleans up within a
//! bound, and the device works again once the dead host has booted.
//!
//! Last, many borrow/return cycles leave nothing held and the module
//! unloads cleanly.
//!
//! `./test.sh stall`, `./test.sh kill` and `./test.sh cycles` select these
//! groups (`DEVLEND_CYCLES=1000 ./test.sh cycles` is the long run).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend::qmp::Qmp;
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::kmemleak;
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::ownership::{self, Marker};
use devlend_vmtests::twohost;
use devlend_vmtests::twohost::{
    boot, host_bin, lender_counter, lent_nvme, log_marks, remote_name, verified_io, BORROWER,
    LENDER, MDEV_TYPE, WAIT,
};
use devlend_vmtests::{Check, Scope, Suite};

/// Longer than the peer timeout (8 s) plus the driver's own (10 s).
const STALL: Duration = Duration::from_secs(25);
/// How long the lender's drive is throttled to, in I/Os per second, so
/// that reads stay queued at the drive when the host stops.
const THROTTLE_IOPS: u64 = 4;

/// Throttles (or, with 0, unthrottles) the lender's drive through its QMP.
fn throttle(c: &Cluster, iops: u64) -> anyhow::Result<()> {
    let mut q = Qmp::connect(&c.paths().qmp_sock(LENDER), Duration::from_secs(10))?;
    q.execute(
        "block_set_io_throttle",
        Some(serde_json::json!({
            "device": "drv-nvme0",
            "bps": 0, "bps_rd": 0, "bps_wr": 0,
            "iops": iops, "iops_rd": 0, "iops_wr": 0,
        })),
        Duration::from_secs(10),
    )?;
    Ok(())
}

/// Waits up to `timeout` until the lender has relayed more interrupts than
/// `from`.
fn wait_io_flowing(
    l: &AgentClient,
    nvme: &PciDev,
    from: u64,
    timeout: Duration,
) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    loop {
        let n = lender_counter(l, nvme, "irq_fires")?;
        if n > from {
            return Ok(n);
        }
        ensure!(
            t0.elapsed() < timeout,
            "no interrupt relayed for {timeout:?}: no I/O in flight"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Proof that I/O is in flight: the lender's count of relayed interrupts
/// climbs, twice; the two counts it passed. The first may take up to
/// `first` (a KVM guest's driver probes the device first), the second up
/// to [`WAIT`].
fn io_in_flight(l: &AgentClient, nvme: &PciDev, first: Duration) -> anyhow::Result<(u64, u64)> {
    let fires = wait_io_flowing(l, nvme, 0, first)?;
    Ok((fires, wait_io_flowing(l, nvme, fires, WAIT)?))
}

/// Waits until the lender says the device is borrowed.
fn wait_borrowed(l: &AgentClient, nvme: &PciDev, timeout: Duration) -> anyhow::Result<()> {
    lending::wait_until(
        "borrowed",
        timeout,
        || lending::lent_state(l, &nvme.addr),
        "borrowed",
    )?;
    Ok(())
}

/// Waits up to `timeout` until the lender has the device back in its
/// pool (`available`; `what` says after what); how long that took.
fn wait_available(
    l: &AgentClient,
    nvme: &PciDev,
    what: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    lending::wait_until(
        what,
        timeout,
        || lending::lent_state(l, &nvme.addr),
        "available",
    )
}

/// Throttles the lender's drive while reads keep coming, and lets them
/// queue up at it.
fn queue_reads_at_drive(c: &Cluster) -> anyhow::Result<()> {
    throttle(c, THROTTLE_IOPS)?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// The driver, reading at queue depth 32 from an mdev of the remote NVMe
/// until it fails; the mdev, which `s` removes when it ends.
fn start_reader(s: &mut Scope<'_>, nvme: &PciDev, log: &str) -> anyhow::Result<String> {
    ownership::start_reader(s, BORROWER, &remote_name(nvme), log)
}

/// Lets the lender's drive run at full speed again when `s` ends (a
/// check throttles it to keep reads queued at the drive).
fn unthrottle_at_end(s: &mut Scope<'_>) {
    s.defer("unthrottle the lender's drive", |c| throttle(c, 0));
}

/// The steps of the stall checks up to the stall: the driver reads (its
/// output in `log`), the device is borrowed, I/O flows and reads queue at
/// the throttled drive (unthrottled when `s` ends); the pages the lender
/// maps then, never none.
fn reads_queued_at_drive(
    s: &mut Scope<'_>,
    nvme: &PciDev,
    log: &str,
) -> anyhow::Result<std::collections::BTreeSet<u64>> {
    start_reader(s, nvme, log)?;
    let l = s.agent(LENDER)?;
    wait_borrowed(l, nvme, WAIT)?;
    io_in_flight(l, nvme, WAIT)?;
    unthrottle_at_end(s);
    queue_reads_at_drive(s)?;
    let mapped = ownership::lender_mapped_pages(s.agent(LENDER)?)?;
    ensure!(
        !mapped.is_empty(),
        "the lender maps nothing while the driver runs"
    );
    Ok(mapped)
}

/// The lender's host stops (SIGSTOP) for longer than the peer timeout while
/// reads are queued at its drive. The borrower declares it down, the driver
/// stops with an error, and the borrower quarantines every page the lender
/// maps instead of freeing it. A marker written into the drive meanwhile
/// lands, once the lender runs again, only in quarantined pages; the
/// borrower then returns the device, the quarantine empties, and a new user
/// does verified I/O.
fn stall_lender_under_userspace_driver(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    for attempt in 1..=STALL_ATTEMPTS {
        if !stall_lender_once(c, &nvme)?.is_empty() {
            break;
        }
        ensure!(
            attempt < STALL_ATTEMPTS,
            "{} ({STALL_ATTEMPTS} stalls)",
            ownership::MARKER_INCONCLUSIVE
        );
        println!("  stall {attempt}: no marker in the borrower's RAM (inconclusive); again");
    }
    verified_io(c, &nvme)?;
    twohost::no_kernel_trouble(c, marks, Some(LENDER))
}

/// Stalls of [`stall_lender_under_userspace_driver`] until one shows where
/// the late DMA lands. In one CI run (2026-11-28) the queued reads left
/// no marker in the borrower's RAM, why is not known (reads that
/// completed before the marker was written, or that the lender's reset
/// after the thaw dropped, would do it): that proves nothing either way,
/// so the experiment runs again. Every stall checks that no marker landed
/// outside the quarantine.
const STALL_ATTEMPTS: u32 = 2;

/// One stall of [`stall_lender_under_userspace_driver`], through the
/// device back in the pool with nothing held: the borrower pages the
/// marker landed in (all quarantined), none if it did not land.
fn stall_lender_once(
    c: &mut Cluster,
    nvme: &PciDev,
) -> anyhow::Result<std::collections::BTreeSet<u64>> {
    let mut s = Scope::new(c);
    let mapped = reads_queued_at_drive(&mut s, nvme, "/tmp/stall-lender.log")?;
    let stalled =
        ownership::stall_lender(&mut s, LENDER, BORROWER, "/tmp/stall-lender.log", STALL)?;
    let held = stalled.held;
    ownership::all_quarantined(&mapped, &held)?;
    println!(
        "  {} pages the lender maps are quarantined ({} in all)",
        mapped.len(),
        held.quarantined
    );

    let marker = Marker::new()?;
    marker.fill(&s.paths().nvme_file(LENDER, "nvme0"))?;
    if let Some(left) = STALL.checked_sub(stalled.at.elapsed()) {
        std::thread::sleep(left);
    }
    s.thaw(LENDER)?;
    // The reads queued at the drive complete now, with the marker,
    // while the lender still maps the borrower's pages.
    throttle(&s, 0)?;

    let (l, b) = (s.agent(LENDER)?, s.agent(BORROWER)?);
    let w = ownership::watch_release(l, b, WAIT)?;
    println!(
        "  {} of {} samples after the resume saw the lender map pages (up to {}), all quarantined",
        w.while_mapped, w.samples, w.max_mapped
    );
    let landed =
        ownership::marker_landed_only_in(&marker, &s.paths().ram_file(BORROWER), &held.quarantine)?;
    println!(
        "  marker found in {} borrower pages, all of them quarantined",
        landed.len()
    );
    let back = wait_available(l, nvme, "device returned after the stall", WAIT)?;
    ownership::wait_quarantine_empty(b, "after the stall", WAIT)?;
    println!(
        "  device back in the pool {:.1} s after the lender resumed",
        back.as_secs_f64()
    );
    ensure!(
        ownership::lender_mapped_pages(l)?.is_empty(),
        "the lender still maps pages after taking the device back"
    );
    ensure!(ownership::borrower_pages(b)?.returned_late >= 1);
    drop(s);
    Ok(landed)
}

/// How the lender's host stops lending a device whose lease the borrower
/// still has to settle.
#[derive(Clone, Copy)]
enum LetGo {
    /// Its administrator unlends the device: the lender no longer knows
    /// the dev_id and answers `ENODEV`.
    Unlend,
    /// Its administrator unloads the lender: the host answers lender
    /// messages `EOPNOTSUPP`.
    Unload,
}

/// A stalled lender leaves the borrower with an unreturned lease and
/// quarantined pages, then stops lending before the borrower can return
/// the device ([`LetGo`]), the trigger of the "ENODEV before the unmap"
/// class: the lease must settle through that answer only once nothing is
/// mapped. The borrower is frozen while the lender resumes, so the order
/// is fixed: the reads queued at the drive write a marker into the
/// borrower's pages, the lender takes the device back from the (now
/// silent) borrower and stops lending it; only then does the borrower run
/// again and settle. Evidence: the settle's answer in the borrower's log,
/// the marker in quarantined pages only, nothing mapped, nothing held.
fn stall_lender_then_let_go(c: &mut Cluster, how: LetGo) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let mut s = Scope::new(c);
    let mapped = reads_queued_at_drive(&mut s, &nvme, "/tmp/stall-let-go.log")?;
    let held =
        ownership::stall_lender(&mut s, LENDER, BORROWER, "/tmp/stall-let-go.log", STALL)?.held;
    ownership::all_quarantined(&mapped, &held)?;
    let marker = Marker::new()?;
    marker.fill(&s.paths().nvme_file(LENDER, "nvme0"))?;

    // The borrower freezes with its lease unreturned; the lender runs.
    let bmark = ownership::kernel_log_lines(s.agent(BORROWER)?)?;
    s.freeze(BORROWER)?;
    s.thaw(LENDER)?;
    throttle(&s, 0)?;
    let l = s.agent(LENDER)?;
    wait_available(
        l,
        &nvme,
        "lender took the device back from the frozen borrower",
        Duration::from_secs(90),
    )?;
    ensure!(
        ownership::lender_mapped_pages(l)?.is_empty(),
        "the lender still maps pages after taking the device back"
    );
    // Nothing writes now: the device was reset, the borrower is
    // frozen with the quarantine it had. Its pages go back to its
    // allocator (and are soon written over) once it settles.
    let landed =
        ownership::marker_landed_in(&marker, &s.paths().ram_file(BORROWER), &held.quarantine)?;
    let (what, errno) = match how {
        LetGo::Unlend => {
            lending::unlend(l, &nvme.addr)?;
            ("unlent", -19)
        }
        LetGo::Unload => {
            sh(l, "rmmod devlend_lender")?;
            ("lender unloaded", -95)
        }
    };
    println!("  device taken back by the lender, then {what}; the borrower runs again");
    s.thaw(BORROWER)?;

    let b = s.agent(BORROWER)?;
    let settled = ownership::wait_quarantine_empty(b, "after the borrower resumed", WAIT)?;
    let said = sh(
        b,
        &format!(
            "dmesg | tail -n +{} | grep -c 'returned to its lender after .* ({errno})' || true",
            bmark + 1
        ),
    )?;
    ensure!(
        said.trim().parse::<u32>().unwrap_or(0) >= 1,
        "the lease did not settle through the lender's {errno} answer"
    );
    println!(
        "  lease settled on {errno} {:.1} s after the borrower resumed; the marker had landed in {} quarantined pages and nowhere else",
        settled.as_secs_f64(),
        landed.len()
    );
    for (host, mark) in [(LENDER, marks[0]), (BORROWER, marks[1])] {
        let t = ownership::kernel_trouble(s.agent(host)?, mark, true)?;
        ensure!(t.is_empty(), "{host}'s kernel log:\n{}", t.join("\n"));
    }
    drop(s);
    // Lent again (and the lender loaded again) for the next user.
    let nvme = lent_nvme(c)?;
    verified_io(c, &nvme)
}

fn stall_lender_then_unlend_settles_on_enodev(c: &mut Cluster) -> anyhow::Result<()> {
    stall_lender_then_let_go(c, LetGo::Unlend)
}

fn stall_lender_then_unload_settles_on_eopnotsupp(c: &mut Cluster) -> anyhow::Result<()> {
    stall_lender_then_let_go(c, LetGo::Unload)
}

/// The borrower's host stops for longer than the peer timeout while reads
/// are queued at the lender's drive. The lender declares it down and takes
/// the device back (reset, no mappings left) while it is stopped; a marker
/// written into the drive afterwards reaches no borrower page. When the
/// borrower runs again, its driver stops with an error, nothing stays
/// quarantined, and a new user does verified I/O.
fn stall_borrower_under_userspace_driver(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let log = "/tmp/stall-borrower.log";
    let mut s = Scope::new(c);
    reads_queued_at_drive(&mut s, &nvme, log)?;

    s.freeze(BORROWER)?;
    let t0 = Instant::now();
    let l = s.agent(LENDER)?;
    let back = wait_available(
        l,
        &nvme,
        "device taken back from the stalled borrower",
        WAIT,
    )?;
    println!(
        "  lender took the device back after {:.1} s",
        back.as_secs_f64()
    );
    ensure!(
        ownership::lender_mapped_pages(l)?.is_empty(),
        "the lender still maps pages of a borrower it declared down"
    );
    let marker = Marker::new()?;
    marker.fill(&s.paths().nvme_file(LENDER, "nvme0"))?;
    if let Some(left) = STALL.checked_sub(t0.elapsed()) {
        std::thread::sleep(left);
    }
    s.thaw(BORROWER)?;

    let b = s.agent(BORROWER)?;
    let (rc, out) = ownership::wait_bg(b, log, Duration::from_secs(90))?;
    ensure!(
        rc != 0,
        "the driver did not notice it lost the device:\n{out}"
    );
    println!("  driver stopped with exit status {rc}");
    lending::wait_until(
        "nothing held by the borrower",
        WAIT,
        || {
            let p = ownership::borrower_pages(b)?;
            Ok(format!("{}/{}", p.pinned, p.quarantined))
        },
        "0/0",
    )?;
    let landed = marker.pages_in_ram(&s.paths().ram_file(BORROWER))?;
    ensure!(
        landed.is_empty(),
        "the drive wrote the marker into {} borrower pages after the device was taken back",
        landed.len()
    );
    drop(s);
    verified_io(c, &nvme)?;
    twohost::no_kernel_trouble(c, marks, Some(BORROWER))
}

/// How soon after a host dies its peer must have noticed and cleaned up:
/// the peer timeout (8 s) plus time to reset the device, under TCG.
const RECLAIM_BOUND: Duration = Duration::from_secs(30);
/// How long a KVM guest on the borrower may take to boot and start its
/// I/O: about 20 s on Debian's kernel, minutes on the debug kernel (whose
/// KVM runs with KASAN and lockdep, under TCG).
const GUEST_BOOT_BOUND: Duration = Duration::from_secs(600);

/// The lender's host dies (its QEMU killed) while the driver reads. The
/// borrower declares it down, the driver stops with an error, and every
/// page the lender mapped stays quarantined (a dead lender cannot say it
/// let go). When the lender boots again, its new incarnation settles the
/// lease: the quarantine empties, and the re-lent device does verified I/O.
fn kill_lender_under_userspace_driver(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let lender_id = fabric::host_id(c.agent(LENDER)?)?;
    let log = "/tmp/kill-lender.log";
    let mut s = Scope::new(c);
    start_reader(&mut s, &nvme, log)?;
    let l = s.agent(LENDER)?;
    wait_borrowed(l, &nvme, WAIT)?;
    let (fires, fires2) = io_in_flight(l, &nvme, WAIT)?;
    let mapped = ownership::lender_mapped_pages(l)?;
    println!("  I/O in flight: {fires} -> {fires2} interrupts relayed; killing the lender");
    s.kill_host(LENDER)?;

    let b = s.agent(BORROWER)?;
    let down = fabric::wait_peer_state(b, lender_id, "down", RECLAIM_BOUND)?;
    println!(
        "  borrower saw the lender down after {:.1} s",
        down.as_secs_f64()
    );
    let (rc, out) = ownership::wait_bg(b, log, Duration::from_secs(60))?;
    ensure!(rc != 0, "the driver did not notice the lender died:\n{out}");
    let held = ownership::borrower_pages(b)?;
    ensure!(
        held.pinned == 0,
        "pins left after the driver exited:\n{}",
        held.text
    );
    ownership::all_quarantined(&mapped, &held)?;
    println!(
        "  {} pages stay quarantined while the lender is dead",
        held.quarantined
    );
    let t = ownership::kernel_trouble(b, marks[1], false)?;
    ensure!(t.is_empty(), "borrower's kernel log:\n{}", t.join("\n"));

    s.restart_host(LENDER)?;
    lending::ensure_module(s.agent(LENDER)?)?;
    let settled =
        ownership::wait_quarantine_empty(s.agent(BORROWER)?, "after the lender restarted", WAIT)?;
    println!(
        "  quarantine released {:.1} s after the lender booted again",
        settled.as_secs_f64()
    );
    drop(s);
    let nvme = lent_nvme(c)?;
    verified_io(c, &nvme)
}

/// The borrower's host dies while the driver reads. The lender declares it
/// down and takes the device back within the bound: reset, no mapping and
/// no vector left. When the borrower boots again, verified I/O works.
fn kill_borrower_under_userspace_driver(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let log = "/tmp/kill-borrower.log";
    let mut s = Scope::new(c);
    start_reader(&mut s, &nvme, log)?;
    kill_borrower_mid_io(&mut s, &nvme, marks, WAIT, "I/O")?;
    drop(s);
    let nvme = lent_nvme(c)?;
    verified_io(c, &nvme)
}

/// Kills the borrower once the device is borrowed and interrupts are
/// relayed (`what` is in flight), and checks that the lender takes the
/// device back within [`RECLAIM_BOUND`] with no mapping or vector left and
/// a clean kernel log; then boots the borrower again.
fn kill_borrower_mid_io(
    c: &mut Cluster,
    nvme: &PciDev,
    marks: [usize; 2],
    borrow_wait: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    wait_borrowed(l, nvme, borrow_wait)?;
    let (fires, fires2) = io_in_flight(l, nvme, borrow_wait)?;
    println!("  {what} in flight: {fires} -> {fires2} interrupts relayed; killing the borrower");
    c.kill_host(BORROWER)?;

    let l = c.agent(LENDER)?;
    let back = wait_available(
        l,
        nvme,
        "device taken back from the dead borrower",
        RECLAIM_BOUND,
    )?;
    println!(
        "  lender took the device back {:.1} s after the kill",
        back.as_secs_f64()
    );
    ensure!(
        ownership::lender_mapped_pages(l)?.is_empty(),
        "the lender still maps pages of a dead borrower"
    );
    ensure!(
        lender_counter(l, nvme, "irq_vectors")? == 0,
        "the lender still holds vectors for a dead borrower"
    );
    let t = ownership::kernel_trouble(l, marks[0], false)?;
    ensure!(t.is_empty(), "lender's kernel log:\n{}", t.join("\n"));
    c.restart_host(BORROWER)?;
    Ok(())
}

/// The guest of [`kill_lender_under_kvm_guest`]: it waits for a hot-plugged
/// NVMe, reads from it until it goes away, says it is still alive, waits
/// for a second hot-plugged NVMe and writes and reads back 16 MiB of random
/// data on it.
const GUEST_LOSES_DEVICE: &str = "nvme_dev() { for d in /sys/bus/pci/devices/*; do \
      [ \"$(cat $d/class)\" = 0x010802 ] && echo $d; done; }
    for i in $(seq 1200); do p=$(nvme_dev); [ -n \"$p\" ] && break; sleep 0.2; done
    [ -n \"$p\" ] || { echo never-plugged; exit 3; }
    for i in $(seq 150); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
    echo plugged
    ( while dd if=/dev/nvme0n1 of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null; do :; done ) &
    echo io-running
    for i in $(seq 1500); do [ -e $p ] || break; sleep 0.2; done
    [ -e $p ] && { echo never-unplugged; exit 4; }
    echo nvme-gone
    echo guest-alive-after-loss
    for i in $(seq 1500); do q=$(nvme_dev); [ -n \"$q\" ] && break; sleep 0.2; done
    [ -n \"$q\" ] || { echo never-replugged; exit 5; }
    for i in $(seq 150); do b=$(ls /dev/nvme*n1 2>/dev/null | head -n 1); [ -n \"$b\" ] && break; sleep 0.2; done
    head -c $((16 << 20)) /dev/urandom > /tmp/data
    echo \"written $(sha256sum /tmp/data | cut -d' ' -f1)\"
    dd if=/tmp/data of=$b bs=1M seek=16 oflag=direct conv=fsync 2>/dev/null
    dd if=$b of=/tmp/back bs=1M skip=16 count=16 iflag=direct 2>/dev/null
    echo \"read $(sha256sum /tmp/back | cut -d' ' -f1)\"";

/// The lender dies under a KVM guest doing I/O on its device. The guest
/// runs on: the borrower signals REQ, QEMU asks the guest to let the device
/// go (hot-unplug) and the guest's driver does so, its I/O failing. Once
/// the lender is back, a new device is hot-plugged into the same guest,
/// which writes and reads back verified data that is also in the lender's
/// backing file.
fn kill_lender_under_kvm_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    fabric::sh(c.agent(BORROWER)?, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let remote = remote_name(&nvme);
    let mut s = Scope::new(c);
    let first = s.mdev(BORROWER, MDEV_TYPE, Some(&remote))?;
    let g = devlend_vmtests::guest::spawn(
        s.agent(BORROWER)?,
        &tools::guest_images_dir()?,
        GUEST_LOSES_DEVICE,
        &devlend_vmtests::guest::GuestOpts {
            mem_mib: 160,
            extra_qemu_args: "",
            qmp: Some("/tmp/loss.qmp"),
            kernel_args: "",
        },
        "/tmp/loss.console",
    )?;
    s.guest(BORROWER, &g);
    let b = s.agent(BORROWER)?;
    let devlend =
        |args: &str| fabric::sh_timeout(b, &format!("{cli} {args}"), Duration::from_secs(240));
    g.wait_for(b, "DEVLEND-CMD-BEGIN", GUEST_BOOT_BOUND)?;
    devlend(&format!("attach --qmp /tmp/loss.qmp --id d0 {first}"))?;
    g.wait_for(b, "io-running", GUEST_BOOT_BOUND)?;
    let l = s.agent(LENDER)?;
    let (fires, fires2) = io_in_flight(l, &nvme, WAIT)?;
    println!("  guest I/O in flight: {fires} -> {fires2} interrupts relayed; killing the lender");
    s.kill_host(LENDER)?;

    let b = s.agent(BORROWER)?;
    let t0 = Instant::now();
    g.wait_for(b, "guest-alive-after-loss", Duration::from_secs(180))?;
    println!(
        "  the guest let the device go {:.1} s after the kill and runs on",
        t0.elapsed().as_secs_f64()
    );
    ensure!(g.running(b)?, "the guest's QEMU is gone");
    let t = ownership::kernel_trouble(b, marks[1], false)?;
    ensure!(t.is_empty(), "borrower's kernel log:\n{}", t.join("\n"));

    s.restart_host(LENDER)?;
    lent_nvme(&s)?;
    let b = s.agent(BORROWER)?;
    ownership::wait_quarantine_empty(b, "after the lender restarted", WAIT)?;
    replug_verified(&mut s, &g, "/tmp/loss.qmp", &first, &remote)
}

/// The end of a guest running [`GUEST_LOSES_DEVICE`] that lost its first
/// device, mdev `first`: that mdev is removed (it still targets the device
/// when the lender did not restart: one mdev per device on a host), a new
/// mdev for `remote` is hot-plugged into the guest over `qmp` (id `d1`),
/// the guest writes and reads back 16 MiB on it and ends, and the lender's
/// backing file holds those bytes.
fn replug_verified(
    s: &mut Scope,
    g: &devlend_vmtests::guest::BackgroundGuest,
    qmp: &str,
    first: &str,
    remote: &str,
) -> anyhow::Result<()> {
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let b = s.agent(BORROWER)?;
    if !g.running(b)? {
        let tail = fabric::sh(b, &format!("tail -n 40 {}", g.console)).unwrap_or_default();
        bail!("the guest is gone before its second device; its console ends:\n{tail}");
    }
    lending::remove_mdev(b, first).context("removing the mdev the guest let go")?;
    let uuid = s.mdev(BORROWER, MDEV_TYPE, Some(remote))?;
    let b = s.agent(BORROWER)?;
    fabric::sh_timeout(
        b,
        &format!("{cli} attach --qmp {qmp} --id d1 {uuid}"),
        Duration::from_secs(240),
    )?;
    let run = g.wait(b, Duration::from_secs(300))?;
    ensure!(run.rc == 0, "guest: {}", run.console);
    let written = lending::output_field(&run.output, "written")?;
    ensure!(
        lending::output_field(&run.output, "read")? == written,
        "the guest read back other bytes from the new device"
    );
    // GUEST_LOSES_DEVICE writes its 16 MiB at lending::IO_OFFSET_MIB.
    let sha = lending::file_sha256_mib(&s.paths().nvme_file(LENDER, "nvme0"), 16)?;
    ensure!(
        sha == written,
        "the lender's backing file does not hold what the guest wrote"
    );
    println!("  a new device, hot-plugged into the same guest, did verified I/O");
    Ok(())
}

/// A KVM guest on the borrower that writes and reads back 16 MiB on a
/// remote NVMe given at boot; the bytes must also be in the lender's file.
fn verified_guest_io(c: &Cluster, nvme: &PciDev) -> anyhow::Result<()> {
    let b = c.agent(BORROWER)?;
    fabric::sh(b, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(nvme)))?;
    let run = devlend_vmtests::guest::run_with(
        b,
        &tools::guest_images_dir()?,
        &lending::nvme_guest_script(&lending::nvme_write_and_read()),
        &devlend_vmtests::guest::GuestOpts {
            mem_mib: 160,
            extra_qemu_args: &lending::vfio_arg(&uuid),
            qmp: None,
            kernel_args: "",
        },
    );
    let removed = lending::remove_mdev(b, &uuid);
    let run = run?;
    removed?;
    ensure!(run.rc == 0, "guest failed:\n{}", run.console);
    let written = lending::output_field(&run.output, "written")?;
    ensure!(
        lending::output_field(&run.output, "read")? == written,
        "the guest read back other bytes"
    );
    ensure!(
        lending::file_sha256(&c.paths().nvme_file(LENDER, "nvme0"))? == written,
        "the lender's backing file does not hold the guest's bytes"
    );
    Ok(())
}

/// The borrower's host dies while a KVM guest on it writes to the remote
/// NVMe. The lender takes the device back within the bound (reset, no
/// mapping, no vector left); after the borrower boots again, a new guest
/// writes and reads back verified data that is in the lender's file.
fn kill_borrower_under_kvm_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    fabric::sh(c.agent(BORROWER)?, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let mut s = Scope::new(c);
    let uuid = s.mdev(BORROWER, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let g = devlend_vmtests::guest::spawn(
        s.agent(BORROWER)?,
        &tools::guest_images_dir()?,
        &lending::nvme_guest_script(
            "echo io-running; while dd if=/dev/urandom of=/dev/nvme0n1 bs=64k count=16 \
             seek=256 oflag=direct 2>/dev/null; do :; done",
        ),
        &devlend_vmtests::guest::GuestOpts {
            mem_mib: 160,
            extra_qemu_args: &lending::vfio_arg(&uuid),
            qmp: None,
            kernel_args: "",
        },
        "/tmp/killb.console",
    )?;
    // Failed before the kill, the guest would still hold the device,
    // which the checks after this one need: killed, on every path (after
    // the kill, the borrower booted again and it is gone anyway).
    s.guest(BORROWER, &g);
    // The guest says io-running once its driver has the namespace: it may
    // take minutes to boot on a debug kernel's KVM.
    g.wait_for(s.agent(BORROWER)?, "io-running", GUEST_BOOT_BOUND)?;
    kill_borrower_mid_io(&mut s, &nvme, marks, Duration::from_secs(240), "guest I/O")?;
    drop(s);
    let nvme = lent_nvme(c)?;
    verified_guest_io(c, &nvme)
}

/// The lender's host stops for longer than the peer timeout while a KVM
/// guest reads from its throttled drive. The guest runs on (QEMU unplugs
/// the lost device on REQ); every page the lender maps is quarantined once
/// QEMU lets the device go; a marker written into the drive during the
/// stall lands, after it, only in quarantined pages; the device comes back
/// and a new guest does verified I/O.
fn stall_lender_under_kvm_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let lender_id = fabric::host_id(c.agent(LENDER)?)?;
    fabric::sh(c.agent(BORROWER)?, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let mut s = Scope::new(c);
    let uuid = s.mdev(BORROWER, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let g = devlend_vmtests::guest::spawn(
        s.agent(BORROWER)?,
        &tools::guest_images_dir()?,
        GUEST_LOSES_DEVICE,
        &devlend_vmtests::guest::GuestOpts {
            mem_mib: 160,
            extra_qemu_args: "",
            qmp: Some(STALL_QMP),
            kernel_args: "",
        },
        "/tmp/stall.console",
    )?;
    s.guest(BORROWER, &g);
    let b = s.agent(BORROWER)?;
    g.wait_for(b, "DEVLEND-CMD-BEGIN", GUEST_BOOT_BOUND)?;
    fabric::sh_timeout(
        b,
        &format!("{cli} attach --qmp {STALL_QMP} --id s0 {uuid}"),
        Duration::from_secs(240),
    )?;
    g.wait_for(b, "io-running", GUEST_BOOT_BOUND)?;
    let l = s.agent(LENDER)?;
    io_in_flight(l, &nvme, WAIT)?;
    unthrottle_at_end(&mut s);
    queue_reads_at_drive(&s)?;
    let mapped = ownership::lender_mapped_pages(s.agent(LENDER)?)?;
    ensure!(
        !mapped.is_empty(),
        "the lender maps nothing while the guest reads"
    );

    s.freeze(LENDER)?;
    let t0 = Instant::now();
    let b = s.agent(BORROWER)?;
    fabric::wait_peer_state(b, lender_id, "down", STALL)?;
    g.wait_for(b, "guest-alive-after-loss", Duration::from_secs(120))?;
    println!(
        "  the guest let the device go {:.1} s into the stall and runs on",
        t0.elapsed().as_secs_f64()
    );
    let held = lending::wait_until(
        "guest memory unpinned",
        WAIT,
        || Ok(ownership::borrower_pages(b)?.pinned.to_string()),
        "0",
    )
    .and_then(|_| ownership::borrower_pages(b))?;
    ownership::all_quarantined(&mapped, &held)?;
    let marker = Marker::new()?;
    marker.fill(&s.paths().nvme_file(LENDER, "nvme0"))?;
    if let Some(left) = (STALL + Duration::from_secs(10)).checked_sub(t0.elapsed()) {
        std::thread::sleep(left);
    }
    // The guest runs on and owns its RAM: the pages its reads were for
    // went back to its allocator when it let the device go, and it may
    // write over them at any time, over the marker too. Paused, it keeps
    // what the late DMA writes where it landed until the check has looked.
    devlend_vmtests::bench::set_vm_running(s.agent(BORROWER)?, STALL_QMP, false)?;
    s.thaw(LENDER)?;
    // The reads queued at the drive complete now, with the marker,
    // while the lender still maps the guest's pages.
    throttle(&s, 0)?;

    let (l, b) = (s.agent(LENDER)?, s.agent(BORROWER)?);
    let w = ownership::watch_release(l, b, WAIT)?;
    let landed =
        ownership::marker_landed_in(&marker, &s.paths().ram_file(BORROWER), &held.quarantine)?;
    devlend_vmtests::bench::set_vm_running(b, STALL_QMP, true)?;
    println!(
        "  {} pages quarantined; {} of {} samples after the resume saw the lender map pages (up to {}), all quarantined; the marker landed in {} of them and nowhere else",
        held.quarantined,
        w.while_mapped,
        w.samples,
        w.max_mapped,
        landed.len()
    );
    wait_available(l, &nvme, "device returned after the stall", WAIT)?;
    ownership::wait_quarantine_empty(b, "after the stall", WAIT)?;
    // A new guest, not the same one given a new device as in
    // kill_lender_under_kvm_guest ([`replug_verified`]): in one of the two
    // runs that tried it here, the guest's QEMU had exited (its QMP
    // socket gone) before the second device came. Unlike a dead lender, a
    // stalled one comes back to the lost mdev; until that exit is
    // understood this check does not depend on the guest running on.
    drop(s);
    verified_guest_io(c, &nvme)?;
    twohost::no_kernel_trouble(c, marks, Some(LENDER))
}

/// The QMP socket of [`stall_lender_under_kvm_guest`]'s guest.
const STALL_QMP: &str = "/tmp/stall.qmp";

const RESET_FAULT: &str = "/sys/module/devlend_lender/parameters/fault_reclaim_reset_fails";

/// A device whose function reset fails when it comes back is lent to
/// nobody (issue 26): it could still hold the last holder's queues, data
/// and DMA addresses. The lender is told (a test-only parameter) that the
/// next take-back's reset failed; the userspace driver borrows the NVMe,
/// does its I/O and closes. Then the lender shows the device `failed` and
/// says why, the borrower lists it `failed`, `devlend mdev create` for it
/// exits 4 saying so, and the kernel offers no instance of the type (a raw
/// create through sysfs is refused); the lender keeps it `failed`.
/// Unlent (no force needed) and lent again, it does verified I/O.
///
/// Before the fix the device went back to the pool (`available`).
fn failed_reset_keeps_device_from_the_next_borrower(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let mut s = Scope::new(c);
    // Whatever happens, the next check finds the device lendable.
    let addr = nvme.addr.clone();
    s.defer("the device lendable again", move |c| {
        let l = c.agent(LENDER)?;
        if lending::lent_state(l, &addr)? == "failed" {
            lending::unlend(l, &addr)?;
            lent_nvme(c)?;
        }
        Ok(())
    });
    s.defer("the reset fault off", |c| {
        sh(c.agent(LENDER)?, &format!("echo 0 > {RESET_FAULT}")).map(drop)
    });
    sh(s.agent(LENDER)?, &format!("echo 1 > {RESET_FAULT}"))?;
    let uuid = s.mdev(BORROWER, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let (l, b) = (s.agent(LENDER)?, s.agent(BORROWER)?);
    let out = b.sh(
        &format!("{drv} --mdev {uuid} --blocks 64 --ios 50"),
        Duration::from_secs(300),
    )?;
    ensure!(out.exit_code == Some(0), "the driver's I/O failed: {out:?}");
    lending::remove_mdev(b, &uuid)?;
    lending::wait_until(
        "the device failed its reset on the lender",
        WAIT,
        || lending::lent_state(l, &nvme.addr),
        "failed",
    )?;
    let said = sh(
        l,
        &format!(
            "dmesg | tail -n +{} | grep -c 'is lent to nobody until it is lent again' || true",
            marks[0] + 1
        ),
    )?;
    ensure!(
        said.trim().parse::<u32>().unwrap_or(0) >= 1,
        "the lender did not say why"
    );
    lending::wait_until(
        "the borrower lists it failed",
        WAIT,
        || {
            Ok(lending::remote_devices(b)?
                .values()
                .find(|d| d.get("name") == Some(&nvme.addr))
                .and_then(|d| d.get("state").cloned())
                .unwrap_or_default())
        },
        "failed",
    )?;
    let out = b.sh(
        &format!(
            "{cli} mdev create --type {MDEV_TYPE} --device {}",
            remote_name(&nvme)
        ),
        Duration::from_secs(60),
    )?;
    ensure!(
        out.exit_code == Some(4) && out.stderr.contains("failed its reset"),
        "devlend mdev create for a failed device: {out:?}"
    );
    // Not free: the kernel offers no instance of it either.
    ensure!(
        lending::available_instances(b, MDEV_TYPE)? == 0,
        "the borrower offers an instance of a failed device"
    );
    ensure!(
        lending::create_mdev(b, MDEV_TYPE, None).is_err(),
        "an mdev was made with only a failed device to back it"
    );
    ensure!(
        lending::lent_state(l, &nvme.addr)? == "failed",
        "the failed device left its state"
    );
    println!("  reset failed on the take-back: lender and borrower show it failed, the CLI exits 4, no instance is offered");

    lending::unlend(l, &nvme.addr)?;
    let nvme = lent_nvme(&s)?;
    verified_io(&s, &nvme)?;
    println!("  unlent and lent again: verified I/O");
    twohost::no_kernel_trouble(&s, marks, None)
}

/// Borrow/return cycles run by the `cycles` check; `DEVLEND_CYCLES` sets
/// another count (the long run: 1000).
fn cycle_count() -> u32 {
    std::env::var("DEVLEND_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// What the two hosts hold for lending, as one comparable line: the
/// borrower's pins, quarantined pages and leases, the lender's mappings
/// and vectors, and the slab memory of both kernels (informational).
fn held_counts(c: &Cluster, nvme: &PciDev) -> anyhow::Result<(String, [u64; 2])> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let p = ownership::borrower_pages(b)?;
    let leases = p.text.lines().filter(|l| l.starts_with("lease ")).count();
    let maps = ownership::lender_mapped_pages(l)?.len();
    let vectors = lender_counter(l, nvme, "irq_vectors")?;
    let slab = |a: &AgentClient| -> anyhow::Result<u64> {
        let kb = sh(a, "awk '/^Slab:/ {print $2}' /proc/meminfo")?;
        kb.trim().parse().with_context(|| format!("Slab {kb:?}"))
    };
    Ok((
        format!(
            "pinned={} quarantined={} leases={leases} lender_mapped_pages={maps} irq_vectors={vectors}",
            p.pinned, p.quarantined
        ),
        [slab(l)?, slab(b)?],
    ))
}

/// Many borrow/return cycles through the userspace driver (open, reset,
/// Identify, one verified write and read, close): every return is logged
/// and none is mistaken for a take-back (`lost`), nothing is left held on
/// either host afterwards, and the module unloads cleanly from both.
fn cycles_borrow_return_leak_nothing(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    let n = cycle_count();
    let (before, slab_before) = held_counts(c, &nvme)?;
    let before_pages = ownership::borrower_pages(c.agent(BORROWER)?)?;
    let leak_check = kmemleak_start(c)?;
    let b = c.agent(BORROWER)?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let t0 = Instant::now();
    let out = b.sh(
        &format!(
            "i=0; while [ $i -lt {n} ]; do \
               {drv} --mdev {uuid} --blocks 1 --ios 0 >/tmp/cycle.log 2>&1 || \
                 {{ echo \"cycle $i failed\"; cat /tmp/cycle.log; exit 1; }}; \
               i=$((i + 1)); done; echo \"$i cycles\""
        ),
        Duration::from_secs(60 + 10 * u64::from(n)),
    );
    let removed = lending::remove_mdev(b, &uuid);
    let out = out?;
    removed?;
    ensure!(out.exit_code == Some(0), "borrow/return cycles: {out:?}");
    println!("  {n} cycles in {:.0} s", t0.elapsed().as_secs_f64());
    lending::wait_until(
        "device back in the pool",
        WAIT,
        || lending::lent_state(c.agent(LENDER)?, &nvme.addr),
        "available",
    )?;
    let (after, slab_after) = held_counts(c, &nvme)?;
    let after_pages = ownership::borrower_pages(c.agent(BORROWER)?)?;
    ensure!(
        before == after,
        "held before the cycles: {before}; after: {after}"
    );
    println!(
        "  held before and after: {after}; slab KiB lender {} -> {}, borrower {} -> {} (informational)",
        slab_before[0], slab_after[0], slab_before[1], slab_after[1]
    );
    // Each cycle returned the device, and no return was taken for the
    // lender taking it back (the release/rescan race).
    let (returned, lost) = (
        after_pages.returned - before_pages.returned,
        after_pages.lost - before_pages.lost,
    );
    println!("  returns counted by the borrower: {returned}, losses: {lost}");
    ensure!(
        lost == 0,
        "{lost} of {n} returned devices were seen as lost"
    );
    ensure!(
        returned == u64::from(n),
        "{returned} returns counted for {n} cycles"
    );
    if leak_check {
        for host in [LENDER, BORROWER] {
            // Every check fails on a lockdep report in its own window;
            // this says whether anything since boot turned lockdep off.
            println!(
                "  lockdep on the {host}: {}",
                match kmemleak::lockdep_on(c.agent(host)?)? {
                    Some(true) => "validating, nothing reported since boot",
                    Some(false) => "turned off by a report (see the host's dmesg)",
                    None => "not in this kernel",
                }
            );
            let leaks = kmemleak::devlend_leaks(c.agent(host)?)?;
            println!(
                "  kmemleak on the {host}: {} devlend objects leaked",
                leaks.len()
            );
            ensure!(leaks.is_empty(), "{host} leaked:\n{}", leaks.join("\n"));
        }
    }
    twohost::no_kernel_trouble(c, marks, None)?;
    for host in [BORROWER, LENDER] {
        let a = c.agent(host)?;
        fabric::unload_modules(a).with_context(|| format!("unloading devlend on the {host}"))?;
    }
    twohost::no_kernel_trouble(c, marks, None)
}

/// Starts kmemleak's count on both hosts when their kernel has it (the
/// debug kernel); says so when it has not.
fn kmemleak_start(c: &Cluster) -> anyhow::Result<bool> {
    for host in [LENDER, BORROWER] {
        if !kmemleak::available(c.agent(host)?)? {
            println!("  no kmemleak in the {host}'s kernel: leaks are judged by the counters");
            return Ok(false);
        }
    }
    for host in [LENDER, BORROWER] {
        kmemleak::clear(c.agent(host)?)?;
    }
    Ok(true)
}

fn main() {
    suite().run(boot)
}

/// The checks of this suite, with its reset; `twohost` runs them on the
/// cluster it shares with the other two-host suites.
pub fn suite() -> Suite {
    let checks = vec![
        Check {
            name: "stall_lender_under_userspace_driver",
            run: stall_lender_under_userspace_driver,
        },
        Check {
            name: "stall_lender_then_unlend_settles_on_enodev",
            run: stall_lender_then_unlend_settles_on_enodev,
        },
        Check {
            name: "stall_lender_then_unload_settles_on_eopnotsupp",
            run: stall_lender_then_unload_settles_on_eopnotsupp,
        },
        Check {
            name: "stall_borrower_under_userspace_driver",
            run: stall_borrower_under_userspace_driver,
        },
        Check {
            name: "kill_lender_under_userspace_driver",
            run: kill_lender_under_userspace_driver,
        },
        Check {
            name: "kill_borrower_under_userspace_driver",
            run: kill_borrower_under_userspace_driver,
        },
        Check {
            name: "kill_lender_under_kvm_guest",
            run: kill_lender_under_kvm_guest,
        },
        Check {
            name: "kill_borrower_under_kvm_guest",
            run: kill_borrower_under_kvm_guest,
        },
        Check {
            name: "stall_lender_under_kvm_guest",
            run: stall_lender_under_kvm_guest,
        },
        Check {
            name: "failed_reset_keeps_device_from_the_next_borrower",
            run: failed_reset_keeps_device_from_the_next_borrower,
        },
        // Last: it unloads the module.
        Check {
            name: "cycles_borrow_return_leak_nothing",
            run: cycles_borrow_return_leak_nothing,
        },
    ];
    Suite::new("isolation", checks).reset(reset)
}

/// Each check starts with both hosts up, no mdev and the lender's drive
/// at full speed, whatever the one before left.
fn reset(c: &mut Cluster) -> anyhow::Result<()> {
    devlend_vmtests::fixture::reset_hosts(c)?;
    throttle(c, 0)
}
