//! Geometry of the control area and of the inboxes, and the ring index
//! arithmetic.

use std::fmt;

use crate::bytes::{align_up, check_len};
use crate::sys::{
    DL_CTL_HEADER_SIZE, DL_CTL_LAYOUT_VERSION, DL_CTL_MAGIC, DL_HOST_INFO_SIZE, DL_MAX_HOSTS,
    DL_MAX_RING_SLOTS, DL_MAX_SLOT_SIZE, DL_MIN_SLOT_SIZE, DL_MSG_HDR_SIZE, DL_RING_CTRL_SIZE,
};
use crate::WireError;

/// Offset of host info slot 0 in layout 2: the page after the header.
pub const HOSTS_OFF: u32 = 4096;
/// Bytes between host info slots in layout 2: one `struct dl_host_info`.
pub const HOST_STRIDE: u32 = DL_HOST_INFO_SIZE as u32;
/// An inbox starts on a boundary of this many bytes: `inbox_phys` is page
/// aligned.
pub const INBOX_ALIGN: u64 = 4096;
/// Each inbox entry (ring control block and slots) is padded to this many
/// bytes.
pub const RING_ALIGN: u32 = 64;

const HDR: &str = "dl_ctl_header";

/// The geometry of a control area and of every host's inbox: what
/// `struct dl_ctl_header` says.
///
/// A value of this type always satisfies layout 2: the parameters are
/// within the header's limits, the offsets, strides and sizes are the ones
/// computed from them, and the host info slots fit in `total_size`. Build
/// one with [`CtlLayout::new`] (the ivshmem server) or [`CtlLayout::parse`]
/// (anyone reading an area).
///
/// The control area holds only the header (page 0) and the host info
/// slots. Messages travel in rings that live in the receiver's own RAM:
/// each host has an *inbox* of `inbox_size` bytes there, physically
/// contiguous, at the `inbox_phys` its host info names. Entry `p` of host
/// `d`'s inbox, at `p * ring_stride`, belongs to peer `p`: a
/// `struct dl_ring_ctrl` (`prod`: messages `p` has published to `d`;
/// `cons`: messages `p` has consumed of the ring from `d` to `p`, which
/// lives in `p`'s inbox entry `d`), then `ring_slots` slots of `slot_size`
/// bytes holding the messages from `p` to `d`. Everything in entry `p` is
/// written by `p` only, through its window onto `d`'s RAM, and read by `d`
/// only; entry `d` of `d`'s own inbox is unused.
///
/// Layout 2, from the parameters `max_hosts`, `ring_slots`, `slot_size`:
///
/// ```text
/// hosts_off   = 4096
/// host_stride = 256                       (sizeof(struct dl_host_info))
/// hosts_end   = hosts_off + max_hosts * host_stride <= total_size
/// ring_stride = align_up(128 + ring_slots * slot_size, 64)
/// inbox_size  = max_hosts * ring_stride
/// ```
///
/// and the limits `1 <= max_hosts <= DL_MAX_HOSTS`, `ring_slots` a power
/// of two `<= DL_MAX_RING_SLOTS`, `slot_size` a multiple of 64 in
/// `DL_MIN_SLOT_SIZE..=DL_MAX_SLOT_SIZE`. The header's reserved bytes
/// must be zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtlLayout {
    total_size: u64,
    max_hosts: u32,
    ring_slots: u32,
    slot_size: u32,
    ring_stride: u32,
    inbox_size: u32,
    fabric_id: u64,
}

/// Sizes computed from the parameters.
struct Derived {
    ring_stride: u32,
    inbox_size: u32,
    hosts_end: u64,
}

