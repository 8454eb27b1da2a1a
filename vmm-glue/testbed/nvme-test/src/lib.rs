//! A minimal NVMe driver over devlend-vfio's [`RemoteDevice`], for testing
//! a remote NVMe from userspace with no guest (the `devlend-nvme-test`
//! program; not part of devlend's VMM library): admin queue, one I/O queue, Identify, read
//! and write, completions taken from MSI-X eventfds.
//!
//! All queues and buffers live in one [`GuestMemoryMmap`] that is DMA-mapped
//! at [`NvmeConfig::iova_base`] (below 4 GiB, where a devlend mdev without
//! KVM looks for DMA ranges). Memory layout, in 4 KiB pages:
//! admin SQ, admin CQ, I/O SQ, I/O CQ, identify buffer, then one PRP list
//! page per slot, then one data slot of [`NvmeConfig::io_size`] (rounded up
//! to whole pages) per slot, [`NvmeConfig::queue_depth`] slots.
//!
//! The controller's memory page size is 4 KiB (CC.MPS = 0), the only one
//! the driver programs: every PRP entry addresses a 4 KiB page, and a
//! controller whose smallest page (CAP.MPSMIN) is larger is refused. An I/O
//! of one or two pages uses PRP1 and PRP2 as data pointers; a longer one
//! points PRP2 at its slot's PRP list page, which holds the addresses of
//! the pages after the first (see [`prps`]).

use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use devlend_vfio::pci;
use devlend_vfio::VFIO_PCI_BAR0_REGION_INDEX as BAR0;
use devlend_vfio::VFIO_PCI_CONFIG_REGION_INDEX;
use devlend_vfio::{RemoteDevice, VfioBackend};

/// The memory page size the driver gives the controller: CC.MPS = 0, so
/// 2^(12 + 0) bytes. PRP entries, the layout and MDTS all count in it.
pub const PAGE_SIZE: u64 = 4096;
const PAGE: u64 = PAGE_SIZE;
/// CC.MPS (bits 10:7) for [`PAGE_SIZE`].
const CC_MPS_4K: u32 = 0 << 7;
/// PRP entries (8 bytes each) in one list page.
pub const PRP_LIST_ENTRIES: u64 = PAGE / 8;
/// Largest I/O the driver does. One PRP list page would allow more
/// ((1 + 512) pages), but 128 KiB is what the benchmark needs, and the data
/// slots (up to 63 of them) are pinned DMA memory, so they stay a few MiB.
pub const MAX_IO_SIZE: u32 = 128 << 10;
const ADMIN_ENTRIES: u16 = 32;
const IO_ENTRIES: u16 = 64;

// Controller registers (BAR0).
const REG_CAP: u64 = 0x00;
const REG_VS: u64 = 0x08;
const REG_CC: u64 = 0x14;
const REG_CSTS: u64 = 0x1c;
const REG_AQA: u64 = 0x24;
const REG_ASQ: u64 = 0x28;
const REG_ACQ: u64 = 0x30;
const REG_DOORBELLS: u64 = 0x1000;

// Opcodes.
const ADMIN_CREATE_SQ: u8 = 0x01;
const ADMIN_CREATE_CQ: u8 = 0x05;
const ADMIN_IDENTIFY: u8 = 0x06;
/// NVM command set: write.
pub const NVM_WRITE: u8 = 0x01;
/// NVM command set: read.
pub const NVM_READ: u8 = 0x02;

/// What went wrong in the NVMe driver.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    /// VFIO failed.
    #[error(transparent)]
    Vfio(#[from] devlend_vfio::Error),
    /// The device is not an NVMe controller.
    #[error("{path}: class {class:#08x} is not an NVMe controller (010802)")]
    NotNvme {
        /// sysfs path.
        path: String,
        /// Its class code.
        class: u32,
    },
    /// Guest memory could not be created or accessed.
    #[error("DMA memory at {addr:#x}: {msg}")]
    Memory {
        /// Address (IOVA) involved.
        addr: u64,
        /// What vm-memory said.
        msg: String,
    },
    /// A bad configuration.
    #[error("bad configuration: {0}")]
    Config(String),
    /// The controller did not reach a state in time.
    #[error("controller did not {what} within {ms} ms (CSTS {csts:#x})")]
    ControllerTimeout {
        /// What was awaited.
        what: &'static str,
        /// How long.
        ms: u64,
        /// Last status register value.
        csts: u32,
    },
    /// The controller reports a fatal status.
    #[error("controller fatal status (CSTS.CFS) after {what}")]
    Fatal {
        /// What was being done.
        what: &'static str,
    },
    /// No completion arrived in time.
    #[error("queue {qid}: no completion within {ms} ms ({pending} commands pending)")]
    Timeout {
        /// Queue id.
        qid: u16,
        /// How long.
        ms: u64,
        /// Commands outstanding.
        pending: usize,
    },
    /// A completion was posted but its MSI-X vector never signalled.
    #[error("queue {qid}: a completion was posted but MSI-X vector {vector} did not signal its eventfd within {ms} ms")]
    NoInterrupt {
        /// Queue id.
        qid: u16,
        /// MSI-X vector.
        vector: usize,
        /// How long.
        ms: u64,
    },
    /// PRPs cannot describe a buffer.
    #[error("PRPs for {len} bytes at IOVA {iova:#x}: {why}")]
    Prp {
        /// IOVA of the buffer.
        iova: u64,
        /// Its length.
        len: u64,
        /// What is wrong.
        why: String,
    },
    /// The I/O size is beyond the controller's Maximum Data Transfer Size.
    #[error(
        "I/O size {io_size} bytes exceeds the controller's maximum data transfer size \
         (Identify Controller MDTS {mdts}: {max} bytes in 4 KiB pages)"
    )]
    Mdts {
        /// The requested I/O size.
        io_size: u32,
        /// MDTS as reported (a power of two of pages; 0 = no limit).
        mdts: u8,
        /// The largest transfer it allows, in bytes.
        max: u64,
    },
    /// A command completed with an error status.
    #[error("{what}: command failed with status type {sct:#x} code {sc:#x}")]
    Command {
        /// The command.
        what: String,
        /// Status code type.
        sct: u8,
        /// Status code.
        sc: u8,
    },
    /// Waiting for an eventfd failed.
    #[error("waiting for MSI-X vector {vector}: {source}")]
    Wait {
        /// MSI-X vector.
        vector: usize,
        /// The system error.
        source: std::io::Error,
    },
}

