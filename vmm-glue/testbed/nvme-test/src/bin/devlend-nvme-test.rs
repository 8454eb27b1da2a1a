//! devlend-nvme-test: drive a (remote) NVMe controller from userspace through
//! VFIO, with no guest.
//!
//! Opens the device (an mdev by UUID, or any VFIO PCI device by sysfs path),
//! maps DMA memory, runs Identify, writes a verifiable pattern to a range of
//! blocks and reads it back, takes every completion from an MSI-X eventfd,
//! then times random or sequential reads or writes inside the range the
//! user named and prints IOPS, bandwidth and latency percentiles.
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
use devlend_nvme_test::{Identity, Nvme, NvmeConfig, NvmeError, MAX_IO_SIZE, NVM_READ, NVM_WRITE};
use devlend_vfio::{mdev_path, DeviceEvent, KernelVfio, RemoteDevice, VfioBackend};
use event_manager::{EventManager, MutEventSubscriber, SubscriberOps};
use vm_memory::mmap::MmapRegion;
use vm_memory::{Bytes, FileOffset, VolatileMemory};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Exercise a (remote) NVMe controller through VFIO from userspace, with no guest",
    long_about = "Exercise a (remote) NVMe controller through VFIO from userspace, with no guest.\n\n\
        Opens the device through its VFIO group (an mdev of a devlend borrower, or a PCI function \
        bound to vfio-pci), DMA-maps a buffer, runs Identify, writes a pattern to --blocks I/Os \
        from --lba on, reads it back and compares, then times --ios I/Os (--pattern, --rw) at \
        --queue-depth over the timed range: --range-blocks I/Os from --lba on (default \
        --blocks). Every completion is taken after its MSI-X vector signalled an eventfd.\n\n\
        THE DATA IN THE TESTED RANGE IS OVERWRITTEN: --blocks I/Os from --lba on, and with \
        --rw write the whole timed range. Nothing outside them is ever written.",
    after_help = "Examples:\n  \
        devlend-nvme-test --mdev 6f1c...-...\n  \
        devlend-nvme-test --device /sys/bus/pci/devices/0000:01:00.0 --ios 2000 --json\n  \
        devlend-nvme-test --device ... --io-size 131072 --pattern seq --rw write --range-blocks 1024\n\n\
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
    /// Bytes per I/O: a multiple of the block size, at most 131072 (128 KiB)
    /// and the controller's MDTS. Past 8192 commands use a PRP list.
    #[arg(long, default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_IO_SIZE)))]
    io_size: u32,
    /// Outstanding commands (1..=63).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..64))]
    queue_depth: u16,
    /// I/Os timed after the verification (0: none).
    #[arg(long, default_value_t = 1000)]
    ios: u64,
    /// Timed phase: `random` picks each I/O uniformly among the --io-size
    /// slots of the timed range; `seq` goes through them in order from --lba
    /// and wraps back to --lba at the end of the timed range (never past it,
    /// nor to the rest of the namespace).
    #[arg(long, value_enum, default_value_t = Pattern::Random)]
    pattern: Pattern,
    /// Timed phase: `read`, or `write` (writes the driver's pattern buffers
    /// over the timed range, and only there).
    #[arg(long, value_enum, default_value_t = Rw::Read)]
    rw: Rw,
    /// The timed range: this many I/Os of --io-size from --lba on (default:
    /// --blocks, the verified range). With --rw write all of it may be
    /// overwritten; it must lie in namespace 1.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    range_blocks: Option<u64>,
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
    /// With --bad-input, also try peer-to-peer DMA: map the first page of
    /// this PCI BAR (a sysfs `resourceN` file of a memory BAR that no driver
    /// claims, e.g. a display adapter's VRAM) into the device's DMA space at
    /// --p2p-iova before the device is set up, then read data into it.
    /// devlend lends DMA to RAM only (docs/p2p.md): the BAR must keep what
    /// was there (the device's status is only reported: a read's data goes
    /// out as posted writes, which an IOMMU drops without telling the
    /// device).
    #[arg(long, requires = "bad_input")]
    p2p_target: Option<PathBuf>,
    /// IOVA of the --p2p-target page (page aligned, below 4 GiB, outside
    /// the DMA buffer).
    #[arg(long, default_value = "0x8000000", value_parser = parse_u64)]
    p2p_iova: u64,
    /// Peer-to-peer between two devices of one lender (docs/p2p.md): after
    /// the verified I/O, open this second mdev too (the same process: the
    /// borrower pairs them), put its memory BAR --p2p-bar at --p2p-addr
    /// with memory decode on, and read the first verified block into it.
    /// The bytes must land in that BAR (the check reads its backing).
    #[arg(long)]
    p2p_mdev: Option<String>,
    /// The --p2p-mdev BAR (a 64-bit memory BAR).
    #[arg(long, default_value_t = 4, requires = "p2p_mdev")]
    p2p_bar: u32,
    /// Where --p2p-mdev's BAR is put (page aligned, clear of the DMA buffer).
    #[arg(long, default_value = "0x60000000", value_parser = parse_u64, requires = "p2p_mdev")]
    p2p_addr: u64,
    /// The --p2p-mdev BAR is an NVMe persistent memory region: enable it
    /// first (PMRCTL.EN), or QEMU's NVMe keeps it off the bus.
    #[arg(long, requires = "p2p_mdev")]
    p2p_pmr: bool,
    /// With --p2p-mdev: after the first read, wait until this file exists,
    /// close the second mdev (its device goes back, and its lender revokes
    /// the mapping) and read into the same address again: that DMA must
    /// not land.
    #[arg(long, requires = "p2p_mdev")]
    p2p_then_release: Option<PathBuf>,
    /// Reset the device (VFIO_DEVICE_RESET) before use; on an mdev this borrows it.
    #[arg(long)]
    reset: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// Enable MSI-X while memory decode is off (cleared in the command
    /// register first, set again right after), as a guest may; the
    /// vectors must work all the same.
    #[arg(long)]
    msix_decode_off: bool,
    /// After setting the device up (DMA memory, bus master, MSI-X,
    /// controller enabled), and before the first command, wait until this
    /// file exists (at most 600 s); prints "waiting before I/O" when it
    /// starts to wait.
    #[arg(long)]
    wait_before_io: Option<PathBuf>,
    /// After the I/O, keep the device open (borrowed) until this file
    /// exists (at most 600 s, or until the host asks for the device back);
    /// prints "holding" when it starts to wait.
    #[arg(long)]
    hold_until: Option<PathBuf>,
}