fn derive(max_hosts: u32, ring_slots: u32, slot_size: u32) -> Result<Derived, WireError> {
    if max_hosts == 0 || max_hosts > DL_MAX_HOSTS {
        return Err(WireError::invalid(
            HDR,
            "max_hosts",
            max_hosts,
            "must be between 1 and DL_MAX_HOSTS",
        ));
    }
    if !ring_slots.is_power_of_two() {
        return Err(WireError::invalid(
            HDR,
            "ring_slots",
            ring_slots,
            "must be a nonzero power of two",
        ));
    }
    if ring_slots > DL_MAX_RING_SLOTS {
        return Err(WireError::invalid(
            HDR,
            "ring_slots",
            ring_slots,
            "exceeds DL_MAX_RING_SLOTS",
        ));
    }
    if !(DL_MIN_SLOT_SIZE..=DL_MAX_SLOT_SIZE).contains(&slot_size) {
        return Err(WireError::invalid(
            HDR,
            "slot_size",
            slot_size,
            "must be between DL_MIN_SLOT_SIZE and DL_MAX_SLOT_SIZE",
        ));
    }
    if slot_size % RING_ALIGN != 0 {
        return Err(WireError::invalid(
            HDR,
            "slot_size",
            slot_size,
            "must be a multiple of 64",
        ));
    }
    // With the limits above none of this can overflow (the largest inbox
    // is 8 * (128 + 1024 * 4096) bytes); checked arithmetic keeps it so if
    // a limit in the header grows.
    let hosts_end = u64::from(HOSTS_OFF) + u64::from(max_hosts) * u64::from(HOST_STRIDE);
    let ring_stride = (u64::from(ring_slots) * u64::from(slot_size))
        .checked_add(DL_RING_CTRL_SIZE as u64)
        .and_then(|v| align_up(v, u64::from(RING_ALIGN)));
    let inbox_size = ring_stride.and_then(|s| s.checked_mul(u64::from(max_hosts)));
    match (
        ring_stride.map(u32::try_from),
        inbox_size.map(u32::try_from),
    ) {
        (Some(Ok(ring_stride)), Some(Ok(inbox_size))) => Ok(Derived {
            ring_stride,
            inbox_size,
            hosts_end,
        }),
        _ => Err(WireError::invalid(
            HDR,
            "inbox_size",
            inbox_size.unwrap_or(u64::MAX),
            "does not fit 32 bits",
        )),
    }
}

impl CtlLayout {
    /// Computes the layout of an area of `total_size` bytes for `max_hosts`
    /// hosts with rings of `ring_slots` slots of `slot_size` bytes.
    ///
    /// The fabric id is 0; set it with [`CtlLayout::with_fabric_id`].
    pub fn new(
        total_size: u64,
        max_hosts: u32,
        ring_slots: u32,
        slot_size: u32,
    ) -> Result<Self, WireError> {
        let d = derive(max_hosts, ring_slots, slot_size)?;
        if total_size < d.hosts_end {
            return Err(WireError::AreaTooSmall {
                total_size,
                need: d.hosts_end,
            });
        }
        Ok(CtlLayout {
            total_size,
            max_hosts,
            ring_slots,
            slot_size,
            ring_stride: d.ring_stride,
            inbox_size: d.inbox_size,
            fabric_id: 0,
        })
    }

    /// The same layout with another fabric id.
    #[must_use]
    pub fn with_fabric_id(mut self, fabric_id: u64) -> Self {
        self.fabric_id = fabric_id;
        self
    }

    /// Parses and validates a `struct dl_ctl_header` at the start of `buf`.
    ///
    /// Checks what the kernel module checks before it trusts an area: the
    /// magic, the layout version, the limits of every parameter, that every
    /// offset, stride and size is the one layout 2 derives from the
    /// parameters, that the host info slots fit in `total_size`, and that
    /// the reserved bytes are zero. It cannot know how much memory backs
    /// the area: check that with [`CtlLayout::check_fits`].
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        check_len(HDR, buf.len(), DL_CTL_HEADER_SIZE)?;
        let magic: u64 = get!(buf, dl_ctl_header, magic);
        if magic != DL_CTL_MAGIC {
            return Err(WireError::BadMagic {
                what: HDR,
                found: magic,
                expected: DL_CTL_MAGIC,
            });
        }
        let version: u32 = get!(buf, dl_ctl_header, layout_version);
        if version != DL_CTL_LAYOUT_VERSION {
            return Err(WireError::UnsupportedLayoutVersion {
                found: version,
                supported: DL_CTL_LAYOUT_VERSION,
            });
        }
        let max_hosts: u32 = get!(buf, dl_ctl_header, max_hosts);
        let ring_slots: u32 = get!(buf, dl_ctl_header, ring_slots);
        let slot_size: u32 = get!(buf, dl_ctl_header, slot_size);
        let d = derive(max_hosts, ring_slots, slot_size)?;

