//! A hostile lender (issue 26), played from the outer machine against a
//! borrower: `peerfuzz::lender`.
//!
//! The lender's host dies (its QEMU killed) and [`run`] takes its place on
//! the fabric, as [`super::run`] takes a dead borrower's: it keeps the dead
//! lender's heartbeat moving, writes into the lender's entry of the
//! borrower's inbox (in the borrower's RAM file) and takes the borrower's
//! messages from the borrower's entry of the dead lender's inbox (in the
//! lender's RAM file). In [`super::Options`] the target is the borrower
//! and the peer the dead lender. It lends a catalog of made-up devices,
//! and it lies:
//!
//! - it answers the borrower's requests (device list and descriptions,
//!   acquire, config reads, DMA maps and unmaps, interrupt setup, resets,
//!   releases) honestly, or with the wrong type, length, status, request
//!   id (unknown, another request's, twice, late) or epoch, with garbage
//!   that parses (device lists with bogus counts and orders, descriptions
//!   with bogus names, BAR and config sizes, config space at random, a
//!   grant naming another device), or not at all; for stretches of the run
//!   it answers every request with EIO, or never, or with garbage (its
//!   moods);
//! - it posts, unasked, what a lender posts: DEV_CHANGED floods, IRQ_FIRE
//!   for devices, vectors and types that do not exist or are not borrowed
//!   (and for the vectors the borrower did set up), DEV_FAULT for devices
//!   nobody knows; and what any peer can write: bad headers, stale epochs,
//!   sequence gaps, replays, responses to requests nobody made, requests of
//!   unknown types, pings, a corrupt ring.
//!
//! One device of the catalog, the victim, looks like an NVMe controller
//! (MSI-X, MSI, PCI Express with FLR, a 16 KiB BAR): a user on the
//! borrower opens an mdev of it, so that the borrower's open, acquire,
//! config, DMA and interrupt paths meet the lies.
//!
//! Every message written goes through [`BorrowerModel`], which mirrors the
//! borrower's receive path (`fabric/rx.c`, `msg.c`, `request.c`,
//! `ping.c` and the borrower's handlers) and predicts its per-peer
//! counters: exactly where the outcome does not depend on timing, as
//! bounds where it does (an answer to a request the borrower may have given
//! up on counts as an answer or as late).
//!
//! The run talks to its caller in lines on stdout: `HOSTILE-LISTED <json>`
//! once it has told the borrower about its catalog (what the borrower's
//! `remote/` directory must then list: [`Listing`]), then it answers
//! honestly until `go("go")`, lies for `messages` messages, prints
//! `HOSTILE-SENT <json>` and answers honestly again until `go("quit")`;
//! then it lets the borrower take everything it wrote and returns the
//! report.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::Write as _;
use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_wire::{sys, Ping, DL_MSG_HDR_SIZE};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::json;

use super::{
    attach, connect_doorbell, le16, le32, le64, next_seq_after, rings, Expected, Gen, Model,
    Options, Pending, Rings, Want, RESP, S_EINVAL, S_EIO, S_ENODEV, S_ENOTSUPP, S_OK, T_ACQUIRE,
    T_BAR_READ, T_BAR_WINDOW, T_CFG_READ, T_CFG_READ_BLOCK, T_CFG_WRITE, T_DEV_CHANGED,
    T_DEV_FAULT, T_DEV_INFO, T_DEV_LIST, T_DMA_MAP, T_DMA_UNMAP, T_IRQ_DIRECT, T_IRQ_FIRE,
    T_IRQ_MASK, T_IRQ_SET, T_LAST_KNOWN, T_PING, T_RELEASE, T_RESET,
};

/// Remote devices a borrower lists of one lender at most
/// (`DL_REMOTE_MAX_PER_LENDER`, `borrower/remote.c`).
pub const BORROWER_MAX_PER_LENDER: usize = 256;

/// The default victim's dev_id.
pub const DEFAULT_VICTIM: u32 = 7;

/// The default size of the catalog: more than a borrower lists.
pub const DEFAULT_CATALOG: usize = 300;

const S_EBUSY: u32 = sys::DL_STATUS_EBUSY;

/// What the hostile lender lends and how it lies, besides [`Options`].
#[derive(Debug, Clone)]
pub struct HostileOptions {
    /// Made-up devices in the catalog (at least 1: the victim).
    pub catalog: usize,
    /// The victim's dev_id: the device the borrower is to borrow.
    pub victim: u32,
    /// How long a late answer is held back: longer than the borrower's
    /// wait (`DL_FABRIC_REQ_TIMEOUT_MS`, 2 s) in the VM check.
    pub late: Duration,
    /// How often, while honest, the borrower is told to read the catalog
    /// again (DEV_CHANGED), so that what it lists catches up.
    pub refresh: Duration,
    /// IRQ_FIRE bursts: written while the borrower's ring is empty, so its
    /// doorbell interrupt takes them (counted `rx_in_irq`).
    pub irq_bursts: u32,
    /// Unsolicited messages a second at most while lying (0: as fast as
    /// the borrower takes them, some 50 000 a second under TCG), so that
    /// the lies last long enough for a user of the victim to meet them.
    pub rate: u32,
}

impl Default for HostileOptions {
    fn default() -> Self {
        HostileOptions {
            catalog: DEFAULT_CATALOG,
            victim: DEFAULT_VICTIM,
            late: Duration::from_millis(2500),
            refresh: Duration::from_secs(2),
            irq_bursts: 8,
            rate: 0,
        }
    }
}

// ---------------------------------------------------------------------------
// The catalog.

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Whether the kernel's `isgraph()` (`lib/ctype.c`, Latin-1) takes a byte.
fn kernel_isgraph(c: u8) -> bool {
    matches!(c, 0x21..=0x7e | 0xa1..=0xff)
}

/// A name as the borrower shows it (`dl_remote_copy_name()`,
/// `borrower/remote.c`): up to the first NUL, at most 16 bytes, every byte
/// `isgraph()` refuses and every '/' made a '?'.
pub fn borrower_name(raw: &[u8]) -> Vec<u8> {
    raw.iter()
        .take(16)
        .take_while(|&&c| c != 0)
        .map(|&c| {
            if kernel_isgraph(c) && c != b'/' {
                c
            } else {
                b'?'
            }
        })
        .collect()
}