/// Result of the NVMe driver.
pub type NvmeResult<T> = std::result::Result<T, NvmeError>;

/// Driver parameters.
#[derive(Clone, Debug)]
pub struct NvmeConfig {
    /// IOVA of the DMA memory; page aligned.
    pub iova_base: u64,
    /// Outstanding I/O commands at most (1..=63); also the number of data
    /// slots, each with its PRP list page.
    pub queue_depth: u16,
    /// Bytes per I/O: a multiple of the block size, at most [`MAX_IO_SIZE`]
    /// and the controller's MDTS.
    pub io_size: u32,
    /// How long to wait for the controller or a completion.
    pub timeout: Duration,
    /// Enable MSI-X while memory decode is off, and turn decode on again
    /// afterwards, as a guest may: the MSI-X table lies in a BAR, so
    /// whoever programs it behind the guest's back (a lender, vfio-pci)
    /// must see to decode itself, or the vectors never fire.
    pub msix_decode_off: bool,
}

impl Default for NvmeConfig {
    fn default() -> Self {
        NvmeConfig {
            iova_base: 0x1000_0000,
            queue_depth: 8,
            io_size: 4096,
            timeout: Duration::from_secs(10),
            msix_decode_off: false,
        }
    }
}

/// What Identify reported.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Identity {
    /// PCI vendor id from Identify Controller.
    pub vid: u16,
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Firmware revision.
    pub firmware: String,
    /// Number of namespaces.
    pub namespaces: u32,
    /// Version register (e.g. 0x10400 = 1.4).
    pub version: u32,
    /// Namespace 1 size in blocks.
    pub ns_blocks: u64,
    /// Namespace 1 block size in bytes.
    pub block_size: u32,
    /// Maximum Data Transfer Size from Identify Controller: a power of two
    /// of the minimum page size (4 KiB here); 0 means no limit.
    pub mdts: u8,
    /// The largest transfer MDTS allows, in bytes; `None` if unlimited.
    pub max_transfer_bytes: Option<u64>,
}

/// One completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Command id.
    pub cid: u16,
    /// Status field without the phase bit (SC in bits 0..8, SCT in 8..11).
    pub status: u16,
    /// Dword 0.
    pub dw0: u32,
    /// SQ head pointer.
    pub sq_head: u16,
}

impl Completion {
    /// Status code.
    pub fn sc(&self) -> u8 {
        self.status as u8
    }
    /// Status code type.
    pub fn sct(&self) -> u8 {
        ((self.status >> 8) & 7) as u8
    }
    /// Whether the command succeeded.
    pub fn ok(&self) -> bool {
        self.status & 0x7ff == 0
    }
}

/// A submission queue entry, little-endian on the wire.
#[derive(Clone, Copy, Debug, Default)]
pub struct Command {
    /// Opcode.
    pub opcode: u8,
    /// Namespace id.
    pub nsid: u32,
    /// PRP entry 1.
    pub prp1: u64,
    /// PRP entry 2.
    pub prp2: u64,
    /// Command dwords 10 to 15.
    pub cdw: [u32; 6],
}