/// The longest --hold-until waits.
const HOLD_MAX: Duration = Duration::from_secs(600);

/// Where the timed I/Os go in the timed range.
#[derive(clap::ValueEnum, serde::Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Pattern {
    /// Each I/O at a uniformly drawn --io-size slot of the range.
    Random,
    /// Slot after slot from the start, wrapping to the start at its end.
    Seq,
}

/// The direction of the timed I/Os.
#[derive(clap::ValueEnum, serde::Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Rw {
    /// Reads into the slots.
    Read,
    /// Writes of the slots' pattern buffers.
    Write,
}

impl Rw {
    fn opcode(self) -> u8 {
        match self {
            Rw::Read => NVM_READ,
            Rw::Write => NVM_WRITE,
        }
    }
}

/// `ios` consecutive I/Os of `per_io` blocks from LBA `first` on: the
/// verified range, or the timed range. Built only by [`ranges`], which
/// checks it lies in the namespace, so `end` cannot overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IoRange {
    first: u64,
    ios: u64,
    per_io: u64,
}

impl IoRange {
    /// One past its last LBA.
    fn end(&self) -> u64 {
        self.first + self.ios * self.per_io
    }

    /// LBA of the `k`-th I/O in order, wrapping to the start at the end.
    fn seq(&self, k: u64) -> u64 {
        self.first + (k % self.ios) * self.per_io
    }

    /// LBA of the `k`-th timed I/O. A pure function of `k` (no generator
    /// state, no list of LBAs: --ios may be millions), always the start of
    /// one of the range's I/O slots, so never outside the range.
    fn timed(&self, pattern: Pattern, seed: u64, k: u64) -> u64 {
        match pattern {
            Pattern::Seq => self.seq(k),
            // The modulo bias is at most ios / 2^64: under 10^-9 for any
            // range of fewer than 2^34 I/Os (64 TiB of 4 KiB): negligible.
            Pattern::Random => self.seq(mix64(seed ^ k.wrapping_mul(GOLDEN))),
        }
    }
}