        let derived: [(&'static str, u32, u32); 4] = [
            ("hosts_off", get!(buf, dl_ctl_header, hosts_off), HOSTS_OFF),
            (
                "host_stride",
                get!(buf, dl_ctl_header, host_stride),
                HOST_STRIDE,
            ),
            (
                "inbox_size",
                get!(buf, dl_ctl_header, inbox_size),
                d.inbox_size,
            ),
            (
                "ring_stride",
                get!(buf, dl_ctl_header, ring_stride),
                d.ring_stride,
            ),
        ];
        for (field, found, expected) in derived {
            if found != expected {
                return Err(WireError::LayoutMismatch {
                    field,
                    found: found.into(),
                    expected: expected.into(),
                });
            }
        }

        let total_size: u64 = get!(buf, dl_ctl_header, total_size);
        if total_size < d.hosts_end {
            return Err(WireError::AreaTooSmall {
                total_size,
                need: d.hosts_end,
            });
        }
        let reserved = &buf[field_range!(dl_ctl_header, reserved)];
        if let Some(pos) = reserved.iter().position(|&b| b != 0) {
            return Err(WireError::invalid(
                HDR,
                "reserved",
                pos as u64,
                "reserved byte at this index is not zero",
            ));
        }
        Ok(CtlLayout {
            total_size,
            max_hosts,
            ring_slots,
            slot_size,
            ring_stride: d.ring_stride,
            inbox_size: d.inbox_size,
            fabric_id: get!(buf, dl_ctl_header, fabric_id),
        })
    }

    /// Writes the `struct dl_ctl_header` for this layout to the start of
    /// `buf` (reserved bytes zeroed). The rest of `buf` is not touched: a
    /// fresh area must be zero, which a newly sized file is.
    pub fn format(&self, buf: &mut [u8]) -> Result<(), WireError> {
        check_len(HDR, buf.len(), DL_CTL_HEADER_SIZE)?;
        let buf = &mut buf[..DL_CTL_HEADER_SIZE];
        buf.fill(0);
        put!(buf, dl_ctl_header, magic, DL_CTL_MAGIC);
        put!(buf, dl_ctl_header, layout_version, DL_CTL_LAYOUT_VERSION);
        put!(buf, dl_ctl_header, max_hosts, self.max_hosts);
        put!(buf, dl_ctl_header, ring_slots, self.ring_slots);
        put!(buf, dl_ctl_header, slot_size, self.slot_size);
        put!(buf, dl_ctl_header, hosts_off, HOSTS_OFF);
        put!(buf, dl_ctl_header, host_stride, HOST_STRIDE);
        put!(buf, dl_ctl_header, inbox_size, self.inbox_size);
        put!(buf, dl_ctl_header, ring_stride, self.ring_stride);
        put!(buf, dl_ctl_header, total_size, self.total_size);
        put!(buf, dl_ctl_header, fabric_id, self.fabric_id);
        Ok(())
    }

    /// The header, as [`CtlLayout::format`] writes it.
    pub fn to_bytes(&self) -> [u8; DL_CTL_HEADER_SIZE] {
        let mut buf = [0u8; DL_CTL_HEADER_SIZE];
        self.format(&mut buf)
            .expect("the array has the header's size");
        buf
    }

    /// Checks that `available` bytes (the mapping, the file, the BAR) hold
    /// the whole area the header describes.
    pub fn check_fits(&self, available: u64) -> Result<(), WireError> {
        if available < self.total_size {
            return Err(WireError::AreaTruncated {
                total_size: self.total_size,
                available,
            });
        }
        Ok(())
    }

    /// Size of the whole area in bytes.
    pub fn total_size(&self) -> u64 {
        self.total_size
    }

    /// Number of host slots, and of entries in an inbox.
    pub fn max_hosts(&self) -> u32 {
        self.max_hosts
    }

