//! `devlend-fuzz-vfio`: a malicious guest, from userspace. Opens a VFIO
//! device (a devlend mdev by UUID) the way a VMM does (type-1 v2 container,
//! group, device fd), maps a small DMA buffer, and then throws random and
//! boundary input at it: VFIO_DEVICE_GET_INFO, GET_REGION_INFO,
//! GET_IRQ_INFO and SET_IRQS with random flags, indices, ranges, argsz and
//! data; VFIO_DEVICE_RESET; ioctl numbers nobody defines; preads and
//! pwrites at random offsets and sizes of every region index (and past the
//! last one, and at huge offsets); config space writes aimed at the
//! command register (memory, bus master, INTx disable), BARs, the ROM BAR,
//! capability headers and bodies, MSI and MSI-X, PCIe device control
//! (FLR included) and the Advanced Features FLR; bus master toggles, which
//! make the borrower pin and map the DMA buffer; unmapping and mapping the
//! buffer again (VFIO's `dma_unmap` of pinned pages); closing and opening
//! the device again.
//!
//! Any syscall may fail; none may hang: each operation runs under
//! `alarm()` (a hang is reported with the operation and exit status 3), and
//! a watchdog thread ends the process if even that does not return.
//!
//! The run is determined by `--seed` (printed first) and `--iters`. The last
//! line of stdout is a JSON summary: operations per kind, successes per
//! kind, errors per errno (all and per kind).
//!
//! Exit status: 0 the run completed; 1 setup failed; 2 usage; 3 an
//! operation hung; 5 the device could not be opened again after a close.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_irq_info, vfio_irq_set, vfio_region_info, VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION,
    VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, VFIO_GROUP_FLAGS_VIABLE,
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_UNMASK,
    VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
};

/// Iterations when neither `--iters` nor `DEVLEND_FUZZ_ITERS` says: about
/// two to three minutes on the TCG-emulated hosts.
const DEFAULT_ITERS: u64 = 12000;
/// Seconds one operation may take before it counts as a hang.
const DEFAULT_OP_TIMEOUT: u32 = 30;
/// Where the DMA buffer is mapped first (2 MiB aligned, below 4 GiB: the
/// borrower probes IOVAs below 4 GiB in 2 MiB blocks when there is no KVM).
const DMA_IOVA: u64 = 0x1000_0000;
/// Bytes of the DMA buffer.
const DMA_SIZE: usize = 64 << 10;
/// Bytes of each scratch arena; a PROT_NONE page follows each.
const ARENA: usize = 64 << 10;
/// Eventfds handed to SET_IRQS.
const NEVENTFDS: usize = 8;
/// How long a closed device may take to open again (its lender resets it).
const REOPEN_WAIT: Duration = Duration::from_secs(30);

/// `_IO(VFIO_TYPE, VFIO_BASE + nr)`.
const fn vfio_io(nr: u32) -> u64 {
    ((b';' as u64) << 8) | (100 + nr) as u64
}
const VFIO_GET_API_VERSION: u64 = vfio_io(0);
const VFIO_CHECK_EXTENSION: u64 = vfio_io(1);
const VFIO_SET_IOMMU: u64 = vfio_io(2);
const VFIO_GROUP_GET_STATUS: u64 = vfio_io(3);
const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(4);
const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
const VFIO_DEVICE_GET_INFO: u64 = vfio_io(7);
const VFIO_DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
const VFIO_DEVICE_GET_IRQ_INFO: u64 = vfio_io(9);
const VFIO_DEVICE_SET_IRQS: u64 = vfio_io(10);
const VFIO_DEVICE_RESET: u64 = vfio_io(11);
const VFIO_IOMMU_MAP_DMA: u64 = vfio_io(13);
const VFIO_IOMMU_UNMAP_DMA: u64 = vfio_io(14);

/// Device ioctl numbers (`nr`) the fuzzer calls by name; the "unknown"
/// ioctls avoid them.
const KNOWN_DEVICE_NRS: [u32; 5] = [7, 8, 9, 10, 11];
/// ioctl types the VFS handles itself on any fd (FIONBIO, FIFREEZE,
/// FS_IOC_*, FICLONE, FS_IOC_GETFSUUID): not sent, they are not the
/// driver's and some change the fd or the file system.
const VFS_IOCTL_TYPES: [u8; 5] = [b'T', b'X', b'f', 0x94, 0x15];

// Config space offsets and bits (include/uapi/linux/pci_regs.h).
const PCI_COMMAND: u16 = 0x04;
const PCI_COMMAND_IO: u16 = 0x1;
const PCI_COMMAND_MEMORY: u16 = 0x2;
const PCI_COMMAND_MASTER: u16 = 0x4;
const PCI_COMMAND_INTX_DISABLE: u16 = 0x400;
const PCI_STATUS: u16 = 0x06;
const PCI_STATUS_CAP_LIST: u16 = 0x10;
const PCI_CAPABILITY_LIST: u16 = 0x34;
const PCI_CAP_ID_PM: u8 = 0x01;
const PCI_CAP_ID_MSI: u8 = 0x05;
const PCI_CAP_ID_VNDR: u8 = 0x09;
const PCI_CAP_ID_EXP: u8 = 0x10;
const PCI_CAP_ID_MSIX: u8 = 0x11;
const PCI_CAP_ID_AF: u8 = 0x13;
const PCI_EXP_DEVCTL: u16 = 0x08;
const PCI_EXP_DEVCTL_BCR_FLR: u16 = 0x8000;
const PCI_AF_CTRL: u16 = 0x04;
const PCI_AF_CTRL_FLR: u8 = 0x01;
const PCI_CFG_SPACE_SIZE: u16 = 0x100;

/// Every kind of operation, with its weight among the operations.
const KINDS: [(Kind, u32); 12] = [
    (Kind::GetInfo, 40),
    (Kind::GetRegionInfo, 60),
    (Kind::GetIrqInfo, 50),
    (Kind::SetIrqs, 150),
    (Kind::Reset, 8),
    (Kind::UnknownIoctl, 40),
    (Kind::RegionRead, 200),
    (Kind::RegionWrite, 170),
    (Kind::ConfigWrite, 220),
    (Kind::BusMaster, 30),
    (Kind::DmaRemap, 15),
    (Kind::Reopen, 4),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    GetInfo,
    GetRegionInfo,
    GetIrqInfo,
    SetIrqs,
    Reset,
    UnknownIoctl,
    RegionRead,
    RegionWrite,
    ConfigWrite,
    BusMaster,
    DmaRemap,
    Reopen,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::GetInfo => "get_info",
            Kind::GetRegionInfo => "get_region_info",
            Kind::GetIrqInfo => "get_irq_info",
            Kind::SetIrqs => "set_irqs",
            Kind::Reset => "reset",
            Kind::UnknownIoctl => "unknown_ioctl",
            Kind::RegionRead => "region_read",
            Kind::RegionWrite => "region_write",
            Kind::ConfigWrite => "config_write",
            Kind::BusMaster => "bus_master",
            Kind::DmaRemap => "dma_remap",
            Kind::Reopen => "reopen",
        }
    }
}

#[derive(Debug)]
struct Args {
    device: PathBuf,
    seed: u64,
    iters: u64,
    op_timeout: u32,
    threads: u32,
}

const USAGE: &str = "usage: devlend-fuzz-vfio (--mdev UUID | --device SYSFS-PATH) [--seed N] \
[--iters N] [--op-timeout SECS] [--threads 1|2]\n\
  --iters defaults to $DEVLEND_FUZZ_ITERS, else 12000 (about 2 minutes on the emulated hosts)\n\
  --threads 2 adds a thread that races the first one on a dup of the device fd (config,\n\
  BAR0, bus master, MSI-X, reset): each thread's operations follow the seed, their\n\
  interleaving does not";