/// The verified range (`blocks` I/Os from `lba`) and the timed range
/// (`range_blocks` I/Os from `lba`, default `blocks`), both checked to lie
/// in a namespace of `ns_blocks` blocks.
fn ranges(
    lba: u64,
    blocks: u64,
    range_blocks: Option<u64>,
    io_size: u32,
    block_size: u32,
    ns_blocks: u64,
) -> Result<(IoRange, IoRange), NvmeError> {
    let per_io = u64::from(io_size / block_size);
    let range = |what: &str, ios: u64| {
        let end = ios
            .checked_mul(per_io)
            .and_then(|n| n.checked_add(lba))
            // Empty ranges cannot come from the command line; refused all
            // the same, since `seq` divides by the I/O count.
            .filter(|&end| end > lba && end <= ns_blocks)
            .ok_or_else(|| {
                NvmeError::Config(format!(
                    "the {what} ({ios} I/Os of {io_size} bytes from LBA {lba}) \
                     does not fit in namespace 1 ({ns_blocks} blocks of {block_size} bytes)"
                ))
            })?;
        debug_assert_eq!(end, lba + ios * per_io);
        Ok::<_, NvmeError>(IoRange {
            first: lba,
            ios,
            per_io,
        })
    };
    Ok((
        range("tested range", blocks)?,
        range("timed range", range_blocks.unwrap_or(blocks))?,
    ))
}

/// IOPS, bytes per second and MB (10^6 bytes) per second of `ios` I/Os of
/// `io_size` bytes in `secs`.
fn throughput(ios: u64, io_size: u32, secs: f64) -> (f64, f64, f64) {
    if secs <= 0.0 {
        return (0.0, 0.0, 0.0);
    }
    let bytes = ios as f64 * f64::from(io_size);
    (ios as f64 / secs, bytes / secs, bytes / secs / 1e6)
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
    /// With --p2p-mdev: the reads into the other device's BAR.
    p2p: Option<P2pReads>,
    ios: u64,
    queue_depth: u16,
    io_size: u32,
    /// The timed phase: "random" or "seq".
    pattern: Pattern,
    /// The timed phase: "read" or "write".
    rw: Rw,
    /// The timed range: LBAs [range_first_lba, range_end_lba), range_ios
    /// I/Os of io_size.
    range_first_lba: u64,
    range_end_lba: u64,
    range_ios: u64,
    /// Bytes moved by the timed I/Os, and how long they took.
    timed_bytes: u64,
    timed_secs: f64,
    iops: f64,
    /// Bandwidth of the timed phase.
    bytes_per_sec: f64,
    /// The same in MB/s (10^6 bytes per second).
    mb_per_sec: f64,
    lat_us: Percentiles,
    irq_signals: u64,
    completions: u64,
    err_notifications: u64,
    req_notifications: u64,
    passed: bool,
}

/// The reads into another device's BAR (--p2p-mdev).
#[derive(serde::Serialize, Debug)]
struct P2pReads {
    /// The LBA read, whose bytes must be in the BAR.
    lba: u64,
    /// Its bytes.
    bytes: u32,
    /// The read while both devices are held: "success" and the bytes there.
    first: String,
    /// With --p2p-then-release, the read after the other device went back:
    /// its status only (the check looks at the BAR's backing).
    after_release: Option<String>,
}

/// Config space offsets the P2P mode writes.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 0x2;
const PCI_BAR0: u64 = 0x10;
/// NVMe's PMR control register, in BAR 0.
const NVME_REG_PMRCTL: u64 = 0xe04;