/// A device's state as the borrower's `remote/<id>/state` says it.
fn state_name(state: u16) -> &'static str {
    match u32::from(state) {
        sys::DL_LENT_AVAILABLE => "available",
        sys::DL_LENT_BORROWED => "borrowed",
        sys::DL_LENT_RETURNING => "returning",
        sys::DL_LENT_FAILED => "failed",
        _ => "unknown",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One made-up device.
#[derive(Debug, Clone)]
struct FakeDev {
    dev_id: u32,
    vendor: u16,
    device: u16,
    class_rev: u32,
    state: u16,
    borrower: u16,
    flags: u32,
    msix: u16,
    msi: u16,
    cfg_size: u32,
    bars: [(u64, u32); 6],
    name: [u8; 16],
    pf_name: [u8; 16],
    /// The config space served, from offset 0 (zeros past it).
    cfg: Vec<u8>,
    /// The borrower holds it: an honest description says so.
    held: bool,
}

impl FakeDev {
    /// Its `dl_dev_info`, as an honest lender describes it to `borrower`.
    fn info(&self, borrower: u32) -> Vec<u8> {
        let mut b = vec![0u8; sys::DL_DEV_INFO_SIZE];
        put32(&mut b, offset_of!(sys::dl_dev_info, dev_id), self.dev_id);
        put16(&mut b, offset_of!(sys::dl_dev_info, vendor), self.vendor);
        put16(&mut b, offset_of!(sys::dl_dev_info, device), self.device);
        put32(
            &mut b,
            offset_of!(sys::dl_dev_info, class_rev),
            self.class_rev,
        );
        let (state, holder) = if self.held {
            (sys::DL_LENT_BORROWED as u16, borrower as u16)
        } else {
            (self.state, self.borrower)
        };
        put16(&mut b, offset_of!(sys::dl_dev_info, state), state);
        put16(&mut b, offset_of!(sys::dl_dev_info, borrower), holder);
        put32(&mut b, offset_of!(sys::dl_dev_info, flags), self.flags);
        put16(&mut b, offset_of!(sys::dl_dev_info, msix_count), self.msix);
        put16(&mut b, offset_of!(sys::dl_dev_info, msi_count), self.msi);
        put32(
            &mut b,
            offset_of!(sys::dl_dev_info, cfg_size),
            self.cfg_size,
        );
        let bars = offset_of!(sys::dl_dev_info, bars);
        for (i, (size, flags)) in self.bars.iter().enumerate() {
            let at = bars + i * sys::DL_BAR_DESC_SIZE;
            put64(&mut b, at + offset_of!(sys::dl_bar_desc, size), *size);
            put32(&mut b, at + offset_of!(sys::dl_bar_desc, flags), *flags);
        }
        let name = offset_of!(sys::dl_dev_info, name);
        b[name..name + 16].copy_from_slice(&self.name);
        b
    }

    /// Its `dl_dev_info_ext`.
    fn ext(&self) -> Vec<u8> {
        let mut b = vec![0u8; sys::DL_DEV_INFO_EXT_SIZE];
        b[..16].copy_from_slice(&self.pf_name);
        b
    }

    /// What the borrower's `remote/` must say of it, honestly described.
    fn listed(&self, lender: u32) -> Listed {
        let vf = self.flags & sys::DL_DEV_F_VF != 0;
        Listed {
            key: format!("{lender}:{}", self.dev_id),
            name: hex(&borrower_name(&self.name)),
            pf: if vf {
                hex(&borrower_name(&self.pf_name))
            } else {
                String::new()
            },
            vendor: format!("0x{:04x}", self.vendor),
            device: format!("0x{:04x}", self.device),
            class: format!("0x{:06x}", self.class_rev >> 8),
            state: state_name(if self.held {
                sys::DL_LENT_BORROWED as u16
            } else {
                self.state
            })
            .to_owned(),
        }
    }
}

/// The config space of the victim: an NVMe controller with a 64-bit BAR0,
/// MSI-X (8 vectors, table and PBA in BAR0), MSI (one 64-bit vector) and a
/// PCI Express capability that can do FLR; INTx pin A.
fn victim_config(vendor: u16, device: u16, class_rev: u32) -> Vec<u8> {
    let mut c = vec![0u8; 256];
    put16(&mut c, 0x00, vendor);
    put16(&mut c, 0x02, device);
    put16(&mut c, 0x06, 0x0010); // status: capability list
    put32(&mut c, 0x08, class_rev);
    put32(&mut c, 0x10, 0x4); // BAR0: 64-bit memory
    put16(&mut c, 0x2c, 0x1af4);
    put16(&mut c, 0x2e, 0x1100);
    c[0x34] = 0x40;
    c[0x3c] = 0x0b;
    c[0x3d] = 1;
    // MSI-X: 8 vectors, table at BAR0 + 0x2000, PBA at BAR0 + 0x3000.
    c[0x40] = 0x11;
    c[0x41] = 0x50;
    put16(&mut c, 0x42, 7);
    put32(&mut c, 0x44, 0x2000);
    put32(&mut c, 0x48, 0x3000);
    // MSI: 64-bit, one vector.
    c[0x50] = 0x05;
    c[0x51] = 0x60;
    put16(&mut c, 0x52, 0x0080);
    // PCI Express 2, endpoint, FLR capable.
    c[0x60] = 0x10;
    put16(&mut c, 0x62, 0x0002);
    put32(&mut c, 0x64, 0x1000_0000);
    c
}

fn victim(dev_id: u32) -> FakeDev {
    let (vendor, device, class_rev) = (0x1b36, 0x0010, 0x0108_0202);
    let mut name = [0u8; 16];
    name[..12].copy_from_slice(b"0000:66:00.0");
    FakeDev {
        dev_id,
        vendor,
        device,
        class_rev,
        state: sys::DL_LENT_AVAILABLE as u16,
        borrower: sys::DL_NO_HOST as u16,
        flags: sys::DL_DEV_F_MSIX | sys::DL_DEV_F_MSI | sys::DL_DEV_F_INTX | sys::DL_DEV_F_PCIE,
        msix: 8,
        msi: 1,
        cfg_size: 256,
        bars: [
            (0x4000, sys::DL_BAR_F_PRESENT | sys::DL_BAR_F_MEM64),
            (0, 0),
            (0, 0),
            (0, 0),
            (0, 0),
            (0, 0),
        ],
        name,
        pf_name: [0; 16],
        cfg: victim_config(vendor, device, class_rev),
        held: false,
    }
}

/// A name a lender could send: plausible, or 16 bytes with no NUL, with
/// slashes, spaces, '=' and control characters, Latin-1 bytes, empty, or
/// with bytes after a NUL.
fn odd_name(rng: &mut StdRng) -> [u8; 16] {
    let mut n = [0u8; 16];
    match rng.random_range(0..7) {
        0 => {
            let s = format!(
                "0000:{:02x}:{:02x}.{}",
                rng.random::<u8>(),
                rng.random_range(0..32u8),
                rng.random_range(0..8u8)
            );
            n[..s.len()].copy_from_slice(s.as_bytes());
        }
        1 => n.iter_mut().for_each(|c| *c = rng.random_range(0x21..0x7f)),
        2 => {
            n.iter_mut().for_each(|c| *c = rng.random_range(0x21..0x7f));
            for _ in 0..rng.random_range(1..4) {
                n[rng.random_range(0..16)] = b'/';
            }
        }
        3 => n.iter_mut().for_each(|c| {
            *c = [b' ', b'=', b'\n', b'\t', 0x7f, 0x1b, b'a', b'.'][rng.random_range(0..8)]
        }),
        4 => n
            .iter_mut()
            .for_each(|c| *c = rng.random_range(0x80..=0xff)),
        5 => {}
        _ => {
            rng.fill_bytes(&mut n);
            n[rng.random_range(0..16)] = 0;
        }
    }
    n
}

/// A made-up device with odd but well-formed-looking fields.
fn odd_dev(rng: &mut StdRng, dev_id: u32, borrower: u32) -> FakeDev {
    let class_rev = match rng.random_range(0..4) {
        0 => 0x0108_0200 | rng.random_range(0..256),
        1 => 0x0200_0000 | rng.random_range(0..256),
        _ => rng.random(),
    };
    let state = match rng.random_range(0..8) {
        0..=3 => sys::DL_LENT_AVAILABLE as u16,
        4 => sys::DL_LENT_BORROWED as u16,
        5 => sys::DL_LENT_RETURNING as u16,
        6 => sys::DL_LENT_FAILED as u16,
        _ => rng.random_range(4..=u16::MAX),
    };
    let holder = match rng.random_range(0..4) {
        0 => borrower as u16,
        1 => rng.random(),
        _ => sys::DL_NO_HOST as u16,
    };
    let mut bars = [(0u64, 0u32); 6];
    for b in &mut bars {
        *b = match rng.random_range(0..8) {
            0 => (0, 0),
            1 => (
                1 << rng.random_range(4..40),
                sys::DL_BAR_F_PRESENT | sys::DL_BAR_F_MEM64,
            ),
            2 => (3000, sys::DL_BAR_F_PRESENT),
            3 => (u64::MAX, sys::DL_BAR_F_PRESENT),
            4 => (
                1 << 63,
                sys::DL_BAR_F_PRESENT | sys::DL_BAR_F_MEM64 | sys::DL_BAR_F_PREFETCH,
            ),
            5 => (0x100, sys::DL_BAR_F_PRESENT | sys::DL_BAR_F_IO),
            _ => (rng.random(), rng.random()),
        };
    }
    let mut cfg = vec![0u8; 256];
    rng.fill_bytes(&mut cfg);
    FakeDev {
        dev_id,
        vendor: rng.random(),
        device: rng.random(),
        class_rev,
        state,
        borrower: holder,
        flags: if rng.random_ratio(1, 2) {
            rng.random_range(0..0x20)
        } else {
            rng.random()
        },
        msix: rng.random(),
        msi: rng.random(),
        cfg_size: [256, 4096, 0, 100, u32::MAX][rng.random_range(0..5)],
        bars,
        name: odd_name(rng),
        pf_name: odd_name(rng),
        cfg,
        held: false,
    }
}

/// `n` devices (at least the victim), by dev_id: small ids, the victim's,
/// and for larger catalogs the largest ids there are.
fn catalog(rng: &mut StdRng, n: usize, victim_id: u32, borrower: u32) -> Vec<FakeDev> {
    let mut ids = BTreeSet::from([victim_id]);
    if n > 8 {
        ids.insert(u32::MAX);
        ids.insert(u32::MAX - 1);
    }
    let mut next = 0u32;
    while ids.len() < n.max(1) {
        ids.insert(next);
        next += if next < 4 { 1 } else { rng.random_range(1..=5) };
    }
    ids.into_iter()
        .map(|id| {
            if id == victim_id {
                victim(id)
            } else {
                odd_dev(rng, id, borrower)
            }
        })
        .collect()
}

/// What the borrower's `remote/<key>/` says of one device, names and PF
/// names hex-encoded (without the newline sysfs adds).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listed {
    /// `<lender host id>:<dev_id>`.
    pub key: String,
    /// `name`, hex.
    pub name: String,
    /// `pf`, hex.
    pub pf: String,
    /// `vendor`.
    pub vendor: String,
    /// `device`.
    pub device: String,
    /// `class`.
    pub class: String,
    /// `state`.
    pub state: String,
}

/// What the borrower must list of the hostile lender once it has read its
/// catalog, honestly described.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listing {
    /// The dead lender's host id.
    pub lender: u32,
    /// The victim's dev_id.
    pub victim: u32,
    /// Devices in the catalog.
    pub catalog: usize,
    /// The first [`BORROWER_MAX_PER_LENDER`] of them, by dev_id.
    pub listed: Vec<Listed>,
}

// ---------------------------------------------------------------------------
// The borrower's receive path, modelled.

/// Lending request types, which the borrower host's own lender module
/// handles (`lender/msg.c`).
fn lender_handles(t: u16) -> bool {
    matches!(
        t,
        T_DEV_LIST | T_DEV_INFO | T_ACQUIRE
            ..=T_IRQ_SET | T_CFG_READ_BLOCK | T_IRQ_MASK | T_IRQ_DIRECT | T_BAR_WINDOW
    )
}

/// What the borrower must have counted for the messages written
/// (debugfs `peers`, the dead lender's line).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostileExpected {
    /// `rx_msgs`, exactly.
    pub rx_msgs: u64,
    /// `rx_stale`, exactly.
    pub rx_stale: u64,
    /// `rx_seq_errors`, exactly.
    pub rx_seq_errors: u64,
    /// `rx_corrupt_ring`, exactly.
    pub rx_corrupt_ring: u64,
    /// `rx_unknown`, exactly.
    pub rx_unknown: u64,
    /// `rx_bad_msgs`, at least: bad headers, responses without an id, bad
    /// pings, posted messages of unknown types.
    pub bad_min: u64,
    /// First answers of the wrong type to the borrower's requests: also
    /// `rx_bad_msgs` if the borrower still waited for them.
    pub wrong_type_answers: u64,
    /// `late_responses`, at least: answers to ids the borrower never used
    /// or that were answered already.
    pub late_min: u64,
    /// First answers to the borrower's requests: each counted `answers`
    /// if the borrower still waited, else `late_responses`.
    pub first_answers: u64,
    /// `rx_in_irq`, at most: posted IRQ_FIREs (as their headers say).
    pub irq_fire_max: u64,
}

/// The borrower's view of the hostile lender, message by message.
#[derive(Debug)]
pub struct BorrowerModel {
    /// The header checks, and the counters of [`Expected`] they feed.
    hdr: Model,
    /// The borrower's requests seen, by id: type, and whether a first
    /// answer (one whose header the borrower takes) was written.
    issued: HashMap<u64, (u16, bool)>,
    exp: HostileExpected,
}

impl BorrowerModel {
    fn new(src: u32, epoch: u32, max_payload: usize) -> Self {
        BorrowerModel {
            hdr: Model {
                src,
                epoch,
                proto: devlend_wire::DL_PROTO_V1,
                max_payload,
                next_seq: None,
                lent: Default::default(),
                target_reqs: HashMap::new(),
                exp: Expected::default(),
            },
            issued: HashMap::new(),
            exp: HostileExpected::default(),
        }
    }

    /// A request of the borrower, seen in its ring.
    fn issued(&mut self, req_id: u64, msg_type: u16) {
        self.issued.entry(req_id).or_insert((msg_type, false));
    }

    /// Whether a request of the borrower has had a first answer.
    fn answered(&self, req_id: u64) -> bool {
        self.issued.get(&req_id).is_some_and(|(_, a)| *a)
    }

    /// Applies one message as the borrower will see it; the response the
    /// borrower must send, if any.
    fn apply(&mut self, slot: &[u8]) -> Option<Pending> {
        let (msg_type, flags, req_id) = (le16(slot, 0), le16(slot, 6), le64(slot, 24));
        if msg_type == T_IRQ_FIRE && flags & RESP == 0 && req_id == 0 {
            self.exp.irq_fire_max += 1;
        }
        if !self.hdr.header(slot) {
            return None;
        }
        let len = usize::from(le16(slot, 4));
        if flags & RESP != 0 {
            if req_id == 0 {
                self.exp.bad_min += 1;
                return None;
            }
            match self.issued.get_mut(&req_id) {
                Some((t, answered @ false)) => {
                    *answered = true;
                    self.exp.first_answers += 1;
                    if *t != msg_type {
                        self.exp.wrong_type_answers += 1;
                    }
                }
                _ => self.exp.late_min += 1,
            }
            return None;
        }
        let pending = |want| {
            (req_id != 0).then_some(Pending {
                req_id,
                want,
                real_dev: false,
                msg_type,
            })
        };
        match msg_type {
            T_PING => {
                if len < sys::DL_PING_SIZE {
                    self.exp.bad_min += 1;
                    return pending(Want::Exact(S_EINVAL));
                }
                let payload = &slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + len];
                let ok = Ping::decode(payload)
                    .map(|(p, data)| p.verify(data).is_ok())
                    .unwrap_or(false);
                pending(Want::Exact(if ok { S_OK } else { S_EINVAL }))
            }
            // The borrower's handlers: they never answer.
            T_DEV_CHANGED | T_IRQ_FIRE | T_DEV_FAULT => None,
            // The borrower host's lender module answers these; the
            // generator writes none on purpose.
            t if lender_handles(t) => pending(Want::Any),
            _ if req_id != 0 => {
                self.hdr.exp.rx_unknown += 1;
                pending(Want::Exact(S_ENOTSUPP))
            }
            _ => {
                self.exp.bad_min += 1;
                None
            }
        }
    }

    /// The ring was skipped as corrupt: the borrower forgets its sequence.
    fn corrupt(&mut self) {
        self.hdr.exp.rx_corrupt_ring += 1;
        self.hdr.next_seq = None;
    }

    /// Everything expected so far.
    pub fn expected(&self) -> HostileExpected {
        let h = &self.hdr.exp;
        HostileExpected {
            rx_msgs: h.rx_msgs,
            rx_stale: h.rx_stale,
            rx_seq_errors: h.rx_seq_errors,
            rx_corrupt_ring: h.rx_corrupt_ring,
            rx_unknown: h.rx_unknown,
            bad_min: self.exp.bad_min + h.rx_bad_msgs,
            ..self.exp.clone()
        }
    }
}

