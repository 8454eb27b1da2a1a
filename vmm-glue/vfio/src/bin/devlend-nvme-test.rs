//! devlend-nvme-test: drive a (remote) NVMe controller from userspace through
//! VFIO, with no guest.
//!
//! Opens the device (an mdev by UUID, or any VFIO PCI device by sysfs path),
//! maps DMA memory, runs Identify, writes a verifiable pattern to a range of
//! blocks and reads it back, takes every completion from an MSI-X eventfd,
//! then measures random reads and prints IOPS and latency percentiles.
//!
//! Exit status: 0 all checks passed; 1 data mismatch; 2 bad usage;
//! 3 the device could not be opened or set up; 4 an I/O failed; 5 the host
//! asked for the device back (REQ, e.g. `devlend mdev remove`) and the run
//! stopped early.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use devlend_vfio::nvme::{Identity, Nvme, NvmeConfig, NvmeError, NVM_READ, NVM_WRITE};
use devlend_vfio::{mdev_path, DeviceEvent, KernelVfio, RemoteDevice, VfioBackend};
use event_manager::{EventManager, MutEventSubscriber, SubscriberOps};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Exercise a (remote) NVMe controller through VFIO from userspace, with no guest",
    long_about = "Exercise a (remote) NVMe controller through VFIO from userspace, with no guest.\n\n\
        Opens the device through its VFIO group (an mdev of a devlend borrower, or a PCI function \
        bound to vfio-pci), DMA-maps a buffer, runs Identify, writes a pattern to --blocks I/Os \
        from --lba on, reads it back and compares, then times --ios random reads at \
        --queue-depth. Every completion is taken after its MSI-X vector signalled an eventfd.\n\n\
        THE DATA IN THE TESTED RANGE IS OVERWRITTEN.",
    after_help = "Examples:\n  \
        devlend-nvme-test --mdev 6f1c...-...\n  \
        devlend-nvme-test --device /sys/bus/pci/devices/0000:01:00.0 --ios 2000 --json\n\n\
        Exit status: 0 passed, 1 data mismatch, 2 usage, 3 open/setup failed, 4 I/O failed, \
        5 stopped because the host asked for the device back."
)]
struct Args {
    /// The mdev to open, by UUID (`/sys/bus/mdev/devices/<UUID>`).
    #[arg(long, conflicts_with = "device", required_unless_present = "device")]
    mdev: Option<String>,
    /// Any VFIO device by sysfs path (e.g. /sys/bus/pci/devices/0000:01:00.0).
    #[arg(long)]
    device: Option<PathBuf>,
    /// First LBA of the tested range.
    #[arg(long, default_value_t = 0)]
    lba: u64,
    /// I/Os written and verified (each --io-size bytes).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    blocks: u64,
    /// Bytes per I/O (a multiple of the block size, at most 8192).
    #[arg(long, default_value_t = 4096)]
    io_size: u32,
    /// Outstanding commands (1..=63).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..64))]
    queue_depth: u16,
    /// Random reads timed after the verification (0: none).
    #[arg(long, default_value_t = 1000)]
    ios: u64,
    /// IOVA of the DMA buffer (page aligned, below 4 GiB for an mdev used without KVM).
    #[arg(long, default_value = "0x10000000", value_parser = parse_u64)]
    iova: u64,
    /// Seconds to wait for the controller or a completion.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Also check that a read past the end of the namespace fails with
    /// "LBA Out of Range" and that the queue still works after it.
    #[arg(long)]
    bad_input: bool,
    /// Reset the device (VFIO_DEVICE_RESET) before use; on an mdev this borrows it.
    #[arg(long)]
    reset: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

#[derive(serde::Serialize, Debug)]
struct Report {
    device: String,
    identity: Identity,
    verified_ios: u64,
    verified_bytes: u64,
    mismatches: u64,
    bad_input: Option<BadInput>,
    ios: u64,
    queue_depth: u16,
    io_size: u32,
    iops: f64,
    lat_us: Percentiles,
    irq_signals: u64,
    completions: u64,
    err_notifications: u64,
    req_notifications: u64,
    passed: bool,
}

/// What the device and the borrower did with bad input.
#[derive(serde::Serialize, Debug)]
struct BadInput {
    /// A read past the end of the namespace: must be "lba-out-of-range".
    lba_out_of_range: String,
    /// A 4-byte BAR0 read crossing the end of the BAR: must be refused.
    bar_overrun: String,
    /// A read whose buffer is an IOVA nobody mapped: the device's status,
    /// and whether every mapped data buffer kept its sentinel bytes.
    unmapped_dma: String,
    /// All three as expected, and the queue still works afterwards.
    passed: bool,
}

#[derive(serde::Serialize, Debug, Default)]
struct Percentiles {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

fn percentiles(mut v: Vec<Duration>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort();
    let at = |p: f64| {
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1e6
    };
    Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: at(1.0),
    }
}

/// The pattern of I/O `n` of this run: distinct per run, I/O and word.
fn pattern(seed: u64, lba: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ lba.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

enum Failure {
    Setup(NvmeError),
    Io(NvmeError),
    /// REQ: the host wants the device back; the run stopped early.
    Requested,
}

/// ERR and REQ notifications seen, watched by an event-manager loop in a
/// thread of its own (what a VMM would do to stop or unplug).
#[derive(Default)]
struct Notes {
    err: AtomicU64,
    req: AtomicU64,
    stop: AtomicBool,
}

impl From<NvmeError> for Failure {
    fn from(e: NvmeError) -> Self {
        Failure::Io(e)
    }
}

/// Runs `lbas` through the queue, at most `qd` in flight; `before` prepares
/// slot `i` for I/O `n`, `after` checks it. Returns per-command latencies.
#[allow(clippy::too_many_arguments)]
fn pipeline<B: VfioBackend>(
    nvme: &mut Nvme<B>,
    opcode: u8,
    what: &str,
    lbas: &[u64],
    qd: usize,
    stop: &dyn Fn() -> bool,
    mut before: impl FnMut(&Nvme<B>, usize, u64) -> Result<(), NvmeError>,
    mut after: impl FnMut(&Nvme<B>, usize, u64) -> Result<(), NvmeError>,
) -> Result<Vec<Duration>, Failure> {
    let mut lat = Vec::with_capacity(lbas.len());
    let mut free: Vec<usize> = (0..qd).rev().collect();
    let mut inflight: HashMap<u16, (usize, u64, Instant)> = HashMap::new();
    let mut next = 0;
    let mut stopped = false;
    while next < lbas.len() || !inflight.is_empty() {
        // Asked to give the device back: submit nothing more, let what is
        // in flight complete, then stop.
        if !stopped && stop() {
            stopped = true;
            next = lbas.len();
        }
        let mut cmds = Vec::new();
        let mut slots = Vec::new();
        while next < lbas.len() && !free.is_empty() {
            let slot = free.pop().expect("free slot");
            before(nvme, slot, lbas[next])?;
            cmds.push(nvme.rw_command(opcode, lbas[next], slot));
            slots.push((slot, lbas[next]));
            next += 1;
        }
        if !cmds.is_empty() {
            let now = Instant::now();
            for (cid, (slot, lba)) in nvme.submit_io(&cmds)?.into_iter().zip(slots) {
                inflight.insert(cid, (slot, lba, now));
            }
        }
        if inflight.is_empty() {
            continue;
        }
        for c in nvme.reap_io()? {
            let Some((slot, lba, t)) = inflight.remove(&c.cid) else {
                continue;
            };
            lat.push(t.elapsed());
            if !c.ok() {
                return Err(Failure::Io(NvmeError::Command {
                    what: format!("{what} of LBA {lba}"),
                    sct: c.sct(),
                    sc: c.sc(),
                }));
            }
            after(nvme, slot, lba)?;
            free.push(slot);
        }
    }
    if stopped {
        return Err(Failure::Requested);
    }
    Ok(lat)
}

fn watch_notifiers<B: VfioBackend>(
    dev: &mut RemoteDevice<B>,
    notes: &Arc<Notes>,
) -> Option<thread::JoinHandle<()>> {
    let n = notes.clone();
    let sub = match dev.enable_notifiers(move |path, ev| {
        match ev {
            DeviceEvent::Error => n.err.fetch_add(1, Ordering::SeqCst),
            DeviceEvent::Request => n.req.fetch_add(1, Ordering::SeqCst),
        };
        eprintln!("devlend-nvme-test: {}: {ev:?} notification", path.display());
    }) {
        Ok(sub) => sub,
        Err(e) => {
            log::info!("no ERR/REQ notifications: {e}");
            return None;
        }
    };
    let mut em = match EventManager::<Box<dyn MutEventSubscriber + Send>>::new() {
        Ok(em) => em,
        Err(e) => {
            log::warn!("no event manager: {e:?}");
            return None;
        }
    };
    em.add_subscriber(Box::new(sub));
    let n = notes.clone();
    Some(thread::spawn(move || {
        while !n.stop.load(Ordering::SeqCst) {
            let _ = em.run_with_timeout(100);
        }
    }))
}

fn run(args: &Args, notes: &Arc<Notes>) -> Result<Report, Failure> {
    let path = match (&args.mdev, &args.device) {
        (Some(uuid), _) => mdev_path(uuid),
        (None, Some(p)) => p.clone(),
        (None, None) => unreachable!("clap requires one"),
    };
    let mut dev = RemoteDevice::<KernelVfio>::open(&path).map_err(|e| Failure::Setup(e.into()))?;
    let watcher = watch_notifiers(&mut dev, notes);
    let res = run_device(args, &path, dev, notes);
    notes.stop.store(true, Ordering::SeqCst);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    res
}

fn status_of(r: Result<devlend_vfio::nvme::Completion, NvmeError>) -> Result<String, Failure> {
    match r {
        Ok(_) => Ok("success".to_string()),
        Err(NvmeError::Command {
            sct: 0, sc: 0x80, ..
        }) => Ok("lba-out-of-range".to_string()),
        Err(NvmeError::Command { sct, sc, .. }) => Ok(format!("status-{sct:x}-{sc:02x}")),
        Err(e) => Err(Failure::Io(e)),
    }
}

fn bad_input(
    nvme: &mut Nvme<KernelVfio>,
    identity: &Identity,
    args: &Args,
    lbas: &[u64],
) -> Result<BadInput, Failure> {
    // 1. Past the end of the namespace.
    let cmd = nvme.rw_command(NVM_READ, identity.ns_blocks, 0);
    let lba_out_of_range = status_of(nvme.io_sync("read past the end", cmd))?;

    // 2. A BAR access crossing the end of the BAR, sent to the kernel
    // without our own bounds check: the mdev (or vfio-pci) must refuse it.
    let dev = nvme.device();
    let bar = dev
        .backend()
        .region(devlend_vfio::VFIO_PCI_BAR0_REGION_INDEX)
        .size;
    let mut b = [0u8; 4];
    let (bar_overrun, bar_ok) = match dev.backend().read_unchecked(
        devlend_vfio::VFIO_PCI_BAR0_REGION_INDEX,
        bar - 2,
        &mut b,
    ) {
        Err(e) => (format!("refused: {e}"), true),
        Ok(n) if n < b.len() => (format!("short read of {n} bytes"), true),
        Ok(n) => (format!("accepted ({n} bytes)"), false),
    };

    // 3. DMA to an IOVA nobody mapped: the IOMMU must stop it. Fill every
    // data buffer with a sentinel first and check none of it changed.
    let (base, len) = nvme.dma_window();
    let qd = usize::from(args.queue_depth);
    let slot = args.io_size as usize;
    let sentinel = vec![0xa5u8; slot];
    for i in 0..qd {
        nvme.fill_slot(i, &sentinel)?;
    }
    let mut cmd = nvme.rw_command(NVM_READ, lbas[0], 0);
    cmd.prp1 = (base + len + (2 << 20)) & !0xfff;
    cmd.prp2 = 0;
    if args.io_size > 4096 {
        cmd.cdw[2] = 4096 / identity.block_size - 1;
    }
    let status = status_of(nvme.io_sync("read into an unmapped IOVA", cmd))?;
    let mut intact = true;
    let mut got = vec![0u8; slot];
    for i in 0..qd {
        nvme.read_slot(i, &mut got)?;
        intact &= got == sentinel;
    }
    let unmapped_dma = format!(
        "{status}, mapped memory {}",
        if intact { "intact" } else { "CHANGED" }
    );

    // The queue still works after all of it.
    let probe = nvme.rw_command(NVM_READ, lbas[0], 0);
    nvme.io_sync("read after the bad commands", probe)?;
    Ok(BadInput {
        passed: lba_out_of_range == "lba-out-of-range" && bar_ok && intact,
        lba_out_of_range,
        bar_overrun,
        unmapped_dma,
    })
}

fn run_device(
    args: &Args,
    path: &std::path::Path,
    dev: RemoteDevice<KernelVfio>,
    notes: &Notes,
) -> Result<Report, Failure> {
    if args.reset {
        dev.reset().map_err(|e| {
            Failure::Setup(NvmeError::Config(format!(
                "{}: VFIO_DEVICE_RESET: {e}",
                path.display()
            )))
        })?;
    }
    let cfg = NvmeConfig {
        iova_base: args.iova,
        queue_depth: args.queue_depth,
        io_size: args.io_size,
        timeout: Duration::from_secs(args.timeout),
    };
    let mut nvme = Nvme::new(dev, cfg).map_err(Failure::Setup)?;
    let identity = nvme.identify_and_setup().map_err(Failure::Setup)?;
    if !args.json {
        println!(
            "{}: {} (serial {}, firmware {}), NVMe {}.{}, namespace 1: {} blocks of {} bytes",
            path.display(),
            identity.model,
            identity.serial,
            identity.firmware,
            identity.version >> 16,
            (identity.version >> 8) & 0xff,
            identity.ns_blocks,
            identity.block_size
        );
    }
    let per_io = u64::from(args.io_size / identity.block_size);
    let end = args.lba + args.blocks * per_io;
    if end > identity.ns_blocks {
        return Err(Failure::Setup(NvmeError::Config(format!(
            "the tested range ends at LBA {end}, past the namespace ({} blocks)",
            identity.ns_blocks
        ))));
    }
    let qd = usize::from(args.queue_depth);
    // Distinct per run, so data left by an earlier run never passes.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32);
    let lbas: Vec<u64> = (0..args.blocks).map(|i| args.lba + i * per_io).collect();
    let stop = || notes.req.load(Ordering::SeqCst) > 0;
    let len = args.io_size as usize;

    pipeline(
        &mut nvme,
        NVM_WRITE,
        "write",
        &lbas,
        qd,
        &stop,
        |n, slot, lba| n.fill_slot(slot, &pattern(seed, lba, len)),
        |_, _, _| Ok(()),
    )?;
    let mut mismatches = 0;
    let mut first_bad = None;
    pipeline(
        &mut nvme,
        NVM_READ,
        "read",
        &lbas,
        qd,
        &stop,
        |n, slot, _| n.fill_slot(slot, &vec![0u8; len]),
        |n, slot, lba| {
            let mut got = vec![0u8; len];
            n.read_slot(slot, &mut got)?;
            let want = pattern(seed, lba, len);
            if got != want {
                mismatches += 1;
                if first_bad.is_none() {
                    let off = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                    first_bad = Some((lba, off));
                }
            }
            Ok(())
        },
    )?;
    if let Some((lba, off)) = first_bad {
        eprintln!(
            "MISMATCH: {mismatches} of {} I/Os read back differently; first at LBA {lba}, byte {off}",
            lbas.len()
        );
    }

    let bad_input = if args.bad_input {
        Some(bad_input(&mut nvme, &identity, args, &lbas)?)
    } else {
        None
    };

    let mut x = seed | 1;
    let rand_lbas: Vec<u64> = (0..args.ios)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lbas[(x % lbas.len().max(1) as u64) as usize]
        })
        .collect();
    let start = Instant::now();
    let lat = pipeline(
        &mut nvme,
        NVM_READ,
        "read",
        &rand_lbas,
        qd,
        &stop,
        |_, _, _| Ok(()),
        |_, _, _| Ok(()),
    )?;
    let secs = start.elapsed().as_secs_f64();
    let counters = nvme.counters();
    nvme.shutdown()?;
    let passed = mismatches == 0
        && notes.err.load(Ordering::SeqCst) == 0
        && bad_input.as_ref().is_none_or(|b| b.passed);
    Ok(Report {
        device: path.display().to_string(),
        identity,
        verified_ios: lbas.len() as u64,
        verified_bytes: lbas.len() as u64 * u64::from(args.io_size),
        mismatches,
        bad_input,
        ios: args.ios,
        queue_depth: args.queue_depth,
        io_size: args.io_size,
        iops: if secs > 0.0 {
            args.ios as f64 / secs
        } else {
            0.0
        },
        lat_us: percentiles(lat),
        irq_signals: counters.irq_signals,
        completions: counters.completions,
        err_notifications: notes.err.load(Ordering::SeqCst),
        req_notifications: notes.req.load(Ordering::SeqCst),
        passed,
    })
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let notes = Arc::new(Notes::default());
    let res = run(&args, &notes);
    let err_hint = if notes.err.load(Ordering::SeqCst) > 0 {
        " (the device signalled ERR: its lender went down or took it back)"
    } else {
        ""
    };
    match res {
        Ok(r) => {
            if args.json {
                println!("{}", serde_json::to_string(&r).expect("report serializes"));
            } else {
                println!(
                    "verified {} I/Os ({} bytes): {} mismatches",
                    r.verified_ios, r.verified_bytes, r.mismatches
                );
                if let Some(b) = &r.bad_input {
                    println!(
                        "bad input: read past the end of the namespace: {}",
                        b.lba_out_of_range
                    );
                    println!("bad input: BAR0 read across its end: {}", b.bar_overrun);
                    println!("bad input: read into an unmapped IOVA: {}", b.unmapped_dma);
                }
                println!(
                    "random reads: {} at QD {} of {} bytes: {:.0} IOPS, latency us p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
                    r.ios, r.queue_depth, r.io_size, r.iops, r.lat_us.p50, r.lat_us.p90, r.lat_us.p99, r.lat_us.max
                );
                println!(
                    "interrupts: {} eventfd signals for {} completions",
                    r.irq_signals, r.completions
                );
                println!("{}", if r.passed { "PASS" } else { "FAIL" });
            }
            if r.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(Failure::Setup(e)) => {
            eprintln!("devlend-nvme-test: setup failed: {e}{err_hint}");
            ExitCode::from(3)
        }
        Err(Failure::Io(e)) => {
            eprintln!("devlend-nvme-test: I/O failed: {e}{err_hint}");
            ExitCode::from(4)
        }
        Err(Failure::Requested) => {
            eprintln!(
                "devlend-nvme-test: the host asked for the device back (REQ); stopped after the commands in flight completed"
            );
            ExitCode::from(5)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_differs_by_lba_and_seed_and_is_stable() {
        assert_eq!(pattern(1, 2, 4096), pattern(1, 2, 4096));
        assert_ne!(pattern(1, 2, 4096), pattern(1, 3, 4096));
        assert_ne!(pattern(1, 2, 4096), pattern(2, 2, 4096));
        assert_eq!(pattern(1, 2, 100).len(), 100);
    }

    #[test]
    fn percentiles_pick_ranks() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let p = percentiles(v);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
    }

    #[test]
    fn arguments_are_range_checked() {
        assert!(Args::try_parse_from(["t", "--device", "/x", "--blocks", "0"]).is_err());
        assert!(Args::try_parse_from(["t", "--device", "/x", "--queue-depth", "64"]).is_err());
        assert!(Args::try_parse_from(["t", "--device", "/x", "--queue-depth", "0"]).is_err());
        assert!(Args::try_parse_from(["t", "--device", "/x", "--queue-depth", "63"]).is_ok());
    }

    #[test]
    fn arguments_need_one_device() {
        assert!(Args::try_parse_from(["t"]).is_err());
        assert!(Args::try_parse_from(["t", "--mdev", "u", "--device", "/x"]).is_err());
        let a = Args::try_parse_from(["t", "--device", "/x", "--iova", "0x2000"]).unwrap();
        assert_eq!(a.iova, 0x2000);
    }
}
