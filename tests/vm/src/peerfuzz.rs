//! A malicious fabric peer, played from the outer machine.
//!
//! The fuzzer takes the place of a host that has died (its QEMU killed):
//! it maps the control area file of the ivshmem server, keeps the dead
//! host's heartbeat moving in its host info slot so that its peer (the
//! target) keeps it up, and writes messages straight into the ring from the
//! dead host to the target: random bytes, headers with a bad length,
//! source, epoch, protocol, sequence or flags, replays, responses to
//! requests nobody made, messages of unknown types, and lending requests
//! with random and boundary payloads. It consumes the ring from the target
//! (responses, posted messages, the target's own requests, which it answers
//! with random payloads) so that the target never waits for room, and
//! rings the target's doorbell through the ivshmem server's socket of the
//! dead host (a new client of a host id gets the other hosts' eventfds).
//!
//! The rings live in the receivers' inboxes (control area layout 2,
//! `devlend_wire::CtlLayout`), so the fuzzer also maps two RAM files on the
//! outer machine: the target's, whose inbox entry for the dead host holds
//! the ring it writes (slots and `prod`) and the consumer index it
//! publishes for the ring back; and the dead host's (its file outlives its
//! QEMU), whose inbox entry for the target holds the ring the target
//! writes and the target's consumer index of the fuzzer's ring. Like any
//! host it writes into the target's inbox only while the target's slot
//! says UP, shows the incarnation it started with and has the ring pair
//! bound to the dead host's incarnation.
//!
//! Every message written is run through [`Model`], which mirrors the
//! receive path of `devlend_fabric.ko` (`fabric/rx.c`, `fabric/msg.c`,
//! `fabric/request.c`, `fabric/ping.c`, `lender/msg.c`): what it must
//! count where, and which status its response must carry. The caller
//! compares the [`Expected`] counts with the target's debugfs counters.
//!
//! Everything the fuzzer writes follows from its seed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_wire::sys;
use devlend_wire::{
    CtlLayout, HostInfo, HostState, Ping, DL_CTL_HEADER_SIZE, DL_HOST_INFO_SIZE, DL_MSG_HDR_SIZE,
};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::json;

/// The other way round: a hostile lender against a borrower.
#[path = "lenderfuzz.rs"]
pub mod lender;

/// What to fuzz and how much.
#[derive(Debug, Clone)]
pub struct Options {
    /// The control area file (the ivshmem server's `--ctl-path`).
    pub ctl: PathBuf,
    /// The target's RAM file (its QEMU's memory backend): its inbox holds
    /// the ring the fuzzer writes.
    pub target_ram: PathBuf,
    /// The impersonated host's RAM file, which outlives its killed QEMU:
    /// its inbox holds the ring the target writes to it.
    pub peer_ram: PathBuf,
    /// The ivshmem server's socket of the impersonated host, to get the
    /// target's doorbell; without it the fuzzer relies on the target's
    /// liveness work, which drains at most a ring every 200 ms.
    pub doorbell_sock: Option<PathBuf>,
    /// Host id of the target.
    pub target: u32,
    /// Host id impersonated: a host whose slot says UP but that is dead.
    pub peer: u32,
    /// Messages to write.
    pub messages: u64,
    /// Seed of everything written.
    pub seed: u64,
    /// The dev_ids the target lends (all others name no device).
    pub dev_ids: Vec<u32>,
    /// How often to publish an impossible producer index (a corrupt ring).
    pub corruptions: u32,
    /// How often to stop taking the target's messages while sending on,
    /// until the target holds ours back (see `Fuzzer::deaf_phase`).
    pub deaf_phases: u32,
    /// Progress lines to stderr.
    pub verbose: bool,
}

/// A response status the fuzzer insists on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Exact(u32),
    NotOk,
    Any,
}

/// A request the target must answer, in ring order.
#[derive(Debug, Clone, Copy)]
struct Pending {
    req_id: u64,
    want: Want,
    /// Names a device the target lends (valid length and reserved fields).
    real_dev: bool,
    msg_type: u16,
}

/// What the target must have counted for the messages written.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Messages that reached the sequence check (peer counter `rx_msgs`).
    pub rx_msgs: u64,
    /// `rx_bad_msgs`.
    pub rx_bad_msgs: u64,
    /// `rx_stale`.
    pub rx_stale: u64,
    /// `rx_seq_errors`.
    pub rx_seq_errors: u64,
    /// `rx_corrupt_ring`.
    pub rx_corrupt_ring: u64,
    /// `rx_unknown`: requests of a type nobody handles.
    pub rx_unknown: u64,
    /// `late_responses`, at least (responses to ids never requested, or
    /// answered already).
    pub late_min: u64,
    /// `late_responses`, at most (plus answers to the target's own
    /// requests, late if the target gave up waiting).
    pub late_max: u64,
    /// Lender `global rej_malformed`: lending requests of a wrong length,
    /// or with a reserved field set.
    pub rej_malformed: u64,
    /// Of those, the ones refused only for a reserved field.
    pub rej_malformed_reserved: u64,
    /// Lender `global rej_nodev`: well-formed requests naming no device.
    pub rej_nodev: u64,
    /// Requests and posted messages naming a lent device.
    pub real_dev_msgs: u64,
    /// Of those, posted (no response tells how they ended).
    pub real_dev_posted: u64,
    /// Of those, DMA unmaps (cutting two mappings may refuse twice).
    pub real_dev_unmaps: u64,
}

/// What the fuzzer did and saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Seed.
    pub seed: u64,
    /// Messages written.
    pub sent: u64,
    /// Deaf phases run.
    pub deaf_phases: u64,
    /// Deaf phases in which the target was seen holding our messages back
    /// (its ring to us full, ours to it full and not taken).
    pub deaf_held: u64,
    /// Seconds from the first message to the last one consumed.
    pub secs: f64,
    /// Messages written, by kind.
    pub kinds: HashMap<&'static str, u64>,
    /// Expected counter deltas.
    pub expected: Expected,
    /// Responses received, by status.
    pub responses: HashMap<u32, u64>,
    /// Responses whose status was not the one required.
    pub wrong_status: u64,
    /// A few of them, for messages.
    pub wrong_examples: Vec<String>,
    /// Requests that got no response.
    pub missing_responses: u64,
    /// Responses to nothing the fuzzer asked (or out of order).
    pub unexpected_responses: u64,
    /// Non-OK responses other than EIO to requests naming a lent device:
    /// refusals, each of which the lender must count by reason.
    pub real_dev_refusals: u64,
    /// EIO responses to requests naming a lent device: the device failed,
    /// or (counted as `busy`) it was resetting.
    pub real_dev_eio: u64,
    /// Posted messages from the target, by type.
    pub target_posts: HashMap<u16, u64>,
    /// Requests from the target, answered by the fuzzer.
    pub target_requests: u64,
    /// Whether the target's doorbell was used.
    pub doorbell: bool,
}

impl Report {
    /// The report as JSON, for the test that runs the fuzzer binary.
    pub fn to_json(&self) -> serde_json::Value {
        let e = &self.expected;
        let kinds: serde_json::Map<String, serde_json::Value> = self
            .kinds
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let map_u = |m: &HashMap<u32, u64>| -> serde_json::Map<String, serde_json::Value> {
            m.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()
        };
        let posts: HashMap<u32, u64> = self
            .target_posts
            .iter()
            .map(|(k, v)| (u32::from(*k), *v))
            .collect();
        json!({
            "seed": self.seed,
            "sent": self.sent,
            "deaf_phases": self.deaf_phases,
            "deaf_held": self.deaf_held,
            "secs": self.secs,
            "doorbell": self.doorbell,
            "kinds": kinds,
            "expected": {
                "rx_msgs": e.rx_msgs,
                "rx_bad_msgs": e.rx_bad_msgs,
                "rx_stale": e.rx_stale,
                "rx_seq_errors": e.rx_seq_errors,
                "rx_corrupt_ring": e.rx_corrupt_ring,
                "rx_unknown": e.rx_unknown,
                "late_min": e.late_min,
                "late_max": e.late_max,
                "rej_malformed": e.rej_malformed,
                "rej_malformed_reserved": e.rej_malformed_reserved,
                "rej_nodev": e.rej_nodev,
                "real_dev_msgs": e.real_dev_msgs,
                "real_dev_posted": e.real_dev_posted,
                "real_dev_unmaps": e.real_dev_unmaps,
            },
            "responses": map_u(&self.responses),
            "wrong_status": self.wrong_status,
            "wrong_examples": self.wrong_examples,
            "missing_responses": self.missing_responses,
            "unexpected_responses": self.unexpected_responses,
            "real_dev_refusals": self.real_dev_refusals,
            "real_dev_eio": self.real_dev_eio,
            "target_posts": map_u(&posts),
            "target_requests": self.target_requests,
        })
    }
}

/// The expected deltas and checks of a report read back from JSON.
#[derive(Debug, Clone)]
pub struct ParsedReport {
    /// The whole JSON.
    pub json: serde_json::Value,
}

impl ParsedReport {
    /// A number at a JSON pointer (`/expected/rx_bad_msgs`).
    pub fn num(&self, pointer: &str) -> anyhow::Result<u64> {
        self.json
            .pointer(pointer)
            .and_then(serde_json::Value::as_u64)
            .with_context(|| format!("no number at {pointer} in the fuzzer's report"))
    }
}

// ---------------------------------------------------------------------------
// Shared memory, mapped: the control area and two inboxes.

/// A range of a file mapped read-write and shared, as the hosts map it:
/// the control area, or a host's inbox in its RAM file.
struct Mapped {
    /// Start of the mapping, page aligned.
    map: *mut u8,
    map_len: usize,
    /// Start of the range: `map` plus the range's offset in its first page.
    base: *mut u8,
    len: usize,
    /// What the range is, for messages.
    what: String,
}

fn page_size() -> u64 {
    // SAFETY: sysconf takes no pointers and only reads a constant of the
    // system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap_or(PAGE)
}

fn open_rw(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))
}