// ---------------------------------------------------------------------------
// How it answers.

/// How the hostile lender answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Twist {
    /// As an honest lender would.
    Honest,
    /// A status other than OK (EPROTO for those nobody defines).
    Status(u32),
    /// A response of another type.
    WrongType,
    /// Shorter than the answer (the borrower wants it whole).
    Short,
    /// Longer than the borrower's buffer.
    Long,
    /// Naming another device (or a device list out of order).
    OtherDev,
    /// Parses, but nonsense: bogus counts, fields, config space.
    Garbage,
    /// To a request id the borrower never used.
    UnknownId,
    /// With the id of another request of the borrower.
    CrossId,
    /// From another incarnation of the lender (dropped as stale).
    StaleEpoch,
    /// A header the borrower drops: source, protocol or length.
    BadHeader,
    /// Answered twice.
    Duplicate,
    /// Answered honestly, after the borrower gave up.
    Late,
    /// Never answered.
    Silent,
}

impl Twist {
    fn name(self) -> &'static str {
        match self {
            Twist::Honest => "honest",
            Twist::Status(_) => "status",
            Twist::WrongType => "wrong_type",
            Twist::Short => "short",
            Twist::Long => "long",
            Twist::OtherDev => "other_dev",
            Twist::Garbage => "garbage",
            Twist::UnknownId => "unknown_id",
            Twist::CrossId => "cross_id",
            Twist::StaleEpoch => "stale_epoch",
            Twist::BadHeader => "bad_header",
            Twist::Duplicate => "duplicate",
            Twist::Late => "late",
            Twist::Silent => "silent",
        }
    }
}

/// How the hostile lender answers for a stretch of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mood {
    /// Every request answered honestly.
    Honest,
    /// Each request at random: mostly honest.
    Mixed,
    /// Every request answered EIO, for ever (as the stretch lasts).
    EioForever,
    /// No request answered.
    Silent,
    /// Every answer malformed or nonsense.
    Garbage,
}

impl Mood {
    fn name(self) -> &'static str {
        match self {
            Mood::Honest => "honest",
            Mood::Mixed => "mixed",
            Mood::EioForever => "eio_forever",
            Mood::Silent => "silent",
            Mood::Garbage => "garbage",
        }
    }
}

/// A request of the borrower.
#[derive(Debug, Clone)]
struct Ask {
    msg_type: u16,
    req_id: u64,
    payload: Vec<u8>,
}

impl Ask {
    fn dev(&self) -> Option<u32> {
        (self.payload.len() >= 4).then(|| le32(&self.payload, 0))
    }

    /// The response buffer the borrower has for it (`remote.c`,
    /// `vdev.c`, `config.c`): a longer answer is -EMSGSIZE.
    fn resp_size(&self) -> usize {
        match self.msg_type {
            T_DEV_LIST => sys::DL_DEV_LIST_SIZE,
            T_DEV_INFO if self.payload.len() >= 8 && le32(&self.payload, 4) != 0 => {
                sys::DL_DEV_INFO_FULL_SIZE
            }
            T_DEV_INFO => sys::DL_DEV_INFO_SIZE,
            T_ACQUIRE => sys::DL_DEV_REF_SIZE,
            T_CFG_READ => sys::DL_CFG_ACCESS_SIZE,
            T_CFG_READ_BLOCK => sys::DL_CFG_BLOCK_SIZE,
            T_BAR_READ => sys::DL_BAR_ACCESS_SIZE,
            _ => 0,
        }
    }
}

/// Unsolicited kinds, with weights (per 1000).
const KINDS: &[(&str, u32)] = &[
    ("dev_changed", 110),
    ("dev_changed_short", 20),
    ("irq_fire_bogus", 150),
    ("irq_fire_real", 80),
    ("irq_fire_short", 20),
    ("dev_fault", 60),
    ("unknown_response", 110),
    ("stale_epoch", 60),
    ("bad_len", 30),
    ("bad_src", 30),
    ("bad_proto", 30),
    ("random_bytes", 40),
    ("unknown_type", 60),
    ("ping", 40),
    ("replay", 60),
];

/// Lending types an answer of the wrong type may carry.
const ANSWER_TYPES: [u16; 12] = [
    T_DEV_LIST,
    T_DEV_INFO,
    T_ACQUIRE,
    T_RELEASE,
    T_RESET,
    T_CFG_READ,
    T_CFG_WRITE,
    T_BAR_READ,
    T_DMA_MAP,
    T_DMA_UNMAP,
    T_IRQ_SET,
    T_CFG_READ_BLOCK,
];

/// What the hostile lender did and saw.
#[derive(Debug, Default, Clone)]
pub struct HostileReport {
    /// Seed.
    pub seed: u64,
    /// Messages written in all (answers included).
    pub written: u64,
    /// Of those, in the hostile stretch.
    pub hostile: u64,
    /// Seconds of the hostile stretch.
    pub secs: f64,
    /// Whether the borrower's doorbell was used.
    pub doorbell: bool,
    /// Unsolicited messages, by kind.
    pub kinds: BTreeMap<&'static str, u64>,
    /// Answers to the borrower's requests, by twist.
    pub twists: BTreeMap<&'static str, u64>,
    /// Moods, in order.
    pub moods: Vec<&'static str>,
    /// The borrower's requests, by type.
    pub asks: BTreeMap<u16, u64>,
    /// The borrower's posted messages, by type.
    pub posts: BTreeMap<u16, u64>,
    /// Grants sent for the victim (honest or not).
    pub grants: u64,
    /// IRQ_FIRE bursts written into an empty ring.
    pub irq_bursts: u64,
    /// Expected counters.
    pub expected: HostileExpected,
    /// The borrower's responses to our requests, by status.
    pub responses: BTreeMap<u32, u64>,
    /// Responses whose status or type was not the one required.
    pub wrong_status: u64,
    /// A few of them.
    pub wrong_examples: Vec<String>,
    /// Requests of ours that got no response.
    pub missing_responses: u64,
    /// Responses to nothing we asked.
    pub unexpected_responses: u64,
}

impl HostileReport {
    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let e = &self.expected;
        let by_type = |m: &BTreeMap<u16, u64>| -> serde_json::Map<String, serde_json::Value> {
            m.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()
        };
        json!({
            "seed": self.seed,
            "written": self.written,
            "hostile": self.hostile,
            "secs": self.secs,
            "doorbell": self.doorbell,
            "kinds": self.kinds,
            "twists": self.twists,
            "moods": self.moods,
            "asks": by_type(&self.asks),
            "posts": by_type(&self.posts),
            "grants": self.grants,
            "irq_bursts": self.irq_bursts,
            "expected": {
                "rx_msgs": e.rx_msgs,
                "rx_stale": e.rx_stale,
                "rx_seq_errors": e.rx_seq_errors,
                "rx_corrupt_ring": e.rx_corrupt_ring,
                "rx_unknown": e.rx_unknown,
                "bad_min": e.bad_min,
                "wrong_type_answers": e.wrong_type_answers,
                "late_min": e.late_min,
                "first_answers": e.first_answers,
                "irq_fire_max": e.irq_fire_max,
            },
            "responses": self.responses.iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>(),
            "wrong_status": self.wrong_status,
            "wrong_examples": self.wrong_examples,
            "missing_responses": self.missing_responses,
            "unexpected_responses": self.unexpected_responses,
        })
    }
}

// ---------------------------------------------------------------------------
// The run.

struct Hostile<'a> {
    rings: Rings<'a>,
    gen: Gen,
    model: BorrowerModel,
    ho: HostileOptions,
    devs: Vec<FakeDev>,
    /// The borrower's host id.
    borrower: u32,
    prod: u32,
    rx_cons: u32,
    /// Slots free in the ring to the borrower, for the batch being written.
    room: u32,
    /// The borrower's requests not answered yet.
    asks: VecDeque<Ask>,
    /// Ids of the borrower's requests, newest last (for cross answers).
    recent_ids: VecDeque<u64>,
    /// Answers held back, and when they are due.
    later: VecDeque<(Instant, Ask)>,
    /// Our own requests, in the order the borrower must answer them.
    pending: VecDeque<Pending>,
    mood: Mood,
    /// Vectors the borrower set up for the victim, by type.
    irq_counts: [u32; 3],
    report: HostileReport,
    last_beat: Instant,
    last_activity: Instant,
    bell: Option<std::os::fd::OwnedFd>,
    /// Whether the borrower's requests are taken (else dropped: made to
    /// the real lender before the hostile one came).
    serving: bool,
}