fn parse_args() -> Result<Args> {
    let mut device = None;
    let mut seed = None;
    let mut iters = None;
    let mut op_timeout = DEFAULT_OP_TIMEOUT;
    let mut threads = 1;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--mdev" => device = Some(PathBuf::from("/sys/bus/mdev/devices").join(val()?)),
            "--device" => device = Some(PathBuf::from(val()?)),
            "--seed" => seed = Some(val()?.parse().context("--seed")?),
            "--iters" => iters = Some(val()?.parse().context("--iters")?),
            "--op-timeout" => op_timeout = val()?.parse().context("--op-timeout")?,
            "--threads" => threads = val()?.parse().context("--threads")?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a:?}"),
        }
    }
    let iters = match iters {
        Some(n) => n,
        None => match std::env::var("DEVLEND_FUZZ_ITERS") {
            Ok(v) => v.parse().context("DEVLEND_FUZZ_ITERS")?,
            Err(_) => DEFAULT_ITERS,
        },
    };
    ensure!(op_timeout > 0, "--op-timeout must be positive");
    ensure!(threads == 1 || threads == 2, "--threads is 1 or 2");
    Ok(Args {
        device: device.context("--mdev or --device is required")?,
        seed: seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        }),
        iters,
        op_timeout,
        threads,
    })
}

/// The errno of the last failed libc call.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::ERANGE => "ERANGE",
        libc::ENOTTY => "ENOTTY",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EPROTO => "EPROTO",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENOSYS => "ENOSYS",
        _ => return format!("E{e}"),
    };
    name.to_owned()
}