impl Command {
    /// The 64-byte entry with command id `cid`.
    pub fn encode(&self, cid: u16) -> [u8; 64] {
        let mut e = [0u8; 64];
        e[0..4].copy_from_slice(&(u32::from(self.opcode) | (u32::from(cid) << 16)).to_le_bytes());
        e[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        e[24..32].copy_from_slice(&self.prp1.to_le_bytes());
        e[32..40].copy_from_slice(&self.prp2.to_le_bytes());
        for (i, d) in self.cdw.iter().enumerate() {
            e[40 + 4 * i..44 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        e
    }
}

/// Decodes a 16-byte completion entry; returns it with its phase bit.
pub fn decode_completion(e: &[u8; 16]) -> (Completion, bool) {
    let status = u16::from_le_bytes([e[14], e[15]]);
    (
        Completion {
            dw0: u32::from_le_bytes([e[0], e[1], e[2], e[3]]),
            sq_head: u16::from_le_bytes([e[8], e[9]]),
            cid: u16::from_le_bytes([e[12], e[13]]),
            status: status >> 1,
        },
        status & 1 == 1,
    )
}

/// The data pointer of a command: PRP1, PRP2 and, when PRP2 points to a
/// PRP list, the entries that list must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prps {
    /// PRP entry 1: the first page of the buffer.
    pub prp1: u64,
    /// PRP entry 2: 0 (one page), the second page (two pages), or the IOVA
    /// of the PRP list (more).
    pub prp2: u64,
    /// The PRP list, for the pages after the first, when one is needed;
    /// empty otherwise. Its entries go at `prp2`, 8 bytes each,
    /// little-endian.
    pub list: Vec<u64>,
}

/// The PRPs for a buffer of `len` bytes at `iova`, with 4 KiB pages
/// (CC.MPS = 0). Beyond two pages PRP2 is `list_iova`, where
/// [`Prps::list`] must be written.
///
/// The buffer must be page aligned (the spec would let PRP1 carry an
/// offset, but every buffer of this driver starts a page, so an offset is a
/// bug worth refusing), and so must the list page. Only one list page is
/// used, no chaining: at most 1 + 512 pages.
pub fn prps(iova: u64, len: u64, list_iova: u64) -> NvmeResult<Prps> {
    let err = |why: String| NvmeError::Prp { iova, len, why };
    if iova % PAGE != 0 {
        return Err(err("the buffer is not 4 KiB aligned".into()));
    }
    if len == 0 {
        return Err(err("empty transfer".into()));
    }
    if iova.checked_add(len).is_none() {
        return Err(err("the buffer wraps the IOVA space".into()));
    }
    let pages = len.div_ceil(PAGE);
    match pages {
        1 => Ok(Prps {
            prp1: iova,
            prp2: 0,
            list: Vec::new(),
        }),
        2 => Ok(Prps {
            prp1: iova,
            prp2: iova + PAGE,
            list: Vec::new(),
        }),
        _ if pages - 1 > PRP_LIST_ENTRIES => Err(err(format!(
            "{pages} pages; one PRP list page holds {PRP_LIST_ENTRIES} entries, \
             so at most {} bytes",
            (PRP_LIST_ENTRIES + 1) * PAGE
        ))),
        _ if list_iova % PAGE != 0 => Err(err(format!(
            "the PRP list at {list_iova:#x} is not 4 KiB aligned"
        ))),
        _ => Ok(Prps {
            prp1: iova,
            prp2: list_iova,
            list: (1..pages).map(|p| iova + p * PAGE).collect(),
        }),
    }
}

#[derive(Debug)]
struct Queue {
    qid: u16,
    entries: u16,
    sq: u64,
    cq: u64,
    tail: u16,
    head: u16,
    phase: bool,
    vector: usize,
    pending: usize,
}

impl Queue {
    fn new(qid: u16, entries: u16, sq: u64, cq: u64, vector: usize) -> Self {
        Queue {
            qid,
            entries,
            sq,
            cq,
            tail: 0,
            head: 0,
            phase: true,
            vector,
            pending: 0,
        }
    }
}

/// Layout of the DMA memory.
#[derive(Clone, Copy, Debug)]
struct Layout {
    asq: u64,
    acq: u64,
    iosq: u64,
    iocq: u64,
    ident: u64,
    /// PRP list pages, one per slot.
    lists: u64,
    /// Data slots, `slot` bytes apart.
    data: u64,
    slot: u64,
    slots: u64,
    size: u64,
}

impl Layout {
    fn new(cfg: &NvmeConfig) -> NvmeResult<Self> {
        if cfg.iova_base % PAGE != 0 {
            return Err(NvmeError::Config(format!(
                "IOVA base {:#x} is not page aligned",
                cfg.iova_base
            )));
        }
        if cfg.queue_depth == 0 || cfg.queue_depth >= IO_ENTRIES {
            return Err(NvmeError::Config(format!(
                "queue depth {} not in 1..={}",
                cfg.queue_depth,
                IO_ENTRIES - 1
            )));
        }
        if cfg.io_size == 0 || cfg.io_size > MAX_IO_SIZE {
            return Err(NvmeError::Config(format!(
                "I/O size {} not in 1..={MAX_IO_SIZE}",
                cfg.io_size
            )));
        }
        let b = cfg.iova_base;
        let slots = u64::from(cfg.queue_depth);
        let slot = u64::from(cfg.io_size).div_ceil(PAGE) * PAGE;
        // Offsets first: the sizes are small, but the base is the user's.
        let size = (5 + slots) * PAGE + slots * slot;
        if b.checked_add(size).is_none() {
            return Err(NvmeError::Config(format!(
                "{size} bytes of DMA memory at IOVA {b:#x} wrap the IOVA space"
            )));
        }
        let lists = b + 5 * PAGE;
        let data = lists + slots * PAGE;
        Ok(Layout {
            asq: b,
            acq: b + PAGE,
            iosq: b + 2 * PAGE,
            iocq: b + 3 * PAGE,
            ident: b + 4 * PAGE,
            lists,
            data,
            slot,
            slots,
            size,
        })
    }

    /// IOVA of slot `i`'s PRP list page.
    fn list(&self, i: usize) -> u64 {
        self.lists + i as u64 * PAGE
    }

    /// IOVA of slot `i`'s data.
    fn slot(&self, i: usize) -> u64 {
        self.data + i as u64 * self.slot
    }
}

/// Counters the driver keeps.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Counters {
    /// Eventfd signals read (each may cover several interrupts).
    pub irq_signals: u64,
    /// Completions processed.
    pub completions: u64,
}

/// An NVMe controller driven from userspace.
#[derive(Debug)]
pub struct Nvme<B: VfioBackend> {
    dev: RemoteDevice<B>,
    mem: GuestMemoryMmap,
    layout: Layout,
    cfg: NvmeConfig,
    dstrd: u64,
    admin: Queue,
    io: Option<Queue>,
    next_cid: u16,
    /// Namespace 1 block size, once identified.
    block_size: u32,
    /// PRP1 and PRP2 of each slot (its list, if any, is in its list page).
    slot_prps: Vec<(u64, u64)>,
    counters: Counters,
}

impl<B: VfioBackend> Nvme<B> {
    /// Takes an opened device: checks it is an NVMe controller, maps the DMA
    /// memory, sets Bus Master Enable, enables two MSI-X vectors (admin, I/O)
    /// and brings the controller up with its admin queue.
    pub fn new(mut dev: RemoteDevice<B>, cfg: NvmeConfig) -> NvmeResult<Self> {
        let layout = Layout::new(&cfg)?;
        let (_, _, class) = dev.ids()?;
        if class != pci::CLASS_NVME {
            return Err(NvmeError::NotNvme {
                path: dev.path().display().to_string(),
                class,
            });
        }
        let mem =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(cfg.iova_base), layout.size as usize)])
                .map_err(|e| NvmeError::Memory {
                    addr: cfg.iova_base,
                    msg: e.to_string(),
                })?;
        dev.map_guest_memory(&mem)?;
        dev.enable_bus_master()?;
        let vectors = dev.msix_count().min(2);
        if cfg.msix_decode_off {
            Self::set_memory_decode(&dev, false)?;
        }
        dev.enable_msix(vectors.max(1))?;
        if cfg.msix_decode_off {
            Self::set_memory_decode(&dev, true)?;
        }
        let io_vector = if vectors >= 2 { 1 } else { 0 };
        let mut nvme = Nvme {
            dev,
            mem,
            layout,
            dstrd: 4,
            admin: Queue::new(0, ADMIN_ENTRIES, layout.asq, layout.acq, 0),
            io: None,
            next_cid: 0,
            block_size: 0,
            slot_prps: Vec::new(),
            counters: Counters::default(),
            cfg,
        };
        nvme.write_prp_lists()?;
        nvme.enable_controller()?;
        nvme.io = Some(Queue::new(
            1,
            IO_ENTRIES,
            layout.iosq,
            layout.iocq,
            io_vector,
        ));
        Ok(nvme)
    }

    /// Sets or clears Memory Space Enable in the command register.
    fn set_memory_decode(dev: &RemoteDevice<B>, on: bool) -> NvmeResult<()> {
        let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
        let cmd = dev.read_u16(cfg, pci::COMMAND)?;
        let cmd = if on {
            cmd | pci::COMMAND_MEMORY
        } else {
            cmd & !pci::COMMAND_MEMORY
        };
        Ok(dev.write_u16(cfg, pci::COMMAND, cmd)?)
    }

    /// Writes every slot's PRP list page and keeps its PRP1 and PRP2, once:
    /// a slot's PRPs depend only on the slot and the I/O size, both fixed
    /// for the driver's life, so no list is ever rewritten while the device
    /// may be reading it, and building a command costs nothing.
    fn write_prp_lists(&mut self) -> NvmeResult<()> {
        for i in 0..self.layout.slots as usize {
            let p = prps(
                self.layout.slot(i),
                u64::from(self.cfg.io_size),
                self.layout.list(i),
            )?;
            let bytes: Vec<u8> = p.list.iter().flat_map(|e| e.to_le_bytes()).collect();
            let addr = self.layout.list(i);
            self.mem
                .write_slice(&bytes, GuestAddress(addr))
                .map_err(Self::mem_err(addr))?;
            self.slot_prps.push((p.prp1, p.prp2));
        }
        Ok(())
    }

    /// The device.
    pub fn device(&self) -> &RemoteDevice<B> {
        &self.dev
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    fn bar_read32(&self, off: u64) -> NvmeResult<u32> {
        Ok(self.dev.read_u32(BAR0, off)?)
    }

    fn bar_write32(&self, off: u64, v: u32) -> NvmeResult<()> {
        Ok(self.dev.write_u32(BAR0, off, v)?)
    }

    fn wait_csts(&self, what: &'static str, ready: bool, timeout: Duration) -> NvmeResult<()> {
        let start = Instant::now();
        loop {
            let csts = self.bar_read32(REG_CSTS)?;
            if csts & 2 != 0 && ready {
                return Err(NvmeError::Fatal { what });
            }
            if (csts & 1 == 1) == ready {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(NvmeError::ControllerTimeout {
                    what,
                    ms: timeout.as_millis() as u64,
                    csts,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn enable_controller(&mut self) -> NvmeResult<()> {
        let cap = self.dev.read_u64(BAR0, REG_CAP)?;
        self.dstrd = 4 << ((cap >> 32) & 0xf);
        let to = Duration::from_millis(((cap >> 24) & 0xff).max(1) * 500).max(self.cfg.timeout);
        // CAP.MPSMIN: the controller's smallest page is 2^(12 + MPSMIN).
        let mpsmin = (cap >> 48) & 0xf;
        if mpsmin != 0 {
            return Err(NvmeError::Config(format!(
                "the controller's smallest memory page (CAP.MPSMIN) is {} bytes; \
                 this driver uses 4 KiB pages (CC.MPS = 0)",
                PAGE << mpsmin
            )));
        }
        let mqes = (cap & 0xffff) as u16;
        if mqes < IO_ENTRIES - 1 {
            return Err(NvmeError::Config(format!(
                "controller queues hold {} entries, {IO_ENTRIES} needed",
                u32::from(mqes) + 1
            )));
        }
        let cc = self.bar_read32(REG_CC)?;
        if cc & 1 != 0 {
            self.bar_write32(REG_CC, cc & !1)?;
        }
        self.wait_csts("become not ready after disable", false, to)?;
        // Zero the queues: a stale phase bit would look like a completion.
        let zero = vec![0u8; (5 * PAGE) as usize];
        self.mem
            .write_slice(&zero, GuestAddress(self.layout.asq))
            .map_err(|e| NvmeError::Memory {
                addr: self.layout.asq,
                msg: e.to_string(),
            })?;
        let aqa = (u32::from(ADMIN_ENTRIES) - 1) << 16 | (u32::from(ADMIN_ENTRIES) - 1);
        self.bar_write32(REG_AQA, aqa)?;
        self.dev.write_u64_split(BAR0, REG_ASQ, self.layout.asq)?;
        self.dev.write_u64_split(BAR0, REG_ACQ, self.layout.acq)?;
        // EN, NVM command set, 4 KiB pages, SQ entries 2^6, CQ entries 2^4.
        self.bar_write32(REG_CC, 1 | CC_MPS_4K | (6 << 16) | (4 << 20))?;
        self.wait_csts("become ready after enable", true, to)
    }

    fn doorbell(&self, qid: u16, cq: bool, value: u16) -> NvmeResult<()> {
        let off = REG_DOORBELLS + (2 * u64::from(qid) + u64::from(cq)) * self.dstrd;
        self.bar_write32(off, u32::from(value))
    }

    fn mem_err(addr: u64) -> impl FnOnce(vm_memory::GuestMemoryError) -> NvmeError {
        move |e| NvmeError::Memory {
            addr,
            msg: e.to_string(),
        }
    }

    /// Queues a command without ringing the doorbell; returns its cid.
    fn push(&mut self, io: bool, cmd: &Command) -> NvmeResult<u16> {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        let q = if io {
            self.io.as_mut().expect("I/O queue")
        } else {
            &mut self.admin
        };
        if q.pending + 1 >= usize::from(q.entries) {
            return Err(NvmeError::Config(format!("queue {} is full", q.qid)));
        }
        let addr = q.sq + u64::from(q.tail) * 64;
        q.tail = (q.tail + 1) % q.entries;
        q.pending += 1;
        self.mem
            .write_slice(&cmd.encode(cid), GuestAddress(addr))
            .map_err(Self::mem_err(addr))?;
        Ok(cid)
    }

    fn ring(&mut self, io: bool) -> NvmeResult<()> {
        fence(Ordering::SeqCst);
        let (qid, tail) = {
            let q = if io {
                self.io.as_ref().expect("I/O queue")
            } else {
                &self.admin
            };
            (q.qid, q.tail)
        };
        self.doorbell(qid, false, tail)
    }

    /// Submits commands (at most the free entries) and rings the doorbell once.
    pub fn submit(&mut self, io: bool, cmds: &[Command]) -> NvmeResult<Vec<u16>> {
        let cids = cmds
            .iter()
            .map(|c| self.push(io, c))
            .collect::<NvmeResult<Vec<_>>>()?;
        self.ring(io)?;
        Ok(cids)
    }

    fn drain(&mut self, io: bool, out: &mut Vec<Completion>) -> NvmeResult<()> {
        let q = if io {
            self.io.as_mut().expect("I/O queue")
        } else {
            &mut self.admin
        };
        let mut any = false;
        loop {
            let addr = q.cq + u64::from(q.head) * 16;
            let status: u16 = self
                .mem
                .read_obj(GuestAddress(addr + 14))
                .map_err(Self::mem_err(addr))?;
            if (status & 1 == 1) != q.phase {
                break;
            }
            // The entry is the device's once the phase flips; read the rest
            // only after seeing it.
            fence(Ordering::Acquire);
            let mut e = [0u8; 16];
            self.mem
                .read_slice(&mut e, GuestAddress(addr))
                .map_err(Self::mem_err(addr))?;
            let (c, _) = decode_completion(&e);
            out.push(c);
            q.pending = q.pending.saturating_sub(1);
            q.head += 1;
            if q.head == q.entries {
                q.head = 0;
                q.phase = !q.phase;
            }
            any = true;
        }
        if any {
            let (qid, head) = (q.qid, q.head);
            self.counters.completions += out.len() as u64;
            self.doorbell(qid, true, head)?;
        }
        Ok(())
    }

    /// Waits until at least one completion arrives on a queue, taking its
    /// MSI-X signal from the vector's eventfd, and returns all that are there.
    pub fn reap(&mut self, io: bool) -> NvmeResult<Vec<Completion>> {
        let mut out = Vec::new();
        let (qid, vector, pending) = {
            let q = if io {
                self.io.as_ref().expect("I/O queue")
            } else {
                &self.admin
            };
            (q.qid, q.vector, q.pending)
        };
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            // Wait for the vector first: a completion is only taken once its
            // interrupt arrived (the interrupt path is what is under test).
            let fd = &self.dev.msix_eventfds()[vector];
            let left = deadline.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is one valid pollfd for the duration of the call.
            let n =
                unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(NvmeError::Wait { vector, source: e });
            }
            if n == 0 {
                self.drain(io, &mut out)?;
                let ms = self.cfg.timeout.as_millis() as u64;
                return Err(if out.is_empty() {
                    NvmeError::Timeout { qid, ms, pending }
                } else {
                    NvmeError::NoInterrupt { qid, vector, ms }
                });
            }
            if fd.read().is_ok() {
                self.counters.irq_signals += 1;
            }
            self.drain(io, &mut out)?;
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }

    fn admin_cmd(&mut self, what: &str, cmd: Command) -> NvmeResult<Completion> {
        self.run_sync(false, what, cmd)
    }

    /// Submits one command on the admin (`io` false) or I/O queue and
    /// reaps until its completion; an error status is an error.
    fn run_sync(&mut self, io: bool, what: &str, cmd: Command) -> NvmeResult<Completion> {
        let cid = self.submit(io, &[cmd])?[0];
        loop {
            for c in self.reap(io)? {
                if c.cid == cid {
                    if !c.ok() {
                        return Err(NvmeError::Command {
                            what: what.to_string(),
                            sct: c.sct(),
                            sc: c.sc(),
                        });
                    }
                    return Ok(c);
                }
            }
        }
    }

    fn read_ident(&self, off: u64, len: usize) -> NvmeResult<Vec<u8>> {
        let mut b = vec![0; len];
        let addr = self.layout.ident + off;
        self.mem
            .read_slice(&mut b, GuestAddress(addr))
            .map_err(Self::mem_err(addr))?;
        Ok(b)
    }

    /// Identify Controller and Namespace 1, then creates the I/O queue pair.
    pub fn identify_and_setup(&mut self) -> NvmeResult<Identity> {
        let ident = self.layout.ident;
        self.admin_cmd(
            "Identify Controller",
            Command {
                opcode: ADMIN_IDENTIFY,
                prp1: ident,
                cdw: [1, 0, 0, 0, 0, 0],
                ..Default::default()
            },
        )?;
        let c = self.read_ident(0, 4096)?;
        let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&c[r]).trim().to_string();
        let vid = u16::from_le_bytes([c[0], c[1]]);
        let serial = text(4..24);
        let model = text(24..64);
        let firmware = text(64..72);
        let namespaces = u32::from_le_bytes([c[516], c[517], c[518], c[519]]);
        // MDTS counts in CAP.MPSMIN pages, which enable_controller made sure
        // are 4 KiB. A shift past 64 bits is no limit anyone could reach.
        let mdts = c[77];
        let max_transfer_bytes = match mdts {
            0 => None,
            m => PAGE.checked_shl(u32::from(m)).filter(|&b| b >> m == PAGE),
        };
        if let Some(max) = max_transfer_bytes {
            if u64::from(self.cfg.io_size) > max {
                return Err(NvmeError::Mdts {
                    io_size: self.cfg.io_size,
                    mdts,
                    max,
                });
            }
        }
        self.admin_cmd(
            "Identify Namespace 1",
            Command {
                opcode: ADMIN_IDENTIFY,
                nsid: 1,
                prp1: ident,
                ..Default::default()
            },
        )?;
        let n = self.read_ident(0, 4096)?;
        let ns_blocks = u64::from_le_bytes(n[0..8].try_into().expect("8 bytes"));
        let flbas = usize::from(n[26] & 0xf);
        let lbads = n[128 + 4 * flbas + 2];
        if !(9..=16).contains(&lbads) {
            return Err(NvmeError::Config(format!(
                "namespace 1 block size 2^{lbads}"
            )));
        }
        let block_size = 1u32 << lbads;
        if self.cfg.io_size % block_size != 0 {
            return Err(NvmeError::Config(format!(
                "I/O size {} is not a multiple of the block size {block_size}",
                self.cfg.io_size
            )));
        }
        self.block_size = block_size;
        let q = self.io.as_ref().expect("I/O queue");
        let (qsize, iv) = (u32::from(q.entries) - 1, q.vector as u32);
        // Create I/O CQ 1: physically contiguous, interrupts enabled on `iv`.
        self.admin_cmd(
            "Create I/O Completion Queue",
            Command {
                opcode: ADMIN_CREATE_CQ,
                prp1: self.layout.iocq,
                cdw: [qsize << 16 | 1, iv << 16 | 0b11, 0, 0, 0, 0],
                ..Default::default()
            },
        )?;
        self.admin_cmd(
            "Create I/O Submission Queue",
            Command {
                opcode: ADMIN_CREATE_SQ,
                prp1: self.layout.iosq,
                cdw: [qsize << 16 | 1, 1 << 16 | 1, 0, 0, 0, 0],
                ..Default::default()
            },
        )?;
        Ok(Identity {
            vid,
            serial,
            model,
            firmware,
            namespaces,
            version: self.bar_read32(REG_VS)?,
            ns_blocks,
            block_size,
            mdts,
            max_transfer_bytes,
        })
    }

    /// The DMA-mapped IOVA range: start and length.
    pub fn dma_window(&self) -> (u64, u64) {
        (self.cfg.iova_base, self.layout.size)
    }

    /// IOVA of data slot `i` (0..queue depth).
    pub fn slot_iova(&self, i: usize) -> u64 {
        self.layout.slot(i)
    }

    /// IOVA of slot `i`'s PRP list page (used when `io_size` spans more
    /// than two pages).
    pub fn prp_list_iova(&self, i: usize) -> u64 {
        self.layout.list(i)
    }

    /// Copies `data` into slot `i`.
    pub fn fill_slot(&self, i: usize, data: &[u8]) -> NvmeResult<()> {
        let addr = self.slot_iova(i);
        self.mem
            .write_slice(data, GuestAddress(addr))
            .map_err(Self::mem_err(addr))
    }

    /// Copies slot `i` out.
    pub fn read_slot(&self, i: usize, data: &mut [u8]) -> NvmeResult<()> {
        let addr = self.slot_iova(i);
        self.mem
            .read_slice(data, GuestAddress(addr))
            .map_err(Self::mem_err(addr))
    }

    /// A read or write of one I/O (`io_size` bytes) at `lba` into slot `i`.
    ///
    /// # Panics
    /// If `i` is not a slot (`queue_depth` or more): its PRPs would point
    /// into another slot's memory.
    pub fn rw_command(&self, opcode: u8, lba: u64, i: usize) -> Command {
        assert!(
            (i as u64) < self.layout.slots,
            "slot {i} of {}",
            self.layout.slots
        );
        let blocks = self.cfg.io_size / self.block_size.max(1);
        let (prp1, prp2) = self.slot_prps[i];
        Command {
            opcode,
            nsid: 1,
            prp1,
            prp2,
            cdw: [
                lba as u32,
                (lba >> 32) as u32,
                blocks.saturating_sub(1),
                0,
                0,
                0,
            ],
        }
    }

    /// Submits I/O commands on the I/O queue; returns their cids.
    pub fn submit_io(&mut self, cmds: &[Command]) -> NvmeResult<Vec<u16>> {
        self.submit(true, cmds)
    }

    /// Waits for I/O completions (at least one).
    pub fn reap_io(&mut self) -> NvmeResult<Vec<Completion>> {
        self.reap(true)
    }

    /// Runs one I/O command to completion.
    pub fn io_sync(&mut self, what: &str, cmd: Command) -> NvmeResult<Completion> {
        self.run_sync(true, what, cmd)
    }

    /// Disables the controller (CC.EN = 0) and waits for it. Dropping does
    /// the same, ignoring errors.
    pub fn shutdown(&mut self) -> NvmeResult<()> {
        let cc = self.bar_read32(REG_CC)?;
        self.bar_write32(REG_CC, cc & !1)?;
        self.wait_csts("stop after disable", false, self.cfg.timeout)?;
        self.dev.disable_bus_master()?;
        Ok(())
    }
}

impl<B: VfioBackend> Drop for Nvme<B> {
    fn drop(&mut self) {
        // Stop the controller before the DMA memory goes away.
        if let Ok(cc) = self.bar_read32(REG_CC) {
            if cc & 1 != 0 {
                let _ = self.bar_write32(REG_CC, cc & !1);
                let _ = self.wait_csts("stop", false, Duration::from_secs(2));
            }
        }
        let _ = self.dev.disable_bus_master();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_encoding_is_little_endian_at_spec_offsets() {
        let c = Command {
            opcode: NVM_READ,
            nsid: 1,
            prp1: 0x1000_5000,
            prp2: 0x1000_6000,
            cdw: [0x10, 0x2, 7, 0, 0, 0],
        };
        let e = c.encode(0xabcd);
        assert_eq!(&e[0..4], &[0x02, 0, 0xcd, 0xab]);
        assert_eq!(&e[4..8], &[1, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(e[24..32].try_into().unwrap()),
            0x1000_5000
        );
        assert_eq!(
            u64::from_le_bytes(e[32..40].try_into().unwrap()),
            0x1000_6000
        );
        assert_eq!(u32::from_le_bytes(e[40..44].try_into().unwrap()), 0x10);
        assert_eq!(u32::from_le_bytes(e[44..48].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(e[48..52].try_into().unwrap()), 7);
    }

    #[test]
    fn completion_decoding_splits_phase_and_status() {
        let mut e = [0u8; 16];
        e[0..4].copy_from_slice(&7u32.to_le_bytes());
        e[8..10].copy_from_slice(&3u16.to_le_bytes());
        e[12..14].copy_from_slice(&42u16.to_le_bytes());
        // SCT 0, SC 0x80 (LBA out of range), phase 1
        e[14..16].copy_from_slice(&((0x80u16 << 1) | 1).to_le_bytes());
        let (c, phase) = decode_completion(&e);
        assert!(phase);
        assert_eq!((c.cid, c.dw0, c.sq_head), (42, 7, 3));
        assert_eq!((c.sct(), c.sc()), (0, 0x80));
        assert!(!c.ok());
    }

    /// The pages a controller would transfer for `p`, in order, as it
    /// reads PRP1, then PRP2 or the list.
    fn pages_of(p: &Prps, len: u64) -> Vec<u64> {
        let n = len.div_ceil(PAGE);
        let mut v = vec![p.prp1];
        match n {
            1 => assert_eq!(p.prp2, 0, "PRP2 set for one page"),
            2 => {
                assert!(p.list.is_empty());
                v.push(p.prp2);
            }
            _ => v.extend(&p.list),
        }
        v
    }

    #[test]
    fn prps_cover_the_buffer_page_by_page() {
        let (buf, list) = (0x1000_8000u64, 0x1000_5000u64);
        for len in [
            512,
            4096,
            4097,
            8192,
            12288,
            65536,
            128 << 10,
            (128 << 10) + 4096,
        ] {
            let p = prps(buf, len, list).unwrap();
            let want: Vec<u64> = (0..len.div_ceil(PAGE)).map(|i| buf + i * PAGE).collect();
            assert_eq!(pages_of(&p, len), want, "{len} bytes");
            // A list exactly when more than two pages, with one entry per
            // page after the first: none past the buffer.
            if len > 2 * PAGE {
                assert_eq!(p.prp2, list, "{len} bytes");
                assert_eq!(p.list.len() as u64, len.div_ceil(PAGE) - 1);
            } else {
                assert!(p.list.is_empty(), "{len} bytes");
            }
        }
    }

    #[test]
    fn prps_for_one_two_and_three_pages() {
        assert_eq!(
            prps(0x2000, 4096, 0x9000).unwrap(),
            Prps {
                prp1: 0x2000,
                prp2: 0,
                list: vec![]
            }
        );
        assert_eq!(
            prps(0x2000, 8192, 0x9000).unwrap(),
            Prps {
                prp1: 0x2000,
                prp2: 0x3000,
                list: vec![]
            }
        );
        assert_eq!(
            prps(0x2000, 12288, 0x9000).unwrap(),
            Prps {
                prp1: 0x2000,
                prp2: 0x9000,
                list: vec![0x3000, 0x4000]
            }
        );
        let p = prps(0x10_0000, 128 << 10, 0x9000).unwrap();
        assert_eq!((p.prp2, p.list.len()), (0x9000, 31));
        assert_eq!(p.list.last(), Some(&(0x10_0000 + 31 * PAGE)));
    }

    #[test]
    fn prps_fill_one_list_page_and_no_more() {
        // 1 + 512 pages: PRP1 and a full list page.
        let p = prps(0, 513 * PAGE, 0x9000_0000).unwrap();
        assert_eq!(p.list.len(), 512);
        // One more page would need a second, chained list page.
        assert!(matches!(
            prps(0, 513 * PAGE + 1, 0x9000_0000),
            Err(NvmeError::Prp { .. })
        ));
    }

    #[test]
    fn prps_refuse_offsets_empty_buffers_and_unaligned_lists() {
        for (iova, len, list) in [
            (0x2200, 4096, 0x9000), // PRP1 offset: not used by this driver
            (0x2004, 512, 0x9000),
            (0x2000, 0, 0x9000),
            (0x2000, 12288, 0x9008), // list page offset
            (!0xfff_u64, 8192, 0x9000),
        ] {
            let e = prps(iova, len, list).unwrap_err();
            assert!(matches!(e, NvmeError::Prp { .. }), "{e}");
        }
        // Up to two pages no list is used, so its address does not matter.
        assert!(prps(0x2000, 8192, 0x9008).is_ok());
        let msg = prps(0x2200, 4096, 0x9000).unwrap_err().to_string();
        assert!(msg.contains("0x2200") && msg.contains("aligned"), "{msg}");
    }

    #[test]
    fn layout_puts_one_list_page_and_one_slot_per_queue_entry() {
        let cfg = NvmeConfig {
            queue_depth: 4,
            io_size: 12288,
            ..NvmeConfig::default()
        };
        let l = Layout::new(&cfg).unwrap();
        let b = cfg.iova_base;
        assert_eq!(l.lists, b + 5 * PAGE);
        assert_eq!(l.data, b + 9 * PAGE);
        assert_eq!((l.slot, l.slots), (3 * PAGE, 4));
        assert_eq!(l.size, 9 * PAGE + 4 * 3 * PAGE);
        assert_eq!(
            l.slot(3) + l.slot,
            b + l.size,
            "the last slot ends the memory"
        );
        assert_eq!(l.list(3) + PAGE, l.data, "lists stop where data starts");
        // An odd size still gives every slot whole pages.
        let l = Layout::new(&NvmeConfig {
            io_size: 4608,
            ..cfg.clone()
        })
        .unwrap();
        assert_eq!(l.slot, 2 * PAGE);
        // 63 slots of 128 KiB: the largest memory, a little under 8 MiB.
        let l = Layout::new(&NvmeConfig {
            queue_depth: 63,
            io_size: MAX_IO_SIZE,
            ..cfg
        })
        .unwrap();
        assert_eq!(l.size, (5 + 63 + 63 * 32) * PAGE);
    }

    #[test]
    fn layout_rejects_bad_configurations() {
        let ok = NvmeConfig::default();
        let l = Layout::new(&ok).unwrap();
        assert_eq!(l.data, ok.iova_base + 5 * PAGE + 8 * PAGE);
        assert_eq!(l.size, 5 * PAGE + 8 * PAGE + 8 * PAGE);
        for good in [4096, 8192, 12288, MAX_IO_SIZE] {
            assert!(Layout::new(&NvmeConfig {
                io_size: good,
                ..ok.clone()
            })
            .is_ok());
        }
        for bad in [
            NvmeConfig {
                iova_base: 0x1001,
                ..ok.clone()
            },
            NvmeConfig {
                iova_base: !0xfff_u64,
                ..ok.clone()
            },
            NvmeConfig {
                queue_depth: 0,
                ..ok.clone()
            },
            NvmeConfig {
                queue_depth: 64,
                ..ok.clone()
            },
            NvmeConfig {
                io_size: 0,
                ..ok.clone()
            },
            // 128 KiB + 4 KiB: one list page could describe it, but it is
            // past the driver's largest I/O.
            NvmeConfig {
                io_size: MAX_IO_SIZE + 4096,
                ..ok.clone()
            },
        ] {
            assert!(
                matches!(Layout::new(&bad), Err(NvmeError::Config(_))),
                "{bad:?}"
            );
        }
    }
}