impl Hostile<'_> {
    fn keep_alive(&mut self) {
        self.rings.keep_alive(&mut self.last_beat);
    }

    fn free_slots(&self) -> u32 {
        self.rings.free_slots(self.prod)
    }

    fn publish(&mut self) -> anyhow::Result<()> {
        self.rings.publish(self.prod, self.bell.as_ref())?;
        self.last_activity = Instant::now();
        Ok(())
    }

    /// Starts a batch of writes: the binding checked, the room counted.
    fn batch(&mut self) -> anyhow::Result<u32> {
        self.rings.check_bound()?;
        self.room = self.free_slots();
        Ok(self.room)
    }

    /// Writes one message into the next slot of the batch.
    fn put(&mut self, slot: &[u8]) {
        assert!(self.room > 0, "a write past the room of the batch");
        self.room -= 1;
        let off = self.rings.slot_off(self.rings.tx_slots, self.prod);
        self.rings.target_inbox.write(off, slot);
        self.prod = self.prod.wrapping_add(1);
        self.report.written += 1;
        if let Some(p) = self.model.apply(slot) {
            self.pending.push_back(p);
        }
        if self.gen.recent.len() == 64 {
            self.gen.recent.pop_front();
        }
        self.gen.recent.push_back(slot.to_vec());
    }

    /// Takes what the borrower wrote: its requests (queued for answers),
    /// posted messages, and responses to our requests.
    fn drain_rx(&mut self) -> anyhow::Result<()> {
        for m in self.rings.drain(&mut self.rx_cons, true)? {
            let (t, req_id) = (m.msg_type, m.req_id);
            if m.flags & RESP != 0 {
                self.response(t, m.status, req_id);
            } else if req_id != 0 {
                if self.serving {
                    *self.report.asks.entry(t).or_default() += 1;
                    self.model.issued(req_id, t);
                    if self.recent_ids.len() == 32 {
                        self.recent_ids.pop_front();
                    }
                    self.recent_ids.push_back(req_id);
                    self.asks.push_back(Ask {
                        msg_type: t,
                        req_id,
                        payload: m.payload,
                    });
                }
            } else if self.serving {
                *self.report.posts.entry(t).or_default() += 1;
            }
        }
        Ok(())
    }

    fn response(&mut self, t: u16, status: u32, req_id: u64) {
        *self.report.responses.entry(status).or_default() += 1;
        let Some(pos) = self.pending.iter().position(|p| p.req_id == req_id) else {
            self.report.unexpected_responses += 1;
            return;
        };
        // The borrower answers in ring order: what was asked before and
        // is still pending got no answer.
        let p = self.pending.remove(pos).expect("pos is in range");
        self.report.missing_responses += pos as u64;
        self.pending.drain(..pos);
        let ok = match p.want {
            Want::Exact(s) => s == status,
            Want::NotOk => status != S_OK,
            Want::Any => true,
        } && t == p.msg_type;
        if !ok {
            self.report.wrong_status += 1;
            if self.report.wrong_examples.len() < 10 {
                self.report.wrong_examples.push(format!(
                    "type {} req {req_id:#x}: status {status} (type {t}), wanted {:?}",
                    p.msg_type, p.want
                ));
            }
        }
    }

    fn dev(&self, dev_id: u32) -> Option<&FakeDev> {
        self.devs
            .binary_search_by_key(&dev_id, |d| d.dev_id)
            .ok()
            .map(|i| &self.devs[i])
    }

    fn dev_mut(&mut self, dev_id: u32) -> Option<&mut FakeDev> {
        self.devs
            .binary_search_by_key(&dev_id, |d| d.dev_id)
            .ok()
            .map(|i| &mut self.devs[i])
    }

    /// What an honest lender answers: status and payload.
    fn honest(&mut self, ask: &Ask) -> (u32, Vec<u8>) {
        let p = &ask.payload;
        let sized = |n: usize| p.len() == n;
        match ask.msg_type {
            T_DEV_LIST if sized(sys::DL_DEV_REF_SIZE) => {
                let start = le32(p, 0);
                let ids: Vec<u32> = self
                    .devs
                    .iter()
                    .map(|d| d.dev_id)
                    .filter(|&id| id >= start)
                    .take(sys::DL_DEV_LIST_MAX as usize)
                    .collect();
                let mut b = vec![0u8; sys::DL_DEV_LIST_SIZE];
                put32(&mut b, 0, self.devs.len() as u32);
                put32(&mut b, 4, ids.len() as u32);
                for (i, id) in ids.iter().enumerate() {
                    put32(&mut b, 8 + 4 * i, *id);
                }
                (S_OK, b)
            }
            T_DEV_INFO if sized(sys::DL_DEV_REF_SIZE) => {
                let ext = le32(p, 4) & sys::DL_DEV_REF_F_INFO_EXT != 0;
                let borrower = self.borrower;
                match self.dev(le32(p, 0)) {
                    Some(d) => {
                        let mut b = d.info(borrower);
                        if ext {
                            b.extend_from_slice(&d.ext());
                        }
                        (S_OK, b)
                    }
                    None => (S_ENODEV, Vec::new()),
                }
            }
            // Granted, again if need be: this lender lends to nobody else.
            T_ACQUIRE if sized(sys::DL_DEV_REF_SIZE) => match self.dev(le32(p, 0)) {
                Some(_) => (S_OK, p.clone()),
                None => (S_ENODEV, Vec::new()),
            },
            T_CFG_READ if sized(sys::DL_CFG_ACCESS_SIZE) => {
                let (off, size) = (usize::from(le16(p, 4)), usize::from(p[6]));
                match self.dev(le32(p, 0)) {
                    Some(d) if matches!(size, 1 | 2 | 4) => {
                        let mut v = [0u8; 4];
                        for (i, b) in v.iter_mut().take(size).enumerate() {
                            *b = d.cfg.get(off + i).copied().unwrap_or(0);
                        }
                        let mut b = p.clone();
                        b[8..12].copy_from_slice(&v);
                        (S_OK, b)
                    }
                    Some(_) => (S_EINVAL, Vec::new()),
                    None => (S_ENODEV, Vec::new()),
                }
            }
            T_CFG_READ_BLOCK if sized(sys::DL_CFG_BLOCK_REQ_SIZE) => {
                let (off, len) = (usize::from(le16(p, 4)), usize::from(le16(p, 6)));
                match self.dev(le32(p, 0)) {
                    Some(d) if len <= sys::DL_CFG_BLOCK_MAX as usize => {
                        let mut b = vec![0u8; sys::DL_CFG_BLOCK_SIZE];
                        b[..8].copy_from_slice(&p[..8]);
                        for i in 0..len {
                            b[8 + i] = d.cfg.get(off + i).copied().unwrap_or(0);
                        }
                        (S_OK, b)
                    }
                    Some(_) => (S_EINVAL, Vec::new()),
                    None => (S_ENODEV, Vec::new()),
                }
            }
            T_BAR_READ if sized(sys::DL_BAR_ACCESS_SIZE) => match self.dev(le32(p, 0)) {
                Some(_) => {
                    let mut b = p.clone();
                    let v = self.gen.rng.random::<u64>();
                    b[16..24].copy_from_slice(&v.to_le_bytes());
                    (S_OK, b)
                }
                None => (S_ENODEV, Vec::new()),
            },
            T_RELEASE | T_RESET | T_CFG_WRITE | T_DMA_MAP | T_DMA_UNMAP | T_IRQ_SET => {
                match ask.dev().and_then(|id| self.dev(id)) {
                    Some(_) => (S_OK, Vec::new()),
                    None => (S_ENODEV, Vec::new()),
                }
            }
            T_PING => (S_OK, p.clone()),
            t if lender_handles(t) => (S_EINVAL, Vec::new()),
            _ => (S_ENOTSUPP, Vec::new()),
        }
    }

    /// Nonsense that parses, for an answer of `ask`'s type.
    fn garbage(&mut self, ask: &Ask, status: &mut u32, payload: &mut Vec<u8>) {
        let r = &mut self.gen.rng;
        match ask.msg_type {
            T_DEV_LIST => {
                let start = ask.dev().unwrap_or(0);
                let mut b = vec![0u8; sys::DL_DEV_LIST_SIZE];
                put32(&mut b, 0, r.random());
                let max = sys::DL_DEV_LIST_MAX;
                match r.random_range(0..6) {
                    // More ids than a list holds.
                    0 => put32(&mut b, 4, r.random_range(max + 1..=u32::MAX)),
                    // Fewer bytes than the count says.
                    1 => {
                        let count = r.random_range(1..=max);
                        put32(&mut b, 4, count);
                        b.truncate(8 + 4 * count as usize - r.random_range(1..=4 * count as usize));
                    }
                    // Descending, or one id again and again.
                    2 | 3 => {
                        let count = r.random_range(2..=max);
                        put32(&mut b, 4, count);
                        let base = start.saturating_add(r.random_range(0..1000));
                        let descending = r.random_ratio(1, 2);
                        for i in 0..count {
                            let id = if descending {
                                base.saturating_add(count - i)
                            } else {
                                base
                            };
                            put32(&mut b, 8 + 4 * i as usize, id);
                        }
                    }
                    // Ids below the one asked for.
                    4 if start > 0 => {
                        put32(&mut b, 4, 1);
                        put32(&mut b, 8, r.random_range(0..start));
                    }
                    // A full page of ids nobody lends, ascending: the
                    // borrower asks for the next page.
                    _ => {
                        put32(&mut b, 4, max);
                        let mut id = start;
                        for i in 0..max as usize {
                            put32(&mut b, 8 + 4 * i, id);
                            id = id.saturating_add(r.random_range(1..1 << 20));
                        }
                    }
                }
                *status = S_OK;
                *payload = b;
            }
            T_DEV_INFO if payload.len() >= sys::DL_DEV_INFO_SIZE => {
                // Any field but the id: ids and classes nobody has,
                // states and holders at random, BARs of any size and
                // kind, names without a NUL.
                let fields: [(usize, usize); 10] = [
                    (offset_of!(sys::dl_dev_info, vendor), 4),
                    (offset_of!(sys::dl_dev_info, class_rev), 4),
                    (offset_of!(sys::dl_dev_info, state), 2),
                    (offset_of!(sys::dl_dev_info, borrower), 2),
                    (offset_of!(sys::dl_dev_info, flags), 4),
                    (offset_of!(sys::dl_dev_info, msix_count), 4),
                    (offset_of!(sys::dl_dev_info, cfg_size), 4),
                    (offset_of!(sys::dl_dev_info, bars), 96),
                    (offset_of!(sys::dl_dev_info, name), 16),
                    (sys::DL_DEV_INFO_SIZE, payload.len() - sys::DL_DEV_INFO_SIZE),
                ];
                for _ in 0..r.random_range(1..4) {
                    let (off, n) = fields[r.random_range(0..fields.len())];
                    r.fill_bytes(&mut payload[off..off + n]);
                }
            }
            T_CFG_READ_BLOCK if payload.len() == sys::DL_CFG_BLOCK_SIZE => {
                // Config space at random: capability lists that loop, run
                // off the end, overlap.
                r.fill_bytes(&mut payload[8..]);
                let off = ask.payload.get(4..6).map_or(1, |b| le16(b, 0));
                if off == 0 && r.random_ratio(1, 2) {
                    // A capability list, to somewhere odd.
                    payload[8 + 0x06] |= 0x10;
                    payload[8 + 0x34] = [0x40, 0x00, 0xff, 0xfc, 0x34][r.random_range(0..5)];
                } else if off == 0x40 && r.random_ratio(1, 2) {
                    // MSI or MSI-X at 0x40, next to itself or to the end.
                    payload[8] = [0x05, 0x11][r.random_range(0..2)];
                    payload[9] = [0x40, 0xfc, 0x44][r.random_range(0..3)];
                }
            }
            T_CFG_READ if payload.len() == sys::DL_CFG_ACCESS_SIZE => {
                r.fill_bytes(&mut payload[8..12]);
            }
            _ => {
                // An empty answer: a payload where none belongs, or a
                // status nobody defines.
                if r.random_ratio(1, 2) {
                    payload.resize(r.random_range(1..=24), 0);
                    r.fill_bytes(payload);
                    *status = S_OK;
                } else {
                    *status = r.random_range(6..=u32::MAX);
                }
            }
        }
    }

    fn pick_twist(&mut self, ask: &Ask) -> Twist {
        let r = &mut self.gen.rng;
        let status = |r: &mut StdRng| {
            Twist::Status(
                [
                    S_EINVAL,
                    S_ENOTSUPP,
                    S_EBUSY,
                    S_ENODEV,
                    S_EIO,
                    S_EIO,
                    6,
                    0x7fff_ffff,
                    u32::MAX,
                ][r.random_range(0..9)],
            )
        };
        match self.mood {
            Mood::Honest => Twist::Honest,
            Mood::EioForever => Twist::Status(S_EIO),
            Mood::Silent => Twist::Silent,
            Mood::Garbage => match r.random_range(0..100) {
                0..40 => Twist::Garbage,
                40..60 => Twist::OtherDev,
                60..75 => Twist::Short,
                75..85 => Twist::Long,
                _ => Twist::WrongType,
            },
            Mood::Mixed => {
                // What an open needs (its description and config space)
                // more often honest, so that opens get through to the
                // borrow, DMA and interrupt paths.
                let opening = ask.msg_type == T_CFG_READ_BLOCK
                    || (ask.msg_type == T_DEV_INFO && ask.resp_size() == sys::DL_DEV_INFO_SIZE);
                let honest = if opening { 85 } else { 55 };
                let x = r.random_range(0..100);
                if x < honest {
                    return Twist::Honest;
                }
                match r.random_range(0..28) {
                    0..4 => status(r),
                    4..6 => Twist::WrongType,
                    6..8 => Twist::Short,
                    8..10 => Twist::Long,
                    10..12 => Twist::OtherDev,
                    12..16 => Twist::Garbage,
                    16..18 => Twist::UnknownId,
                    18 => Twist::CrossId,
                    19..21 => Twist::StaleEpoch,
                    21 => Twist::BadHeader,
                    22..24 => Twist::Duplicate,
                    24..26 => Twist::Late,
                    _ => Twist::Silent,
                }
            }
        }
    }

    /// After an answer that the borrower takes (or may take) is written:
    /// what the lender now believes it lends to whom. A release answered
    /// with anything the borrower takes as "not yours" is one.
    fn commit(&mut self, ask: &Ask, status: u32, payload: &[u8]) {
        let Some(id) = ask.dev() else { return };
        let victim = self.ho.victim;
        if ask.msg_type == T_RELEASE
            && payload.is_empty()
            && matches!(status, S_OK | S_EINVAL | S_EBUSY | S_ENODEV | S_ENOTSUPP)
        {
            if let Some(d) = self.dev_mut(id) {
                d.held = false;
            }
            if id == victim {
                self.irq_counts = [0; 3];
            }
            return;
        }
        if status != S_OK {
            return;
        }
        match ask.msg_type {
            T_ACQUIRE => {
                if id == victim {
                    self.report.grants += 1;
                }
                if let Some(d) = self.dev_mut(id) {
                    d.held = true;
                }
            }
            T_RESET if id == victim && payload.is_empty() => self.irq_counts = [0; 3],
            T_IRQ_SET if id == victim && payload.is_empty() && ask.payload.len() >= 12 => {
                let (ty, count) = (le16(&ask.payload, 4), le32(&ask.payload, 8));
                if let Some(c) = self.irq_counts.get_mut(usize::from(ty)) {
                    *c = count;
                }
            }
            _ => {}
        }
    }

    /// Writes the answer to `ask` as `twist` says, within the batch's
    /// room (a duplicate needs two slots); false if it did not fit.
    fn answer(&mut self, ask: Ask, twist: Twist) -> bool {
        let need = if twist == Twist::Duplicate { 2 } else { 1 };
        if matches!(twist, Twist::Silent | Twist::Late) {
            // Nothing now.
        } else if self.room < need {
            return false;
        }
        *self.report.twists.entry(twist.name()).or_default() += 1;
        match twist {
            Twist::Silent => return true,
            Twist::Late => {
                self.later.push_back((Instant::now() + self.ho.late, ask));
                return true;
            }
            _ => {}
        }
        let (mut status, mut payload) = self.honest(&ask);
        let mut msg_type = ask.msg_type;
        let mut req_id = ask.req_id;
        let max = self.rings.slot_size - DL_MSG_HDR_SIZE;
        match twist {
            Twist::Status(s) => status = s,
            Twist::WrongType => {
                let others: Vec<u16> = ANSWER_TYPES
                    .iter()
                    .copied()
                    .filter(|&t| t != ask.msg_type)
                    .collect();
                msg_type = others[self.gen.rng.random_range(0..others.len())];
            }
            Twist::Short if !payload.is_empty() => {
                let n = self.gen.rng.random_range(0..payload.len());
                payload.truncate(n);
            }
            Twist::Short | Twist::Long => {
                let from = ask.resp_size().max(payload.len()) + 1;
                if from <= max {
                    let n = self.gen.rng.random_range(from..=max);
                    let at = payload.len();
                    payload.resize(n, 0);
                    self.gen.rng.fill_bytes(&mut payload[at..]);
                } else {
                    payload.truncate(payload.len() / 2);
                }
                status = S_OK;
            }
            Twist::OtherDev => {
                if ask.msg_type == T_DEV_LIST {
                    self.garbage(&ask, &mut status, &mut payload);
                } else if payload.len() >= 4 {
                    let id = loop {
                        let id = match self.gen.rng.random_range(0..3) {
                            0 => self.gen.rng.random(),
                            1 => self.devs[self.gen.rng.random_range(0..self.devs.len())].dev_id,
                            _ => le32(&payload, 0) ^ 1,
                        };
                        if id != le32(&payload, 0) {
                            break id;
                        }
                    };
                    put32(&mut payload, 0, id);
                    status = S_OK;
                } else {
                    status = S_ENODEV;
                }
            }
            Twist::Garbage => self.garbage(&ask, &mut status, &mut payload),
            Twist::UnknownId => req_id = self.gen.unknown_id(),
            Twist::CrossId => {
                let open: Vec<u64> = self
                    .recent_ids
                    .iter()
                    .copied()
                    .filter(|&id| id != ask.req_id && !self.model.answered(id))
                    .collect();
                req_id = if open.is_empty() {
                    self.gen.unknown_id()
                } else {
                    open[self.gen.rng.random_range(0..open.len())]
                };
            }
            _ => {}
        }
        let mut slot = vec![0u8; self.rings.slot_size];
        payload.truncate(max);
        self.gen
            .hdr(&mut slot, msg_type, payload.len(), RESP, req_id);
        slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + payload.len()].copy_from_slice(&payload);
        put32(&mut slot, 20, status);
        match twist {
            Twist::StaleEpoch => {
                let e = self.stale_epoch();
                put32(&mut slot, 12, e);
            }
            Twist::BadHeader => match self.gen.rng.random_range(0..3) {
                0 => put32(&mut slot, 8, self.gen.src ^ 0x8000_0001),
                1 => put16(&mut slot, 2, 2),
                _ => put16(&mut slot, 4, (max + 1) as u16),
            },
            _ => {}
        }
        self.put(&slot);
        if twist == Twist::Duplicate {
            let seq = self.gen.seq;
            self.gen.seq = seq.wrapping_add(1);
            put32(&mut slot, 16, seq);
            self.put(&slot);
        }
        if !matches!(
            twist,
            Twist::UnknownId | Twist::CrossId | Twist::StaleEpoch | Twist::BadHeader
        ) && msg_type == ask.msg_type
        {
            self.commit(&ask, status, &payload);
        }
        true
    }

    fn stale_epoch(&mut self) -> u32 {
        loop {
            let e = match self.gen.rng.random_range(0..3) {
                0 => self.gen.epoch.wrapping_add(1),
                1 => self.gen.epoch ^ 0x8000_0000,
                _ => self.gen.rng.random(),
            };
            if e != self.gen.epoch {
                return e;
            }
        }
    }

    fn pick_kind(&mut self) -> &'static str {
        let total: u32 = KINDS.iter().map(|(_, w)| w).sum();
        let mut x = self.gen.rng.random_range(0..total);
        for (k, w) in KINDS {
            if x < *w {
                return k;
            }
            x -= w;
        }
        KINDS[0].0
    }

    /// A posted IRQ_FIRE: for the victim's vectors the borrower set up
    /// (`real`), or for devices, types and vectors that are not.
    fn irq_fire(&mut self, slot: &mut [u8], real: bool) {
        let r = &mut self.gen.rng;
        let set: Vec<usize> = (0..3).filter(|&t| self.irq_counts[t] > 0).collect();
        let (dev, ty, vector) = if real && !set.is_empty() {
            let ty = set[r.random_range(0..set.len())];
            let count = self.irq_counts[ty];
            // Now and then the vector just past the last one.
            let v = if r.random_ratio(1, 8) {
                count
            } else {
                r.random_range(0..count)
            };
            (self.ho.victim, ty as u16, v.min(u32::from(u16::MAX)) as u16)
        } else {
            let dev = match r.random_range(0..4) {
                0 => self.ho.victim,
                1 => self.devs[r.random_range(0..self.devs.len())].dev_id,
                _ => r.random(),
            };
            let ty = match r.random_range(0..4) {
                0 => r.random_range(3..=u16::MAX),
                _ => r.random_range(0..3),
            };
            let v = match r.random_range(0..4) {
                0 => u16::MAX,
                1 => r.random(),
                _ => r.random_range(0..16),
            };
            (dev, ty, v)
        };
        self.gen.hdr(slot, T_IRQ_FIRE, sys::DL_IRQ_FIRE_SIZE, 0, 0);
        put32(slot, 32, dev);
        put16(slot, 36, ty);
        put16(slot, 38, vector);
    }

    /// Fills `slot` with the next unsolicited message; its kind.
    fn unsolicited(&mut self, slot: &mut [u8]) -> &'static str {
        slot.fill(0);
        let max = self.rings.slot_size - DL_MSG_HDR_SIZE;
        let kind = self.pick_kind();
        match kind {
            "dev_changed" => {
                let len = if self.gen.rng.random_ratio(1, 8) {
                    self.gen.rng.random_range(8..=24)
                } else {
                    8
                };
                self.gen.hdr(slot, T_DEV_CHANGED, len, 0, 0);
                let dev = if self.gen.rng.random_ratio(1, 2) {
                    self.ho.victim
                } else {
                    self.gen.rng.random()
                };
                put32(slot, 32, dev);
            }
            "dev_changed_short" => {
                let len = self.gen.rng.random_range(0..8);
                self.gen.hdr(slot, T_DEV_CHANGED, len, 0, 0);
                self.gen.rng.fill_bytes(&mut slot[32..32 + len]);
            }
            "irq_fire_bogus" => self.irq_fire(slot, false),
            "irq_fire_real" => self.irq_fire(slot, true),
            "irq_fire_short" => {
                let len = self.gen.rng.random_range(0..sys::DL_IRQ_FIRE_SIZE);
                self.gen.hdr(slot, T_IRQ_FIRE, len, 0, 0);
                self.gen.rng.fill_bytes(&mut slot[32..32 + len]);
            }
            "dev_fault" => {
                let len = match self.gen.rng.random_range(0..6) {
                    0 => self.gen.rng.random_range(0..sys::DL_DEV_FAULT_SIZE),
                    1 => self.gen.rng.random_range(sys::DL_DEV_FAULT_SIZE..=max),
                    _ => sys::DL_DEV_FAULT_SIZE,
                };
                self.gen.hdr(slot, T_DEV_FAULT, len, 0, 0);
                self.gen.rng.fill_bytes(&mut slot[32..32 + len]);
                if len >= 4 && self.gen.rng.random_ratio(1, 4) {
                    put32(slot, 32, self.ho.victim);
                }
            }
            "unknown_response" => {
                let t = self.gen.rng.random_range(0..64);
                let id = if self.gen.rng.random_ratio(1, 5) {
                    0
                } else {
                    self.gen.unknown_id()
                };
                let len = self.gen.rng.random_range(0..=max);
                self.gen.hdr(slot, t, len, RESP, id);
                self.gen.rng.fill_bytes(&mut slot[32..32 + len]);
                let status = self.gen.rng.random_range(0..8u32);
                put32(slot, 20, status);
            }
            "stale_epoch" => {
                match self.gen.rng.random_range(0..3) {
                    0 => self.irq_fire(slot, true),
                    1 => {
                        self.gen.hdr(slot, T_DEV_CHANGED, 8, 0, 0);
                        put32(slot, 32, self.ho.victim);
                    }
                    _ => {
                        // An answer from another incarnation, to a
                        // request the borrower may be waiting for.
                        let id = self
                            .recent_ids
                            .back()
                            .copied()
                            .unwrap_or_else(|| self.gen.unknown_id());
                        self.gen.hdr(slot, T_DEV_INFO, 0, RESP, id);
                    }
                }
                let e = self.stale_epoch();
                put32(slot, 12, e);
            }
            "bad_len" => {
                let len = match self.gen.rng.random_range(0..3) {
                    0 => max + 1,
                    1 => usize::from(u16::MAX),
                    _ => self.gen.rng.random_range(max + 1..=usize::from(u16::MAX)),
                };
                self.gen.hdr(slot, T_IRQ_FIRE, 0, 0, 0);
                put16(slot, 4, len as u16);
            }
            "bad_src" => {
                self.gen.hdr(slot, T_DEV_CHANGED, 8, 0, 0);
                let src = loop {
                    let s = match self.gen.rng.random_range(0..3) {
                        0 => self.gen.rng.random_range(0..8),
                        1 => u32::MAX,
                        _ => self.gen.rng.random(),
                    };
                    if s != self.gen.src {
                        break s;
                    }
                };
                put32(slot, 8, src);
            }
            "bad_proto" => {
                self.gen.hdr(slot, T_DEV_CHANGED, 8, 0, 0);
                let proto = match self.gen.rng.random_range(0..3) {
                    0 => 0u16,
                    1 => 2,
                    _ => self.gen.rng.random_range(3..=u16::MAX),
                };
                put16(slot, 2, proto);
            }
            "random_bytes" => {
                self.gen.rng.fill_bytes(slot);
                if self.gen.rng.random_ratio(1, 2) {
                    let len = self.gen.rng.random_range(0..=max) as u16;
                    put16(slot, 4, len);
                }
                if self.gen.rng.random_ratio(1, 2) {
                    put32(slot, 8, self.gen.src);
                }
            }
            "unknown_type" => {
                let t = loop {
                    let t = match self.gen.rng.random_range(0..4) {
                        0 => 0,
                        1 => self.gen.rng.random_range(2..16),
                        2 => self.gen.rng.random_range(T_LAST_KNOWN + 1..64),
                        _ => self.gen.rng.random_range(64..=u16::MAX),
                    };
                    // The emulated NTB port's types, in case its module
                    // is loaded.
                    if !(sys::DL_MSG_NTB_HELLO as u16..=sys::DL_MSG_NTB_XLATE as u16).contains(&t) {
                        break t;
                    }
                };
                let id = if self.gen.rng.random_ratio(1, 2) {
                    0
                } else {
                    self.gen.next_req()
                };
                let len = self.gen.rng.random_range(0..=max);
                self.gen.hdr(slot, t, len, 0, id);
                self.gen.rng.fill_bytes(&mut slot[32..32 + len]);
            }
            "ping" => {
                let len = self.gen.rng.random_range(0..=max);
                let id = if self.gen.rng.random_ratio(1, 8) {
                    0
                } else {
                    self.gen.next_req()
                };
                self.gen.hdr(slot, T_PING, len, 0, id);
                if len >= sys::DL_PING_SIZE {
                    let mut data = vec![0u8; len - sys::DL_PING_SIZE];
                    self.gen.rng.fill_bytes(&mut data);
                    let mut ping =
                        Ping::for_data(self.gen.rng.random(), self.gen.rng.random(), &data);
                    if self.gen.rng.random_ratio(1, 4) {
                        ping.data_crc ^= 1;
                    }
                    ping.encode(&data, &mut slot[32..32 + len])
                        .expect("ping fits the slot");
                } else {
                    self.gen.rng.fill_bytes(&mut slot[32..32 + len]);
                }
            }
            "replay" => {
                let n = self.gen.recent.len();
                if n > 0 {
                    let i = self.gen.rng.random_range(0..n);
                    slot.copy_from_slice(&self.gen.recent[i]);
                } else {
                    self.gen.hdr(slot, T_DEV_CHANGED, 8, 0, 0);
                }
            }
            _ => unreachable!("kind {kind}"),
        }
        // Sequence trouble and flags nobody knows, on top.
        if kind != "replay" && kind != "random_bytes" {
            if self.gen.rng.random_ratio(1, 25) {
                let cur = le32(slot, 16);
                let seq = match self.gen.rng.random_range(0..3) {
                    0 => {
                        let s = cur.wrapping_add(self.gen.rng.random_range(1..1000));
                        self.gen.seq = s.wrapping_add(1);
                        s
                    }
                    1 => cur.wrapping_sub(self.gen.rng.random_range(1..10)),
                    _ => self.gen.rng.random(),
                };
                put32(slot, 16, seq);
            }
            if self.gen.rng.random_ratio(1, 50) {
                let flags = le16(slot, 6) | (self.gen.rng.random::<u16>() & !RESP);
                put16(slot, 6, flags);
            }
        }
        kind
    }

    /// Writes, within the batch, the answers that are due: held-back
    /// ones first, then the borrower's requests as the mood says.
    fn answer_due(&mut self) {
        while self.room > 0 {
            if self
                .later
                .front()
                .is_some_and(|(due, _)| *due <= Instant::now())
            {
                let (_, ask) = self.later.pop_front().expect("front");
                // Held back, then answered honestly.
                let (status, payload) = self.honest(&ask);
                let mut slot = vec![0u8; self.rings.slot_size];
                self.gen
                    .hdr(&mut slot, ask.msg_type, payload.len(), RESP, ask.req_id);
                slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + payload.len()].copy_from_slice(&payload);
                put32(&mut slot, 20, status);
                self.put(&slot);
                self.commit(&ask, status, &payload);
                continue;
            }
            let Some(ask) = self.asks.pop_front() else {
                break;
            };
            let twist = self.pick_twist(&ask);
            if !self.answer(ask.clone(), twist) {
                self.asks.push_front(ask);
                break;
            }
        }
    }

    /// Keeps the lender alive, takes the borrower's messages and answers
    /// (in the current mood); with `refresh`, a DEV_CHANGED now and then.
    fn tend(&mut self, refresh: &mut Option<Instant>) -> anyhow::Result<()> {
        self.keep_alive();
        self.drain_rx()?;
        let due = self
            .later
            .front()
            .is_some_and(|(d, _)| *d <= Instant::now());
        let tell = refresh.is_some_and(|t| t.elapsed() >= self.ho.refresh);
        if self.asks.is_empty() && !due && !tell {
            if self.last_activity.elapsed() > Duration::from_millis(50) {
                // A doorbell, in case the borrower missed one.
                self.publish()?;
            }
            return Ok(());
        }
        if self.batch()? == 0 {
            return Ok(());
        }
        self.answer_due();
        if tell && self.room > 0 {
            self.dev_changed()?;
            *refresh = Some(Instant::now());
        }
        self.publish()
    }

    /// Tells the borrower to read the catalog again (one slot of the
    /// batch).
    fn dev_changed(&mut self) -> anyhow::Result<()> {
        let mut slot = vec![0u8; self.rings.slot_size];
        self.gen.hdr(&mut slot, T_DEV_CHANGED, 8, 0, 0);
        put32(&mut slot, 32, self.ho.victim);
        self.put(&slot);
        Ok(())
    }

    /// Waits until the borrower took everything written, serving it
    /// meanwhile.
    fn wait_drained(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        while self.rings.tx_cons().load(Ordering::Acquire) != self.prod {
            self.tend(&mut None)?;
            ensure!(
                t0.elapsed() < timeout,
                "the borrower consumed up to {} of {} after {timeout:?}",
                self.rings.tx_cons().load(Ordering::Acquire),
                self.prod
            );
            std::thread::sleep(Duration::from_micros(300));
        }
        Ok(())
    }

    /// Publishes an impossible producer index: the borrower must skip the
    /// ring and count it.
    fn corrupt_ring(&mut self) -> anyhow::Result<()> {
        self.wait_drained(Duration::from_secs(60))?;
        let skip = self.rings.slots + 1 + self.gen.rng.random_range(0..1000);
        self.prod = self.prod.wrapping_add(skip);
        self.publish()?;
        let t0 = Instant::now();
        while self.rings.tx_cons().load(Ordering::Acquire) != self.prod {
            self.keep_alive();
            self.drain_rx()?;
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "the borrower did not skip a corrupt ring (prod {})",
                self.prod
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.model.corrupt();
        *self.report.kinds.entry("corrupt_ring").or_default() += 1;
        Ok(())
    }

    /// IRQ_FIREs written into an empty ring with one doorbell: the
    /// borrower's doorbell interrupt takes them, unless its receive work
    /// runs.
    fn irq_burst(&mut self) -> anyhow::Result<()> {
        self.wait_drained(Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_millis(5));
        self.batch()?;
        let n = self.room.min(32);
        let mut slot = vec![0u8; self.rings.slot_size];
        for i in 0..n {
            slot.fill(0);
            self.irq_fire(&mut slot, i % 2 == 0);
            self.put(&slot);
        }
        self.report.hostile += u64::from(n);
        *self.report.kinds.entry("irq_burst").or_default() += u64::from(n);
        self.report.irq_bursts += 1;
        self.publish()
    }

    fn next_mood(&mut self) {
        let x = self.gen.rng.random_range(0..100);
        self.mood = match x {
            0..45 => Mood::Mixed,
            45..60 => Mood::Honest,
            60..75 => Mood::EioForever,
            75..85 => Mood::Silent,
            _ => Mood::Garbage,
        };
        self.report.moods.push(self.mood.name());
    }

    /// The hostile stretch: `messages` messages, answers included.
    fn lie(&mut self, messages: u64, corruptions: u32, verbose: bool) -> anyhow::Result<()> {
        // A dozen moods in the default run; a new one every 20 000
        // messages (10 s at 2000 a second) in longer ones.
        let mood_every = (messages / 12).clamp(500, 20_000);
        let mut next_mood = mood_every;
        let corrupt_every = (messages / (u64::from(corruptions) + 1)).max(1);
        let mut next_corrupt = corrupt_every;
        let burst_every = (messages / (u64::from(self.ho.irq_bursts) + 1)).max(1);
        let mut next_burst = burst_every;
        let mut corrupted = 0;
        self.mood = Mood::Mixed;
        self.report.moods.push(self.mood.name());
        let t0 = Instant::now();
        let mut last_report = Instant::now();
        let mut slot = vec![0u8; self.rings.slot_size];
        while self.report.hostile < messages {
            self.keep_alive();
            self.drain_rx()?;
            if self.batch()? == 0 {
                if self.last_activity.elapsed() > Duration::from_millis(20) {
                    self.publish()?;
                }
                std::thread::sleep(Duration::from_micros(300));
                continue;
            }
            let before = self.report.written;
            self.answer_due();
            // Unsolicited messages as the rate allows by now.
            let allowed = if self.ho.rate == 0 {
                messages
            } else {
                (t0.elapsed().as_secs_f64() * f64::from(self.ho.rate)) as u64
            };
            if self.report.hostile >= allowed && self.report.written == before {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
            let limit = messages.min(allowed);
            while self.room > 0 && self.report.hostile + (self.report.written - before) < limit {
                let kind = self.unsolicited(&mut slot);
                *self.report.kinds.entry(kind).or_default() += 1;
                self.put(&slot);
            }
            self.report.hostile += self.report.written - before;
            self.publish()?;
            if self.report.hostile >= next_mood {
                self.next_mood();
                next_mood += mood_every;
            }
            if self.report.hostile >= next_burst
                && self.report.irq_bursts < u64::from(self.ho.irq_bursts)
            {
                self.irq_burst()?;
                next_burst += burst_every;
            }
            if self.report.hostile >= next_corrupt && corrupted < corruptions {
                self.corrupt_ring()?;
                corrupted += 1;
                next_corrupt += corrupt_every;
            }
            if verbose && last_report.elapsed() > Duration::from_secs(10) {
                eprintln!(
                    "  hostile lender: {} messages, {:.0}/s, mood {}, {} requests of the borrower waiting",
                    self.report.hostile,
                    self.report.hostile as f64 / t0.elapsed().as_secs_f64(),
                    self.mood.name(),
                    self.asks.len()
                );
                last_report = Instant::now();
            }
        }
        self.report.secs = t0.elapsed().as_secs_f64();
        self.mood = Mood::Honest;
        Ok(())
    }

    /// The end: every held-back answer written (honestly), every request
    /// seen answered, the ring drained, our requests answered (or given
    /// up on after a while). Nothing is written after this.
    fn finish(&mut self) -> anyhow::Result<()> {
        self.mood = Mood::Honest;
        for (due, _) in &mut self.later {
            *due = Instant::now();
        }
        let t0 = Instant::now();
        while !self.later.is_empty() || !self.asks.is_empty() {
            self.tend(&mut None)?;
            ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "could not write the last answers in 60 s"
            );
            std::thread::sleep(Duration::from_micros(300));
        }
        self.serving = false;
        self.wait_drained(Duration::from_secs(60))?;
        let quiet = Instant::now();
        while !self.pending.is_empty() && quiet.elapsed() < Duration::from_secs(10) {
            self.keep_alive();
            self.drain_rx()?;
            std::thread::sleep(Duration::from_millis(2));
        }
        self.report.missing_responses += self.pending.len() as u64;
        self.pending.clear();
        self.report.expected = self.model.expected();
        self.rings.beat();
        Ok(())
    }

    fn listing(&self) -> Listing {
        let lender = self.gen.src;
        Listing {
            lender,
            victim: self.ho.victim,
            catalog: self.devs.len(),
            listed: self
                .devs
                .iter()
                .take(BORROWER_MAX_PER_LENDER)
                .map(|d| d.listed(lender))
                .collect(),
        }
    }
}