    /// Slots per ring (a power of two).
    pub fn ring_slots(&self) -> u32 {
        self.ring_slots
    }

    /// Bytes per slot, message header included.
    pub fn slot_size(&self) -> u32 {
        self.slot_size
    }

    /// Largest payload a message can carry: a slot less the message header.
    pub fn max_payload(&self) -> usize {
        self.slot_size as usize - DL_MSG_HDR_SIZE
    }

    /// Offset of host info slot 0.
    pub fn hosts_off(&self) -> u32 {
        HOSTS_OFF
    }

    /// Bytes between host info slots.
    pub fn host_stride(&self) -> u32 {
        HOST_STRIDE
    }

    /// End of the last host info slot: the least `total_size` may be.
    pub fn hosts_end(&self) -> u64 {
        u64::from(HOSTS_OFF) + u64::from(self.max_hosts) * u64::from(HOST_STRIDE)
    }

    /// Bytes of each host's inbox: `max_hosts * ring_stride`.
    pub fn inbox_size(&self) -> u32 {
        self.inbox_size
    }

    /// Bytes between the entries of an inbox: a `struct dl_ring_ctrl` and
    /// `ring_slots` slots, padded to a multiple of 64.
    pub fn ring_stride(&self) -> u32 {
        self.ring_stride
    }

    /// The fabric instance's random id.
    pub fn fabric_id(&self) -> u64 {
        self.fabric_id
    }

    fn check_host(&self, what: &'static str, id: u32) -> Result<(), WireError> {
        if id >= self.max_hosts {
            return Err(WireError::OutOfRange {
                what,
                value: id.into(),
                limit: self.max_hosts.into(),
            });
        }
        Ok(())
    }

    /// Offset in the control area of the `struct dl_host_info` of host
    /// `id`.
    pub fn host_offset(&self, id: u32) -> Result<u64, WireError> {
        self.check_host("host id", id)?;
        Ok(u64::from(HOSTS_OFF) + u64::from(id) * u64::from(HOST_STRIDE))
    }

    /// Offset, from the start of an inbox, of the entry of host `peer`:
    /// its `struct dl_ring_ctrl`, which the slots of the ring from `peer`
    /// to the inbox's owner follow.
    pub fn inbox_entry_offset(&self, peer: u32) -> Result<u64, WireError> {
        self.check_host("inbox entry", peer)?;
        Ok(u64::from(peer) * u64::from(self.ring_stride))
    }

    /// Slot number of ring index `index` (indices wrap at 2^32; slots at
    /// `ring_slots`).
    pub fn slot_of(&self, index: u32) -> u32 {
        index & (self.ring_slots - 1)
    }

    /// Offset, from the start of an inbox, of the slot holding ring index
    /// `index` of the ring from `peer` to the inbox's owner.
    pub fn inbox_slot_offset(&self, peer: u32, index: u32) -> Result<u64, WireError> {
        Ok(self.inbox_entry_offset(peer)?
            + DL_RING_CTRL_SIZE as u64
            + u64::from(self.slot_of(index)) * u64::from(self.slot_size))
    }
}

impl fmt::Display for CtlLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fabric {:#018x}: {} bytes, {} hosts, inboxes of {:#x} bytes: rings of {} x {}-byte slots (stride {:#x})",
            self.fabric_id,
            self.total_size,
            self.max_hosts,
            self.inbox_size,
            self.ring_slots,
            self.slot_size,
            self.ring_stride
        )
    }
}

/// A producer and a consumer index (`struct dl_ring_ctrl`), and the ring
/// arithmetic on them.
///
/// [`RingCtrl::decode`] and [`RingCtrl::encode`] read and write the
/// `struct dl_ring_ctrl` at the start of an inbox entry. Both its fields
/// are written by the peer the entry belongs to, and they are indices of
/// two different rings: in entry `p` of host `d`'s inbox, `prod` is the
/// producer index of the ring from `p` to `d` (whose slots follow it),
/// `cons` the consumer index of the ring from `d` to `p` (which lives in
/// `p`'s inbox entry `d`).
///
/// The arithmetic ([`RingCtrl::occupancy`] and the rest) is about one
/// ring: the ring from `p` to `d` is
/// `RingCtrl { prod: d.inbox[p].prod, cons: p.inbox[d].cons }`. Both
/// indices count messages from 0 at binding and wrap at 2^32: occupancy is
/// `prod - cons` in wrapping arithmetic, and a ring whose occupancy
/// exceeds its slot count is corrupt.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingCtrl {
    /// Producer index: messages published by the sender.
    pub prod: u32,
    /// Consumer index: messages consumed by the receiver.
    pub cons: u32,
}