/// Opens --p2p-mdev, puts its BAR at --p2p-addr with decode on, and reads
/// `lba` (one 4 KiB buffer) into it; with --p2p-then-release, again after
/// that mdev is closed.
fn p2p_reads(
    nvme: &mut Nvme<KernelVfio>,
    identity: &Identity,
    args: &Args,
    lba: u64,
) -> Result<P2pReads, Failure> {
    let uuid = args.p2p_mdev.as_deref().unwrap_or_default();
    let setup =
        |what: String| Failure::Setup(NvmeError::Config(format!("--p2p-mdev {uuid}: {what}")));
    if args.p2p_addr % 4096 != 0 || args.p2p_bar > 4 {
        return Err(setup(
            "--p2p-addr must be page aligned and --p2p-bar at most 4".into(),
        ));
    }
    let other = RemoteDevice::<KernelVfio>::open_mdev(uuid).map_err(|e| setup(e.to_string()))?;
    let cfg = devlend_vfio::VFIO_PCI_CONFIG_REGION_INDEX;
    let reg = PCI_BAR0 + 4 * u64::from(args.p2p_bar);
    // Moved with decode off, as a guest's PCI core does.
    other
        .read_u16(cfg, PCI_COMMAND)
        .and_then(|c| {
            other.write_u16(cfg, PCI_COMMAND, c & !PCI_COMMAND_MEMORY)?;
            other.write_u64_split(cfg, reg, args.p2p_addr)?;
            other.write_u16(cfg, PCI_COMMAND, c | PCI_COMMAND_MEMORY)
        })
        .map_err(|e| setup(format!("BAR{} at {:#x}: {e}", args.p2p_bar, args.p2p_addr)))?;
    if args.p2p_pmr {
        other
            .write_u32(devlend_vfio::VFIO_PCI_BAR0_REGION_INDEX, NVME_REG_PMRCTL, 1)
            .map_err(|e| setup(format!("PMRCTL: {e}")))?;
    }
    let bytes = 4096u32;
    let read = |nvme: &mut Nvme<KernelVfio>, what: &str| {
        let mut cmd = nvme.rw_command(NVM_READ, lba, 0);
        cmd.prp1 = args.p2p_addr;
        cmd.prp2 = 0;
        cmd.cdw[2] = bytes / identity.block_size - 1;
        status_of(nvme.io_sync(what, cmd))
    };
    let first = read(nvme, "read into another device's BAR")?;
    if !args.json {
        println!(
            "p2p read of LBA {lba} into BAR{} of {uuid} at {:#x}: {first}",
            args.p2p_bar, args.p2p_addr
        );
    }
    let after_release = match &args.p2p_then_release {
        Some(flag) => {
            wait_for(flag, "p2p waiting", &|| false)?;
            drop(other);
            let r = read(nvme, "read into a BAR gone back")?;
            if !args.json {
                println!("p2p read after the release: {r}");
            }
            Some(r)
        }
        None => None,
    };
    Ok(P2pReads {
        lba,
        bytes,
        first,
        after_release,
    })
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
    /// With --p2p-target: a read whose buffer is a PCI BAR mapped at an
    /// IOVA: the device's status, and whether the BAR kept its sentinel
    /// bytes (it must).
    p2p_dma: Option<String>,
    /// All as expected, and the queue still works afterwards.
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

/// 2^64 / golden ratio: splitmix64's increment.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output function: a well-mixed 64-bit hash of `x + GOLDEN`.
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The pattern of I/O `n` of this run: distinct per run, I/O and word.
fn pattern(seed: u64, lba: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ lba.wrapping_mul(GOLDEN);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        out.extend_from_slice(&mix64(x).to_le_bytes());
        x = x.wrapping_add(GOLDEN);
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

/// Runs `count` I/Os through the queue, I/O `k` at LBA `lba_at(k)`, at most
/// `qd` in flight; `before` prepares slot `i` for the I/O at an LBA, `after`
/// checks it. Returns per-command latencies.
#[allow(clippy::too_many_arguments)]
fn pipeline<B: VfioBackend>(
    nvme: &mut Nvme<B>,
    opcode: u8,
    what: &str,
    count: u64,
    lba_at: impl Fn(u64) -> u64,
    qd: usize,
    stop: &dyn Fn() -> bool,
    mut before: impl FnMut(&Nvme<B>, usize, u64) -> Result<(), NvmeError>,
    mut after: impl FnMut(&Nvme<B>, usize, u64) -> Result<(), NvmeError>,
) -> Result<Vec<Duration>, Failure> {
    // Capped: a long run grows it as it goes rather than reserving
    // gigabytes up front.
    let mut lat = Vec::with_capacity(count.min(1 << 20) as usize);
    let mut free: Vec<usize> = (0..qd).rev().collect();
    let mut inflight: HashMap<u16, (usize, u64, Instant)> = HashMap::new();
    let mut next = 0;
    let mut stopped = false;
    while next < count || !inflight.is_empty() {
        // Asked to give the device back: submit nothing more, let what is
        // in flight complete, then stop.
        if !stopped && stop() {
            stopped = true;
            next = count;
        }
        let mut cmds = Vec::new();
        let mut slots = Vec::new();
        while next < count && !free.is_empty() {
            let slot = free.pop().expect("free slot");
            let lba = lba_at(next);
            before(nvme, slot, lba)?;
            cmds.push(nvme.rw_command(opcode, lba, slot));
            slots.push((slot, lba));
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

fn status_of(r: Result<devlend_nvme_test::Completion, NvmeError>) -> Result<String, Failure> {
    match r {
        Ok(_) => Ok("success".to_string()),
        Err(NvmeError::Command {
            sct: 0, sc: 0x80, ..
        }) => Ok("lba-out-of-range".to_string()),
        Err(NvmeError::Command { sct, sc, .. }) => Ok(format!("status-{sct:x}-{sc:02x}")),
        Err(e) => Err(Failure::Io(e)),
    }
}

/// The first page of a PCI memory BAR, mapped for the device's DMA at an
/// IOVA: the target of the peer-to-peer check.
struct P2pTarget {
    page: MmapRegion,
    iova: u64,
}

/// Bytes of the BAR mapped: one page.
const P2P_LEN: usize = 4096;
/// What the BAR holds while the device is asked to DMA into it.
const P2P_SENTINEL: u8 = 0x5a;

impl P2pTarget {
    /// Maps the BAR's first page from `file` (sysfs `resourceN`) and hands
    /// it to the container at `iova`, before the device's bus mastering is
    /// on, so the borrower sees it among the mapped IOVAs.
    fn map(
        file: &std::path::Path,
        iova: u64,
        dev: &RemoteDevice<KernelVfio>,
    ) -> Result<Self, NvmeError> {
        let cfg =
            |what: String| NvmeError::Config(format!("--p2p-target {}: {what}", file.display()));
        if iova % P2P_LEN as u64 != 0 || iova >= 1 << 32 {
            return Err(cfg(format!(
                "--p2p-iova {iova:#x} must be page aligned and below 4 GiB"
            )));
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(file)
            .map_err(|e| cfg(e.to_string()))?;
        let page = MmapRegion::from_file(FileOffset::new(f, 0), P2P_LEN)
            .map_err(|e| cfg(format!("mmap: {e}")))?;
        // SAFETY: `run_device` declares the `P2pTarget` before the `Nvme`
        // that owns the device and its container, so `page` is unmapped
        // only after the container is closed, which ends the DMA mapping;
        // it is only read and written through volatile slices.
        unsafe { dev.backend().dma_map(iova, P2P_LEN as u64, page.as_ptr()) }
            .map_err(|e| cfg(format!("VFIO map at {iova:#x}: {e}")))?;
        Ok(P2pTarget { page, iova })
    }

    fn fill(&self, byte: u8) -> Result<(), NvmeError> {
        self.page
            .get_slice(0, P2P_LEN)
            .map_err(|e| NvmeError::Config(format!("p2p target: {e}")))?
            .write_slice(&[byte; P2P_LEN], 0)
            .map_err(|e| NvmeError::Config(format!("p2p target: {e}")))
    }

    /// Whether every byte is `byte`.
    fn holds(&self, byte: u8) -> Result<bool, NvmeError> {
        let mut got = [0u8; P2P_LEN];
        self.page
            .get_slice(0, P2P_LEN)
            .map_err(|e| NvmeError::Config(format!("p2p target: {e}")))?
            .read_slice(&mut got, 0)
            .map_err(|e| NvmeError::Config(format!("p2p target: {e}")))?;
        Ok(got.iter().all(|&b| b == byte))
    }
}

/// Step 4 of the bad input, peer-to-peer: a read of LBA `lba` whose buffer
/// is the BAR page at `p2p.iova`. The borrower pins and maps RAM only
/// (vfio_pin_pages() refuses a page that is not RAM), so the lender's IOMMU
/// must stop the DMA: the BAR keeps its sentinel. The status is only
/// reported: the data goes out as posted writes, which an IOMMU drops
/// without telling the device, so the command completes as successful,
/// as it does for an unmapped IOVA.
fn p2p_dma(
    nvme: &mut Nvme<KernelVfio>,
    p2p: &P2pTarget,
    identity: &Identity,
    io_size: u32,
    lba: u64,
) -> Result<(String, bool), Failure> {
    p2p.fill(P2P_SENTINEL)?;
    if !p2p.holds(P2P_SENTINEL)? {
        return Err(Failure::Setup(NvmeError::Config(
            "the --p2p-target BAR does not keep what is written to it (memory decode off, or not RAM-like)"
                .into(),
        )));
    }
    let mut cmd = nvme.rw_command(NVM_READ, lba, 0);
    cmd.prp1 = p2p.iova;
    cmd.prp2 = 0;
    if io_size > 4096 {
        cmd.cdw[2] = 4096 / identity.block_size - 1;
    }
    let status = status_of(nvme.io_sync("read into a PCI BAR", cmd))?;
    let intact = p2p.holds(P2P_SENTINEL)?;
    Ok((
        format!(
            "{status} at IOVA {:#x}, BAR {}",
            p2p.iova,
            if intact { "intact" } else { "CHANGED" }
        ),
        intact,
    ))
}

fn bad_input(
    nvme: &mut Nvme<KernelVfio>,
    identity: &Identity,
    args: &Args,
    first_lba: u64,
    p2p: Option<&P2pTarget>,
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
    let mut cmd = nvme.rw_command(NVM_READ, first_lba, 0);
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

    let (p2p_dma, p2p_ok) = match p2p {
        Some(t) => {
            let (what, ok) = p2p_dma(nvme, t, identity, args.io_size, first_lba)?;
            (Some(what), ok)
        }
        None => (None, true),
    };

    // The queue still works after all of it.
    let probe = nvme.rw_command(NVM_READ, first_lba, 0);
    nvme.io_sync("read after the bad commands", probe)?;
    Ok(BadInput {
        passed: lba_out_of_range == "lba-out-of-range" && bar_ok && intact && p2p_ok,
        lba_out_of_range,
        bar_overrun,
        unmapped_dma,
        p2p_dma,
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
        msix_decode_off: args.msix_decode_off,
    };
    // Before `nvme`, so dropped after it (see `P2pTarget::map`).
    let p2p = args
        .p2p_target
        .as_deref()
        .map(|f| P2pTarget::map(f, args.p2p_iova, &dev))
        .transpose()
        .map_err(Failure::Setup)?;
    let mut nvme = Nvme::new(dev, cfg).map_err(Failure::Setup)?;
    if let Some(flag) = &args.wait_before_io {
        wait_for(flag, "waiting before I/O", &|| {
            notes.req.load(Ordering::SeqCst) > 0
        })?;
    }
    let identity = nvme.identify_and_setup().map_err(Failure::Setup)?;
    if !args.json {
        println!(
            "{}: {} (serial {}, firmware {}), NVMe {}.{}, namespace 1: {} blocks of {} bytes, \
             largest transfer {}",
            path.display(),
            identity.model,
            identity.serial,
            identity.firmware,
            identity.version >> 16,
            (identity.version >> 8) & 0xff,
            identity.ns_blocks,
            identity.block_size,
            identity
                .max_transfer_bytes
                .map_or("unlimited".to_string(), |b| format!(
                    "{b} bytes (MDTS {})",
                    identity.mdts
                )),
        );
    }
    let (verified, timed) = ranges(
        args.lba,
        args.blocks,
        args.range_blocks,
        args.io_size,
        identity.block_size,
        identity.ns_blocks,
    )
    .map_err(Failure::Setup)?;
    let qd = usize::from(args.queue_depth);
    // Distinct per run, so data left by an earlier run never passes.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32);
    let stop = || notes.req.load(Ordering::SeqCst) > 0;
    let len = args.io_size as usize;

    pipeline(
        &mut nvme,
        NVM_WRITE,
        "write",
        verified.ios,
        |k| verified.seq(k),
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
        verified.ios,
        |k| verified.seq(k),
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
            verified.ios
        );
    }

    let bad_input = if args.bad_input {
        Some(bad_input(
            &mut nvme,
            &identity,
            args,
            verified.first,
            p2p.as_ref(),
        )?)
    } else {
        None
    };
    let p2p_reads = match &args.p2p_mdev {
        Some(_) => Some(p2p_reads(&mut nvme, &identity, args, verified.first)?),
        None => None,
    };

    // Timed writes write whatever the slots hold: fill each with a pattern
    // once, outside the timing (the verification and bad-input phases left
    // read data and sentinels there).
    if args.rw == Rw::Write {
        for slot in 0..qd {
            nvme.fill_slot(slot, &pattern(!seed, slot as u64, len))?;
        }
    }
    let start = Instant::now();
    let lat = pipeline(
        &mut nvme,
        args.rw.opcode(),
        match args.rw {
            Rw::Read => "timed read",
            Rw::Write => "timed write",
        },
        args.ios,
        |k| timed.timed(args.pattern, seed, k),
        qd,
        &stop,
        |_, _, _| Ok(()),
        |_, _, _| Ok(()),
    )?;
    let secs = start.elapsed().as_secs_f64();
    if let Some(flag) = &args.hold_until {
        hold_until(flag, &stop)?;
    }
    let timed_ios = lat.len() as u64;
    let (iops, bytes_per_sec, mb_per_sec) = throughput(timed_ios, args.io_size, secs);
    let counters = nvme.counters();
    nvme.shutdown()?;
    let passed = mismatches == 0
        && notes.err.load(Ordering::SeqCst) == 0
        && bad_input.as_ref().is_none_or(|b| b.passed);
    Ok(Report {
        device: path.display().to_string(),
        identity,
        verified_ios: verified.ios,
        verified_bytes: verified.ios * u64::from(args.io_size),
        mismatches,
        bad_input,
        p2p: p2p_reads,
        ios: timed_ios,
        queue_depth: args.queue_depth,
        io_size: args.io_size,
        pattern: args.pattern,
        rw: args.rw,
        range_first_lba: timed.first,
        range_end_lba: timed.end(),
        range_ios: timed.ios,
        timed_bytes: timed_ios * u64::from(args.io_size),
        timed_secs: secs,
        iops,
        bytes_per_sec,
        mb_per_sec,
        lat_us: percentiles(lat),
        irq_signals: counters.irq_signals,
        completions: counters.completions,
        err_notifications: notes.err.load(Ordering::SeqCst),
        req_notifications: notes.req.load(Ordering::SeqCst),
        passed,
    })
}

/// Keeps the device (open in the caller) until `flag` exists, the host
/// asks for it back, or HOLD_MAX passes.
fn hold_until(flag: &std::path::Path, stop: &dyn Fn() -> bool) -> Result<(), Failure> {
    wait_for(flag, "holding the device", stop)
}

/// Prints "`what` until `flag` exists" and waits for that, the host asking
/// for the device back, or HOLD_MAX.
fn wait_for(flag: &std::path::Path, what: &str, stop: &dyn Fn() -> bool) -> Result<(), Failure> {
    use std::io::Write;
    println!("{what} until {} exists", flag.display());
    let _ = std::io::stdout().flush();
    let t0 = Instant::now();
    while !flag.exists() && !stop() {
        if t0.elapsed() > HOLD_MAX {
            return Err(Failure::Setup(NvmeError::Config(format!(
                "{} did not appear within {} s",
                flag.display(),
                HOLD_MAX.as_secs()
            ))));
        }
        thread::sleep(Duration::from_millis(100));
    }
    Ok(())
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
                    if let Some(p) = &b.p2p_dma {
                        println!("bad input: read into a PCI BAR (peer-to-peer): {p}");
                    }
                }
                println!("{}", timed_line(&r));
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

/// The human line for the timed phase.
fn timed_line(r: &Report) -> String {
    let pattern = match r.pattern {
        Pattern::Random => "random",
        Pattern::Seq => "sequential",
    };
    let rw = match r.rw {
        Rw::Read => "reads",
        Rw::Write => "writes",
    };
    format!(
        "{pattern} {rw}: {} of {} bytes at QD {} over LBAs {}..{}: {:.0} IOPS, {:.1} MB/s \
         ({:.0} bytes/s), latency us p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
        r.ios,
        r.io_size,
        r.queue_depth,
        r.range_first_lba,
        r.range_end_lba,
        r.iops,
        r.mb_per_sec,
        r.bytes_per_sec,
        r.lat_us.p50,
        r.lat_us.p90,
        r.lat_us.p99,
        r.lat_us.max
    )
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

    #[test]
    fn io_size_pattern_rw_and_range_arguments() {
        let a = Args::try_parse_from(["t", "--device", "/x"]).unwrap();
        assert_eq!(
            (a.io_size, a.pattern, a.rw, a.range_blocks),
            (4096, Pattern::Random, Rw::Read, None)
        );
        let a = Args::try_parse_from([
            "t",
            "--device",
            "/x",
            "--io-size",
            "131072",
            "--pattern",
            "seq",
            "--rw",
            "write",
            "--range-blocks",
            "100",
        ])
        .unwrap();
        assert_eq!(
            (a.io_size, a.pattern, a.rw, a.range_blocks),
            (131072, Pattern::Seq, Rw::Write, Some(100))
        );
        for bad in [
            ["--io-size", "0"],
            ["--io-size", "135168"],
            ["--pattern", "sequential"],
            ["--rw", "trim"],
            ["--range-blocks", "0"],
        ] {
            let argv = ["t", "--device", "/x", bad[0], bad[1]];
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ranges_default_to_the_verified_one_and_stay_in_the_namespace() {
        // 8 KiB I/Os of 512-byte blocks: 16 blocks each.
        let (v, t) = ranges(100, 4, None, 8192, 512, 1000).unwrap();
        assert_eq!(v, t);
        assert_eq!((v.first, v.ios, v.per_io, v.end()), (100, 4, 16, 164));
        let (v, t) = ranges(100, 4, Some(10), 8192, 512, 1000).unwrap();
        assert_eq!((v.end(), t.first, t.end()), (164, 100, 260));
        // Ends exactly at the end of the namespace: fine; one past: not.
        assert!(ranges(0, 1, Some(62), 8192, 512, 992).is_ok());
        for (lba, blocks, range, ns) in [
            (0, 63, None, 1000),
            (0, 1, Some(63), 1000),
            (990, 1, None, 1000),
            (u64::MAX - 8, 1, None, u64::MAX),
            (0, u64::MAX / 2, None, u64::MAX),
        ] {
            match ranges(lba, blocks, range, 8192, 512, ns) {
                Err(NvmeError::Config(m)) => assert!(m.contains("namespace 1"), "{m}"),
                other => panic!("{lba} {blocks} {range:?}: {other:?}"),
            }
        }
    }

    /// Every LBA a timed I/O can use starts one of the range's I/O slots,
    /// so the I/O lies inside the range: nothing outside it is written.
    #[test]
    fn timed_ios_never_leave_the_timed_range() {
        let r = IoRange {
            first: 1000,
            ios: 7,
            per_io: 32,
        };
        for pattern in [Pattern::Random, Pattern::Seq] {
            let mut seen = std::collections::BTreeSet::new();
            for k in 0..10_000 {
                let lba = r.timed(pattern, 42, k);
                assert!(
                    lba >= r.first && lba + r.per_io <= r.end(),
                    "{pattern:?} {k}: {lba}"
                );
                assert_eq!((lba - r.first) % r.per_io, 0);
                seen.insert(lba);
            }
            assert_eq!(seen.len(), 7, "{pattern:?} reaches every slot");
        }
        // Also at the very end of the LBA space.
        let top = IoRange {
            first: u64::MAX - 256,
            ios: 1,
            per_io: 256,
        };
        assert!((0..100).all(|k| top.timed(Pattern::Random, k, k) == u64::MAX - 256));
    }

    #[test]
    fn seq_walks_in_order_and_wraps_to_the_start_of_the_range() {
        let r = IoRange {
            first: 64,
            ios: 3,
            per_io: 8,
        };
        let got: Vec<u64> = (0..7).map(|k| r.timed(Pattern::Seq, 9, k)).collect();
        assert_eq!(got, [64, 72, 80, 64, 72, 80, 64]);
    }

    #[test]
    fn random_depends_on_the_seed_and_spreads() {
        let r = IoRange {
            first: 0,
            ios: 1 << 20,
            per_io: 1,
        };
        let a: Vec<u64> = (0..64).map(|k| r.timed(Pattern::Random, 1, k)).collect();
        let b: Vec<u64> = (0..64).map(|k| r.timed(Pattern::Random, 2, k)).collect();
        assert_ne!(a, b);
        assert_eq!(
            a,
            (0..64)
                .map(|k| r.timed(Pattern::Random, 1, k))
                .collect::<Vec<_>>()
        );
        // Not sequential, and no more than a few repeats.
        assert!(a.windows(2).filter(|w| w[1] == w[0] + 1).count() < 4);
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(distinct.len() > 60);
    }

    #[test]
    fn throughput_counts_bytes_per_second_and_decimal_megabytes() {
        let (iops, bps, mbs) = throughput(1000, 131072, 2.0);
        assert_eq!((iops, bps, mbs), (500.0, 65_536_000.0, 65.536));
        assert_eq!(throughput(0, 4096, 0.0), (0.0, 0.0, 0.0));
    }

    #[test]
    fn the_report_names_pattern_rw_io_size_and_bandwidth() {
        let r = Report {
            device: "/x".into(),
            identity: Identity {
                vid: 0x1b36,
                serial: "s".into(),
                model: "m".into(),
                firmware: "f".into(),
                namespaces: 1,
                version: 0x10400,
                ns_blocks: 1000,
                block_size: 512,
                mdts: 7,
                max_transfer_bytes: Some(512 << 10),
            },
            verified_ios: 4,
            verified_bytes: 4 * 131072,
            mismatches: 0,
            bad_input: None,
            p2p: None,
            ios: 1000,
            queue_depth: 8,
            io_size: 131072,
            pattern: Pattern::Seq,
            rw: Rw::Write,
            range_first_lba: 0,
            range_end_lba: 1024,
            range_ios: 4,
            timed_bytes: 131_072_000,
            timed_secs: 2.0,
            iops: 500.0,
            bytes_per_sec: 65_536_000.0,
            mb_per_sec: 65.536,
            lat_us: Percentiles::default(),
            irq_signals: 1,
            completions: 1,
            err_notifications: 0,
            req_notifications: 0,
            passed: true,
        };
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["pattern"], "seq");
        assert_eq!(j["rw"], "write");
        assert_eq!(j["io_size"], 131072);
        assert_eq!(j["mb_per_sec"], 65.536);
        assert_eq!(j["bytes_per_sec"], 65_536_000.0);
        assert_eq!(j["range_end_lba"], 1024);
        assert_eq!(j["identity"]["mdts"], 7);
        assert_eq!(j["identity"]["max_transfer_bytes"], 512 << 10);
        for f in [
            "iops",
            "lat_us",
            "passed",
            "verified_ios",
            "irq_signals",
            "timed_secs",
        ] {
            assert!(j.get(f).is_some(), "{f}");
        }
        let line = timed_line(&r);
        assert!(
            line.starts_with("sequential writes: 1000 of 131072 bytes at QD 8")
                && line.contains("500 IOPS, 65.5 MB/s (65536000 bytes/s)"),
            "{line}"
        );
    }
}