/// Prints a line for the caller and flushes it.
fn say(tag: &str, v: &serde_json::Value) {
    println!("{tag} {v}");
    let _ = std::io::stdout().flush();
}

/// The listing a hostile lender of `ho.catalog` devices, seeded with
/// `seed`, has the borrower show (the catalog follows from the seed).
pub fn listing(seed: u64, ho: &HostileOptions, lender: u32, borrower: u32) -> Listing {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xca7a_109e);
    let devs = catalog(&mut rng, ho.catalog, ho.victim, borrower);
    Listing {
        lender,
        victim: ho.victim,
        catalog: devs.len(),
        listed: devs
            .iter()
            .take(BORROWER_MAX_PER_LENDER)
            .map(|d| d.listed(lender))
            .collect(),
    }
}

/// Plays the hostile lender: `opts.target` is the borrower, `opts.peer`
/// the dead lender. Prints `HOSTILE-LISTED`, waits for `go("go")`, lies
/// for `opts.messages` messages, prints `HOSTILE-SENT`, answers honestly
/// until `go("quit")`, and returns the report once the borrower has taken
/// everything written.
pub fn run(
    opts: &Options,
    ho: &HostileOptions,
    go: &dyn Fn(&str) -> bool,
) -> anyhow::Result<HostileReport> {
    ensure!(ho.catalog >= 1, "the catalog needs at least the victim");
    let att = attach(opts)?;
    let rings = rings(&att, opts)?;
    let bell = connect_doorbell(opts, &rings)?;
    let (b, src) = (opts.target, opts.peer);
    let epoch = att.peer_info.incarnation as u32;
    let slot_size = rings.slot_size;
    let mut crng = StdRng::seed_from_u64(opts.seed ^ 0xca7a_109e);
    let devs = catalog(&mut crng, ho.catalog, ho.victim, b);
    let mut h = Hostile {
        gen: Gen {
            rng: StdRng::seed_from_u64(opts.seed),
            src,
            epoch,
            slot_size,
            seq: 0,
            req: 0,
            lent: Vec::new(),
            borrower_ram: 0,
            recent: VecDeque::new(),
            total_weight: 0,
        },
        model: BorrowerModel::new(src, epoch, slot_size - DL_MSG_HDR_SIZE),
        ho: ho.clone(),
        devs,
        borrower: b,
        prod: rings.tx_prod().load(Ordering::Acquire),
        rx_cons: rings.rx_cons().load(Ordering::Acquire),
        room: 0,
        asks: VecDeque::new(),
        recent_ids: VecDeque::new(),
        later: VecDeque::new(),
        pending: VecDeque::new(),
        mood: Mood::Honest,
        irq_counts: [0; 3],
        report: HostileReport {
            seed: opts.seed,
            doorbell: bell.is_some(),
            ..HostileReport::default()
        },
        last_beat: Instant::now(),
        last_activity: Instant::now(),
        bell: bell.as_ref().map(|(_, fd)| fd.try_clone()).transpose()?,
        serving: false,
        rings,
    };
    let _bell_stream = bell.map(|(stream, _)| stream);

    // Continue after what the dead lender left in its ring; requests the
    // borrower made to it before we came are not ours to answer.
    h.wait_drained(Duration::from_secs(30))
        .context("the borrower does not drain the dead lender's ring")?;
    if let Some(next) = next_seq_after(&h.rings, h.prod, src, epoch) {
        h.gen.seq = next;
        h.model.hdr.next_seq = Some(next);
    }
    h.drain_rx()?;
    h.asks.clear();
    h.serving = true;

    // The catalog, honestly.
    h.batch()?;
    ensure!(h.room > 0, "no room in the ring to the borrower");
    h.dev_changed()?;
    h.publish()?;
    say(
        "HOSTILE-LISTED",
        &serde_json::to_value(h.listing()).context("the listing as JSON")?,
    );
    let mut refresh = Some(Instant::now());
    while !go("go") {
        h.tend(&mut refresh)?;
        std::thread::sleep(Duration::from_micros(300));
    }

    h.lie(opts.messages, opts.corruptions, opts.verbose)?;
    say(
        "HOSTILE-SENT",
        &json!({
            "hostile": h.report.hostile,
            "secs": h.report.secs,
            "moods": h.report.moods,
            "asks": h.report.asks.iter().map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>(),
        }),
    );

    // Honest again, until told to stop.
    let mut refresh = Some(Instant::now());
    while !go("quit") {
        h.tend(&mut refresh)?;
        std::thread::sleep(Duration::from_micros(300));
    }
    h.finish()?;
    Ok(h.report)
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use super::super::tests::{host, incarnation, write_host, Fabric, INBOX, P, T};
    use super::super::{open_inbox, CONS, PROD};
    use super::*;
    use devlend_wire::CtlLayout;

    #[test]
    fn names_as_the_borrower_shows_them() {
        assert_eq!(borrower_name(b"0000:01:00.0\0\0\0\0"), b"0000:01:00.0");
        // No NUL: 16 bytes, no more.
        assert_eq!(borrower_name(b"abcdefghijklmnopqrst"), b"abcdefghijklmnop");
        assert_eq!(
            borrower_name(b"a/b c=d\n\x7f\x80\xa0\xa1\xff\0zz"),
            b"a?b?c=d????\xa1\xff"
        );
        assert_eq!(borrower_name(b"\0abc"), b"");
    }

    #[test]
    fn the_catalog_follows_from_the_seed() {
        let ho = HostileOptions::default();
        let a = listing(5, &ho, 1, 0);
        assert_eq!(a, listing(5, &ho, 1, 0));
        assert_ne!(a, listing(6, &ho, 1, 0));
        // More than a borrower lists: the first 256 by id, the victim
        // among them, looking like an NVMe controller nobody holds.
        assert_eq!(a.catalog, DEFAULT_CATALOG);
        assert_eq!(a.listed.len(), BORROWER_MAX_PER_LENDER);
        let v = a
            .listed
            .iter()
            .find(|l| l.key == format!("1:{DEFAULT_VICTIM}"))
            .expect("the victim is listed");
        assert_eq!(
            (v.class.as_str(), v.state.as_str()),
            ("0x010802", "available")
        );
        assert_eq!(v.name, hex(b"0000:66:00.0"));
        for l in &a.listed {
            let name: Vec<u8> = (0..l.name.len() / 2)
                .map(|i| u8::from_str_radix(&l.name[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            assert!(name.len() <= 16 && name.iter().all(|&c| kernel_isgraph(c) && c != b'/'));
        }
    }

    /// How long the fake borrower waits for an answer, as the kernel
    /// waits `DL_FABRIC_REQ_TIMEOUT_MS`.
    const GIVE_UP: Duration = Duration::from_millis(150);

    /// What the fake borrower saw, counted as `fabric/rx.c` and
    /// `request.c` count.
    #[derive(Debug, Default)]
    struct Seen {
        rx_msgs: u64,
        rx_bad: u64,
        rx_stale: u64,
        rx_seq: u64,
        rx_corrupt: u64,
        rx_unknown: u64,
        answers: u64,
        late: u64,
        /// Requests it gave up on.
        gave_up: u64,
        /// Answers it checked against what an honest lender says.
        honest_checked: u64,
        /// Its requests, and those answered before `go`.
        asked: u64,
    }

    /// Requests the fake borrower makes, in turn: a scan, an open, a
    /// borrow, DMA, interrupts, a release.
    fn fake_request(n: u64, victim: u32) -> (u16, Vec<u8>) {
        let dev_ref = |dev: u32, flags: u32| {
            let mut p = dev.to_le_bytes().to_vec();
            p.extend_from_slice(&flags.to_le_bytes());
            p
        };
        match n % 8 {
            0 => (T_DEV_LIST, dev_ref(0, 0)),
            1 => (T_DEV_INFO, dev_ref(victim, sys::DL_DEV_REF_F_INFO_EXT)),
            2 => {
                let mut p = victim.to_le_bytes().to_vec();
                p.extend_from_slice(&0u16.to_le_bytes());
                p.extend_from_slice(&64u16.to_le_bytes());
                (T_CFG_READ_BLOCK, p)
            }
            3 => (T_ACQUIRE, dev_ref(victim, 0)),
            4 => {
                let mut p = victim.to_le_bytes().to_vec();
                p.extend_from_slice(&1u32.to_le_bytes());
                p.extend_from_slice(&[0; 24]);
                (T_DMA_MAP, p)
            }
            5 => {
                let mut p = victim.to_le_bytes().to_vec();
                p.extend_from_slice(&2u16.to_le_bytes());
                p.extend_from_slice(&0u16.to_le_bytes());
                p.extend_from_slice(&4u32.to_le_bytes());
                (T_IRQ_SET, p)
            }
            6 => (T_DEV_INFO, dev_ref(victim, 0)),
            _ => (T_RELEASE, dev_ref(victim, 0)),
        }
    }

    /// Plays the borrower T against the hostile lender P: takes P's
    /// messages from T's inbox entry P, checks and counts them as the
    /// kernel does, answers P's requests (pings as `ping.c`, other
    /// types ENOTSUPP), and keeps up to 16 requests of its own in flight.
    fn fake_borrower(fabric: &Fabric, stop: &AtomicBool, go: &AtomicU64, victim: u32) -> Seen {
        let layout: &CtlLayout = &fabric.layout;
        let t_host = host(T, incarnation(P));
        let p_host = host(P, incarnation(T));
        let t_inbox = open_inbox(&fabric.ram(T), layout, &t_host).unwrap();
        let p_inbox = open_inbox(&fabric.ram(P), layout, &p_host).unwrap();
        let entry_p = layout.inbox_entry_offset(P).unwrap();
        let entry_t = layout.inbox_entry_offset(T).unwrap();
        let slots = layout.ring_slots();
        let slot_size = layout.slot_size() as usize;
        let max = slot_size - DL_MSG_HDR_SIZE;
        let p_epoch = incarnation(P) as u32;
        let mut cons = p_inbox.u32_at(entry_t + CONS).load(Ordering::Acquire);
        let mut prod = p_inbox.u32_at(entry_t + PROD).load(Ordering::Acquire);
        let (mut seq_out, mut next_seq, mut next_id) = (0u32, None::<u32>, 1u64);
        let mut waiting: HashMap<u64, (u16, Vec<u8>, Instant)> = HashMap::new();
        let mut seen = Seen::default();
        let mut slot = vec![0u8; slot_size];
        let send =
            |prod: &mut u32, seq: &mut u32, t: u16, flags: u16, status: u32, id: u64, p: &[u8]| {
                let room = t_inbox.u32_at(entry_p + CONS).load(Ordering::Acquire);
                if prod.wrapping_sub(room) >= slots {
                    return false;
                }
                let mut s = vec![0u8; slot_size];
                put16(&mut s, 0, t);
                put16(&mut s, 2, 1);
                put16(&mut s, 4, p.len() as u16);
                put16(&mut s, 6, flags);
                put32(&mut s, 8, T);
                put32(&mut s, 12, incarnation(T) as u32);
                put32(&mut s, 16, *seq);
                put32(&mut s, 20, status);
                put64(&mut s, 24, id);
                s[32..32 + p.len()].copy_from_slice(p);
                p_inbox.write(layout.inbox_slot_offset(T, *prod).unwrap(), &s);
                *prod = prod.wrapping_add(1);
                *seq = seq.wrapping_add(1);
                p_inbox
                    .u32_at(entry_t + PROD)
                    .store(*prod, Ordering::Release);
                true
            };
        while !stop.load(Ordering::Acquire) {
            // Requests of our own.
            if waiting.len() < 16 {
                let (t, p) = fake_request(seen.asked, victim);
                let id = 1 << 32 | next_id;
                if send(&mut prod, &mut seq_out, t, 0, 0, id, &p) {
                    next_id += 1;
                    seen.asked += 1;
                    waiting.insert(id, (t, p, Instant::now()));
                }
            }
            let before = waiting.len();
            waiting.retain(|_, (_, _, sent)| sent.elapsed() < GIVE_UP);
            seen.gave_up += (before - waiting.len()) as u64;
            let their = t_inbox.u32_at(entry_p + PROD).load(Ordering::Acquire);
            if their.wrapping_sub(cons) > slots {
                seen.rx_corrupt += 1;
                cons = their;
                next_seq = None;
            }
            while cons != their {
                t_inbox.read(layout.inbox_slot_offset(P, cons).unwrap(), &mut slot);
                let (t, len, flags) = (le16(&slot, 0), usize::from(le16(&slot, 4)), le16(&slot, 6));
                let (status, id) = (le32(&slot, 20), le64(&slot, 24));
                // The request or ping answer first needs room.
                let request = flags & RESP == 0 && id != 0;
                if request
                    && prod.wrapping_sub(t_inbox.u32_at(entry_p + CONS).load(Ordering::Acquire))
                        >= slots
                {
                    break;
                }
                cons = cons.wrapping_add(1);
                if len > max || le32(&slot, 8) != P {
                    seen.rx_bad += 1;
                    continue;
                }
                if le32(&slot, 12) != p_epoch {
                    seen.rx_stale += 1;
                    continue;
                }
                if le16(&slot, 2) != 1 {
                    seen.rx_bad += 1;
                    continue;
                }
                let seq = le32(&slot, 16);
                if next_seq.is_some_and(|n| n != seq) {
                    seen.rx_seq += 1;
                }
                next_seq = Some(seq.wrapping_add(1));
                seen.rx_msgs += 1;
                let payload = slot[32..32 + len].to_vec();
                if flags & RESP != 0 {
                    if id == 0 {
                        seen.rx_bad += 1;
                    } else if let Some((want, ask, _)) = waiting.remove(&id) {
                        seen.answers += 1;
                        if want != t {
                            seen.rx_bad += 1;
                        } else if go.load(Ordering::Acquire) == 0 {
                            // Before `go` the lender is honest: check it.
                            check_honest(want, &ask, status, &payload, victim);
                            seen.honest_checked += 1;
                        }
                    } else {
                        seen.late += 1;
                    }
                    continue;
                }
                match t {
                    T_PING => {
                        let st = if len < sys::DL_PING_SIZE {
                            seen.rx_bad += 1;
                            S_EINVAL
                        } else if Ping::decode(&payload)
                            .map(|(p, d)| p.verify(d).is_ok())
                            .unwrap_or(false)
                        {
                            S_OK
                        } else {
                            S_EINVAL
                        };
                        if id != 0 {
                            assert!(send(&mut prod, &mut seq_out, t, RESP, st, id, &payload));
                        }
                    }
                    T_DEV_CHANGED | T_IRQ_FIRE | T_DEV_FAULT => {}
                    _ if id != 0 => {
                        seen.rx_unknown += 1;
                        assert!(send(&mut prod, &mut seq_out, t, RESP, S_ENOTSUPP, id, &[]));
                    }
                    _ => seen.rx_bad += 1,
                }
            }
            p_inbox
                .u32_at(entry_t + CONS)
                .store(cons, Ordering::Release);
            std::thread::sleep(Duration::from_micros(100));
        }
        seen
    }

    /// The answers of an honest lender to the fake borrower's requests.
    fn check_honest(t: u16, ask: &[u8], status: u32, p: &[u8], victim: u32) {
        match t {
            T_DEV_LIST => {
                assert_eq!((status, p.len()), (S_OK, sys::DL_DEV_LIST_SIZE));
                let count = le32(p, 4) as usize;
                assert!(count > 0 && count <= sys::DL_DEV_LIST_MAX as usize);
                let ids: Vec<u32> = (0..count).map(|i| le32(p, 8 + 4 * i)).collect();
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
                assert!(ids.contains(&victim));
            }
            T_DEV_INFO => {
                let want = if le32(ask, 4) != 0 {
                    sys::DL_DEV_INFO_FULL_SIZE
                } else {
                    sys::DL_DEV_INFO_SIZE
                };
                assert_eq!((status, p.len()), (S_OK, want));
                assert_eq!(le32(p, 0), victim);
                assert_eq!(
                    le32(p, offset_of!(sys::dl_dev_info, class_rev)) >> 8,
                    0x010802
                );
            }
            T_CFG_READ_BLOCK => {
                assert_eq!((status, p.len()), (S_OK, sys::DL_CFG_BLOCK_SIZE));
                assert_eq!(&p[..8], &ask[..8]);
                assert_eq!((le16(p, 8), p[8 + 0x34]), (0x1b36, 0x40));
            }
            T_ACQUIRE => {
                // The first is granted; then the device is held (by this
                // borrower) until it is released.
                assert!(status == S_OK && p == ask || status == S_EBUSY && p.is_empty());
            }
            _ => assert_eq!((status, p.len()), (S_OK, 0), "type {t}"),
        }
    }

    fn hostile_options(fabric: &Fabric, messages: u64) -> (Options, HostileOptions) {
        let opts = Options {
            corruptions: 1,
            ..fabric.options(messages)
        };
        let ho = HostileOptions {
            catalog: 40,
            // Past the fake borrower's GIVE_UP: late answers are late.
            late: Duration::from_millis(200),
            refresh: Duration::from_millis(20),
            irq_bursts: 2,
            ..HostileOptions::default()
        };
        (opts, ho)
    }

    #[test]
    fn lies_as_the_model_says() {
        let fabric = Fabric::new("hostile");
        let (opts, ho) = hostile_options(&fabric, 20_000);
        let stop = AtomicBool::new(false);
        let go = AtomicU64::new(0);
        let (report, seen) = std::thread::scope(|s| {
            let borrower = s.spawn(|| fake_borrower(&fabric, &stop, &go, ho.victim));
            let t0 = Instant::now();
            let went = std::sync::Mutex::new(None::<Instant>);
            let res = run(&opts, &ho, &|stage| {
                let mut went = went.lock().unwrap();
                if stage == "go" {
                    // Honest until the borrower had a few answers.
                    let ok = t0.elapsed() > Duration::from_millis(300);
                    if ok {
                        go.store(1, Ordering::Release);
                        went.get_or_insert_with(Instant::now);
                    }
                    ok
                } else {
                    // Honest again for a while: late answers come due.
                    went.is_some_and(|t| t.elapsed() > Duration::from_millis(800))
                }
            });
            // Let the borrower take what is left, then stop it.
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Release);
            (res, borrower.join().unwrap())
        });
        let report = report.unwrap();
        let e = &report.expected;
        assert!(report.hostile >= 20_000, "{report:?}");
        assert!(seen.honest_checked >= 8, "{seen:?}");
        // The reference receiver counted what the model predicts: exactly,
        // but where it depends on whether the receiver still waited for an
        // answer, which the VM check bounds the same way.
        assert_eq!(seen.rx_msgs, e.rx_msgs, "{seen:?} {e:?}");
        assert_eq!(seen.rx_stale, e.rx_stale, "{seen:?} {e:?}");
        assert_eq!(seen.rx_seq, e.rx_seq_errors, "{seen:?} {e:?}");
        assert_eq!(seen.rx_corrupt, e.rx_corrupt_ring, "{seen:?} {e:?}");
        assert_eq!(seen.rx_unknown, e.rx_unknown, "{seen:?} {e:?}");
        assert_eq!(
            seen.answers + seen.late,
            e.first_answers + e.late_min,
            "{seen:?} {e:?}"
        );
        assert!(
            (e.late_min..=e.late_min + e.first_answers).contains(&seen.late),
            "{seen:?} {e:?}"
        );
        assert!(
            (e.bad_min..=e.bad_min + e.wrong_type_answers).contains(&seen.rx_bad),
            "{seen:?} {e:?}"
        );
        assert!(
            seen.gave_up > 0 && seen.answers > 0 && seen.late > 0,
            "{seen:?}"
        );
        assert_eq!(e.rx_corrupt_ring, 1);
        assert_eq!(report.irq_bursts, 2);
        assert!(e.irq_fire_max > 0);
        // Every request of ours answered, as the borrower must.
        assert_eq!(
            (
                report.wrong_status,
                report.missing_responses,
                report.unexpected_responses
            ),
            (0, 0, 0),
            "{:?}",
            report.wrong_examples
        );
        // It lied in many ways.
        for t in [
            "honest",
            "status",
            "garbage",
            "late",
            "silent",
            "duplicate",
            "stale_epoch",
        ] {
            assert!(
                report.twists.get(t).copied().unwrap_or(0) > 0,
                "{t}: {:?}",
                report.twists
            );
        }
        for k in [
            "dev_changed",
            "irq_fire_bogus",
            "dev_fault",
            "unknown_response",
            "ping",
        ] {
            assert!(
                report.kinds.get(k).copied().unwrap_or(0) > 0,
                "{k}: {:?}",
                report.kinds
            );
        }
        // Nothing was written into the entries of other hosts.
        let layout = &fabric.layout;
        assert_eq!(
            fabric.inbox_u32(T, layout.inbox_entry_offset(T).unwrap() + PROD),
            0
        );
        assert_eq!(
            fabric.inbox_u32(P, layout.inbox_entry_offset(P).unwrap() + PROD),
            0
        );
    }

    #[test]
    fn writes_only_into_an_inbox_bound_to_it() {
        let fabric = Fabric::new("hostile-bound");
        let (opts, ho) = hostile_options(&fabric, 10);
        // The borrower bound the ring pair to an earlier incarnation.
        write_host(&fabric.ctl(), &fabric.layout, &host(T, 0x1234));
        let err = run(&opts, &ho, &|_| true).unwrap_err();
        assert!(format!("{err:#}").contains("no longer takes"), "{err:#}");
        let mut buf = [0u8; 4];
        File::open(fabric.ram(T))
            .unwrap()
            .read_exact_at(
                &mut buf,
                INBOX + fabric.layout.inbox_entry_offset(P).unwrap(),
            )
            .unwrap();
        assert_eq!(buf, [0; 4]);
    }
}