/// ioctl with a pointer or integer argument; the return value or errno.
///
/// # Safety
/// If `arg` is an address the kernel may write through, whatever lies
/// there must tolerate any bytes being written (an [`Arena`], or an
/// address nothing of ours is mapped at).
unsafe fn ioctl(fd: RawFd, req: u64, arg: usize) -> std::result::Result<i32, i32> {
    // SAFETY: passed on from the caller: every byte the kernel may write
    // through `arg` is ours to lose.
    let r = unsafe { libc::ioctl(fd, req as _, arg) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// Anonymous memory followed by a PROT_NONE page, used for nothing but
/// what the kernel reads and writes: an access past its end faults
/// (EFAULT) instead of touching anything else of the process.
struct Arena {
    base: *mut u8,
    len: usize,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Arena({:p}, {})", self.base, self.len)
    }
}

impl Arena {
    fn new(len: usize) -> Result<Arena> {
        let page = 4096;
        // SAFETY: a new anonymous mapping; no memory of ours is involved.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!("mmap of {len} bytes: {}", std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // SAFETY: the guard page is the last page of the mapping just made,
        // which nothing else refers to.
        if unsafe { libc::mprotect(base.add(len).cast(), page, libc::PROT_NONE) } != 0 {
            bail!(
                "mprotect of the guard page: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Arena { base, len })
    }

    /// The address `len` bytes before the guard page.
    fn tail(&self, len: usize) -> usize {
        self.base as usize + self.len - len.min(self.len)
    }

    /// Writes `bytes` at `off`.
    fn put(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len, "arena write out of bounds");
        // SAFETY: in bounds (checked above) of a mapping we own; no
        // reference into it exists (it is only ever accessed by copies).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(off), bytes.len()) };
    }

    fn fill_random(&self, rng: &mut StdRng, off: usize, n: usize) {
        let mut v = vec![0u8; n];
        rng.fill(&mut v[..]);
        self.put(off, &v);
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, with its guard page.
        unsafe { libc::munmap(self.base.cast(), self.len + 4096) };
    }
}

/// What the device said about itself at the start, and its config space.
#[derive(Debug, Default)]
struct Layout {
    region_size: Vec<u64>,
    irq_count: Vec<u32>,
    /// The config space as read at the start, then as we wrote it.
    cfg: Vec<u8>,
    /// Standard capabilities: (id, offset, bytes).
    caps: Vec<(u8, u16, u16)>,
    /// Extended capabilities: (id, offset, bytes).
    ext_caps: Vec<(u16, u16, u16)>,
}

impl Layout {
    fn cap(&self, id: u8) -> Option<(u16, u16)> {
        self.caps
            .iter()
            .find(|c| c.0 == id)
            .map(|&(_, pos, len)| (pos, len))
    }

    fn cfg_u16(&self, off: u16) -> u16 {
        let o = off as usize;
        if o + 2 > self.cfg.len() {
            return 0;
        }
        u16::from_le_bytes([self.cfg[o], self.cfg[o + 1]])
    }

    fn cfg_get(&self, off: u16, size: usize) -> u32 {
        let mut b = [0u8; 4];
        for (i, x) in b.iter_mut().enumerate().take(size) {
            *x = self.cfg.get(off as usize + i).copied().unwrap_or(0);
        }
        u32::from_le_bytes(b)
    }

    fn cfg_put(&mut self, off: u16, size: usize, val: u32) {
        for (i, x) in val.to_le_bytes().iter().enumerate().take(size) {
            if let Some(b) = self.cfg.get_mut(off as usize + i) {
                *b = *x;
            }
        }
    }

    /// Finds the capabilities in `cfg`.
    fn find_caps(&mut self) {
        self.caps.clear();
        self.ext_caps.clear();
        if self.cfg.len() < PCI_CFG_SPACE_SIZE as usize
            || self.cfg_u16(PCI_STATUS) & PCI_STATUS_CAP_LIST == 0
        {
            return;
        }
        let mut pos = u16::from(self.cfg[PCI_CAPABILITY_LIST as usize]) & !3;
        let mut ttl = 48;
        while (0x40..=PCI_CFG_SPACE_SIZE - 4).contains(&pos) && ttl > 0 {
            ttl -= 1;
            let id = self.cfg[pos as usize];
            let flags = self.cfg_u16(pos + 2);
            let len = match id {
                PCI_CAP_ID_MSI => {
                    let mut l = if flags & 0x80 != 0 { 14 } else { 10 };
                    if flags & 0x100 != 0 {
                        l += 10;
                    }
                    l
                }
                PCI_CAP_ID_MSIX => 12,
                PCI_CAP_ID_EXP => 0x3c,
                PCI_CAP_ID_PM => 8,
                PCI_CAP_ID_AF => 6,
                PCI_CAP_ID_VNDR => u16::from(self.cfg[pos as usize + 2]).max(3),
                _ => 16,
            };
            self.caps.push((id, pos, len.min(PCI_CFG_SPACE_SIZE - pos)));
            pos = u16::from(self.cfg[pos as usize + 1]) & !3;
        }
        let size = self.cfg.len() as u16;
        let mut pos = PCI_CFG_SPACE_SIZE;
        let mut ttl = 480;
        while self.cfg.len() > PCI_CFG_SPACE_SIZE as usize && pos >= PCI_CFG_SPACE_SIZE && ttl > 0 {
            ttl -= 1;
            if pos as usize + 4 > self.cfg.len() {
                break;
            }
            let hdr = self.cfg_get(pos, 4);
            if hdr == 0 || hdr == u32::MAX {
                break;
            }
            let next = ((hdr >> 20) & 0xffc) as u16;
            let len = if next > pos { next - pos } else { size - pos }.min(64);
            self.ext_caps.push(((hdr & 0xffff) as u16, pos, len));
            if next <= pos {
                break;
            }
            pos = next;
        }
    }
}

/// Counts, printed as the JSON summary.
#[derive(Debug, Default)]
struct Stats {
    ops: BTreeMap<&'static str, u64>,
    ok: BTreeMap<&'static str, u64>,
    short: BTreeMap<&'static str, u64>,
    errors: BTreeMap<String, u64>,
    errors_by_kind: BTreeMap<&'static str, BTreeMap<String, u64>>,
    reopens: u64,
}

impl Stats {
    fn record(&mut self, kind: &'static str, res: std::result::Result<(), i32>) {
        *self.ops.entry(kind).or_default() += 1;
        match res {
            Ok(()) => *self.ok.entry(kind).or_default() += 1,
            Err(e) => {
                let name = errno_name(e);
                *self.errors.entry(name.clone()).or_default() += 1;
                *self
                    .errors_by_kind
                    .entry(kind)
                    .or_default()
                    .entry(name)
                    .or_default() += 1;
            }
        }
    }
}

/// The operation running now, for the watchdog.
#[derive(Debug)]
struct Current {
    index: u64,
    started: Instant,
    what: String,
    done: bool,
}

/// Set by SIGALRM: the operation under way took too long.
static ALARMED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_alarm(_: libc::c_int) {
    ALARMED.store(true, Ordering::SeqCst);
}

/// SIGALRM sets [`ALARMED`] and interrupts the syscall under way (no
/// SA_RESTART), so that a wait the kernel lets signals end returns EINTR.
fn install_alarm() -> Result<()> {
    // SAFETY: a zeroed sigaction is a valid value to fill in.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as usize;
    sa.sa_flags = 0;
    // SAFETY: `sa` is initialized; the handler only stores to an atomic,
    // which is async-signal-safe.
    let r = unsafe {
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut())
    };
    if r != 0 {
        bail!("sigaction(SIGALRM): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// A thread that ends the process when an operation outlives its alarm by
/// far: the kernel is stuck in a wait that signals do not end.
fn start_watchdog(cur: Arc<Mutex<Current>>, limit: Duration) {
    std::thread::spawn(move || {
        // SIGALRM is for the main thread's syscalls.
        // SAFETY: a sigset_t filled by sigemptyset/sigaddset; this thread's
        // own mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGALRM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let c = cur.lock().unwrap_or_else(|p| p.into_inner());
            if c.done {
                return;
            }
            if c.started.elapsed() > limit {
                eprintln!(
                    "devlend-fuzz-vfio: HANG: operation #{} ({}) has not returned after {:.0} s, even to SIGALRM",
                    c.index,
                    c.what,
                    c.started.elapsed().as_secs_f64()
                );
                let _ = std::io::stderr().flush();
                // SAFETY: ends the process; nothing to clean up that the
                // kernel does not do at exit.
                unsafe { libc::_exit(3) };
            }
        }
    });
}

/// The open VFIO objects.
struct Vfio {
    container: OwnedFd,
    group: OwnedFd,
    name: CString,
    device: Option<OwnedFd>,
}

impl std::fmt::Debug for Vfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vfio").field("name", &self.name).finish()
    }
}

fn open_rw(path: &Path) -> Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: `c` is a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        bail!(
            "open {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Vfio {
    fn open(device: &Path) -> Result<Vfio> {
        let link = std::fs::read_link(device.join("iommu_group"))
            .with_context(|| format!("{}/iommu_group", device.display()))?;
        let group_nr = link
            .file_name()
            .and_then(|s| s.to_str())
            .with_context(|| format!("iommu_group link {}", link.display()))?
            .to_owned();
        let name = device
            .file_name()
            .with_context(|| format!("device path {}", device.display()))?;
        let name = CString::new(name.as_encoded_bytes())?;

        let container = open_rw(Path::new("/dev/vfio/vfio"))?;
        let c = container.as_raw_fd();
        // SAFETY: the integer-argument ioctls of a VFIO container.
        let version = unsafe { ioctl(c, VFIO_GET_API_VERSION, 0) };
        ensure!(
            version == Ok(VFIO_API_VERSION as i32),
            "VFIO API version {version:?}"
        );
        // SAFETY: as above.
        let ext = unsafe { ioctl(c, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU as usize) };
        ensure!(ext == Ok(1), "no type-1 v2 IOMMU backend: {ext:?}");

        let group = open_rw(&Path::new("/dev/vfio").join(&group_nr))?;
        let mut status = vfio_group_status {
            argsz: std::mem::size_of::<vfio_group_status>() as u32,
            flags: 0,
        };
        // SAFETY: the kernel writes a vfio_group_status into `status`.
        unsafe {
            ioctl(
                group.as_raw_fd(),
                VFIO_GROUP_GET_STATUS,
                &mut status as *mut _ as usize,
            )
        }
        .map_err(|e| anyhow::anyhow!("VFIO_GROUP_GET_STATUS: {}", errno_name(e)))?;
        ensure!(
            status.flags & VFIO_GROUP_FLAGS_VIABLE != 0,
            "group {group_nr} is not viable"
        );
        let cfd: i32 = c;
        // SAFETY: the kernel reads an int (the container fd) at the address.
        unsafe {
            ioctl(
                group.as_raw_fd(),
                VFIO_GROUP_SET_CONTAINER,
                &cfd as *const i32 as usize,
            )
        }
        .map_err(|e| anyhow::anyhow!("VFIO_GROUP_SET_CONTAINER: {}", errno_name(e)))?;
        // SAFETY: integer argument.
        unsafe { ioctl(c, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU as usize) }
            .map_err(|e| anyhow::anyhow!("VFIO_SET_IOMMU: {}", errno_name(e)))?;
        let mut v = Vfio {
            container,
            group,
            name,
            device: None,
        };
        v.open_device()
            .map_err(|e| anyhow::anyhow!("VFIO_GROUP_GET_DEVICE_FD: {}", errno_name(e)))?;
        Ok(v)
    }

    fn open_device(&mut self) -> std::result::Result<(), i32> {
        // SAFETY: the kernel reads the NUL-terminated name.
        let fd = unsafe {
            ioctl(
                self.group.as_raw_fd(),
                VFIO_GROUP_GET_DEVICE_FD,
                self.name.as_ptr() as usize,
            )
        }?;
        // SAFETY: a new fd, owned by nobody else.
        self.device = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(())
    }

    /// The device fd (-1 if closed: every call then fails with EBADF).
    fn fd(&self) -> RawFd {
        self.device.as_ref().map_or(-1, |d| d.as_raw_fd())
    }

    fn dma_map(
        &self,
        iova: u64,
        vaddr: usize,
        size: usize,
        flags: u32,
    ) -> std::result::Result<(), i32> {
        let map = vfio_iommu_type1_dma_map {
            argsz: std::mem::size_of::<vfio_iommu_type1_dma_map>() as u32,
            flags,
            vaddr: vaddr as u64,
            iova,
            size: size as u64,
        };
        // SAFETY: the kernel reads the struct; the memory at `vaddr` is the
        // DMA buffer, which stays mapped until the container is closed and
        // which nothing of ours reads or writes.
        unsafe {
            ioctl(
                self.container.as_raw_fd(),
                VFIO_IOMMU_MAP_DMA,
                &map as *const _ as usize,
            )
        }
        .map(drop)
    }

    fn dma_unmap(&self, iova: u64, size: usize) -> std::result::Result<(), i32> {
        let mut um = vfio_iommu_type1_dma_unmap {
            argsz: std::mem::size_of::<vfio_iommu_type1_dma_unmap>() as u32,
            iova,
            size: size as u64,
            ..Default::default()
        };
        // SAFETY: the kernel reads the struct and writes back its size field.
        unsafe {
            ioctl(
                self.container.as_raw_fd(),
                VFIO_IOMMU_UNMAP_DMA,
                &mut um as *mut _ as usize,
            )
        }
        .map(drop)
    }
}

/// A well-formed ioctl with a struct argument that the kernel fills in.
fn query<T: Copy>(fd: RawFd, req: u64, mut arg: T) -> std::result::Result<T, i32> {
    // SAFETY: `arg` is a plain VFIO info struct with argsz its own size, so
    // the kernel writes within it.
    unsafe { ioctl(fd, req, &mut arg as *mut T as usize) }?;
    Ok(arg)
}

/// The device's regions, interrupts and config space, asked properly.
fn discover(v: &Vfio) -> Result<Layout> {
    let fd = v.fd();
    let info = query(
        fd,
        VFIO_DEVICE_GET_INFO,
        vfio_device_info {
            argsz: std::mem::size_of::<vfio_device_info>() as u32,
            ..Default::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("VFIO_DEVICE_GET_INFO: {}", errno_name(e)))?;
    let mut l = Layout::default();
    for index in 0..info.num_regions.max(VFIO_PCI_NUM_REGIONS) {
        let r = query(
            fd,
            VFIO_DEVICE_GET_REGION_INFO,
            vfio_region_info {
                argsz: std::mem::size_of::<vfio_region_info>() as u32,
                index,
                ..Default::default()
            },
        );
        l.region_size.push(r.map_or(0, |r| r.size));
    }
    for index in 0..info.num_irqs.max(VFIO_PCI_NUM_IRQS) {
        let r = query(
            fd,
            VFIO_DEVICE_GET_IRQ_INFO,
            vfio_irq_info {
                argsz: std::mem::size_of::<vfio_irq_info>() as u32,
                index,
                ..Default::default()
            },
        );
        l.irq_count.push(r.map_or(0, |r| r.count));
    }
    let cfg_size = l.region_size[VFIO_PCI_CONFIG_REGION_INDEX as usize] as usize;
    ensure!(
        cfg_size == 256 || cfg_size == 4096,
        "config region of {cfg_size} bytes"
    );
    l.cfg = vec![0u8; cfg_size];
    let pos = (u64::from(VFIO_PCI_CONFIG_REGION_INDEX)) << 40;
    // SAFETY: `l.cfg` is valid for writes of its length.
    let n = unsafe { libc::pread(fd, l.cfg.as_mut_ptr().cast(), cfg_size, pos as i64) };
    ensure!(
        n == cfg_size as isize,
        "reading the config space: {n} ({})",
        std::io::Error::last_os_error()
    );
    l.find_caps();
    println!(
        "device: {} regions (sizes {:x?}), irqs {:?}, config {} bytes, ids {:04x}:{:04x}",
        info.num_regions,
        l.region_size,
        l.irq_count,
        cfg_size,
        l.cfg_u16(0),
        l.cfg_u16(2)
    );
    println!(
        "capabilities: {}; extended: {}",
        l.caps
            .iter()
            .map(|(id, pos, len)| format!("{id:#04x}@{pos:#x}+{len}"))
            .collect::<Vec<_>>()
            .join(" "),
        l.ext_caps
            .iter()
            .map(|(id, pos, len)| format!("{id:#06x}@{pos:#x}+{len}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(l)
}

/// The fuzzer's state.
struct Fuzzer {
    rng: StdRng,
    vfio: Vfio,
    layout: Layout,
    /// Ioctl arguments.
    args: Arena,
    /// pread/pwrite buffers.
    io: Arena,
    /// The DMA buffer: nothing of ours reads or writes it.
    dma: Arena,
    /// Where the DMA buffer is mapped in the container, if it is.
    dma_iova: Option<u64>,
    eventfds: Vec<OwnedFd>,
    /// An fd that is not an eventfd.
    not_eventfd: OwnedFd,
    stats: Stats,
    op_timeout: u32,
}

impl std::fmt::Debug for Fuzzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fuzzer").field("vfio", &self.vfio).finish()
    }
}

/// An address the kernel must refuse: NULL, straddling a guard page, or in
/// the kernel's half.
fn bad_pointer(rng: &mut StdRng, arena: &Arena) -> usize {
    match rng.random_range(0..4) {
        0 => 0,
        1 => arena.tail(rng.random_range(1..8)),
        2 => 0xffff_8000_0000_0000usize + (rng.random::<u32>() as usize & !7),
        _ => rng.random_range(1..4096),
    }
}

/// A u32 near the interesting values: 0, 1, `n` - 1, `n`, `n` + 1, max.
fn boundary_u32(rng: &mut StdRng, n: u32) -> u32 {
    match rng.random_range(0..10) {
        0 => 0,
        1 => 1,
        2 => n.saturating_sub(1),
        3 => n,
        4 => n.saturating_add(1),
        5 => u32::MAX,
        6 => u32::MAX - rng.random_range(0..4),
        7 => 1 << rng.random_range(0..32),
        8 => rng.random(),
        _ => rng.random_range(0..=n.saturating_add(2)),
    }
}

/// argsz for a struct of `size` bytes whose fields up to `minsz` count.
fn pick_argsz(rng: &mut StdRng, minsz: u32, size: u32) -> u32 {
    match rng.random_range(0..12) {
        0..=4 => size,
        5 => minsz,
        6 => minsz.saturating_sub(1),
        7 => 0,
        8 => size.saturating_add(rng.random_range(1..64)),
        9 => u32::MAX,
        10 => rng.random_range(0..4096),
        _ => rng.random(),
    }
}

impl Fuzzer {
    /// Runs one operation of `kind`; its description and result.
    fn op(&mut self, kind: Kind, cur: &Mutex<Current>, index: u64) -> std::result::Result<(), i32> {
        let mut note = |what: String| {
            let mut c = cur.lock().unwrap_or_else(|p| p.into_inner());
            c.index = index;
            c.started = Instant::now();
            c.what = what;
        };
        match kind {
            Kind::GetInfo => self.get_info(&mut note),
            Kind::GetRegionInfo => self.get_region_info(&mut note),
            Kind::GetIrqInfo => self.get_irq_info(&mut note),
            Kind::SetIrqs => self.set_irqs(&mut note),
            Kind::Reset => {
                note("VFIO_DEVICE_RESET".into());
                // SAFETY: no argument.
                unsafe { ioctl(self.vfio.fd(), VFIO_DEVICE_RESET, 0) }.map(drop)
            }
            Kind::UnknownIoctl => self.unknown_ioctl(&mut note),
            Kind::RegionRead => self.region_rw(false, &mut note),
            Kind::RegionWrite => self.region_rw(true, &mut note),
            Kind::ConfigWrite => self.config_write(&mut note),
            Kind::BusMaster => self.bus_master(&mut note),
            Kind::DmaRemap => self.dma_remap(&mut note),
            Kind::Reopen => {
                note("close and open the device again".into());
                self.reopen()
            }
        }
    }

    /// The argument address of a fuzzed info ioctl: mostly the argument
    /// arena (holding `bytes`), sometimes an address the kernel must refuse.
    fn arg_ptr(&mut self, bytes: &[u8]) -> usize {
        if self.rng.random_range(0..50) == 0 {
            return bad_pointer(&mut self.rng, &self.args);
        }
        // Mostly at the start; sometimes flush against the guard page, so
        // that a kernel reading or writing past what it should faults.
        let at = if self.rng.random_bool(0.3) {
            self.args.len - bytes.len().max(1)
        } else {
            0
        };
        self.args.fill_random(&mut self.rng, 0, 512);
        self.args.put(at, bytes);
        self.args.base as usize + at
    }

    fn get_info(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let size = std::mem::size_of::<vfio_device_info>() as u32;
        let argsz = pick_argsz(&mut self.rng, 16, size);
        let mut b = vec![0u8; size as usize];
        b[..4].copy_from_slice(&argsz.to_le_bytes());
        let p = self.arg_ptr(&b);
        note(format!("VFIO_DEVICE_GET_INFO argsz {argsz} at {p:#x}"));
        // SAFETY: `p` is in the argument arena or an address the kernel
        // must refuse.
        unsafe { ioctl(self.vfio.fd(), VFIO_DEVICE_GET_INFO, p) }.map(drop)
    }

    fn get_region_info(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let size = std::mem::size_of::<vfio_region_info>() as u32;
        let argsz = pick_argsz(&mut self.rng, 32, size);
        let index = boundary_u32(&mut self.rng, VFIO_PCI_NUM_REGIONS);
        let index = if self.rng.random_bool(0.6) {
            self.rng.random_range(0..=VFIO_PCI_NUM_REGIONS + 1)
        } else {
            index
        };
        let mut b = vec![0u8; size as usize];
        b[..4].copy_from_slice(&argsz.to_le_bytes());
        b[8..12].copy_from_slice(&index.to_le_bytes());
        let p = self.arg_ptr(&b);
        note(format!(
            "VFIO_DEVICE_GET_REGION_INFO index {index} argsz {argsz} at {p:#x}"
        ));
        // SAFETY: as in get_info.
        unsafe { ioctl(self.vfio.fd(), VFIO_DEVICE_GET_REGION_INFO, p) }.map(drop)
    }

    fn get_irq_info(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let size = std::mem::size_of::<vfio_irq_info>() as u32;
        let argsz = pick_argsz(&mut self.rng, 16, size);
        let index = if self.rng.random_bool(0.7) {
            self.rng.random_range(0..=VFIO_PCI_NUM_IRQS + 1)
        } else {
            boundary_u32(&mut self.rng, VFIO_PCI_NUM_IRQS)
        };
        let mut b = vec![0u8; size as usize];
        b[..4].copy_from_slice(&argsz.to_le_bytes());
        b[8..12].copy_from_slice(&index.to_le_bytes());
        let p = self.arg_ptr(&b);
        note(format!(
            "VFIO_DEVICE_GET_IRQ_INFO index {index} argsz {argsz} at {p:#x}"
        ));
        // SAFETY: as in get_info.
        unsafe { ioctl(self.vfio.fd(), VFIO_DEVICE_GET_IRQ_INFO, p) }.map(drop)
    }

    /// An fd for SET_IRQS data: mostly one of our eventfds, sometimes -1
    /// (clear), an fd that is no eventfd, or a number that is no fd.
    fn pick_fd(&mut self) -> i32 {
        match self.rng.random_range(0..40) {
            0..=31 => self.eventfds[self.rng.random_range(0..self.eventfds.len())].as_raw_fd(),
            32..=35 => -1,
            36 => self.not_eventfd.as_raw_fd(),
            37 => self.vfio.fd(),
            38 => 100_000 + self.rng.random_range(0..1000),
            _ => self.rng.random::<i32>(),
        }
    }

    /// SET_IRQS as a VMM sends it: enable with eventfds, update, disable,
    /// loopback; so that the paths past validation run often.
    fn set_irqs_valid(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let index = *[2u32, 2, 2, 3, 4, 1].choose(&mut self.rng).unwrap_or(&2);
        let n = self
            .layout
            .irq_count
            .get(index as usize)
            .copied()
            .unwrap_or(0);
        let sub = self.rng.random_range(0..10);
        let (flags, start, count) = match sub {
            0..=4 => {
                let s = if self.rng.random_bool(0.6) {
                    0
                } else {
                    self.rng.random_range(0..n.max(1))
                };
                let c = self.rng.random_range(1..=n.saturating_sub(s).max(1));
                (
                    VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                    s,
                    c,
                )
            }
            5..=6 => (VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0),
            7..=8 => {
                let s = self.rng.random_range(0..n.max(1));
                let c = self.rng.random_range(1..=n.saturating_sub(s).max(1));
                (VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, s, c)
            }
            _ => {
                let s = self.rng.random_range(0..n.max(1));
                let c = self.rng.random_range(1..=n.saturating_sub(s).max(1));
                (VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_ACTION_TRIGGER, s, c)
            }
        };
        let esize = match flags & 7 {
            VFIO_IRQ_SET_DATA_EVENTFD => 4,
            VFIO_IRQ_SET_DATA_BOOL => 1,
            _ => 0,
        };
        let minsz = std::mem::size_of::<vfio_irq_set>() as u32;
        let argsz = minsz + count * esize;
        let mut b = Vec::new();
        for x in [argsz, flags, index, start, count] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for _ in 0..count {
            match esize {
                4 => {
                    let fd = if self.rng.random_range(0..10) == 0 {
                        -1
                    } else {
                        self.eventfds[self.rng.random_range(0..self.eventfds.len())].as_raw_fd()
                    };
                    b.extend_from_slice(&fd.to_le_bytes());
                }
                1 => b.push(self.rng.random_range(0..2)),
                _ => {}
            }
        }
        self.args.put(0, &b);
        note(format!(
            "VFIO_DEVICE_SET_IRQS (well-formed) index {index} flags {flags:#x} start {start} count {count}"
        ));
        // SAFETY: the argument is in the argument arena; the eventfds stay
        // open for the whole run.
        unsafe {
            ioctl(
                self.vfio.fd(),
                VFIO_DEVICE_SET_IRQS,
                self.args.base as usize,
            )
        }
        .map(drop)
    }

    fn set_irqs(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        if self.rng.random_bool(0.4) {
            return self.set_irqs_valid(note);
        }
        let rng = &mut self.rng;
        // MSI-X and the notifiers are what QEMU uses; the rest is rarer.
        let index: u32 = match rng.random_range(0..20) {
            0..=7 => 2,
            8..=10 => 3,
            11..=12 => 4,
            13..=15 => 1,
            16..=17 => 0,
            18 => rng.random_range(5..8),
            _ => rng.random(),
        };
        let n = self
            .layout
            .irq_count
            .get(index as usize)
            .copied()
            .unwrap_or(0);
        let data_type = match rng.random_range(0..20) {
            0..=3 => VFIO_IRQ_SET_DATA_NONE,
            4..=6 => VFIO_IRQ_SET_DATA_BOOL,
            7..=18 => VFIO_IRQ_SET_DATA_EVENTFD,
            _ => rng.random_range(0..8),
        };
        let action = match rng.random_range(0..20) {
            0..=15 => VFIO_IRQ_SET_ACTION_TRIGGER,
            16 => VFIO_IRQ_SET_ACTION_MASK,
            17 => VFIO_IRQ_SET_ACTION_UNMASK,
            _ => rng.random_range(0..8) << 3,
        };
        let mut flags = data_type | action;
        if rng.random_range(0..30) == 0 {
            flags = rng.random();
        }
        let (start, count) = match rng.random_range(0..10) {
            // All of them, as QEMU enables MSI-X.
            0..=2 => (0, n),
            // Disable the index.
            3 => (0, 0),
            4..=5 => {
                let s = rng.random_range(0..=n);
                (s, rng.random_range(0..=n - s + 1))
            }
            _ => (boundary_u32(rng, n), boundary_u32(rng, n)),
        };
        let size: u32 = match data_type {
            VFIO_IRQ_SET_DATA_BOOL => 1,
            VFIO_IRQ_SET_DATA_EVENTFD => 4,
            _ => 0,
        };
        let minsz = std::mem::size_of::<vfio_irq_set>() as u32;
        let exact =
            (u64::from(minsz) + u64::from(count) * u64::from(size)).min(u64::from(u32::MAX)) as u32;
        let argsz = match rng.random_range(0..12) {
            0..=7 => exact,
            8 => exact.saturating_sub(1),
            9 => exact.saturating_add(rng.random_range(1..16)),
            10 => minsz - rng.random_range(0..minsz),
            _ => pick_argsz(rng, minsz, exact),
        };
        // The data that fits in the arena after the header.
        let room = (self.args.len - minsz as usize) / 4;
        let entries = (count as usize).min(room).min(4096);
        let mut b = Vec::with_capacity(minsz as usize + entries * 4);
        for x in [argsz, flags, index, start, count] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        if data_type == VFIO_IRQ_SET_DATA_BOOL {
            for _ in 0..entries {
                let v = *[0u8, 1, 1, 255].choose(&mut self.rng).unwrap_or(&1);
                b.push(v);
            }
        } else {
            for _ in 0..entries {
                let fd = self.pick_fd();
                b.extend_from_slice(&fd.to_le_bytes());
            }
        }
        let p = if self.rng.random_range(0..60) == 0 {
            bad_pointer(&mut self.rng, &self.args)
        } else if self.rng.random_bool(0.2) {
            // Flush against the guard page: argsz larger than the data faults.
            let at = self.args.len - b.len();
            self.args.put(at, &b);
            self.args.base as usize + at
        } else {
            self.args.put(0, &b);
            self.args.base as usize
        };
        note(format!(
            "VFIO_DEVICE_SET_IRQS index {index} flags {flags:#x} start {start} count {count} argsz {argsz} at {p:#x}"
        ));
        // SAFETY: `p` is in the argument arena or an address the kernel
        // must refuse; the eventfds stay open for the whole run.
        unsafe { ioctl(self.vfio.fd(), VFIO_DEVICE_SET_IRQS, p) }.map(drop)
    }

    fn unknown_ioctl(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let rng = &mut self.rng;
        let (ty, nr) = if rng.random_bool(0.7) {
            // VFIO's own type, numbers the device does not define (or the
            // core handles: FEATURE, the iommufd ones, hot reset).
            let nr = loop {
                let nr: u32 = if rng.random_bool(0.5) {
                    rng.random_range(100..=130)
                } else {
                    rng.random_range(0..=255)
                };
                if !KNOWN_DEVICE_NRS.contains(&(nr.wrapping_sub(100))) {
                    break nr;
                }
            };
            (b';', nr)
        } else {
            let ty = loop {
                let t: u8 = rng.random();
                if !VFS_IOCTL_TYPES.contains(&t) && t != b';' && t != 0 {
                    break t;
                }
            };
            (ty, rng.random_range(0..=255))
        };
        let dir: u64 = rng.random_range(0..4);
        let size: u64 = if rng.random_bool(0.5) {
            0
        } else {
            rng.random_range(0..1 << 14)
        };
        let req = (dir << 30) | (size << 16) | (u64::from(ty) << 8) | u64::from(nr);
        let arg = match rng.random_range(0..10) {
            0..=6 => {
                let a = self.args.base as usize;
                self.args.fill_random(&mut self.rng, 0, 4096);
                a
            }
            7 => 0,
            8 => self.rng.random_range(0..65536),
            _ => bad_pointer(&mut self.rng, &self.args),
        };
        note(format!("ioctl {req:#x} arg {arg:#x}"));
        // SAFETY: `arg` is in the argument arena, an integer below
        // mmap_min_addr, or an address the kernel must refuse.
        unsafe { ioctl(self.vfio.fd(), req, arg) }.map(drop)
    }

    /// A region index: every defined one, one past the last, or any.
    fn pick_region(&mut self) -> u64 {
        match self.rng.random_range(0..40) {
            0..=11 => u64::from(VFIO_PCI_CONFIG_REGION_INDEX),
            12..=23 => 0,
            24..=33 => self.rng.random_range(0..=VFIO_PCI_NUM_REGIONS as u64),
            34..=37 => self.rng.random_range(0..16),
            _ => self.rng.random_range(0..1 << 23),
        }
    }

    /// An offset in a region of `size` bytes: inside, at and past its end,
    /// or far beyond.
    fn pick_offset(&mut self, size: u64) -> u64 {
        let r = &mut self.rng;
        match r.random_range(0..20) {
            0..=9 if size > 0 => r.random_range(0..size),
            0..=9 => r.random_range(0..64),
            10 => 0,
            11 => size.saturating_sub(r.random_range(1..9)),
            12 => size,
            13 => size + r.random_range(1..4096),
            14 => (1 << 40) - r.random_range(1..9),
            15 => r.random_range(0..1 << 40),
            16 if size > 0 => r.random_range(0..size) & !7,
            _ => r.random_range(0..256),
        }
    }

    fn pick_len(&mut self) -> usize {
        let r = &mut self.rng;
        match r.random_range(0..100) {
            0..=59 => *[1usize, 2, 4, 8].choose(r).unwrap_or(&4),
            60..=69 => *[3usize, 5, 6, 7].choose(r).unwrap_or(&3),
            70..=84 => r.random_range(9..=64),
            85..=95 => r.random_range(65..=4096),
            96..=98 => r.random_range(4097..=ARENA),
            _ => r.random_range(ARENA + 1..=1 << 31),
        }
    }

    fn region_rw(
        &mut self,
        write: bool,
        note: &mut dyn FnMut(String),
    ) -> std::result::Result<(), i32> {
        let index = self.pick_region();
        let size = self
            .layout
            .region_size
            .get(index as usize)
            .copied()
            .unwrap_or(0);
        let off = self.pick_offset(size);
        let len = self.pick_len();
        let mut pos = (index << 40) | (off & ((1 << 40) - 1));
        if self.rng.random_range(0..50) == 0 {
            // Huge: past every region, or negative as an off_t.
            pos = self.rng.random::<u64>() | (1 << 62);
        }
        // Flush against the guard page: an access longer than the arena
        // (or a kernel going past what it granted) faults.
        let buf = if self.rng.random_range(0..80) == 0 {
            bad_pointer(&mut self.rng, &self.io)
        } else {
            self.io.tail(len)
        };
        if write && len <= ARENA {
            self.io.fill_random(&mut self.rng, self.io.len - len, len);
        }
        let what = format!(
            "{} region {index} offset {off:#x} ({pos:#x}) len {len} buf {buf:#x}",
            if write { "pwrite" } else { "pread" }
        );
        note(what);
        let fd = self.vfio.fd();
        // SAFETY: `buf` is in the I/O arena or an address the kernel must
        // refuse; whatever the kernel does past the arena's end faults on
        // its guard page.
        let n = unsafe {
            if write {
                libc::pwrite(fd, buf as *const libc::c_void, len, pos as i64)
            } else {
                libc::pread(fd, buf as *mut libc::c_void, len, pos as i64)
            }
        };
        if n < 0 {
            return Err(errno());
        }
        if (n as usize) < len {
            *self
                .stats
                .short
                .entry(if write { "region_write" } else { "region_read" })
                .or_default() += 1;
        }
        if n as usize > len {
            eprintln!("devlend-fuzz-vfio: {n} bytes done of {len} asked");
            return Err(libc::EOVERFLOW);
        }
        Ok(())
    }

    /// Writes `size` bytes of `val` at config offset `off` (size up to 8:
    /// the kernel splits it).
    fn cfg_write(
        &mut self,
        off: u16,
        bytes: &[u8],
        note: &mut dyn FnMut(String),
    ) -> std::result::Result<(), i32> {
        note(format!("config write {:02x?} at {off:#x}", bytes));
        let at = self.io.len - bytes.len();
        self.io.put(at, bytes);
        let pos = (u64::from(VFIO_PCI_CONFIG_REGION_INDEX) << 40) + u64::from(off);
        // SAFETY: the source is in the I/O arena.
        let n = unsafe {
            libc::pwrite(
                self.vfio.fd(),
                (self.io.base as usize + at) as *const libc::c_void,
                bytes.len(),
                pos as i64,
            )
        };
        if n < 0 {
            return Err(errno());
        }
        for (i, b) in bytes.iter().enumerate() {
            self.layout.cfg_put(off + i as u16, 1, u32::from(*b));
        }
        Ok(())
    }

    /// A value for `size` bytes at `off`: the current one with bits
    /// flipped, all ones (BAR sizing), zero, or random.
    fn cfg_value(&mut self, off: u16, size: usize) -> u32 {
        let cur = self.layout.cfg_get(off, size);
        let mask = if size >= 4 {
            u32::MAX
        } else {
            (1u32 << (8 * size)) - 1
        };
        let v = match self.rng.random_range(0..6) {
            0 | 1 => cur ^ (1 << self.rng.random_range(0..8 * size as u32)),
            2 => u32::MAX,
            3 => 0,
            _ => self.rng.random(),
        };
        v & mask
    }

    fn config_write(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let cfg_size = self.layout.cfg.len() as u16;
        let sub = self.rng.random_range(0..100);
        let (off, size, mut val) = match sub {
            // Command: memory mostly on (so BAR accesses get through), the
            // rest of the bits at random.
            0..=14 => {
                let mut cmd = self.layout.cfg_u16(PCI_COMMAND);
                for (bit, p) in [
                    (PCI_COMMAND_MEMORY, 0.8),
                    (PCI_COMMAND_MASTER, 0.4),
                    (PCI_COMMAND_IO, 0.2),
                    (PCI_COMMAND_INTX_DISABLE, 0.5),
                ] {
                    if self.rng.random_bool(p) {
                        cmd |= bit;
                    } else {
                        cmd &= !bit;
                    }
                }
                if self.rng.random_range(0..8) == 0 {
                    cmd ^= 1 << self.rng.random_range(0..16);
                }
                let size = *[2usize, 2, 4, 1].choose(&mut self.rng).unwrap_or(&2);
                let v = if size == 4 {
                    u32::from(cmd) | (self.rng.random::<u32>() << 16)
                } else {
                    u32::from(cmd)
                };
                (PCI_COMMAND, size, v)
            }
            // The header: BARs, ROM, cap pointer, interrupt line and pin,
            // BIST, latency.
            15..=29 => {
                let off = *[
                    0x10u16, 0x14, 0x18, 0x1c, 0x20, 0x24, 0x30, 0x34, 0x3c, 0x3d, 0x0c, 0x0d,
                    0x0f, 0x06, 0x08,
                ]
                .choose(&mut self.rng)
                .unwrap_or(&0x10);
                let size = if off.is_multiple_of(4) { 4 } else { 1 };
                let v = self.cfg_value(off, size);
                (off, size, v)
            }
            // A capability's header or body.
            30..=54 if !self.layout.caps.is_empty() => {
                let &(_, pos, len) = self
                    .layout
                    .caps
                    .choose(&mut self.rng)
                    .unwrap_or(&(0, 0x40, 4));
                let off = if self.rng.random_bool(0.3) {
                    pos + self.rng.random_range(0..2)
                } else {
                    pos + self.rng.random_range(0..len.max(1))
                };
                let size = *[1usize, 2, 4].choose(&mut self.rng).unwrap_or(&1);
                let off = off & !(size as u16 - 1);
                let v = self.cfg_value(off, size);
                (off, size, v)
            }
            // MSI and MSI-X control: enable, mask all, multiple message.
            55..=64 => {
                let cap = if self.rng.random_bool(0.5) {
                    self.layout.cap(PCI_CAP_ID_MSIX)
                } else {
                    self.layout.cap(PCI_CAP_ID_MSI)
                };
                let Some((pos, len)) = cap else {
                    return self.cfg_write(PCI_COMMAND + 1, &[0], note);
                };
                let off = if self.rng.random_bool(0.7) {
                    pos + 2
                } else {
                    (pos + self.rng.random_range(0..len.max(1))) & !3
                };
                let size = if off.is_multiple_of(4) { 4 } else { 2 };
                let v = self.cfg_value(off, size);
                (off, size, v)
            }
            // PCIe device control (no FLR here), device control 2, link
            // control.
            65..=74 => {
                let Some((pos, _)) = self.layout.cap(PCI_CAP_ID_EXP) else {
                    return self.cfg_write(PCI_COMMAND + 1, &[0], note);
                };
                let off = pos
                    + *[PCI_EXP_DEVCTL, 0x28, 0x10, 0x0a]
                        .choose(&mut self.rng)
                        .unwrap_or(&8);
                let mut v = self.cfg_value(off, 2);
                if off == pos + PCI_EXP_DEVCTL {
                    v &= !u32::from(PCI_EXP_DEVCTL_BCR_FLR);
                }
                (off, 2, v)
            }
            // Function level reset: PCIe device control, or Advanced
            // Features if the device has it.
            75..=76 => {
                if let Some((pos, _)) = self
                    .layout
                    .cap(PCI_CAP_ID_AF)
                    .filter(|_| self.rng.random_bool(0.5))
                {
                    (pos + PCI_AF_CTRL, 1, u32::from(PCI_AF_CTRL_FLR))
                } else if let Some((pos, _)) = self.layout.cap(PCI_CAP_ID_EXP) {
                    let off = pos + PCI_EXP_DEVCTL;
                    let v = u32::from(self.layout.cfg_u16(off) | PCI_EXP_DEVCTL_BCR_FLR);
                    if self.rng.random_bool(0.5) {
                        (off + 1, 1, v >> 8)
                    } else {
                        (off, 2, v)
                    }
                } else {
                    return Err(libc::ENODEV);
                }
            }
            // Extended capabilities.
            77..=86 if !self.layout.ext_caps.is_empty() => {
                let &(_, pos, len) = self
                    .layout
                    .ext_caps
                    .choose(&mut self.rng)
                    .unwrap_or(&(0, 0x100, 4));
                let off = if self.rng.random_bool(0.3) {
                    pos + self.rng.random_range(0..4)
                } else {
                    pos + self.rng.random_range(0..len.max(1))
                };
                let size = *[1usize, 2, 4].choose(&mut self.rng).unwrap_or(&4);
                let off = off & !(size as u16 - 1);
                let v = self.cfg_value(off, size);
                (off, size, v)
            }
            // Anywhere, any size up to 8, unaligned, past the end.
            _ => {
                let off = self.rng.random_range(0..cfg_size + 16);
                let size = self.rng.random_range(1..=8usize);
                let mut bytes = vec![0u8; size];
                self.rng.fill(&mut bytes[..]);
                // Random FLRs would reset the device every few writes.
                if let Some((pos, _)) = self.layout.cap(PCI_CAP_ID_EXP) {
                    let flr = pos + PCI_EXP_DEVCTL + 1;
                    if off <= flr && flr < off + size as u16 {
                        bytes[(flr - off) as usize] &= 0x7f;
                    }
                }
                return self.cfg_write(off, &bytes, note);
            }
        };
        if (75..77).contains(&sub) {
            // An FLR, as chosen.
        } else if let Some((pos, _)) = self.layout.cap(PCI_CAP_ID_EXP) {
            // No accidental FLR through a wider write.
            let flr = pos + PCI_EXP_DEVCTL + 1;
            if off <= flr && flr < off + size as u16 {
                val &= !(0x80u32 << (8 * (flr - off)));
            }
        }
        let bytes = val.to_le_bytes();
        self.cfg_write(off, &bytes[..size], note)
    }

    /// Bus mastering on or off (memory decode on): the borrower pins and
    /// maps the DMA buffer, or unmaps and unpins it.
    fn bus_master(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let mut cmd = self.layout.cfg_u16(PCI_COMMAND) | PCI_COMMAND_MEMORY;
        if self.rng.random_bool(0.55) {
            cmd |= PCI_COMMAND_MASTER;
        } else {
            cmd &= !PCI_COMMAND_MASTER;
        }
        self.cfg_write(PCI_COMMAND, &cmd.to_le_bytes(), note)
    }

    /// Unmaps the DMA buffer from the container (VFIO's dma_unmap of what
    /// the borrower pinned) and maps it again, maybe elsewhere or read-only.
    fn dma_remap(&mut self, note: &mut dyn FnMut(String)) -> std::result::Result<(), i32> {
        let iova = *[
            DMA_IOVA,
            DMA_IOVA,
            DMA_IOVA + 0x10000,
            0x2000_0000,
            0xffe0_0000,
        ]
        .choose(&mut self.rng)
        .unwrap_or(&DMA_IOVA);
        let flags = if self.rng.random_range(0..8) == 0 {
            VFIO_DMA_MAP_FLAG_READ
        } else {
            VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE
        };
        let remap = self.rng.random_range(0..6) != 0;
        note(format!(
            "DMA unmap {:?}, map at {iova:#x} flags {flags:#x}: {remap}",
            self.dma_iova
        ));
        if let Some(old) = self.dma_iova {
            self.vfio.dma_unmap(old, DMA_SIZE)?;
            self.dma_iova = None;
        }
        if remap || self.dma_iova.is_none() {
            self.vfio
                .dma_map(iova, self.dma.base as usize, DMA_SIZE, flags)?;
            self.dma_iova = Some(iova);
        }
        Ok(())
    }

    /// Closes the device fd (the borrower gives the device back) and opens
    /// it again, waiting while it is still being returned.
    fn reopen(&mut self) -> std::result::Result<(), i32> {
        self.vfio.device = None;
        self.stats.reopens += 1;
        let t0 = Instant::now();
        loop {
            match self.vfio.open_device() {
                Ok(()) => return Ok(()),
                Err(e) if t0.elapsed() < REOPEN_WAIT => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads whatever the eventfds counted, so that nothing piles up.
    fn drain_eventfds(&self) {
        let mut buf = [0u8; 8];
        for fd in &self.eventfds {
            // SAFETY: reads 8 bytes into `buf` from a non-blocking eventfd.
            unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        }
    }
}

/// What the racer thread needs of the device.
#[derive(Debug, Clone, Copy)]
struct RaceTarget {
    cfg_size: u64,
    bar0_size: u64,
    msix_count: u32,
}

/// What the racer did.
#[derive(Debug, Default)]
struct RaceStats {
    ops: u64,
    ok: u64,
    errors: BTreeMap<String, u64>,
}

/// With `--threads 2`: on a dup of the device fd, unsynchronized with the
/// main thread, reads and writes config space and BAR0, toggles memory
/// decode and bus mastering, enables and disables MSI-X, resets; until
/// `stop`. Buffers are at most 8 bytes, and the kernel is asked for no
/// more.
fn racer(fd: OwnedFd, seed: u64, t: RaceTarget, stop: Arc<AtomicBool>) -> Result<RaceStats> {
    // SIGALRM is for the main thread's syscalls.
    // SAFETY: a sigset_t filled by sigemptyset/sigaddset; this thread's
    // own mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGALRM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_5eed_5eed_5eed);
    let efds = [new_eventfd()?, new_eventfd()?];
    let fd = fd.as_raw_fd();
    let cfg = u64::from(VFIO_PCI_CONFIG_REGION_INDEX) << 40;
    let mut st = RaceStats::default();
    while !stop.load(Ordering::SeqCst) {
        let mut buf = [0u8; 8];
        let r = rng.random_range(0..100);
        let res = match r {
            0..=54 => {
                let (base, size) = if r < 30 {
                    (cfg, t.cfg_size)
                } else {
                    (0, t.bar0_size)
                };
                let len = *[1usize, 2, 4, 8].choose(&mut rng).unwrap_or(&4);
                let off = rng.random_range(0..size.max(1)) & !(len as u64 - 1);
                let write = r >= 45;
                rng.fill(&mut buf[..]);
                // SAFETY: `buf` is valid for `len` <= 8 bytes either way.
                let n = unsafe {
                    if write {
                        libc::pwrite(fd, buf.as_ptr().cast(), len, (base + off) as i64)
                    } else {
                        libc::pread(fd, buf.as_mut_ptr().cast(), len, (base + off) as i64)
                    }
                };
                if n < 0 {
                    Err(errno())
                } else {
                    Ok(())
                }
            }
            55..=74 => {
                let mut cmd = PCI_COMMAND_MEMORY;
                if rng.random_bool(0.5) {
                    cmd |= PCI_COMMAND_MASTER;
                }
                let b = cmd.to_le_bytes();
                // SAFETY: `b` is valid for 2 bytes.
                let n = unsafe { libc::pwrite(fd, b.as_ptr().cast(), 2, (cfg + 4) as i64) };
                if n < 0 {
                    Err(errno())
                } else {
                    Ok(())
                }
            }
            75..=96 => {
                let enable = rng.random_bool(0.6);
                let count = if enable { t.msix_count } else { 0 };
                let flags = VFIO_IRQ_SET_ACTION_TRIGGER
                    | if enable {
                        VFIO_IRQ_SET_DATA_EVENTFD
                    } else {
                        VFIO_IRQ_SET_DATA_NONE
                    };
                let mut b = Vec::new();
                let argsz = 20 + 4 * count;
                for x in [argsz, flags, 2, 0, count] {
                    b.extend_from_slice(&x.to_le_bytes());
                }
                for i in 0..count {
                    b.extend_from_slice(&efds[i as usize % 2].as_raw_fd().to_le_bytes());
                }
                // SAFETY: the kernel reads at most argsz bytes of `b`, all
                // of it; the eventfds outlive the call.
                unsafe { ioctl(fd, VFIO_DEVICE_SET_IRQS, b.as_ptr() as usize) }.map(drop)
            }
            _ => {
                // SAFETY: no argument.
                unsafe { ioctl(fd, VFIO_DEVICE_RESET, 0) }.map(drop)
            }
        };
        st.ops += 1;
        match res {
            Ok(()) => st.ok += 1,
            Err(e) => *st.errors.entry(errno_name(e)).or_default() += 1,
        }
    }
    Ok(st)
}

fn new_eventfd() -> Result<OwnedFd> {
    // SAFETY: creates a new fd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        bail!("eventfd: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new fd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn pick_kind(rng: &mut StdRng) -> Kind {
    let total: u32 = KINDS.iter().map(|k| k.1).sum();
    let mut x = rng.random_range(0..total);
    for (k, w) in KINDS {
        if x < w {
            return k;
        }
        x -= w;
    }
    Kind::GetInfo
}

fn summary_json(
    args: &Args,
    stats: &Stats,
    race: Option<&RaceStats>,
    done: u64,
    secs: f64,
    hang: Option<&str>,
) -> String {
    let racer = race.map(|r| serde_json::json!({"ops": r.ops, "ok": r.ok, "errors": r.errors}));
    serde_json::json!({
        "seed": args.seed,
        "iters": args.iters,
        "done": done,
        "secs": (secs * 10.0).round() / 10.0,
        "ops": stats.ops,
        "ok": stats.ok,
        "short": stats.short,
        "errors": stats.errors,
        "errors_by_kind": stats.errors_by_kind,
        "reopens": stats.reopens,
        "threads": args.threads,
        "racer": racer,
        "hang": hang,
    })
    .to_string()
}

fn run(args: &Args) -> Result<ExitCode> {
    println!(
        "devlend-fuzz-vfio: seed {} iters {} device {}",
        args.seed,
        args.iters,
        args.device.display()
    );
    let _ = std::io::stdout().flush();
    install_alarm()?;
    let vfio = Vfio::open(&args.device).context("opening the device through VFIO")?;
    let layout = discover(&vfio)?;
    let dma = Arena::new(DMA_SIZE)?;
    vfio.dma_map(
        DMA_IOVA,
        dma.base as usize,
        DMA_SIZE,
        VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
    )
    .map_err(|e| anyhow::anyhow!("VFIO_IOMMU_MAP_DMA: {}", errno_name(e)))?;
    let mut f = Fuzzer {
        rng: StdRng::seed_from_u64(args.seed),
        vfio,
        layout,
        args: Arena::new(ARENA)?,
        io: Arena::new(ARENA)?,
        dma,
        dma_iova: Some(DMA_IOVA),
        eventfds: (0..NEVENTFDS)
            .map(|_| new_eventfd())
            .collect::<Result<_>>()?,
        not_eventfd: open_rw(Path::new("/dev/null"))?,
        stats: Stats::default(),
        op_timeout: args.op_timeout,
    };

    let cur = Arc::new(Mutex::new(Current {
        index: 0,
        started: Instant::now(),
        what: "start".into(),
        done: false,
    }));
    // A reopen may wait REOPEN_WAIT by itself.
    start_watchdog(
        cur.clone(),
        Duration::from_secs(u64::from(args.op_timeout) * 2) + REOPEN_WAIT,
    );
    let race = if args.threads > 1 {
        let dup = f
            .vfio
            .device
            .as_ref()
            .context("no device fd")?
            .try_clone()
            .context("dup of the device fd")?;
        let target = RaceTarget {
            cfg_size: f.layout.cfg.len() as u64,
            bar0_size: f.layout.region_size.first().copied().unwrap_or(0),
            msix_count: f.layout.irq_count.get(2).copied().unwrap_or(0),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop2, seed) = (stop.clone(), args.seed);
        std::thread::spawn(move || {
            let _ = tx.send(racer(dup, seed, target, stop2));
        });
        Some((stop, rx))
    } else {
        None
    };
    let t0 = Instant::now();
    let mut done = 0;
    let mut hang = None;
    for i in 0..args.iters {
        let kind = pick_kind(&mut f.rng);
        ALARMED.store(false, Ordering::SeqCst);
        let secs = if kind == Kind::Reopen {
            f.op_timeout + REOPEN_WAIT.as_secs() as u32
        } else {
            f.op_timeout
        };
        let started = Instant::now();
        // SAFETY: alarm() has no memory effects.
        unsafe { libc::alarm(secs) };
        let res = f.op(kind, &cur, i);
        // SAFETY: as above.
        unsafe { libc::alarm(0) };
        let took = started.elapsed();
        f.stats.record(kind.name(), res);
        done = i + 1;
        if ALARMED.load(Ordering::SeqCst) || took > Duration::from_secs(u64::from(secs)) {
            let what = cur.lock().unwrap_or_else(|p| p.into_inner()).what.clone();
            eprintln!(
                "devlend-fuzz-vfio: HANG: operation #{i} ({what}) took {:.1} s (limit {secs} s), result {res:?}",
                took.as_secs_f64()
            );
            hang = Some(what);
            break;
        }
        if kind == Kind::Reopen && res.is_err() {
            cur.lock().unwrap_or_else(|p| p.into_inner()).done = true;
            eprintln!(
                "devlend-fuzz-vfio: the device could not be opened again within {REOPEN_WAIT:?}: {:?}",
                res.map_err(errno_name)
            );
            println!(
                "{}",
                summary_json(args, &f.stats, None, done, t0.elapsed().as_secs_f64(), None)
            );
            return Ok(ExitCode::from(5));
        }
        if i % 64 == 63 {
            f.drain_eventfds();
        }
        if i % 500 == 499 {
            eprintln!(
                "devlend-fuzz-vfio: {} operations in {:.1} s",
                i + 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let mut race_stats = None;
    if let Some((stop, rx)) = race {
        stop.store(true, Ordering::SeqCst);
        match rx.recv_timeout(Duration::from_secs(u64::from(args.op_timeout))) {
            Ok(r) => race_stats = Some(r.context("the racer thread")?),
            Err(_) => {
                eprintln!(
                    "devlend-fuzz-vfio: HANG: the racer thread did not stop within {} s",
                    args.op_timeout
                );
                hang.get_or_insert_with(|| "racer thread".to_owned());
            }
        }
    }
    cur.lock().unwrap_or_else(|p| p.into_inner()).done = true;
    let secs = t0.elapsed().as_secs_f64();
    // Close in the order a dying VMM does: the device first (it gives the
    // remote device back), then the group and the container (which unmap
    // the DMA buffer), then the buffer.
    let Fuzzer {
        vfio, dma, stats, ..
    } = f;
    let Vfio {
        container,
        group,
        device,
        ..
    } = vfio;
    drop(device);
    drop(group);
    drop(container);
    drop(dma);
    println!(
        "devlend-fuzz-vfio: {done} operations in {secs:.1} s ({:.0}/s)",
        done as f64 / secs.max(0.001)
    );
    println!(
        "{}",
        summary_json(
            args,
            &stats,
            race_stats.as_ref(),
            done,
            secs,
            hang.as_deref()
        )
    );
    Ok(if hang.is_some() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("devlend-fuzz-vfio: {e:#}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("devlend-fuzz-vfio: {e:#}");
            ExitCode::from(1)
        }
    }
}