impl RingCtrl {
    /// Reads a `struct dl_ring_ctrl` (the start of an inbox entry) from the
    /// start of `buf`. The padding is not looked at.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        check_len("dl_ring_ctrl", buf.len(), DL_RING_CTRL_SIZE)?;
        Ok(RingCtrl {
            prod: get!(buf, dl_ring_ctrl, prod),
            cons: get!(buf, dl_ring_ctrl, cons),
        })
    }

    /// Writes a `struct dl_ring_ctrl` (padding zeroed) to the start of `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        check_len("dl_ring_ctrl", buf.len(), DL_RING_CTRL_SIZE)?;
        let buf = &mut buf[..DL_RING_CTRL_SIZE];
        buf.fill(0);
        put!(buf, dl_ring_ctrl, prod, self.prod);
        put!(buf, dl_ring_ctrl, cons, self.cons);
        Ok(())
    }

    /// Messages waiting in a ring of `ring_slots` slots.
    pub fn occupancy(&self, ring_slots: u32) -> Result<u32, WireError> {
        let used = self.prod.wrapping_sub(self.cons);
        if used > ring_slots {
            return Err(WireError::RingCorrupt {
                prod: self.prod,
                cons: self.cons,
                ring_slots,
            });
        }
        Ok(used)
    }

    /// Whether the indices are impossible for a ring of `ring_slots` slots.
    pub fn is_corrupt(&self, ring_slots: u32) -> bool {
        self.occupancy(ring_slots).is_err()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.prod == self.cons
    }

    /// Whether the ring is exactly full.
    pub fn is_full(&self, ring_slots: u32) -> bool {
        self.prod.wrapping_sub(self.cons) == ring_slots
    }

    /// Slots the producer may still fill.
    pub fn free_slots(&self, ring_slots: u32) -> Result<u32, WireError> {
        Ok(ring_slots - self.occupancy(ring_slots)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{DL_DEFAULT_CTL_SIZE, DL_DEFAULT_RING_SLOTS, DL_DEFAULT_SLOT_SIZE};

    fn default_layout() -> CtlLayout {
        CtlLayout::new(
            DL_DEFAULT_CTL_SIZE,
            8,
            DL_DEFAULT_RING_SLOTS,
            DL_DEFAULT_SLOT_SIZE,
        )
        .unwrap()
        .with_fabric_id(0xfeed_f00d_dead_beef)
    }

    #[test]
    fn default_layout_math() {
        let l = default_layout();
        assert_eq!(l.hosts_off(), 4096);
        assert_eq!(l.host_stride(), 256);
        // 4096 + 8 * 256
        assert_eq!(l.hosts_end(), 6144);
        // 128 + 128 * 256 = 32896, already a multiple of 64
        assert_eq!(l.ring_stride(), 32896);
        assert_eq!(l.inbox_size(), 8 * 32896);
        assert_eq!(l.max_payload(), 256 - 32);
        assert_eq!(l.host_offset(0).unwrap(), 4096);
        assert_eq!(l.host_offset(7).unwrap(), 4096 + 7 * 256);
        assert_eq!(l.inbox_entry_offset(0).unwrap(), 0);
        assert_eq!(l.inbox_entry_offset(2).unwrap(), 2 * 32896);
        assert_eq!(l.inbox_entry_offset(7).unwrap(), 7 * 32896);
        assert_eq!(l.inbox_slot_offset(2, 0).unwrap(), 2 * 32896 + 128);
        // Index 130 of a 128-slot ring is slot 2.
        assert_eq!(l.inbox_slot_offset(2, 130).unwrap(), 2 * 32896 + 128 + 512);
        // The last slot of the last entry ends the inbox.
        assert_eq!(
            l.inbox_slot_offset(7, 127).unwrap() + 256,
            u64::from(l.inbox_size())
        );
        assert_eq!(l.slot_of(u32::MAX), 127);
    }

    #[test]
    fn small_layouts_round_up() {
        // One host: its slot ends at 4096 + 256; 128 + 1 * 128 = 256.
        let l = CtlLayout::new(4096 + 256, 1, 1, 128).unwrap();
        assert_eq!(
            (l.hosts_end(), l.ring_stride(), l.inbox_size()),
            (4352, 256, 256)
        );
        // Odd stride: 128 + 2 * 192 = 512.
        let l = CtlLayout::new(1 << 20, 3, 2, 192).unwrap();
        assert_eq!((l.ring_stride(), l.inbox_size()), (512, 1536));
        // 128 + 4 * 4032 = 16256, a multiple of 64.
        let l = CtlLayout::new(1 << 20, 2, 4, 4032).unwrap();
        assert_eq!(l.ring_stride(), 16256);
        assert_eq!(l.inbox_size(), 2 * 16256);
    }

    #[test]
    fn largest_layout_does_not_overflow() {
        // The inboxes are in the hosts' RAM: the area needs only the host
        // slots, whatever the rings' size.
        let l = CtlLayout::new(8192, DL_MAX_HOSTS, DL_MAX_RING_SLOTS, DL_MAX_SLOT_SIZE).unwrap();
        assert_eq!(l.ring_stride(), 128 + 1024 * 4096);
        assert_eq!(l.inbox_size(), 8 * (128 + 1024 * 4096));
        assert_eq!(l.hosts_end(), 4096 + 8 * 256);
        assert_eq!(
            l.inbox_slot_offset(7, u32::MAX).unwrap() + 4096,
            u64::from(l.inbox_size())
        );
        assert_eq!(CtlLayout::parse(&l.to_bytes()).unwrap(), l);
    }

    #[test]
    fn new_rejects_bad_parameters() {
        let bad = [
            (0, 128, 256, "max_hosts"),
            (9, 128, 256, "max_hosts"),
            (2, 0, 256, "ring_slots"),
            (2, 96, 256, "ring_slots"),
            (2, 2048, 256, "ring_slots"),
            (2, 128, 64, "slot_size"),
            (2, 128, 8192, "slot_size"),
            (2, 128, 200, "slot_size"),
        ];
        for (hosts, slots, size, field) in bad {
            let err = CtlLayout::new(DL_DEFAULT_CTL_SIZE, hosts, slots, size).unwrap_err();
            assert_eq!(err.field(), Some(field), "{hosts} {slots} {size}: {err}");
        }
        assert_eq!(
            CtlLayout::new(4096 + 2 * 256 - 1, 2, 128, 256),
            Err(WireError::AreaTooSmall {
                total_size: 4096 + 2 * 256 - 1,
                need: 4096 + 2 * 256
            })
        );
        assert!(CtlLayout::new(4096 + 2 * 256, 2, 128, 256).is_ok());
    }

    #[test]
    fn header_round_trip() {
        let l = default_layout();
        let mut area = vec![0xaau8; 4096];
        l.format(&mut area).unwrap();
        // Only the header is written.
        assert!(area[DL_CTL_HEADER_SIZE..].iter().all(|&b| b == 0xaa));
        assert_eq!(&area[..8], b"DLFABRIC");
        assert_eq!(&area[8..12], &3u32.to_le_bytes());
        // inbox_size at 32, ring_stride at 36.
        assert_eq!(&area[32..36], &(8u32 * 32896).to_le_bytes());
        assert_eq!(&area[36..40], &32896u32.to_le_bytes());
        assert_eq!(CtlLayout::parse(&area).unwrap(), l);
        assert_eq!(
            CtlLayout::parse(&l.to_bytes()).unwrap().fabric_id(),
            0xfeed_f00d_dead_beef
        );
        assert!(l.check_fits(DL_DEFAULT_CTL_SIZE).is_ok());
        assert_eq!(
            l.check_fits(DL_DEFAULT_CTL_SIZE - 1),
            Err(WireError::AreaTruncated {
                total_size: DL_DEFAULT_CTL_SIZE,
                available: DL_DEFAULT_CTL_SIZE - 1
            })
        );
        assert!(matches!(
            l.format(&mut [0u8; 127]),
            Err(WireError::Truncated {
                need: 128,
                got: 127,
                ..
            })
        ));
    }

    /// Patches one little-endian field of a valid header and parses it.
    fn parse_patched(off: usize, bytes: &[u8]) -> Result<CtlLayout, WireError> {
        let mut h = default_layout().to_bytes();
        h[off..off + bytes.len()].copy_from_slice(bytes);
        CtlLayout::parse(&h)
    }

    #[test]
    fn parse_rejects_every_malformed_field() {
        use std::mem::offset_of;

        use crate::sys::dl_ctl_header as H;

        let h = default_layout().to_bytes();
        assert!(matches!(
            CtlLayout::parse(&h[..127]),
            Err(WireError::Truncated {
                need: 128,
                got: 127,
                ..
            })
        ));
        assert!(matches!(
            parse_patched(offset_of!(H, magic), &0u64.to_le_bytes()),
            Err(WireError::BadMagic { found: 0, .. })
        ));
        // Big-endian magic is not the magic.
        assert!(matches!(
            parse_patched(offset_of!(H, magic), &DL_CTL_MAGIC.to_be_bytes()),
            Err(WireError::BadMagic { .. })
        ));
        // Layouts 1 (rings in the control area) and 2 (no `inbound` in a
        // host's slot) are not spoken any more.
        for v in [0u32, 1, 2, 4, u32::MAX] {
            assert_eq!(
                parse_patched(offset_of!(H, layout_version), &v.to_le_bytes()),
                Err(WireError::UnsupportedLayoutVersion {
                    found: v,
                    supported: 3
                })
            );
        }
        let fields: &[(usize, &[u32], &str)] = &[
            (offset_of!(H, max_hosts), &[0, 9, u32::MAX], "max_hosts"),
            (
                offset_of!(H, ring_slots),
                &[0, 3, 100, 2048, 1 << 31],
                "ring_slots",
            ),
            (
                offset_of!(H, slot_size),
                &[0, 64, 127, 129, 200, 4160, u32::MAX],
                "slot_size",
            ),
            (offset_of!(H, hosts_off), &[0, 128, 8192], "hosts_off"),
            (offset_of!(H, host_stride), &[0, 128, 512], "host_stride"),
            (
                offset_of!(H, inbox_size),
                // Layout 1's rings_off, one entry short, one too many.
                &[0, 8192, 7 * 32896, 9 * 32896, u32::MAX],
                "inbox_size",
            ),
            (
                offset_of!(H, ring_stride),
                &[0, 32768, 32960, u32::MAX],
                "ring_stride",
            ),
        ];
        for &(off, values, field) in fields {
            for &v in values {
                let err = parse_patched(off, &v.to_le_bytes()).unwrap_err();
                assert_eq!(err.field(), Some(field), "{field} = {v}: {err}");
            }
        }
        // Fewer hosts without the inbox size is a mismatch: the inbox has
        // an entry per host.
        assert_eq!(
            parse_patched(offset_of!(H, max_hosts), &2u32.to_le_bytes()),
            Err(WireError::LayoutMismatch {
                field: "inbox_size",
                found: 8 * 32896,
                expected: 2 * 32896
            })
        );
        // Changing ring parameters without the sizes is a mismatch too.
        assert_eq!(
            parse_patched(offset_of!(H, ring_slots), &64u32.to_le_bytes()),
            Err(WireError::LayoutMismatch {
                field: "inbox_size",
                found: 8 * 32896,
                expected: 8 * (128 + 64 * 256)
            })
        );
        let mut fewer = default_layout().to_bytes();
        fewer[offset_of!(H, max_hosts)..][..4].copy_from_slice(&2u32.to_le_bytes());
        fewer[offset_of!(H, inbox_size)..][..4].copy_from_slice(&(2u32 * 32896).to_le_bytes());
        let l = CtlLayout::parse(&fewer).unwrap();
        assert_eq!((l.max_hosts(), l.inbox_size()), (2, 2 * 32896));
        assert!(l.inbox_entry_offset(2).is_err());

        for total in [0u64, 4096, 6143] {
            assert_eq!(
                parse_patched(offset_of!(H, total_size), &total.to_le_bytes()),
                Err(WireError::AreaTooSmall {
                    total_size: total,
                    need: 6144
                })
            );
        }
        // The smallest area that holds the host slots is fine.
        assert_eq!(
            parse_patched(offset_of!(H, total_size), &6144u64.to_le_bytes())
                .unwrap()
                .total_size(),
            6144
        );
        for i in 0..72 {
            let err = parse_patched(offset_of!(H, reserved) + i, &[1]).unwrap_err();
            assert_eq!(
                err,
                WireError::invalid(
                    "dl_ctl_header",
                    "reserved",
                    i as u64,
                    "reserved byte at this index is not zero"
                )
            );
        }
    }

    #[test]
    fn index_helpers_reject_out_of_range_hosts() {
        let l = CtlLayout::new(1 << 20, 3, 8, 128).unwrap();
        assert!(l.host_offset(2).is_ok());
        assert_eq!(
            l.host_offset(3),
            Err(WireError::OutOfRange {
                what: "host id",
                value: 3,
                limit: 3
            })
        );
        assert_eq!(
            l.inbox_entry_offset(3),
            Err(WireError::OutOfRange {
                what: "inbox entry",
                value: 3,
                limit: 3
            })
        );
        assert!(l.inbox_slot_offset(u32::MAX, 0).is_err());
        // 128 + 8 * 128 = 1152.
        assert_eq!(l.ring_stride(), 1152);
        assert_eq!(
            l.inbox_slot_offset(2, 9).unwrap(),
            l.inbox_entry_offset(2).unwrap() + 128 + 128
        );
    }

    #[test]
    fn ring_occupancy_and_corruption() {
        let slots = 128;
        let r = |prod, cons| RingCtrl { prod, cons };
        assert_eq!(r(0, 0).occupancy(slots), Ok(0));
        assert!(r(0, 0).is_empty());
        assert_eq!(r(5, 2).occupancy(slots), Ok(3));
        assert_eq!(r(128, 0).occupancy(slots), Ok(128));
        assert!(r(128, 0).is_full(slots));
        assert_eq!(r(128, 0).free_slots(slots), Ok(0));
        // Wrapping at 2^32.
        assert_eq!(r(3, u32::MAX - 1).occupancy(slots), Ok(5));
        assert_eq!(r(2, u32::MAX - 125).occupancy(slots), Ok(128));
        // More than a ring ahead, or the consumer ahead of the producer.
        assert!(r(129, 0).is_corrupt(slots));
        assert!(r(0, 1).is_corrupt(slots));
        assert_eq!(
            r(1, 5).occupancy(slots),
            Err(WireError::RingCorrupt {
                prod: 1,
                cons: 5,
                ring_slots: 128
            })
        );
        assert!(r(1, 5).free_slots(slots).is_err());
    }

    #[test]
    fn ring_ctrl_round_trip() {
        let mut buf = [0xffu8; 200];
        let r = RingCtrl {
            prod: 0x1234_5678,
            cons: 0x1234_5600,
        };
        r.encode(&mut buf).unwrap();
        assert_eq!(&buf[0..4], &0x1234_5678u32.to_le_bytes());
        assert_eq!(&buf[64..68], &0x1234_5600u32.to_le_bytes());
        assert!(buf[4..64].iter().all(|&b| b == 0));
        assert!(buf[68..128].iter().all(|&b| b == 0));
        assert!(buf[128..].iter().all(|&b| b == 0xff));
        assert_eq!(RingCtrl::decode(&buf), Ok(r));
        assert!(matches!(
            RingCtrl::decode(&buf[..127]),
            Err(WireError::Truncated { .. })
        ));
        assert!(r.encode(&mut [0u8; 100]).is_err());
    }
}