impl Mapped {
    /// Maps `len` (nonzero) bytes at `offset` of `file`.
    fn new(file: &File, offset: u64, len: usize, what: String) -> anyhow::Result<Mapped> {
        let start = offset - offset % page_size();
        let lead = usize::try_from(offset - start)?;
        let map_len = lead
            .checked_add(len)
            .with_context(|| format!("{what}: {len} bytes at {offset:#x} overflow"))?;
        let file_off = libc::off_t::try_from(start)
            .with_context(|| format!("{what}: offset {offset:#x} too large"))?;
        // SAFETY: a new shared mapping of `map_len` bytes of an open file,
        // at an address the kernel picks; nothing in this process aliases
        // it. The hosts write the same pages concurrently, so it is only
        // ever accessed through atomics and volatile copies (see below).
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                file_off,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("mmap {what}"));
        }
        let map = map.cast::<u8>();
        // SAFETY: `lead < map_len`: the range starts inside the mapping
        // just made.
        let base = unsafe { map.add(lead) };
        Ok(Mapped {
            map,
            map_len,
            base,
            len,
            what,
        })
    }

    /// Checks that `len` bytes at `off` lie in the range and that their
    /// address is `align`-aligned; the offset as usize.
    fn check(&self, off: u64, len: usize, align: usize) -> usize {
        let off = usize::try_from(off).expect("offset fits usize");
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len)
                && (self.base as usize).wrapping_add(off).is_multiple_of(align),
            "access of {len} bytes at {off:#x} outside {} or misaligned",
            self.what
        );
        off
    }

    fn u32_at(&self, off: u64) -> &AtomicU32 {
        let off = self.check(off, 4, 4);
        // SAFETY: the address is 4-byte aligned and within the mapping
        // (checked), which lives as long as `self`; every access of this
        // process to the word is atomic. Other processes (QEMU's vCPUs)
        // access it with their own atomic loads and stores.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    fn u64_at(&self, off: u64) -> &AtomicU64 {
        let off = self.check(off, 8, 8);
        // SAFETY: as in u32_at, for an 8-byte aligned word.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
    }

    /// Copies bytes out, 8 at a time; `buf.len()` a multiple of 8.
    fn read(&self, off: u64, buf: &mut [u8]) {
        assert!(buf.len().is_multiple_of(8));
        let start = self.check(off, buf.len(), 8);
        for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
            // SAFETY: within the mapping (checked for the whole of `buf`)
            // and 8-byte aligned; volatile because another process writes
            // the memory whenever it likes.
            let word =
                unsafe { std::ptr::read_volatile(self.base.add(start + i * 8).cast::<u64>()) };
            chunk.copy_from_slice(&word.to_le_bytes());
        }
    }

    /// Copies bytes in, 8 at a time; `buf.len()` a multiple of 8.
    fn write(&self, off: u64, buf: &[u8]) {
        assert!(buf.len().is_multiple_of(8));
        let start = self.check(off, buf.len(), 8);
        for (i, chunk) in buf.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            // SAFETY: as in read.
            unsafe { std::ptr::write_volatile(self.base.add(start + i * 8).cast::<u64>(), word) };
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new, not used after this.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// Maps the control area file (the ivshmem server's `--ctl-path`) whole.
fn open_ctl(path: &Path) -> anyhow::Result<(Mapped, CtlLayout)> {
    let file = open_rw(path)?;
    let len = file
        .metadata()
        .with_context(|| format!("stat {}", path.display()))?
        .len();
    let mut header = [0u8; DL_CTL_HEADER_SIZE];
    file.read_exact_at(&mut header, 0)
        .with_context(|| format!("read the header of {}", path.display()))?;
    let layout =
        CtlLayout::parse(&header).with_context(|| format!("control area {}", path.display()))?;
    layout
        .check_fits(len)
        .with_context(|| format!("control area {}", path.display()))?;
    let area = Mapped::new(
        &file,
        0,
        usize::try_from(len)?,
        format!("control area {}", path.display()),
    )?;
    Ok((area, layout))
}

/// Host `id`'s slot in the control area, decoded and checked.
fn read_host(area: &Mapped, layout: &CtlLayout, id: u32) -> anyhow::Result<HostInfo> {
    let mut buf = [0u8; DL_HOST_INFO_SIZE];
    area.read(layout.host_offset(id)?, &mut buf);
    HostInfo::decode_slot(&buf, id)
        .and_then(|h| h.check_layout(layout).map(|()| h))
        .with_context(|| format!("host {id}'s slot in the control area"))
}

/// Maps the inbox of `owner` (which is up) in its RAM file `path`, after
/// checking that the file is that host's RAM (its ident token at
/// `ident_phys`) and holds the whole inbox.
fn open_inbox(path: &Path, layout: &CtlLayout, owner: &HostInfo) -> anyhow::Result<Mapped> {
    let id = owner.host_id;
    let file = open_rw(path)?;
    let len = file
        .metadata()
        .with_context(|| format!("stat {}", path.display()))?
        .len();
    let ident = owner
        .ram
        .window_range(owner.ident_phys, 8)
        .with_context(|| format!("host {id}'s ident_phys is not in its RAM"))?;
    let mut token = [0u8; 8];
    file.read_exact_at(&mut token, ident)
        .with_context(|| format!("read host {id}'s ident token in {}", path.display()))?;
    ensure!(
        u64::from_le_bytes(token) == owner.ident_token,
        "{} is not host {id}'s RAM: no ident token {:#x} at offset {ident:#x}",
        path.display(),
        owner.ident_token
    );
    let off = owner
        .inbox_offset(layout)
        .with_context(|| format!("host {id}'s inbox"))?;
    let size = layout.inbox_size();
    ensure!(
        off.checked_add(u64::from(size))
            .is_some_and(|end| end <= len),
        "{} ({len} bytes) ends before host {id}'s inbox ({size} bytes at {off:#x})",
        path.display()
    );
    Mapped::new(
        &file,
        off,
        usize::try_from(size)?,
        format!("host {id}'s inbox in {}", path.display()),
    )
}

// ---------------------------------------------------------------------------
// The doorbell: the ivshmem client protocol, as far as the eventfds.

/// Connects to the server's socket of the dead host and takes the target's
/// vector-0 eventfd. Keep the stream until done: closing it lets the host's
/// new QEMU connect.
fn doorbell(sock: &Path, target: u32) -> anyhow::Result<(UnixStream, OwnedFd)> {
    let stream =
        UnixStream::connect(sock).with_context(|| format!("connect to {}", sock.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut found = None;
    // version, own id, control area, the other hosts' vectors, own vectors.
    for _ in 0..(3 + 2 * 8 * sys::DL_DB_VECTORS) {
        let (value, fd) = recv_msg(stream.as_raw_fd())
            .with_context(|| format!("ivshmem protocol on {}", sock.display()))?;
        if value == i64::from(target) && found.is_none() {
            found = fd;
            if found.is_some() {
                break;
            }
        }
    }
    let fd = found.with_context(|| {
        format!(
            "{} sent no eventfd of host {target} (is its old client gone?)",
            sock.display()
        )
    })?;
    Ok((stream, fd))
}

#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// One ivshmem message: 8 bytes and at most one descriptor.
fn recv_msg(sock: RawFd) -> anyhow::Result<(i64, Option<OwnedFd>)> {
    let mut bytes = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut cbuf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is a plain C struct for which all-zero bytes are a
    // valid, empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len() as _;
    // SAFETY: `msg` points to `iov` (which points to `bytes`) and `cbuf`,
    // exclusively borrowed and alive for the call.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let mut fd = None;
    // SAFETY: the kernel filled `msg` and its control buffer in.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return a header within the
        // control bytes the kernel filled in; SCM_RIGHTS data is ints.
        unsafe {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let n = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..n {
                    let raw = std::ptr::read_unaligned(data.add(i));
                    // SAFETY: a descriptor just received, owned by nobody
                    // else; the first one is kept, others closed on drop.
                    let owned = OwnedFd::from_raw_fd(raw);
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n != 8 {
        bail!("short ivshmem message ({n} bytes)");
    }
    Ok((i64::from_le_bytes(bytes), fd))
}

fn ring_doorbell(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

// ---------------------------------------------------------------------------
// The model of the target's receive path.

const T_PING: u16 = sys::DL_MSG_PING as u16;
const T_DEV_LIST: u16 = sys::DL_MSG_DEV_LIST as u16;
const T_DEV_INFO: u16 = sys::DL_MSG_DEV_INFO as u16;
const T_DEV_CHANGED: u16 = sys::DL_MSG_DEV_CHANGED as u16;
const T_ACQUIRE: u16 = sys::DL_MSG_DEV_ACQUIRE as u16;
const T_RELEASE: u16 = sys::DL_MSG_DEV_RELEASE as u16;
const T_RESET: u16 = sys::DL_MSG_DEV_RESET as u16;
const T_CFG_READ: u16 = sys::DL_MSG_CFG_READ as u16;
const T_CFG_WRITE: u16 = sys::DL_MSG_CFG_WRITE as u16;
const T_BAR_READ: u16 = sys::DL_MSG_BAR_READ as u16;
const T_BAR_WRITE: u16 = sys::DL_MSG_BAR_WRITE as u16;
const T_DMA_MAP: u16 = sys::DL_MSG_DMA_MAP as u16;
const T_DMA_UNMAP: u16 = sys::DL_MSG_DMA_UNMAP as u16;
const T_IRQ_SET: u16 = sys::DL_MSG_IRQ_SET as u16;
const T_IRQ_FIRE: u16 = sys::DL_MSG_IRQ_FIRE as u16;
const T_DEV_FAULT: u16 = sys::DL_MSG_DEV_FAULT as u16;
const T_CFG_READ_BLOCK: u16 = sys::DL_MSG_CFG_READ_BLOCK as u16;
const T_IRQ_MASK: u16 = sys::DL_MSG_IRQ_MASK as u16;
const T_IRQ_DIRECT: u16 = sys::DL_MSG_IRQ_DIRECT as u16;
const T_BAR_WINDOW: u16 = sys::DL_MSG_BAR_WINDOW as u16;
const T_BAR_DMA: u16 = sys::DL_MSG_BAR_DMA as u16;
const T_P2P_DMA: u16 = sys::DL_MSG_P2P_DMA as u16;
const T_P2P_EXPORT: u16 = sys::DL_MSG_P2P_EXPORT as u16;
/// Lender to lender (`lender/p2p_remote.c`).
const T_P2P_LOOKUP: u16 = sys::DL_MSG_P2P_LOOKUP as u16;
const T_P2P_REVOKE: u16 = sys::DL_MSG_P2P_REVOKE as u16;
/// Live migration (`lender/migrate.c`), holder and destination to lender.
const T_MIG_QUIESCE: u16 = sys::DL_MSG_MIG_QUIESCE as u16;
const T_MIG_RESUME: u16 = sys::DL_MSG_MIG_RESUME as u16;
const T_MIG_TAKEOVER: u16 = sys::DL_MSG_MIG_TAKEOVER as u16;
/// The last type a lender knows.
const T_LAST_KNOWN: u16 = T_MIG_TAKEOVER;
/// The emulated NTB port's hello (`ntb-emu/main.c`), used by the flood.
const T_NTB_HELLO: u16 = sys::DL_MSG_NTB_HELLO as u16;

const S_OK: u32 = sys::DL_STATUS_OK;
const S_EINVAL: u32 = sys::DL_STATUS_EINVAL;
const S_ENOTSUPP: u32 = sys::DL_STATUS_ENOTSUPP;
const S_ENODEV: u32 = sys::DL_STATUS_ENODEV;
const S_EIO: u32 = sys::DL_STATUS_EIO;

const RESP: u16 = sys::DL_MSG_F_RESPONSE;
const PAGE: u64 = 4096;

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}
fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}
fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// The fixed payload size of a lending request type, if it has one.
fn fixed_size(t: u16) -> Option<usize> {
    Some(match t {
        T_DEV_LIST | T_DEV_INFO | T_ACQUIRE | T_RELEASE | T_RESET => sys::DL_DEV_REF_SIZE,
        T_CFG_READ | T_CFG_WRITE => sys::DL_CFG_ACCESS_SIZE,
        T_CFG_READ_BLOCK => sys::DL_CFG_BLOCK_REQ_SIZE,
        T_BAR_READ | T_BAR_WRITE => sys::DL_BAR_ACCESS_SIZE,
        T_DMA_UNMAP => sys::DL_DMA_UNMAP_SIZE,
        T_IRQ_SET => sys::DL_IRQ_SET_SIZE,
        T_IRQ_MASK => sys::DL_IRQ_MASK_SIZE,
        T_IRQ_DIRECT => sys::DL_IRQ_DIRECT_SIZE,
        T_BAR_WINDOW => sys::DL_BAR_WINDOW_SIZE,
        T_BAR_DMA => sys::DL_BAR_DMA_SIZE,
        T_P2P_DMA => sys::DL_P2P_DMA_SIZE,
        T_P2P_EXPORT => sys::DL_P2P_EXPORT_SIZE,
        T_MIG_QUIESCE => sys::DL_MIG_QUIESCE_SIZE,
        T_MIG_RESUME => sys::DL_DEV_REF_SIZE,
        T_MIG_TAKEOVER => sys::DL_MIG_TAKEOVER_SIZE,
        _ => return None,
    })
}

/// The target's view of the impersonated peer, message by message.
#[derive(Debug)]
struct Model {
    src: u32,
    epoch: u32,
    proto: u16,
    max_payload: usize,
    /// The sequence number the target expects next, if it is synced.
    next_seq: Option<u32>,
    lent: HashSet<u32>,
    /// Ids of the target's requests to the peer, and whether answered.
    target_reqs: HashMap<u64, bool>,
    exp: Expected,
}

impl Model {
    /// The checks of `dl_rx_one()` (`fabric/rx.c`), in its order,
    /// counted as the target counts them; whether the message goes on to
    /// be dispatched.
    fn header(&mut self, slot: &[u8]) -> bool {
        let len = usize::from(le16(slot, 4));
        if len > self.max_payload {
            self.exp.rx_bad_msgs += 1;
            return false;
        }
        if le32(slot, 8) != self.src {
            self.exp.rx_bad_msgs += 1;
            return false;
        }
        // The peer's slot shows the epoch that is up, so any other epoch
        // is stale (never "wait for the new incarnation").
        if le32(slot, 12) != self.epoch {
            self.exp.rx_stale += 1;
            return false;
        }
        if le16(slot, 2) != self.proto {
            self.exp.rx_bad_msgs += 1;
            return false;
        }
        let seq = le32(slot, 16);
        if self.next_seq.is_some_and(|n| n != seq) {
            self.exp.rx_seq_errors += 1;
        }
        self.next_seq = Some(seq.wrapping_add(1));
        self.exp.rx_msgs += 1;
        true
    }

    /// Applies one message, as the target will see it; a response the
    /// target must send, if any.
    fn apply(&mut self, slot: &[u8]) -> Option<Pending> {
        if !self.header(slot) {
            return None;
        }
        let len = usize::from(le16(slot, 4));
        let msg_type = le16(slot, 0);
        let flags = le16(slot, 6);
        let req_id = le64(slot, 24);
        let payload = &slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + len];
        if flags & RESP != 0 {
            if req_id == 0 {
                self.exp.rx_bad_msgs += 1;
            } else {
                match self.target_reqs.get_mut(&req_id) {
                    // Completes the request, unless it timed out.
                    Some(answered @ false) => {
                        *answered = true;
                        self.exp.late_max += 1;
                    }
                    _ => {
                        self.exp.late_min += 1;
                        self.exp.late_max += 1;
                    }
                }
            }
            return None;
        }
        let pending = |want: Want, real_dev: bool| {
            (req_id != 0).then_some(Pending {
                req_id,
                want,
                real_dev,
                msg_type,
            })
        };
        match msg_type {
            T_PING => {
                if len < sys::DL_PING_SIZE {
                    self.exp.rx_bad_msgs += 1;
                    return pending(Want::Exact(S_EINVAL), false);
                }
                let ok = Ping::decode(payload)
                    .map(|(p, data)| p.verify(data).is_ok())
                    .unwrap_or(false);
                pending(Want::Exact(if ok { S_OK } else { S_EINVAL }), false)
            }
            // The borrower's handlers: they never answer.
            T_DEV_CHANGED | T_IRQ_FIRE | T_DEV_FAULT => None,
            T_DEV_LIST..=T_IRQ_SET
            | T_CFG_READ_BLOCK
            | T_IRQ_MASK
            | T_IRQ_DIRECT
            | T_BAR_WINDOW
            | T_BAR_DMA
            | T_P2P_DMA
            | T_P2P_EXPORT
            | T_MIG_QUIESCE
            | T_MIG_RESUME
            | T_MIG_TAKEOVER => self.lending(msg_type, payload, req_id),
            // Another lender's: checked, then nothing of ours matches.
            T_P2P_LOOKUP | T_P2P_REVOKE => {
                let bad = if msg_type == T_P2P_LOOKUP {
                    len != sys::DL_P2P_LOOKUP_SIZE
                        || payload[5..8] != [0; 3]
                        || payload[12..16] != [0; 4]
                } else {
                    len != sys::DL_DEV_REF_SIZE || payload[4..8] != [0; 4]
                };
                if bad {
                    self.exp.rej_malformed += 1;
                    return pending(Want::Exact(S_EINVAL), false);
                }
                // No export here names the fuzzer (ENOENT, on the wire
                // EIO); a REVOKE drops nothing.
                pending(
                    Want::Exact(if msg_type == T_P2P_REVOKE {
                        S_OK
                    } else {
                        S_EIO
                    }),
                    false,
                )
            }
            _ if req_id != 0 => {
                self.exp.rx_unknown += 1;
                pending(Want::Exact(S_ENOTSUPP), false)
            }
            _ => {
                self.exp.rx_bad_msgs += 1;
                None
            }
        }
    }

    /// `lender/msg.c`: a lending request with a valid header.
    fn lending(&mut self, t: u16, p: &[u8], req_id: u64) -> Option<Pending> {
        let pending = |want: Want, real_dev: bool| {
            (req_id != 0).then_some(Pending {
                req_id,
                want,
                real_dev,
                msg_type: t,
            })
        };
        let malformed = match t {
            T_DMA_MAP => {
                p.len() < sys::DL_DMA_MAP_SIZE || {
                    let count = le32(p, 4) as usize;
                    let room = (p.len() - sys::DL_DMA_MAP_SIZE) / sys::DL_DMA_RANGE_SIZE;
                    count == 0
                        || count > room
                        || p.len() != sys::DL_DMA_MAP_SIZE + count * sys::DL_DMA_RANGE_SIZE
                }
            }
            _ => Some(p.len()) != fixed_size(t),
        };
        // Reserved fields and flags checked before the device is looked up.
        let reserved = !malformed
            && match t {
                T_DEV_LIST | T_ACQUIRE | T_RELEASE | T_RESET => le32(p, 4) != 0,
                // DEV_INFO's flags may ask for the extension.
                T_DEV_INFO => le32(p, 4) & !sys::DL_DEV_REF_F_INFO_EXT != 0,
                T_IRQ_SET => {
                    let flags = le16(p, 6);
                    flags != 0
                        && (flags & !(sys::DL_IRQ_SET_F_UNMASK_MSG as u16) != 0
                            || u32::from(le16(p, 4)) != sys::DL_IRQ_INTX)
                }
                T_IRQ_MASK => {
                    u32::from(le16(p, 4)) != sys::DL_IRQ_INTX
                        || le16(p, 6) != 0
                        || p[8] > 1
                        || p[9..12] != [0, 0, 0]
                }
                T_IRQ_DIRECT => p[10..16] != [0; 6],
                // Reserved bytes and the answer's fields zero.
                T_BAR_WINDOW => p[5..32].iter().any(|&b| b != 0),
                // Known flags, reserved zero, an unmap names no IOVA.
                T_BAR_DMA => {
                    let flags = u32::from(p[5]);
                    flags & !sys::DL_BAR_DMA_F_MAP != 0
                        || p[6..8] != [0, 0]
                        || (flags & sys::DL_BAR_DMA_F_MAP == 0 && p[8..16] != [0; 8])
                }
                // The same, in dl_p2p_dma's places.
                T_P2P_DMA => {
                    let flags = u32::from(p[9]);
                    flags & !sys::DL_P2P_DMA_F_MAP != 0
                        || p[10..12] != [0, 0]
                        || (flags & sys::DL_P2P_DMA_F_MAP == 0 && p[16..24] != [0; 8])
                }
                T_P2P_EXPORT => p[5..8] != [0; 3] || p[12..16] != [0; 4],
                T_MIG_RESUME => le32(p, 4) != 0,
                // dl_settle_args_ok(): a settle time, a timeout from it to
                // the most, reserved zero.
                T_MIG_QUIESCE => {
                    let (settle, timeout) = (le32(p, 4), le32(p, 8));
                    settle == 0
                        || timeout < settle
                        || timeout > sys::DL_MIG_TIMEOUT_MAX_MS
                        || le32(p, 12) != 0
                }
                _ => false,
            };
        if malformed || reserved {
            self.exp.rej_malformed += 1;
            if reserved {
                self.exp.rej_malformed_reserved += 1;
            }
            return pending(Want::Exact(S_EINVAL), false);
        }
        if t == T_DEV_LIST {
            return pending(Want::Exact(S_OK), false);
        }
        if !self.lent.contains(&le32(p, 0)) {
            self.exp.rej_nodev += 1;
            return pending(Want::Exact(S_ENODEV), false);
        }
        self.exp.real_dev_msgs += 1;
        if req_id == 0 {
            self.exp.real_dev_posted += 1;
        }
        if t == T_DMA_UNMAP {
            self.exp.real_dev_unmaps += 1;
        }
        pending(
            if certainly_refused(t, p) {
                Want::NotOk
            } else {
                Want::Any
            },
            true,
        )
    }
}

/// Whether a well-formed request to a lent device is refused whatever the
/// device's state (then by exactly one counted reason).
fn certainly_refused(t: u16, p: &[u8]) -> bool {
    match t {
        T_CFG_READ | T_CFG_WRITE => {
            let (off, size, reserved) = (u32::from(le16(p, 4)), u32::from(p[6]), p[7]);
            reserved != 0 || !matches!(size, 1 | 2 | 4) || off % size != 0 || off + size > 4096
        }
        T_CFG_READ_BLOCK => {
            let (off, len) = (u32::from(le16(p, 4)), u32::from(le16(p, 6)));
            off % 4 != 0
                || len % 4 != 0
                || len == 0
                || len > sys::DL_CFG_BLOCK_MAX
                || off + len > 4096
        }
        T_BAR_READ | T_BAR_WRITE => {
            let (bar, size, reserved, off) = (p[4], u64::from(p[5]), le16(p, 6), le64(p, 8));
            reserved != 0
                || bar >= 6
                || !matches!(size, 1 | 2 | 4 | 8)
                || off % size != 0
                || off >= 1 << 40
        }
        T_DMA_MAP => {
            let (iova, addr, len) = (le64(p, 8), le64(p, 16), le64(p, 24));
            len == 0 || iova % PAGE != 0 || addr % PAGE != 0 || len % PAGE != 0
        }
        T_DMA_UNMAP => {
            let (flags, iova, len) = (le32(p, 4), le64(p, 8), le64(p, 16));
            flags & !sys::DL_DMA_UNMAP_F_ALL != 0
                || (flags == 0 && (len == 0 || iova % PAGE != 0 || len % PAGE != 0))
        }
        T_IRQ_SET => le16(p, 4) > 2,
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// The generator.

/// Kinds of message, with weights (per 1000).
const KINDS: &[(&str, u32)] = &[
    ("random_bytes", 40),
    ("bad_len", 40),
    ("bad_src", 30),
    ("stale_epoch", 40),
    ("bad_proto", 30),
    ("unknown_response", 40),
    ("unknown_type", 40),
    ("ping", 30),
    ("lending_malformed", 150),
    ("lending_nodev", 150),
    ("lending_real_dev", 260),
    ("lender_p2p", 20),
    ("dev_list", 20),
    ("borrower_post", 20),
    ("replay", 70),
];

/// Boundary or random u64 values, else `typical`.
fn edge64(rng: &mut StdRng, typical: u64) -> u64 {
    match rng.random_range(0..8) {
        0 => 0,
        1 => u64::MAX,
        2 => !(PAGE - 1),
        3 => 1 << 63,
        4 => rng.random(),
        _ => typical,
    }
}

struct Gen {
    rng: StdRng,
    src: u32,
    epoch: u32,
    slot_size: usize,
    seq: u32,
    req: u64,
    lent: Vec<u32>,
    borrower_ram: u64,
    recent: VecDeque<Vec<u8>>,
    total_weight: u32,
}

impl Gen {
    fn pick_kind(&mut self) -> &'static str {
        let mut x = self.rng.random_range(0..self.total_weight);
        for (k, w) in KINDS {
            if x < *w {
                return k;
            }
            x -= w;
        }
        KINDS[0].0
    }

    fn next_req(&mut self) -> u64 {
        self.req += 1;
        // Our own ids: the target only echoes them.
        0x5eed_0000_0000_0000 | self.req
    }

    /// An id the target never issued: its ids are generation << 32 | index
    /// with the index from 1 and the generation small.
    fn unknown_id(&mut self) -> u64 {
        match self.rng.random_range(0..4) {
            0 => 1 << 32,
            1 => !0xffff_ffff,
            2 => (self.rng.random::<u64>() | 1 << 63) & !0xffff_ffff,
            _ => self.rng.random::<u64>() | 1 << 63,
        }
    }

    fn dev_id_bogus(&mut self) -> u32 {
        loop {
            let d = match self.rng.random_range(0..5) {
                0 => 0,
                1 => u32::MAX,
                2 => self.lent.iter().max().copied().unwrap_or(0).wrapping_add(1),
                3 => self.rng.random_range(0..64),
                _ => self.rng.random(),
            };
            if !self.lent.contains(&d) {
                return d;
            }
        }
    }

    fn real_dev(&mut self) -> u32 {
        if self.lent.is_empty() {
            return self.dev_id_bogus();
        }
        self.lent[self.rng.random_range(0..self.lent.len())]
    }

    fn hdr(&mut self, slot: &mut [u8], t: u16, len: usize, flags: u16, req_id: u64) {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        slot[0..2].copy_from_slice(&t.to_le_bytes());
        slot[2..4].copy_from_slice(&1u16.to_le_bytes());
        slot[4..6].copy_from_slice(&(len as u16).to_le_bytes());
        slot[6..8].copy_from_slice(&flags.to_le_bytes());
        slot[8..12].copy_from_slice(&self.src.to_le_bytes());
        slot[12..16].copy_from_slice(&self.epoch.to_le_bytes());
        slot[16..20].copy_from_slice(&seq.to_le_bytes());
        slot[20..24].copy_from_slice(&0u32.to_le_bytes());
        slot[24..32].copy_from_slice(&req_id.to_le_bytes());
    }

    /// A lending payload for type `t`, for device `dev`, mostly valid.
    fn lending_payload(&mut self, t: u16, dev: u32, p: &mut Vec<u8>) {
        p.clear();
        let r = &mut self.rng;
        match t {
            T_DEV_LIST | T_DEV_INFO | T_ACQUIRE | T_RELEASE | T_RESET => {
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&0u32.to_le_bytes());
            }
            T_CFG_READ_BLOCK => {
                let off: u16 = match r.random_range(0..4) {
                    0 => r.random_range(0..64) * 64,
                    1 => r.random_range(0..4096),
                    2 => [0xfffc, 0x1000, 0x0fc0, 0x0ffc, 0xffc0][r.random_range(0..5)],
                    _ => r.random_range(0..1024) * 4,
                };
                let len: u16 = match r.random_range(0..4) {
                    0 | 1 => sys::DL_CFG_BLOCK_MAX as u16,
                    2 => r.random_range(1..=16) * 4,
                    _ => [0, 2, 68, 0xffff, 0xfffc][r.random_range(0..5)],
                };
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&off.to_le_bytes());
                p.extend_from_slice(&len.to_le_bytes());
            }
            T_CFG_READ | T_CFG_WRITE => {
                let size = [1u8, 2, 4, 4, 4, 0, 3, 8][r.random_range(0..8)];
                let off: u16 = match r.random_range(0..4) {
                    0 => r.random_range(0..64) * 4,
                    1 => r.random_range(0..4096),
                    2 => [0xfffc, 0x1000, 0xffff, 0x0ffc, 0x100][r.random_range(0..5)],
                    _ => r.random_range(0..1024) * 4,
                };
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&off.to_le_bytes());
                p.push(size);
                p.push(if r.random_ratio(1, 30) { 1 } else { 0 });
                p.extend_from_slice(&r.random::<u32>().to_le_bytes());
            }
            T_BAR_READ | T_BAR_WRITE => {
                let bar = if r.random_ratio(1, 8) {
                    r.random_range(0..=255)
                } else {
                    r.random_range(0..6)
                };
                let size = [1u8, 2, 4, 8, 4, 4, 0, 3][r.random_range(0..8)];
                let off: u64 = match r.random_range(0..5) {
                    0 => r.random_range(0..0x4000) & !3,
                    1 => r.random_range(0..0x1_0000),
                    2 => [0, 0x14, 0x1c, 0x1000, 0x2000, 0x3000][r.random_range(0..6)],
                    3 => u64::MAX - r.random_range(0..16),
                    _ => r.random(),
                };
                p.extend_from_slice(&dev.to_le_bytes());
                p.push(bar);
                p.push(size);
                let reserved: u16 = if r.random_ratio(1, 30) { 1 } else { 0 };
                p.extend_from_slice(&reserved.to_le_bytes());
                p.extend_from_slice(&off.to_le_bytes());
                p.extend_from_slice(&r.random::<u64>().to_le_bytes());
            }
            T_DMA_MAP => {
                let count = r.random_range(1..=9u32);
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&count.to_le_bytes());
                for _ in 0..count {
                    let pages = r.random_range(1..=16u64);
                    let iova = r.random_range(0..0x1_0000u64) * PAGE;
                    let addr = r.random_range(0..self.borrower_ram / PAGE) * PAGE;
                    let len = pages * PAGE;
                    let (iova, addr, len) = match r.random_range(0..10) {
                        0 => (iova + 1, addr, len),
                        1 => (iova, addr, 0),
                        2 => (edge64(r, iova), addr, len),
                        3 => (iova, edge64(r, addr), len),
                        4 => (iova, addr, edge64(r, len)),
                        _ => (iova, addr, len),
                    };
                    p.extend_from_slice(&iova.to_le_bytes());
                    p.extend_from_slice(&addr.to_le_bytes());
                    p.extend_from_slice(&len.to_le_bytes());
                }
            }
            T_DMA_UNMAP => {
                let flags: u32 = match r.random_range(0..10) {
                    0 => 1,
                    1 => r.random::<u32>() | 2,
                    _ => 0,
                };
                let iova = r.random_range(0..0x1_0000u64) * PAGE;
                let len = r.random_range(1..=64u64) * PAGE;
                let (iova, len) = match r.random_range(0..8) {
                    0 => (edge64(r, iova), len),
                    1 => (iova, edge64(r, len)),
                    2 => (iova + 8, len),
                    _ => (iova, len),
                };
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&flags.to_le_bytes());
                p.extend_from_slice(&iova.to_le_bytes());
                p.extend_from_slice(&len.to_le_bytes());
            }
            T_IRQ_SET => {
                let ty: u16 = if r.random_ratio(1, 6) {
                    r.random()
                } else {
                    r.random_range(0..3)
                };
                let count: u32 = match r.random_range(0..6) {
                    0 => 0,
                    1 => u32::MAX,
                    2 => r.random_range(0..100),
                    _ => r.random_range(1..4),
                };
                // INTx ended by unmask messages, as the borrower asks.
                let flags = u16::from(ty == sys::DL_IRQ_INTX as u16 && r.random_ratio(1, 2));
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&ty.to_le_bytes());
                p.extend_from_slice(&flags.to_le_bytes());
                p.extend_from_slice(&count.to_le_bytes());
            }
            T_IRQ_MASK => {
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&(sys::DL_IRQ_INTX as u16).to_le_bytes());
                p.extend_from_slice(&0u16.to_le_bytes());
                p.push(u8::from(r.random_ratio(1, 2)));
                p.extend_from_slice(&[0; 3]);
            }
            T_IRQ_DIRECT => {
                // Mostly an MSI-X vector the holder may have taken and a
                // doorbell vector it may have; now and then anything.
                let ty: u16 = if r.random_ratio(1, 6) {
                    r.random()
                } else {
                    sys::DL_IRQ_MSIX as u16
                };
                let vector: u16 = if r.random_ratio(1, 6) {
                    r.random()
                } else {
                    r.random_range(0..4)
                };
                let db: u16 = if r.random_ratio(1, 6) {
                    r.random()
                } else {
                    r.random_range(0..sys::DL_DB_VECTORS_MAX as u16 + 1)
                };
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&ty.to_le_bytes());
                p.extend_from_slice(&vector.to_le_bytes());
                p.extend_from_slice(&db.to_le_bytes());
                p.extend_from_slice(&[0; 6]);
            }
            T_BAR_WINDOW => {
                let bar: u8 = if r.random_ratio(1, 6) {
                    r.random()
                } else {
                    r.random_range(0..6)
                };
                p.extend_from_slice(&dev.to_le_bytes());
                p.push(bar);
                p.extend_from_slice(&[0; 27]);
            }
            // An unmap: nothing of the lender's changes, whatever the BAR.
            T_BAR_DMA => {
                p.extend_from_slice(&dev.to_le_bytes());
                p.push(r.random_range(0..7));
                p.extend_from_slice(&[0; 11]);
            }
            // Shows a BAR to a host; the lender has no window to show it
            // through (no bar_windows here): refused.
            T_P2P_EXPORT => {
                p.extend_from_slice(&dev.to_le_bytes());
                p.push(r.random_range(0..7));
                p.extend_from_slice(&[0; 3]);
                p.extend_from_slice(&r.random_range(0..4u32).to_le_bytes());
                p.extend_from_slice(&[0; 4]);
            }
            // An unmap of another device's BAR: nothing changes either.
            T_P2P_DMA => {
                p.extend_from_slice(&dev.to_le_bytes());
                p.extend_from_slice(&r.random::<u32>().to_le_bytes());
                p.push(r.random_range(0..7));
                p.extend_from_slice(&[0; 3]);
                p.extend_from_slice(&r.random_range(0..4u32).to_le_bytes());
                p.extend_from_slice(&[0; 8]);
            }
            _ => {}
        }
    }

    /// A lending type for the lent device, weighted towards cheap requests:
    /// resets and releases reset the device (slow under TCG), vectors cost
    /// interrupts.
    fn real_dev_type(&mut self) -> u16 {
        let x = self.rng.random_range(0..10_000);
        match x {
            0..2500 => T_CFG_READ,
            2500..3000 => T_CFG_READ_BLOCK,
            3000..3950 => T_CFG_WRITE,
            3950..3975 => T_IRQ_MASK,
            3975..3990 => T_IRQ_DIRECT,
            3990..4000 => T_BAR_WINDOW,
            4000..6500 => T_BAR_READ,
            6500..8000 => T_BAR_WRITE,
            8000..8900 => T_DMA_MAP,
            8900..9500 => T_DMA_UNMAP,
            9500..9600 => T_IRQ_SET,
            9600..9850 => T_ACQUIRE,
            9850..9995 => T_DEV_INFO,
            9995..9998 => T_RESET,
            _ => T_RELEASE,
        }
    }

    /// Fills `slot` (all of it) with the next message; its kind.
    fn message(&mut self, slot: &mut [u8]) -> &'static str {
        slot.fill(0);
        let max = self.slot_size - DL_MSG_HDR_SIZE;
        let kind = self.pick_kind();
        let mut p = Vec::with_capacity(max);
        match kind {
            "random_bytes" => {
                self.rng.fill_bytes(slot);
                // Sometimes only the header's length is sane.
                if self.rng.random_ratio(1, 2) {
                    let len = self.rng.random_range(0..=max) as u16;
                    slot[4..6].copy_from_slice(&len.to_le_bytes());
                }
                if self.rng.random_ratio(1, 2) {
                    slot[8..12].copy_from_slice(&self.src.to_le_bytes());
                }
            }
            "bad_len" => {
                let len = match self.rng.random_range(0..4) {
                    0 => max + 1,
                    1 => usize::from(u16::MAX),
                    2 => self.slot_size,
                    _ => self.rng.random_range(max + 1..=usize::from(u16::MAX)),
                };
                let id = self.next_req();
                self.hdr(slot, T_DEV_INFO, 0, 0, id);
                slot[4..6].copy_from_slice(&(len as u16).to_le_bytes());
            }
            "bad_src" => {
                let id = self.next_req();
                self.hdr(slot, T_DEV_LIST, sys::DL_DEV_REF_SIZE, 0, id);
                let src = loop {
                    let s = match self.rng.random_range(0..3) {
                        0 => self.rng.random_range(0..8),
                        1 => u32::MAX,
                        _ => self.rng.random(),
                    };
                    if s != self.src {
                        break s;
                    }
                };
                slot[8..12].copy_from_slice(&src.to_le_bytes());
            }
            "stale_epoch" => {
                let id = self.next_req();
                let t = self.real_dev_type();
                let dev = self.real_dev();
                self.lending_payload(t, dev, &mut p);
                self.hdr(slot, t, p.len(), 0, id);
                slot[32..32 + p.len()].copy_from_slice(&p);
                let epoch = loop {
                    let e = match self.rng.random_range(0..4) {
                        0 => self.epoch.wrapping_add(1),
                        1 => self.epoch ^ 0x8000_0000,
                        2 => 0,
                        _ => self.rng.random(),
                    };
                    if e != self.epoch {
                        break e;
                    }
                };
                slot[12..16].copy_from_slice(&epoch.to_le_bytes());
            }
            "bad_proto" => {
                let id = self.next_req();
                self.hdr(slot, T_DEV_LIST, sys::DL_DEV_REF_SIZE, 0, id);
                let proto = match self.rng.random_range(0..3) {
                    0 => 0u16,
                    1 => 2,
                    _ => self.rng.random_range(3..=u16::MAX),
                };
                slot[2..4].copy_from_slice(&proto.to_le_bytes());
            }
            "unknown_response" => {
                let t = self.rng.random_range(0..64);
                let id = if self.rng.random_ratio(1, 5) {
                    0
                } else {
                    self.unknown_id()
                };
                let len = self.rng.random_range(0..=max);
                self.hdr(slot, t, len, RESP, id);
                self.rng.fill_bytes(&mut slot[32..32 + len]);
                let status = self.rng.random_range(0..8u32);
                slot[20..24].copy_from_slice(&status.to_le_bytes());
            }
            "unknown_type" => {
                let t = match self.rng.random_range(0..4) {
                    0 => 0,
                    1 => self.rng.random_range(2..16),
                    2 => self.rng.random_range(T_LAST_KNOWN + 1..64),
                    _ => self.rng.random_range(64..=u16::MAX),
                };
                let id = if self.rng.random_ratio(1, 2) {
                    0
                } else {
                    self.next_req()
                };
                let len = self.rng.random_range(0..=max);
                self.hdr(slot, t, len, 0, id);
                self.rng.fill_bytes(&mut slot[32..32 + len]);
            }
            "ping" => {
                let len = self.rng.random_range(0..=max);
                let id = if self.rng.random_ratio(1, 8) {
                    0
                } else {
                    self.next_req()
                };
                self.hdr(slot, T_PING, len, 0, id);
                if len >= sys::DL_PING_SIZE {
                    let mut data = vec![0u8; len - sys::DL_PING_SIZE];
                    self.rng.fill_bytes(&mut data);
                    let mut ping = Ping::for_data(self.rng.random(), self.rng.random(), &data);
                    if self.rng.random_ratio(1, 4) {
                        ping.data_crc ^= 1;
                    }
                    ping.encode(&data, &mut slot[32..32 + len])
                        .expect("ping fits the slot");
                } else {
                    self.rng.fill_bytes(&mut slot[32..32 + len]);
                }
            }
            "lending_malformed" => {
                let t = match self.rng.random_range(T_DEV_LIST..=T_IRQ_SET + 7) {
                    T_DEV_CHANGED => T_DEV_LIST,
                    t if t == T_IRQ_SET + 1 => T_CFG_READ_BLOCK,
                    t if t == T_IRQ_SET + 2 => T_IRQ_MASK,
                    t if t == T_IRQ_SET + 3 => T_IRQ_DIRECT,
                    t if t == T_IRQ_SET + 4 => T_BAR_WINDOW,
                    t if t == T_IRQ_SET + 5 => T_BAR_DMA,
                    t if t == T_IRQ_SET + 6 => T_P2P_DMA,
                    t if t > T_IRQ_SET => T_P2P_EXPORT,
                    t => t,
                };
                let dev = if self.rng.random_ratio(1, 2) {
                    self.real_dev()
                } else {
                    self.dev_id_bogus()
                };
                self.lending_payload(t, dev, &mut p);
                let id = if self.rng.random_ratio(1, 10) {
                    0
                } else {
                    self.next_req()
                };
                let has_reserved = matches!(
                    t,
                    T_DEV_LIST | T_DEV_INFO | T_ACQUIRE | T_RELEASE | T_RESET | T_IRQ_SET
                );
                if has_reserved && self.rng.random_ratio(1, 3) {
                    // IRQ_SET's flags: bit 0 is valid, with INTx;
                    // DEV_INFO's: bit 0 asks for the extension.
                    let at = if t == T_IRQ_SET { 6 } else { 4 };
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_IRQ_MASK && self.rng.random_ratio(1, 2) {
                    let at = self.rng.random_range(4..sys::DL_IRQ_MASK_SIZE);
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_IRQ_DIRECT && self.rng.random_ratio(1, 2) {
                    let at = self.rng.random_range(10..sys::DL_IRQ_DIRECT_SIZE);
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_BAR_WINDOW && self.rng.random_ratio(1, 2) {
                    let at = self.rng.random_range(5..sys::DL_BAR_WINDOW_SIZE);
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_BAR_DMA && self.rng.random_ratio(1, 2) {
                    // Reserved bytes, or an IOVA in an unmap.
                    let at = self.rng.random_range(6..sys::DL_BAR_DMA_SIZE);
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_P2P_DMA && self.rng.random_ratio(1, 2) {
                    // Reserved bytes, or an IOVA in an unmap.
                    let at = [10, 11, 16, 17, 18, 19, 20, 21, 22, 23][self.rng.random_range(0..10)];
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_P2P_EXPORT && self.rng.random_ratio(1, 2) {
                    let at = [5, 6, 7, 12, 13, 14, 15][self.rng.random_range(0..7)];
                    p[at] = self.rng.random_range(1..=255);
                } else if t == T_DMA_MAP && self.rng.random_ratio(1, 2) {
                    // A count that disagrees with the length.
                    let count = match self.rng.random_range(0..3) {
                        0 => 0u32,
                        1 => u32::MAX,
                        _ => le32(&p, 4) + 1,
                    };
                    p[4..8].copy_from_slice(&count.to_le_bytes());
                } else {
                    // A length off by a little, none, or all of a slot.
                    let len = match self.rng.random_range(0..4) {
                        0 => p.len() + 1,
                        1 => p.len().saturating_sub(1),
                        2 => 0,
                        _ => max,
                    };
                    p.resize(len, 0xa5);
                }
                let len = p.len().min(max);
                self.hdr(slot, t, len, 0, id);
                slot[32..32 + len].copy_from_slice(&p[..len]);
            }
            "lending_nodev" => {
                let t = match self.rng.random_range(T_DEV_INFO..=T_IRQ_SET + 7) {
                    T_DEV_CHANGED => T_CFG_READ,
                    t if t == T_IRQ_SET + 1 => T_CFG_READ_BLOCK,
                    t if t == T_IRQ_SET + 2 => T_IRQ_MASK,
                    t if t == T_IRQ_SET + 3 => T_IRQ_DIRECT,
                    t if t == T_IRQ_SET + 4 => T_BAR_WINDOW,
                    t if t == T_IRQ_SET + 5 => T_BAR_DMA,
                    t if t == T_IRQ_SET + 6 => T_P2P_DMA,
                    t if t > T_IRQ_SET => T_P2P_EXPORT,
                    t => t,
                };
                let dev = self.dev_id_bogus();
                self.lending_payload(t, dev, &mut p);
                let id = if t == T_BAR_WRITE && self.rng.random_ratio(1, 2) {
                    0
                } else {
                    self.next_req()
                };
                self.hdr(slot, t, p.len(), 0, id);
                slot[32..32 + p.len()].copy_from_slice(&p);
            }
            "lending_real_dev" => {
                let t = self.real_dev_type();
                let dev = self.real_dev();
                self.lending_payload(t, dev, &mut p);
                // BAR writes are posted, as the borrower sends them.
                let id = if t == T_BAR_WRITE && !self.rng.random_ratio(1, 4) {
                    0
                } else {
                    self.next_req()
                };
                self.hdr(slot, t, p.len(), 0, id);
                slot[32..32 + p.len()].copy_from_slice(&p);
            }
            // Another lender's questions and revocations, often wrong.
            "lender_p2p" => {
                let revoke = self.rng.random_ratio(1, 2);
                p.clear();
                let dev = if self.rng.random_ratio(1, 2) {
                    self.real_dev()
                } else {
                    self.dev_id_bogus()
                };
                p.extend_from_slice(&dev.to_le_bytes());
                if revoke {
                    p.extend_from_slice(&0u32.to_le_bytes());
                } else {
                    p.push(self.rng.random_range(0..7));
                    p.extend_from_slice(&[0; 3]);
                    p.extend_from_slice(&self.rng.random_range(0..4u32).to_le_bytes());
                    p.extend_from_slice(&[0; 4]);
                    p.extend_from_slice(&edge64(&mut self.rng, 1).to_le_bytes());
                }
                if self.rng.random_ratio(1, 3) {
                    let at = if revoke {
                        self.rng.random_range(4..8)
                    } else {
                        [5, 6, 7, 12, 13, 14, 15][self.rng.random_range(0..7)]
                    };
                    p[at] = self.rng.random_range(1..=255);
                } else if self.rng.random_ratio(1, 4) {
                    let len = p.len();
                    p.resize(self.rng.random_range(0..=len + 1), 0x5a);
                }
                let t = if revoke { T_P2P_REVOKE } else { T_P2P_LOOKUP };
                let id = self.next_req();
                self.hdr(slot, t, p.len(), 0, id);
                slot[32..32 + p.len()].copy_from_slice(&p);
            }
            "dev_list" => {
                let id = self.next_req();
                let start = edge64(&mut self.rng, 0) as u32;
                self.hdr(slot, T_DEV_LIST, sys::DL_DEV_REF_SIZE, 0, id);
                slot[32..36].copy_from_slice(&start.to_le_bytes());
            }
            "borrower_post" => {
                let t = [T_DEV_CHANGED, T_IRQ_FIRE, T_DEV_FAULT][self.rng.random_range(0..3)];
                let len = self.rng.random_range(0..=24);
                let id = if self.rng.random_ratio(1, 4) {
                    self.next_req()
                } else {
                    0
                };
                self.hdr(slot, t, len, 0, id);
                self.rng.fill_bytes(&mut slot[32..32 + len]);
                if len >= 4 && self.rng.random_ratio(1, 2) {
                    let dev = self.rng.random_range(0..4u32);
                    slot[32..36].copy_from_slice(&dev.to_le_bytes());
                }
            }
            "replay" => {
                if let Some(old) = self
                    .recent
                    .get(self.rng.random_range(0..self.recent.len().max(1)))
                {
                    slot.copy_from_slice(old);
                } else {
                    let id = self.next_req();
                    self.hdr(slot, T_DEV_LIST, sys::DL_DEV_REF_SIZE, 0, id);
                }
            }
            _ => unreachable!("kind {kind}"),
        }
        // Sequence trouble on top of any kind: gaps, going back, random.
        if kind != "replay" && kind != "random_bytes" && self.rng.random_ratio(1, 25) {
            let cur = le32(slot, 16);
            let seq = match self.rng.random_range(0..3) {
                0 => {
                    let s = cur.wrapping_add(self.rng.random_range(1..1000));
                    self.seq = s.wrapping_add(1);
                    s
                }
                1 => cur.wrapping_sub(self.rng.random_range(1..10)),
                _ => self.rng.random(),
            };
            slot[16..20].copy_from_slice(&seq.to_le_bytes());
        }
        // Flag bits nobody knows are ignored.
        if kind != "random_bytes" && self.rng.random_ratio(1, 50) {
            let flags = le16(slot, 6) | (self.rng.random::<u16>() & !RESP);
            slot[6..8].copy_from_slice(&flags.to_le_bytes());
        }
        if self.recent.len() == 64 {
            self.recent.pop_front();
        }
        self.recent.push_back(slot.to_vec());
        kind
    }

    /// An answer to a request of the target: right type and id, random
    /// status and payload (a DEV_LIST answer sometimes plausible).
    fn answer(&mut self, slot: &mut [u8], msg_type: u16, req_id: u64) {
        slot.fill(0);
        let max = self.slot_size - DL_MSG_HDR_SIZE;
        let len = match msg_type {
            T_DEV_LIST if self.rng.random_ratio(1, 2) => sys::DL_DEV_LIST_SIZE,
            T_DEV_INFO if self.rng.random_ratio(1, 2) => {
                [sys::DL_DEV_INFO_SIZE, sys::DL_DEV_INFO_FULL_SIZE][self.rng.random_range(0..2)]
            }
            _ => self.rng.random_range(0..=max),
        };
        self.hdr(slot, msg_type, len, RESP, req_id);
        self.rng.fill_bytes(&mut slot[32..32 + len]);
        if msg_type == T_DEV_LIST && len == sys::DL_DEV_LIST_SIZE {
            let count = self.rng.random_range(0..=40u32);
            slot[32..36].copy_from_slice(&count.to_le_bytes());
            slot[36..40].copy_from_slice(&count.to_le_bytes());
        }
        let status = if self.rng.random_ratio(3, 4) {
            S_OK
        } else {
            self.rng.random_range(0..8)
        };
        slot[20..24].copy_from_slice(&status.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------
// The run.

const PROD: u64 = std::mem::offset_of!(sys::dl_ring_ctrl, prod) as u64;
const CONS: u64 = std::mem::offset_of!(sys::dl_ring_ctrl, cons) as u64;

/// The ring pair between the impersonated peer P and the target T.
struct Rings<'a> {
    area: &'a Mapped,
    /// T's inbox: entry P holds the ring P -> T and P's consumer index of
    /// the ring T -> P, all written by the fuzzer.
    target_inbox: &'a Mapped,
    /// P's inbox: entry T holds the ring T -> P and T's consumer index of
    /// the ring P -> T, all written by the target.
    peer_inbox: &'a Mapped,
    slots: u32,
    slot_size: usize,
    /// Ring P -> T: T's inbox entry P and its slots, in `target_inbox`.
    tx_entry: u64,
    tx_slots: u64,
    /// Ring T -> P: P's inbox entry T and its slots, in `peer_inbox`.
    rx_entry: u64,
    rx_slots: u64,
    heartbeat: u64,
    /// T's host info slot in the control area, and what it must show for
    /// P to write into T's inbox.
    target_slot: u64,
    target: u32,
    target_inc: u64,
    peer: u32,
    peer_inc: u64,
}

impl Rings<'_> {
    /// Producer index of the ring P -> T, in T's inbox entry P.
    fn tx_prod(&self) -> &AtomicU32 {
        self.target_inbox.u32_at(self.tx_entry + PROD)
    }
    /// Consumer index of the ring P -> T, which T publishes in P's inbox
    /// entry T.
    fn tx_cons(&self) -> &AtomicU32 {
        self.peer_inbox.u32_at(self.rx_entry + CONS)
    }
    /// Producer index of the ring T -> P, in P's inbox entry T.
    fn rx_prod(&self) -> &AtomicU32 {
        self.peer_inbox.u32_at(self.rx_entry + PROD)
    }
    /// Consumer index of the ring T -> P, which P publishes in T's inbox
    /// entry P.
    fn rx_cons(&self) -> &AtomicU32 {
        self.target_inbox.u32_at(self.tx_entry + CONS)
    }
    fn slot_off(&self, base: u64, idx: u32) -> u64 {
        base + u64::from(idx & (self.slots - 1)) * self.slot_size as u64
    }
    fn beat(&self) {
        self.area
            .u64_at(self.heartbeat)
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Beats for P if the last beat (`last`) is 100 ms old: what keeps T
    /// from declaring P down while a fuzzer stands in for it.
    fn keep_alive(&self, last: &mut Instant) {
        if last.elapsed() >= Duration::from_millis(100) {
            self.beat();
            *last = Instant::now();
        }
    }

    /// Slots free in the ring P -> T for a producer at `prod`.
    fn free_slots(&self, prod: u32) -> u32 {
        let cons = self.tx_cons().load(Ordering::Acquire);
        self.slots - prod.wrapping_sub(cons).min(self.slots)
    }

    /// Publishes `prod` as the producer index of the ring P -> T (the
    /// binding checked first) and rings T's doorbell.
    fn publish(&self, prod: u32, bell: Option<&OwnedFd>) -> anyhow::Result<()> {
        self.check_bound()?;
        self.tx_prod().store(prod, Ordering::Release);
        if let Some(bell) = bell {
            ring_doorbell(bell);
        }
        Ok(())
    }

    /// The receive side both fuzzers share: takes every message T wrote
    /// into the ring T -> P since `*cons` (jumping to T's producer index
    /// if it is not from a sane target), then publishes the new consumer
    /// index (the binding checked first). The messages, in order, with
    /// their payloads if `payloads` (else the header only is read).
    fn drain(&self, cons: &mut u32, payloads: bool) -> anyhow::Result<Vec<RxMsg>> {
        let prod = self.rx_prod().load(Ordering::Acquire);
        let mut slot = vec![0u8; self.slot_size];
        if prod.wrapping_sub(*cons) > self.slots {
            // Not from a sane target; start over from its index.
            *cons = prod;
        }
        let max = self.slot_size - DL_MSG_HDR_SIZE;
        let mut msgs = Vec::new();
        while *cons != prod {
            let off = self.slot_off(self.rx_slots, *cons);
            let read = if payloads {
                &mut slot[..]
            } else {
                &mut slot[..DL_MSG_HDR_SIZE]
            };
            self.peer_inbox.read(off, read);
            *cons = cons.wrapping_add(1);
            let len = usize::from(le16(&slot, 4)).min(max);
            msgs.push(RxMsg {
                msg_type: le16(&slot, 0),
                flags: le16(&slot, 6),
                status: le32(&slot, 20),
                req_id: le64(&slot, 24),
                payload: if payloads {
                    slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + len].to_vec()
                } else {
                    Vec::new()
                },
            });
        }
        self.check_bound()?;
        self.rx_cons().store(*cons, Ordering::Release);
        Ok(msgs)
    }

    /// The binding rule, checked before every batch of stores into T's
    /// inbox: T's slot says UP, shows the incarnation P bound to, and has
    /// bound its ring pair to P's incarnation.
    fn check_bound(&self) -> anyhow::Result<()> {
        use std::mem::offset_of;
        let field = |off: usize| self.target_slot + off as u64;
        let state = self
            .area
            .u32_at(field(offset_of!(sys::dl_host_info, state)))
            .load(Ordering::Acquire);
        let inc = self
            .area
            .u64_at(field(offset_of!(sys::dl_host_info, incarnation)))
            .load(Ordering::Acquire);
        let bound = self
            .area
            .u64_at(field(offset_of!(sys::dl_host_info, bound)) + 8 * u64::from(self.peer))
            .load(Ordering::Acquire);
        ensure!(
            state == sys::DL_HOST_UP && inc == self.target_inc && bound == self.peer_inc,
            "host {} no longer takes messages from host {}'s incarnation {:#x}: \
             its slot says state {state}, incarnation {inc:#x} (bound to {:#x}), bound[{}] = {bound:#x}",
            self.target,
            self.peer,
            self.peer_inc,
            self.target_inc,
            self.peer
        );
        Ok(())
    }
}

/// A message T wrote to P, as [`Rings::drain`] read it.
struct RxMsg {
    msg_type: u16,
    flags: u16,
    status: u32,
    req_id: u64,
    /// Its payload (as long as its header says, within the slot), if
    /// asked for.
    payload: Vec<u8>,
}

struct Fuzzer<'a> {
    rings: Rings<'a>,
    gen: Gen,
    model: Model,
    pending: VecDeque<Pending>,
    answers: VecDeque<(u16, u64)>,
    prod: u32,
    rx_cons: u32,
    report: Report,
    last_beat: Instant,
    last_activity: Instant,
    bell: Option<OwnedFd>,
    /// The ivshmem server connection the doorbell came from, kept until
    /// the fuzzer is done (closing it lets the host's new QEMU connect).
    _bell_stream: Option<UnixStream>,
    /// The status of each response by request id, when someone wants them
    /// (the churn mode).
    statuses: Option<HashMap<u64, u32>>,
}

impl Fuzzer<'_> {
    fn keep_alive(&mut self) {
        self.rings.keep_alive(&mut self.last_beat);
    }

    /// Consumes what the target wrote to the peer.
    fn drain_rx(&mut self) -> anyhow::Result<()> {
        let msgs = self.rings.drain(&mut self.rx_cons, false)?;
        if !msgs.is_empty() {
            self.last_activity = Instant::now();
        }
        for m in msgs {
            let (t, req_id) = (m.msg_type, m.req_id);
            if m.flags & RESP != 0 {
                self.response(t, m.status, req_id);
            } else if req_id != 0 {
                self.report.target_requests += 1;
                self.model.target_reqs.entry(req_id).or_insert(false);
                self.answers.push_back((t, req_id));
            } else {
                *self.report.target_posts.entry(t).or_default() += 1;
            }
        }
        Ok(())
    }

    fn response(&mut self, t: u16, status: u32, req_id: u64) {
        *self.report.responses.entry(status).or_default() += 1;
        if let Some(st) = &mut self.statuses {
            st.insert(req_id, status);
        }
        let Some(pos) = self.pending.iter().position(|p| p.req_id == req_id) else {
            self.report.unexpected_responses += 1;
            return;
        };
        // Everything asked before it was answered before it, or never;
        // but for resets, which the lender answers from a work of the
        // device when done: releases, resets, and config writes that ask
        // for function-level reset (which ones do depends on where the
        // device has its capabilities, so any config write may be late).
        let p = self.pending.remove(pos).expect("pos is in range");
        let before = self.pending.len();
        let mut kept = 0;
        self.pending.retain(|q| {
            kept += 1;
            kept > pos || matches!(q.msg_type, T_RELEASE | T_RESET | T_CFG_WRITE)
        });
        self.report.missing_responses += (before - self.pending.len()) as u64;
        let ok = match p.want {
            Want::Exact(s) => s == status,
            Want::NotOk => status != S_OK,
            Want::Any => true,
        } && t == p.msg_type;
        if !ok {
            self.report.wrong_status += 1;
            if self.report.wrong_examples.len() < 10 {
                self.report.wrong_examples.push(format!(
                    "type {} req {:#x}: status {status} (type {t}), wanted {:?}",
                    p.msg_type, req_id, p.want
                ));
            }
        }
        if p.real_dev && status == S_EIO {
            self.report.real_dev_eio += 1;
        } else if p.real_dev && status != S_OK {
            self.report.real_dev_refusals += 1;
        }
    }

    fn free_slots(&self) -> u32 {
        self.rings.free_slots(self.prod)
    }

    fn publish(&mut self) -> anyhow::Result<()> {
        self.rings.publish(self.prod, self.bell.as_ref())
    }

    /// Writes one message (or an answer) into the next slot; the batch it
    /// is part of has checked the binding first.
    fn put(&mut self, slot: &[u8]) {
        let off = self.rings.slot_off(self.rings.tx_slots, self.prod);
        self.rings.target_inbox.write(off, slot);
        self.prod = self.prod.wrapping_add(1);
        if let Some(p) = self.model.apply(slot) {
            self.pending.push_back(p);
        }
    }

    /// Stops taking the target's messages while sending on (up to `budget`
    /// of them), as a peer that ignores its credits and its answers would.
    /// Ends when the target is seen holding our messages back: its ring to
    /// us full of answers, ours to it full and not taken for a while; or
    /// after a bound. Returns whether it was seen.
    fn deaf_phase(&mut self, budget: u64) -> anyhow::Result<bool> {
        const HELD_FOR: Duration = Duration::from_millis(300);
        const AT_MOST: Duration = Duration::from_secs(10);
        let t0 = Instant::now();
        let mut slot = vec![0u8; self.rings.slot_size];
        let mut full_since: Option<Instant> = None;
        let mut sent = 0;
        while t0.elapsed() < AT_MOST {
            self.keep_alive();
            let room = self.free_slots();
            if room == 0 || sent >= budget {
                let rx_used = self
                    .rings
                    .rx_prod()
                    .load(Ordering::Acquire)
                    .wrapping_sub(self.rx_cons);
                let since = *full_since.get_or_insert_with(Instant::now);
                if room == 0 && rx_used >= self.rings.slots && since.elapsed() >= HELD_FOR {
                    return Ok(true);
                }
                // A doorbell, in case the target missed one.
                self.publish()?;
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            full_since = None;
            self.rings.check_bound()?;
            for _ in 0..room.min(u32::try_from(budget - sent).unwrap_or(u32::MAX)) {
                let kind = self.gen.message(&mut slot);
                *self.report.kinds.entry(kind).or_default() += 1;
                self.report.sent += 1;
                sent += 1;
                self.put(&slot);
            }
            self.publish()?;
        }
        Ok(false)
    }

    /// Waits until the target consumed everything, keeping the peer alive.
    fn wait_drained(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let mut last_bell = Instant::now();
        while self.rings.tx_cons().load(Ordering::Acquire) != self.prod {
            self.keep_alive();
            self.drain_rx()?;
            if last_bell.elapsed() > Duration::from_millis(50) {
                self.publish()?;
                last_bell = Instant::now();
            }
            if t0.elapsed() > timeout {
                bail!(
                    "the target consumed up to {} of {} after {timeout:?}",
                    self.rings.tx_cons().load(Ordering::Acquire),
                    self.prod
                );
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(())
    }

    /// Publishes an impossible producer index: the target must skip the
    /// ring (cons = prod) and count it.
    fn corrupt_ring(&mut self) -> anyhow::Result<()> {
        self.wait_drained(Duration::from_secs(30))?;
        let skip = self.rings.slots + 1 + self.gen.rng.random_range(0..1000);
        self.prod = self.prod.wrapping_add(skip);
        self.publish()?;
        let t0 = Instant::now();
        while self.rings.tx_cons().load(Ordering::Acquire) != self.prod {
            self.keep_alive();
            self.drain_rx()?;
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "the target did not skip a corrupt ring (prod {})",
                self.prod
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.model.exp.rx_corrupt_ring += 1;
        self.model.next_seq = None;
        *self.report.kinds.entry("corrupt_ring").or_default() += 1;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The churn mode: a well-formed holder that costs the lender page tables.

/// What the churn mode does (see [`churn`]).
#[derive(Debug, Clone)]
pub struct ChurnOptions {
    /// The lent device to take.
    pub dev_id: u32,
    /// Rounds: round k maps one page at IOVA k << 21 and unmaps it.
    pub rounds: u64,
}

/// The IOVA of churn round `k`: a 2 MiB region of its own each round, so
/// that each round needs a leaf page table of its own in the lender's
/// IOMMU domain.
pub fn churn_iova(k: u64) -> u64 {
    k << 21
}

/// Borrower pages the churn mode maps (in the dead peer's low RAM, which
/// its window shows): one kept mapped at IOVA 0 for the whole run (so the
/// lender's domain is never empty meanwhile), one mapped and unmapped again
/// and again.
const CHURN_ANCHOR_ADDR: u64 = 16 << 20;
const CHURN_PAGE_ADDR: u64 = (16 << 20) + PAGE;
/// Requests in flight at most.
const CHURN_WINDOW: usize = 32;
/// How long the lender may take to answer one request (a release resets
/// the device first).
const CHURN_ANSWER: Duration = Duration::from_secs(120);

impl Fuzzer<'_> {
    /// Answers the target's requests (as the fuzzer does, with random
    /// payloads), while there is room.
    fn answer_target(&mut self) {
        let mut slot = vec![0u8; self.rings.slot_size];
        while self.free_slots() > 0 {
            let Some((t, id)) = self.answers.pop_front() else {
                break;
            };
            self.gen.answer(&mut slot, t, id);
            self.put(&slot);
        }
    }

    /// Keeps the peer alive and takes what the target sent; answers its
    /// requests.
    fn tend(&mut self) -> anyhow::Result<()> {
        self.keep_alive();
        self.drain_rx()?;
        if !self.answers.is_empty() {
            self.rings.check_bound()?;
            self.answer_target();
            self.publish()?;
        }
        Ok(())
    }

    /// Writes one well-formed request of type `t` with payload `p`, once
    /// there is room; its id.
    fn request(&mut self, t: u16, p: &[u8]) -> anyhow::Result<u64> {
        let t0 = Instant::now();
        while self.free_slots() == 0 {
            self.tend()?;
            if self.last_activity.elapsed() > Duration::from_millis(20) {
                self.publish()?;
                self.last_activity = Instant::now();
            }
            ensure!(
                t0.elapsed() < CHURN_ANSWER,
                "no room in the ring to the target for {CHURN_ANSWER:?}"
            );
            std::thread::sleep(Duration::from_micros(300));
        }
        let mut slot = vec![0u8; self.rings.slot_size];
        let id = self.gen.next_req();
        self.gen.hdr(&mut slot, t, p.len(), 0, id);
        slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + p.len()].copy_from_slice(p);
        self.rings.check_bound()?;
        self.put(&slot);
        self.publish()?;
        self.last_activity = Instant::now();
        Ok(id)
    }

    /// Waits for the answer to request `id`; its status.
    fn status_of(&mut self, id: u64) -> anyhow::Result<u32> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.statuses.as_mut().and_then(|m| m.remove(&id)) {
                return Ok(st);
            }
            self.tend()?;
            if self.last_activity.elapsed() > Duration::from_millis(50) {
                // A doorbell, in case the target missed one.
                self.publish()?;
                self.last_activity = Instant::now();
            }
            ensure!(
                t0.elapsed() < CHURN_ANSWER,
                "no answer to request {id:#x} within {CHURN_ANSWER:?}"
            );
            std::thread::sleep(Duration::from_micros(300));
        }
    }

    /// Keeps the peer alive until `go()`, or at most `limit`.
    fn idle_until(&mut self, go: &dyn Fn() -> bool, limit: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        while !go() {
            self.tend()?;
            ensure!(t0.elapsed() < limit, "not told to go on within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

fn dev_ref_payload(dev: u32) -> Vec<u8> {
    let mut p = dev.to_le_bytes().to_vec();
    p.extend_from_slice(&0u32.to_le_bytes());
    p
}

fn dma_map_payload(dev: u32, iova: u64, addr: u64, len: u64) -> Vec<u8> {
    let mut p = dev.to_le_bytes().to_vec();
    p.extend_from_slice(&1u32.to_le_bytes());
    for v in [iova, addr, len] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p
}

fn dma_unmap_payload(dev: u32, iova: u64, len: u64) -> Vec<u8> {
    let mut p = dev.to_le_bytes().to_vec();
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&iova.to_le_bytes());
    p.extend_from_slice(&len.to_le_bytes());
    p
}

/// The churn mode (issue 26): as the dead peer, takes device `co.dev_id`,
/// keeps one page mapped at IOVA 0, then for k = 1..=rounds maps one page
/// at [`churn_iova`]`(k)` and unmaps it again: each round a little memory
/// for the lender's IOMMU page tables, which only a budget on them bounds.
/// Prints `CHURN-HELD <json>` and keeps the device (and the peer alive)
/// until `go("release")`; then releases it, prints `CHURN-RELEASED <json>`
/// and keeps the peer alive until `go("quit")`. Fails if the acquire, the
/// first map or the release is refused.
pub fn churn(
    opts: &Options,
    co: &ChurnOptions,
    go: &dyn Fn(&str) -> bool,
) -> anyhow::Result<serde_json::Value> {
    let att = attach(opts)?;
    let mut fz = fuzzer(&att, opts)?;
    fz.statuses = Some(HashMap::new());
    let dev = co.dev_id;

    let st = fz.request(T_ACQUIRE, &dev_ref_payload(dev))?;
    let st = fz.status_of(st)?;
    ensure!(st == S_OK, "acquire of device {dev} answered {st}");
    let id = fz.request(T_DMA_MAP, &dma_map_payload(dev, 0, CHURN_ANCHOR_ADDR, PAGE))?;
    let st = fz.status_of(id)?;
    ensure!(st == S_OK, "the anchor map at IOVA 0 was answered {st}");

    let t0 = Instant::now();
    let (mut maps_ok, mut maps_refused, mut unmaps_ok, mut unmaps_refused) = (0u64, 0, 0, 0);
    let mut first_refused = None;
    let mut statuses: HashMap<u32, u64> = HashMap::new();
    let mut inflight: VecDeque<(u64, bool, u64)> = VecDeque::new();
    let mut take = |fz: &mut Fuzzer, (id, map, k): (u64, bool, u64)| -> anyhow::Result<()> {
        let st = fz.status_of(id)?;
        *statuses.entry(st).or_default() += 1;
        match (map, st == S_OK) {
            (true, true) => maps_ok += 1,
            (true, false) => {
                maps_refused += 1;
                first_refused.get_or_insert(k);
            }
            (false, true) => unmaps_ok += 1,
            (false, false) => unmaps_refused += 1,
        }
        Ok(())
    };
    for k in 1..=co.rounds {
        let iova = churn_iova(k);
        let id = fz.request(
            T_DMA_MAP,
            &dma_map_payload(dev, iova, CHURN_PAGE_ADDR, PAGE),
        )?;
        inflight.push_back((id, true, k));
        let id = fz.request(T_DMA_UNMAP, &dma_unmap_payload(dev, iova, PAGE))?;
        inflight.push_back((id, false, k));
        while inflight.len() >= CHURN_WINDOW {
            let r = inflight.pop_front().expect("in flight");
            take(&mut fz, r)?;
        }
        if opts.verbose && k % 256 == 0 {
            eprintln!(
                "  churn: {k} rounds, {:.0}/s",
                k as f64 / t0.elapsed().as_secs_f64()
            );
        }
    }
    while let Some(r) = inflight.pop_front() {
        take(&mut fz, r)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let statuses: serde_json::Map<String, serde_json::Value> = statuses
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut report = json!({
        "dev_id": dev,
        "rounds": co.rounds,
        "maps_ok": maps_ok,
        "maps_refused": maps_refused,
        "first_refused": first_refused,
        "unmaps_ok": unmaps_ok,
        "unmaps_refused": unmaps_refused,
        "statuses": statuses,
        "secs": secs,
    });
    println!("CHURN-HELD {report}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    fz.idle_until(&|| go("release"), Duration::from_secs(600))?;

    let id = fz.request(T_RELEASE, &dev_ref_payload(dev))?;
    let st = fz.status_of(id)?;
    report["release_status"] = json!(st);
    ensure!(st == S_OK, "the release of device {dev} was answered {st}");
    println!("CHURN-RELEASED {report}");
    let _ = std::io::stdout().flush();
    fz.idle_until(&|| go("quit"), Duration::from_secs(600))?;
    fz.rings.beat();
    Ok(report)
}

/// The shared memory of the impersonated peer and its target, mapped and
/// checked: the control area and both inboxes.
struct Attachment {
    area: Mapped,
    layout: CtlLayout,
    target_inbox: Mapped,
    peer_inbox: Mapped,
    target_info: HostInfo,
    peer_info: HostInfo,
}

/// Maps what the fuzzer writes and reads, after checking that the peer is
/// dead but still says UP and the target has a ring pair bound to it.
fn attach(opts: &Options) -> anyhow::Result<Attachment> {
    let (area, layout) = open_ctl(&opts.ctl)?;
    let (t, b) = (opts.target, opts.peer);
    let peer_info = read_host(&area, &layout, b)?;
    ensure!(
        peer_info.state == HostState::Up,
        "host {b} does not say UP: {peer_info:?}"
    );
    let target_info = read_host(&area, &layout, t)?;
    ensure!(
        target_info.state == HostState::Up,
        "host {t} does not say UP: {target_info:?}"
    );
    // The target writes into the dead host's inbox only while the dead
    // host's slot has the ring pair bound to the target's incarnation.
    ensure!(
        peer_info.bound_to(t) == Some(target_info.incarnation),
        "host {b} has not bound a ring pair to host {t}'s incarnation {:#x} (bound[{t}] = {:#x})",
        target_info.incarnation,
        peer_info.bound_to(t).unwrap_or(0)
    );
    let target_inbox = open_inbox(&opts.target_ram, &layout, &target_info)?;
    let peer_inbox = open_inbox(&opts.peer_ram, &layout, &peer_info)?;
    Ok(Attachment {
        area,
        layout,
        target_inbox,
        peer_inbox,
        target_info,
        peer_info,
    })
}

/// The ring pair between the dead host and the target in `att`, checked to
/// be bound; the dead host's heartbeat moved once.
fn rings<'a>(att: &'a Attachment, opts: &Options) -> anyhow::Result<Rings<'a>> {
    let (layout, target_info, peer_info) = (&att.layout, &att.target_info, &att.peer_info);
    let (t, b) = (opts.target, opts.peer);
    let host = layout.host_offset(b)?;
    let rings = Rings {
        area: &att.area,
        target_inbox: &att.target_inbox,
        peer_inbox: &att.peer_inbox,
        slots: layout.ring_slots(),
        slot_size: layout.slot_size() as usize,
        tx_entry: layout.inbox_entry_offset(b)?,
        tx_slots: layout.inbox_slot_offset(b, 0)?,
        rx_entry: layout.inbox_entry_offset(t)?,
        rx_slots: layout.inbox_slot_offset(t, 0)?,
        heartbeat: host + std::mem::offset_of!(sys::dl_host_info, heartbeat) as u64,
        target_slot: layout.host_offset(t)?,
        target: t,
        target_inc: target_info.incarnation,
        peer: b,
        peer_inc: peer_info.incarnation,
    };
    rings.beat();
    rings
        .check_bound()
        .context("the target has not bound a ring pair to the dead host")?;
    Ok(rings)
}

/// The target's doorbell, if `opts` names the ivshmem server's socket of
/// the dead host: the server takes a new client for the dead host's id
/// once it has seen the old one go, so this tries for a while, keeping the
/// dead host's heartbeat moving.
fn connect_doorbell(
    opts: &Options,
    rings: &Rings<'_>,
) -> anyhow::Result<Option<(UnixStream, OwnedFd)>> {
    let Some(sock) = &opts.doorbell_sock else {
        return Ok(None);
    };
    let mut tries = 0;
    loop {
        match doorbell(sock, opts.target) {
            Ok(b) => return Ok(Some(b)),
            Err(e) if tries < 10 => {
                tries += 1;
                if opts.verbose {
                    eprintln!("  doorbell: {e:#}; retrying");
                }
                rings.beat();
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The sequence number after the last message the dead host (`src`, of
/// epoch `epoch`) left in its ring before `prod`, if that slot holds one.
fn next_seq_after(rings: &Rings<'_>, prod: u32, src: u32, epoch: u32) -> Option<u32> {
    let mut last = vec![0u8; rings.slot_size];
    rings.target_inbox.read(
        rings.slot_off(rings.tx_slots, prod.wrapping_sub(1)),
        &mut last,
    );
    (le32(&last, 12) == epoch && le32(&last, 8) == src).then(|| le32(&last, 16).wrapping_add(1))
}

/// A fuzzer on the rings of `att`, bound, with the target's doorbell (if
/// asked), continuing after what the dead host left in its ring.
fn fuzzer<'a>(att: &'a Attachment, opts: &Options) -> anyhow::Result<Fuzzer<'a>> {
    let peer_info = &att.peer_info;
    let b = opts.peer;
    let epoch = peer_info.incarnation as u32;
    let rings = rings(att, opts)?;
    let bell = connect_doorbell(opts, &rings)?;

    let total_weight = KINDS.iter().map(|(_, w)| w).sum();
    let mut fz = Fuzzer {
        gen: Gen {
            rng: StdRng::seed_from_u64(opts.seed),
            src: b,
            epoch,
            slot_size: rings.slot_size,
            seq: 0,
            req: 0,
            lent: opts.dev_ids.clone(),
            borrower_ram: peer_info.ram.low_size.max(PAGE),
            recent: VecDeque::new(),
            total_weight,
        },
        model: Model {
            src: b,
            epoch,
            proto: devlend_wire::DL_PROTO_V1,
            max_payload: rings.slot_size - DL_MSG_HDR_SIZE,
            next_seq: None,
            lent: opts.dev_ids.iter().copied().collect(),
            target_reqs: HashMap::new(),
            exp: Expected::default(),
        },
        pending: VecDeque::new(),
        answers: VecDeque::new(),
        prod: 0,
        rx_cons: rings.rx_cons().load(Ordering::Acquire),
        report: Report {
            seed: opts.seed,
            doorbell: bell.is_some(),
            ..Report::default()
        },
        last_beat: Instant::now(),
        last_activity: Instant::now(),
        bell: bell.as_ref().map(|(_, fd)| fd.try_clone()).transpose()?,
        _bell_stream: bell.map(|(stream, _)| stream),
        statuses: None,
        rings,
    };

    // Continue where the dead host stopped: after what it left in the
    // ring, with the sequence number after its last message.
    fz.prod = fz.rings.tx_prod().load(Ordering::Acquire);
    fz.wait_drained(Duration::from_secs(30))
        .context("the target does not drain the dead host's ring")?;
    if let Some(next) = next_seq_after(&fz.rings, fz.prod, b, epoch) {
        fz.gen.seq = next;
        fz.model.next_seq = Some(next);
    }
    fz.drain_rx()?;
    // Answers to the target's requests made before we came.
    fz.answers.clear();
    Ok(fz)
}

/// Runs the fuzzer; the report of what was sent and seen.
pub fn run(opts: &Options) -> anyhow::Result<Report> {
    let att = attach(opts)?;
    let mut fz = fuzzer(&att, opts)?;

    let corrupt_every = (opts.messages / (u64::from(opts.corruptions) + 1)).max(1);
    let mut next_corrupt = corrupt_every;
    let deaf_every = (opts.messages / (u64::from(opts.deaf_phases) + 1)).max(1);
    let mut next_deaf = deaf_every;
    let t0 = Instant::now();
    let mut slot = vec![0u8; fz.rings.slot_size];
    let mut last_report = Instant::now();
    while fz.report.sent < opts.messages {
        fz.keep_alive();
        fz.drain_rx()?;
        let room = fz.free_slots();
        if room == 0 {
            // Nudge the target if it stopped (a lost doorbell), then wait.
            if fz.last_activity.elapsed() > Duration::from_millis(20) {
                fz.publish()?;
                fz.last_activity = Instant::now();
            }
            std::thread::sleep(Duration::from_micros(300));
            continue;
        }
        fz.rings.check_bound()?;
        for _ in 0..room {
            if let Some((t, id)) = fz.answers.pop_front() {
                fz.gen.answer(&mut slot, t, id);
                *fz.report.kinds.entry("answer").or_default() += 1;
            } else if fz.report.sent < opts.messages {
                let kind = fz.gen.message(&mut slot);
                *fz.report.kinds.entry(kind).or_default() += 1;
                fz.report.sent += 1;
            } else {
                break;
            }
            fz.put(&slot);
        }
        fz.publish()?;
        fz.last_activity = Instant::now();
        if fz.report.sent >= next_deaf && fz.report.deaf_phases < u64::from(opts.deaf_phases) {
            let held = fz.deaf_phase(opts.messages - fz.report.sent)?;
            fz.report.deaf_phases += 1;
            fz.report.deaf_held += u64::from(held);
            next_deaf += deaf_every;
        }
        if fz.report.sent >= next_corrupt
            && fz.model.exp.rx_corrupt_ring < u64::from(opts.corruptions)
        {
            fz.corrupt_ring()?;
            next_corrupt += corrupt_every;
        }
        if opts.verbose && last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {} messages, {:.0}/s, {} responses outstanding",
                fz.report.sent,
                fz.report.sent as f64 / t0.elapsed().as_secs_f64(),
                fz.pending.len()
            );
            last_report = Instant::now();
        }
    }
    // Let the target finish: everything consumed, every answer in.
    fz.wait_drained(Duration::from_secs(60))?;
    let quiet = Instant::now();
    while !fz.pending.is_empty() && quiet.elapsed() < Duration::from_secs(10) {
        fz.keep_alive();
        fz.drain_rx()?;
        std::thread::sleep(Duration::from_millis(2));
    }
    fz.report.secs = t0.elapsed().as_secs_f64();
    fz.report.missing_responses += fz.pending.len() as u64;
    fz.report.expected = fz.model.exp.clone();
    fz.rings.beat();
    Ok(fz.report)
}

// ---------------------------------------------------------------------------
// The flood mode: a peer that asks for answers and never takes them.

/// `DL_FABRIC_URGENT_SLOTS` (`fabric/fabric.h`): of the half ring that
/// requests and posted messages may fill, the slots kept for urgent ones.
const URGENT_SLOTS: u32 = 8;

/// The slots of a ring that posted messages may fill
/// (`dl_ring_share_normal()`): once the target's answers to our hellos
/// fill them in the ring back, every further answer finds no room.
fn posted_share(slots: u32) -> u32 {
    let share = (slots / 2).max(1);
    if share > 2 * URGENT_SLOTS {
        share - URGENT_SLOTS
    } else {
        (share / 2).max(1)
    }
}

/// How long each stage of the flood waits at most for the target.
const FLOOD_STAGE: Duration = Duration::from_secs(60);
/// How long the flood mode runs at most without being told to go on.
const FLOOD_IDLE: Duration = Duration::from_secs(900);
/// Bytes of data in each of the flood's pings.
const FLOOD_PING_DATA: usize = 32;

impl Fuzzer<'_> {
    /// Our messages the target has taken since index `start`.
    fn taken_since(&self, start: u32) -> u32 {
        self.rings
            .tx_cons()
            .load(Ordering::Acquire)
            .wrapping_sub(start)
    }

    /// The target's messages waiting in the ring back, which the flood
    /// never takes.
    fn rx_waiting(&self) -> u32 {
        self.rings
            .rx_prod()
            .load(Ordering::Acquire)
            .wrapping_sub(self.rx_cons)
    }

    /// The messages waiting in the ring back by kind, looked at but not
    /// taken: the target's hellos, its answers to our pings, anything else.
    fn rx_waiting_kinds(&self) -> serde_json::Value {
        let (mut hellos, mut ping_answers, mut other) = (0u64, 0u64, 0u64);
        let mut hdr = [0u8; DL_MSG_HDR_SIZE];
        for i in 0..self.rx_waiting().min(self.rings.slots) {
            let idx = self.rx_cons.wrapping_add(i);
            self.rings
                .peer_inbox
                .read(self.rings.slot_off(self.rings.rx_slots, idx), &mut hdr);
            match (le16(&hdr, 0), le16(&hdr, 6) & RESP != 0) {
                (T_NTB_HELLO, false) => hellos += 1,
                (T_PING, true) => ping_answers += 1,
                _ => other += 1,
            }
        }
        json!({ "hellos": hellos, "ping_answers": ping_answers, "other": other })
    }

    /// Keeps the peer alive, and takes nothing, until `go()`.
    fn beat_until(&mut self, go: &dyn Fn() -> bool, limit: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        while !go() {
            self.keep_alive();
            self.rings.check_bound()?;
            ensure!(t0.elapsed() < limit, "not told to go on within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// An NTB hello (`DL_MSG_NTB_HELLO`, posted) that says our port is
    /// there and asks the target's emulated port for its own hello and
    /// translations: a handler that posts back to us.
    fn hello_asking(&mut self, slot: &mut [u8]) {
        slot.fill(0);
        self.gen
            .hdr(slot, T_NTB_HELLO, sys::DL_NTB_HELLO_SIZE, 0, 0);
        let flags = sys::DL_NTB_F_PRESENT | sys::DL_NTB_F_ASK;
        slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + 4].copy_from_slice(&flags.to_le_bytes());
    }

    /// A well-formed ping request, number `test_seq` of run `nonce`.
    fn ping_request(&mut self, slot: &mut [u8], nonce: u64, test_seq: u32) {
        slot.fill(0);
        let mut data = [0u8; FLOOD_PING_DATA];
        self.gen.rng.fill_bytes(&mut data);
        let len = sys::DL_PING_SIZE + data.len();
        let id = self.gen.next_req();
        self.gen.hdr(slot, T_PING, len, 0, id);
        Ping::for_data(test_seq, nonce, &data)
            .encode(&data, &mut slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + len])
            .expect("a ping fits the slot");
    }
}

/// Prints one line `<tag> <json>` of the flood mode and flushes it.
fn flood_line(tag: &str, v: &serde_json::Value) {
    use std::io::Write;
    println!("{tag} {v}");
    let _ = std::io::stdout().flush();
}

/// The flood mode (issue 26): as the dead peer, floods the target with
/// messages whose handling posts answers back, and never takes the ring
/// back (its consumer index stays where it was), so that every answer
/// after the first ones finds that ring full. Stages, each printed as a
/// line `<tag> <json>` and started by `go(stage)`:
///
/// - `FLOOD-READY`: attached, the target has taken everything the dead
///   host left; from here on nothing is taken from the ring back. Waits
///   for `go("flood")`.
/// - `go("flood")`: NTB hellos asking for an answer (`DL_NTB_F_ASK`),
///   posted, as fast as the target takes them, until `go("hold")`.
///   `FLOOD-FLOODING` is printed once the target's answers fill what
///   posted messages may use of the ring back (`share_full`), or after
///   [`FLOOD_STAGE`] without (`share_full: false`); from then on each
///   further answer finds no room.
/// - `go("hold")`: well-formed ping requests, whose responses may fill
///   the whole ring back, until the target holds our messages back for
///   want of room for their answers: our ring full and not taken, the ring
///   back full, for 300 ms (`held`; or [`FLOOD_STAGE`] without).
///   `FLOOD-HELD` is printed; the peer is kept alive until `go("quit")`.
/// - `FLOOD-DONE`: what the target had taken by then; returned as well.
///
/// Every line says how many hellos and pings were written, how many of
/// our messages the target `taken` (in the order written: hellos first),
/// and what waits in the ring back (`waiting`, `waiting_kinds`).
pub fn flood(opts: &Options, go: &dyn Fn(&str) -> bool) -> anyhow::Result<serde_json::Value> {
    const HELD_FOR: Duration = Duration::from_millis(300);
    const BELL_EVERY: Duration = Duration::from_millis(20);
    let att = attach(opts)?;
    let mut fz = fuzzer(&att, opts)?;
    let slots = fz.rings.slots;
    let share = posted_share(slots);
    // fuzzer() waited until the target took everything before this index
    // and took the ring back up to here.
    let start = fz.prod;
    let mut report = json!({
        "target": opts.target,
        "peer": opts.peer,
        "ring_slots": slots,
        "posted_share": share,
        "hellos": 0,
        "pings": 0,
        "taken": 0,
        "waiting": fz.rx_waiting(),
    });
    flood_line("FLOOD-READY", &report);
    fz.beat_until(&|| go("flood"), FLOOD_IDLE)?;

    let mut slot = vec![0u8; fz.rings.slot_size];
    let t0 = Instant::now();
    let mut hellos = 0u64;
    let mut flooding_said = false;
    let mut last_bell = Instant::now();
    while !go("hold") {
        fz.keep_alive();
        let room = fz.free_slots();
        if room > 0 {
            fz.rings.check_bound()?;
            for _ in 0..room {
                fz.hello_asking(&mut slot);
                fz.put(&slot);
                hellos += 1;
            }
            fz.publish()?;
            last_bell = Instant::now();
        } else if last_bell.elapsed() >= BELL_EVERY {
            // A doorbell, in case the target missed one.
            fz.publish()?;
            last_bell = Instant::now();
        }
        let waiting = fz.rx_waiting();
        if !flooding_said && (waiting >= share || t0.elapsed() >= FLOOD_STAGE) {
            report["hellos"] = json!(hellos);
            report["taken"] = json!(fz.taken_since(start));
            report["waiting"] = json!(waiting);
            report["waiting_kinds"] = fz.rx_waiting_kinds();
            report["share_full"] = json!(waiting >= share);
            report["secs"] = json!(t0.elapsed().as_secs_f64());
            flood_line("FLOOD-FLOODING", &report);
            flooding_said = true;
        }
        ensure!(
            t0.elapsed() < FLOOD_IDLE,
            "not told to hold within {FLOOD_IDLE:?}"
        );
        std::thread::sleep(Duration::from_micros(500));
    }

    let t1 = Instant::now();
    let nonce: u64 = fz.gen.rng.random();
    let mut pings = 0u32;
    let mut full_since: Option<Instant> = None;
    let held = loop {
        fz.keep_alive();
        let room = fz.free_slots();
        if room == 0 {
            let since = *full_since.get_or_insert_with(Instant::now);
            if fz.rx_waiting() >= slots && since.elapsed() >= HELD_FOR {
                break true;
            }
            if last_bell.elapsed() >= BELL_EVERY {
                fz.publish()?;
                last_bell = Instant::now();
            }
        } else {
            full_since = None;
            fz.rings.check_bound()?;
            for _ in 0..room {
                fz.ping_request(&mut slot, nonce, pings);
                fz.put(&slot);
                pings += 1;
            }
            fz.publish()?;
            last_bell = Instant::now();
        }
        if t1.elapsed() >= FLOOD_STAGE {
            break false;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    report["hellos"] = json!(hellos);
    report["pings"] = json!(pings);
    report["taken"] = json!(fz.taken_since(start));
    report["waiting"] = json!(fz.rx_waiting());
    report["waiting_kinds"] = fz.rx_waiting_kinds();
    report["held"] = json!(held);
    report["secs"] = json!(t0.elapsed().as_secs_f64());
    flood_line("FLOOD-HELD", &report);
    fz.beat_until(&|| go("quit"), FLOOD_IDLE)?;

    report["taken"] = json!(fz.taken_since(start));
    report["waiting"] = json!(fz.rx_waiting());
    report["waiting_kinds"] = fz.rx_waiting_kinds();
    report["secs"] = json!(t0.elapsed().as_secs_f64());
    flood_line("FLOOD-DONE", &report);
    fz.rings.beat();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use devlend_wire::RamLayout;

    use super::*;

    pub(super) const T: u32 = 0;
    pub(super) const P: u32 = 1;
    const RAM: u64 = 16 << 20;
    pub(super) const INBOX: u64 = 0x10_0000;
    const IDENT: u64 = 0x1000;

    /// A directory of its own under the system's temporary directory.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("devlend-peerfuzz-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(super) fn host(id: u32, peer_inc: u64) -> HostInfo {
        let mut bound = [0; devlend_wire::BOUND_LEN];
        bound[(1 - id) as usize] = peer_inc;
        HostInfo {
            state: HostState::Up,
            host_id: id,
            incarnation: incarnation(id),
            heartbeat: 1,
            proto_min: 1,
            proto_max: 1,
            ram: RamLayout {
                size: RAM,
                low_size: RAM,
                high_base: 1 << 32,
            },
            ident_phys: IDENT,
            ident_token: 0x70_0000 + u64::from(id),
            name: format!("host{id}"),
            inbox_phys: INBOX,
            bound,
        }
    }

    pub(super) fn incarnation(id: u32) -> u64 {
        0xabcd_0000_0000_0000 + u64::from(id)
    }

    pub(super) fn write_host(ctl: &Path, layout: &CtlLayout, h: &HostInfo) {
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        h.encode(&mut buf).unwrap();
        let f = open_rw(ctl).unwrap();
        f.write_all_at(&buf, layout.host_offset(h.host_id).unwrap())
            .unwrap();
    }

    /// A fabric of two hosts, T (0) and P (1), bound to each other, as
    /// files: the control area and both RAM files, inboxes zeroed.
    pub(super) struct Fabric {
        dir: TempDir,
        pub(super) layout: CtlLayout,
    }

    impl Fabric {
        pub(super) fn new(name: &str) -> Self {
            let dir = TempDir::new(name);
            let layout = CtlLayout::new(1 << 20, 2, 32, 256).unwrap();
            let fabric = Fabric { dir, layout };
            let ctl = File::create(fabric.ctl()).unwrap();
            ctl.set_len(layout.total_size()).unwrap();
            ctl.write_all_at(&layout.to_bytes(), 0).unwrap();
            for id in [T, P] {
                write_host(&fabric.ctl(), &layout, &host(id, incarnation(1 - id)));
                let ram = File::create(fabric.ram(id)).unwrap();
                ram.set_len(RAM).unwrap();
                ram.write_all_at(&(0x70_0000 + u64::from(id)).to_le_bytes(), IDENT)
                    .unwrap();
            }
            fabric
        }

        pub(super) fn ctl(&self) -> PathBuf {
            self.dir.0.join("fabric.ctl")
        }

        pub(super) fn ram(&self, id: u32) -> PathBuf {
            self.dir.0.join(format!("host{id}.ram"))
        }

        pub(super) fn options(&self, messages: u64) -> Options {
            Options {
                ctl: self.ctl(),
                target_ram: self.ram(T),
                peer_ram: self.ram(P),
                doorbell_sock: None,
                target: T,
                peer: P,
                messages,
                seed: 7,
                dev_ids: vec![1],
                corruptions: 2,
                deaf_phases: 0,
                verbose: false,
            }
        }

        /// The u32 at `off` of host `id`'s inbox, read from its RAM file.
        pub(super) fn inbox_u32(&self, id: u32, off: u64) -> u32 {
            let mut buf = [0u8; 4];
            File::open(self.ram(id))
                .unwrap()
                .read_exact_at(&mut buf, INBOX + off)
                .unwrap();
            u32::from_le_bytes(buf)
        }
    }

    /// What the fake target saw.
    #[derive(Debug, Default)]
    struct Seen {
        msgs: u64,
        answered: u64,
        corrupt: u64,
    }

    /// Plays T: takes P's messages from T's inbox entry P, mirrors its
    /// consumer index into P's inbox entry T, skips a corrupt ring, and
    /// answers every request (status OK, empty) in P's inbox entry T,
    /// within the room P's consumer index in T's inbox leaves.
    fn fake_target(fabric: &Fabric, stop: &AtomicBool) -> Seen {
        let layout = &fabric.layout;
        let t_inbox = open_inbox(&fabric.ram(T), layout, &host(T, incarnation(P))).unwrap();
        let p_inbox = open_inbox(&fabric.ram(P), layout, &host(P, incarnation(T))).unwrap();
        let entry_p = layout.inbox_entry_offset(P).unwrap();
        let entry_t = layout.inbox_entry_offset(T).unwrap();
        let slots = layout.ring_slots();
        // Continue from the indices in the files, as a live target would.
        let mut cons = p_inbox.u32_at(entry_t + CONS).load(Ordering::Acquire);
        let mut prod = p_inbox.u32_at(entry_t + PROD).load(Ordering::Acquire);
        let mut seen = Seen::default();
        let mut hdr = [0u8; DL_MSG_HDR_SIZE];
        while !stop.load(Ordering::Acquire) {
            let their = t_inbox.u32_at(entry_p + PROD).load(Ordering::Acquire);
            if their.wrapping_sub(cons) > slots {
                seen.corrupt += 1;
                cons = their;
            }
            while cons != their && !stop.load(Ordering::Acquire) {
                t_inbox.read(layout.inbox_slot_offset(P, cons).unwrap(), &mut hdr);
                let (flags, req_id) = (le16(&hdr, 6), le64(&hdr, 24));
                if flags & RESP == 0 && req_id != 0 {
                    let room = t_inbox.u32_at(entry_p + CONS);
                    if prod.wrapping_sub(room.load(Ordering::Acquire)) >= slots {
                        break;
                    }
                    let mut resp = [0u8; DL_MSG_HDR_SIZE];
                    resp[0..2].copy_from_slice(&hdr[0..2]);
                    resp[2..4].copy_from_slice(&1u16.to_le_bytes());
                    resp[6..8].copy_from_slice(&RESP.to_le_bytes());
                    resp[8..12].copy_from_slice(&T.to_le_bytes());
                    resp[12..16].copy_from_slice(&(incarnation(T) as u32).to_le_bytes());
                    resp[16..20].copy_from_slice(&prod.to_le_bytes());
                    resp[24..32].copy_from_slice(&req_id.to_le_bytes());
                    p_inbox.write(layout.inbox_slot_offset(T, prod).unwrap(), &resp);
                    prod = prod.wrapping_add(1);
                    p_inbox
                        .u32_at(entry_t + PROD)
                        .store(prod, Ordering::Release);
                    seen.answered += 1;
                }
                seen.msgs += 1;
                cons = cons.wrapping_add(1);
            }
            p_inbox
                .u32_at(entry_t + CONS)
                .store(cons, Ordering::Release);
            std::thread::sleep(Duration::from_micros(100));
        }
        seen
    }

    /// Runs the fuzzer against [`fake_target`]; its result and what the
    /// target saw.
    fn run_against_fake(fabric: &Fabric, opts: &Options) -> (anyhow::Result<Report>, Seen) {
        let stop = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            let target = s.spawn(|| fake_target(fabric, &stop));
            let res = run(opts);
            stop.store(true, Ordering::Release);
            (res, target.join().unwrap())
        })
    }

    #[test]
    fn fuzzes_through_the_inboxes() {
        let fabric = Fabric::new("inboxes");
        let heartbeat = |ctl: &Path| {
            let area = devlend_wire::ControlArea::open(ctl).unwrap();
            match area.read_host(P).unwrap() {
                devlend_wire::HostSlot::Valid(h) => h.heartbeat,
                other => panic!("{other:?}"),
            }
        };
        let (res, seen) = run_against_fake(&fabric, &fabric.options(3000));
        let report = res.unwrap();
        assert_eq!(report.sent, 3000);
        assert_eq!(report.expected.rx_corrupt_ring, 2);
        assert_eq!(seen.corrupt, 2, "{seen:?}");
        // Every message and answer, and the two impossible producer
        // indices, went into T's inbox entry P.
        assert!(seen.msgs >= 3000, "{seen:?}");
        assert_eq!(report.missing_responses, 0, "{:?}", report.wrong_examples);
        assert_eq!(report.responses.values().sum::<u64>(), seen.answered);
        // The indices where they belong: T's consumer index of P's ring in
        // P's inbox entry T, P's of T's ring in T's inbox entry P.
        let layout = &fabric.layout;
        let (entry_p, entry_t) = (
            layout.inbox_entry_offset(P).unwrap(),
            layout.inbox_entry_offset(T).unwrap(),
        );
        assert_eq!(
            fabric.inbox_u32(T, entry_p + PROD),
            fabric.inbox_u32(P, entry_t + CONS)
        );
        assert_eq!(
            fabric.inbox_u32(P, entry_t + PROD),
            u32::try_from(seen.answered).unwrap()
        );
        assert_eq!(
            fabric.inbox_u32(T, entry_p + CONS),
            fabric.inbox_u32(P, entry_t + PROD)
        );
        // Nothing was written into the entries of other hosts.
        assert_eq!(fabric.inbox_u32(T, entry_t + PROD), 0);
        assert_eq!(fabric.inbox_u32(P, entry_p + PROD), 0);
        assert!(heartbeat(&fabric.ctl()) > 1);

        // A second run continues from the indices the first one left.
        let before = fabric.inbox_u32(T, entry_p + PROD);
        let (res, _) = run_against_fake(&fabric, &fabric.options(100));
        assert_eq!(res.unwrap().sent, 100);
        assert!(fabric.inbox_u32(T, entry_p + PROD).wrapping_sub(before) >= 100);
    }

    #[test]
    fn writes_only_into_an_inbox_bound_to_it() {
        let fabric = Fabric::new("bound");
        let layout = fabric.layout;
        // T has not bound the ring pair to P: nothing is written.
        write_host(&fabric.ctl(), &layout, &host(T, 0));
        let err = run(&fabric.options(10)).unwrap_err();
        assert!(format!("{err:#}").contains("bound[1] = 0x0"), "{err:#}");
        // T bound to an earlier incarnation of P.
        write_host(&fabric.ctl(), &layout, &host(T, 0x1234));
        let err = run(&fabric.options(10)).unwrap_err();
        assert!(format!("{err:#}").contains("no longer takes"), "{err:#}");
        // P had not bound to T: T would send it nothing.
        write_host(&fabric.ctl(), &layout, &host(T, incarnation(P)));
        write_host(&fabric.ctl(), &layout, &host(P, 0));
        let err = run(&fabric.options(10)).unwrap_err();
        assert!(format!("{err:#}").contains("has not bound"), "{err:#}");
        assert_eq!(
            fabric.inbox_u32(T, layout.inbox_entry_offset(P).unwrap()),
            0
        );
    }

    #[test]
    fn refuses_ram_files_of_other_hosts() {
        let fabric = Fabric::new("ident");
        let swapped = Options {
            target_ram: fabric.ram(P),
            peer_ram: fabric.ram(T),
            ..fabric.options(10)
        };
        let err = run(&swapped).unwrap_err();
        assert!(
            format!("{err:#}").contains("is not host 0's RAM"),
            "{err:#}"
        );
        // A RAM file that ends before the inbox.
        File::options()
            .write(true)
            .open(fabric.ram(P))
            .unwrap()
            .set_len(INBOX + 4096)
            .unwrap();
        let err = run(&fabric.options(10)).unwrap_err();
        assert!(
            format!("{err:#}").contains("ends before host 1's inbox"),
            "{err:#}"
        );
    }

    /// Plays T against the flood mode as `fabric/rx.c` and the emulated
    /// NTB port would: takes P's messages only while the ring back has room
    /// for an answer (else holds them back), answers a hello asking for one
    /// with a hello of its own while posted messages have room, answers
    /// every request. Returns how often a hello's answer found no room.
    fn fake_flooded_target(fabric: &Fabric, stop: &AtomicBool) -> u64 {
        let layout = &fabric.layout;
        let t_inbox = open_inbox(&fabric.ram(T), layout, &host(T, incarnation(P))).unwrap();
        let p_inbox = open_inbox(&fabric.ram(P), layout, &host(P, incarnation(T))).unwrap();
        let entry_p = layout.inbox_entry_offset(P).unwrap();
        let entry_t = layout.inbox_entry_offset(T).unwrap();
        let slots = layout.ring_slots();
        let mut cons = p_inbox.u32_at(entry_t + CONS).load(Ordering::Acquire);
        let mut prod = p_inbox.u32_at(entry_t + PROD).load(Ordering::Acquire);
        let mut no_room = 0;
        let mut hdr = [0u8; DL_MSG_HDR_SIZE + 8];
        while !stop.load(Ordering::Acquire) {
            let their = t_inbox.u32_at(entry_p + PROD).load(Ordering::Acquire);
            while cons != their {
                let used =
                    prod.wrapping_sub(t_inbox.u32_at(entry_p + CONS).load(Ordering::Acquire));
                if used >= slots {
                    break;
                }
                t_inbox.read(layout.inbox_slot_offset(P, cons).unwrap(), &mut hdr);
                let (t, req_id) = (le16(&hdr, 0), le64(&hdr, 24));
                let ask = t == T_NTB_HELLO && le32(&hdr, DL_MSG_HDR_SIZE) & sys::DL_NTB_F_ASK != 0;
                let answer = match (ask, req_id) {
                    (true, _) if used < posted_share(slots) => Some((T_NTB_HELLO, 0)),
                    (true, _) => {
                        no_room += 1;
                        None
                    }
                    (false, 0) => None,
                    (false, _) => Some((t, RESP)),
                };
                if let Some((t, flags)) = answer {
                    let mut msg = [0u8; DL_MSG_HDR_SIZE];
                    msg[0..2].copy_from_slice(&t.to_le_bytes());
                    msg[6..8].copy_from_slice(&flags.to_le_bytes());
                    msg[24..32].copy_from_slice(&req_id.to_le_bytes());
                    p_inbox.write(layout.inbox_slot_offset(T, prod).unwrap(), &msg);
                    prod = prod.wrapping_add(1);
                    p_inbox
                        .u32_at(entry_t + PROD)
                        .store(prod, Ordering::Release);
                }
                cons = cons.wrapping_add(1);
            }
            p_inbox
                .u32_at(entry_t + CONS)
                .store(cons, Ordering::Release);
            std::thread::sleep(Duration::from_micros(100));
        }
        no_room
    }

    #[test]
    fn floods_until_held_back() {
        let fabric = Fabric::new("flood");
        let slots = fabric.layout.ring_slots();
        let told: [AtomicBool; 3] = Default::default();
        let stop = AtomicBool::new(false);
        let (res, no_room) = std::thread::scope(|s| {
            let target = s.spawn(|| fake_flooded_target(&fabric, &stop));
            let flood = s.spawn(|| {
                flood(&fabric.options(0), &|stage| match stage {
                    "flood" => told[0].load(Ordering::SeqCst),
                    "hold" => told[1].load(Ordering::SeqCst),
                    _ => told[2].load(Ordering::SeqCst),
                })
            });
            for t in &told {
                std::thread::sleep(Duration::from_millis(500));
                t.store(true, Ordering::SeqCst);
            }
            let res = flood.join().unwrap();
            stop.store(true, Ordering::Release);
            (res, target.join().unwrap())
        });
        let r = res.unwrap();
        let num = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
        assert_eq!(r["held"], true, "{r}");
        assert!(num("hellos") > u64::from(slots), "{r}");
        assert!(no_room > 0, "{r}");
        // Held back: the ring back full (hellos within their share, ping
        // answers in the rest), ours full and not taken.
        assert_eq!(num("waiting"), u64::from(slots), "{r}");
        assert_eq!(
            r["waiting_kinds"]["hellos"],
            u64::from(posted_share(slots)),
            "{r}"
        );
        assert_eq!(
            num("hellos") + num("pings") - num("taken"),
            u64::from(slots),
            "{r}"
        );
    }
}
