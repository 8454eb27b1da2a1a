//! Geometry of the control area and the ring index arithmetic.

use std::fmt;

use crate::bytes::{align_up, check_len};
use crate::sys::{
    DL_CTL_HEADER_SIZE, DL_CTL_LAYOUT_VERSION, DL_CTL_MAGIC, DL_HOST_INFO_SIZE, DL_MAX_HOSTS,
    DL_MAX_RING_SLOTS, DL_MAX_SLOT_SIZE, DL_MIN_SLOT_SIZE, DL_MSG_HDR_SIZE, DL_RING_CTRL_SIZE,
};
use crate::WireError;

/// Offset of host info slot 0 in layout v1: the page after the header.
pub const HOSTS_OFF: u32 = 4096;
/// Bytes between host info slots in layout v1: one `struct dl_host_info`.
pub const HOST_STRIDE: u32 = DL_HOST_INFO_SIZE as u32;
/// The rings start on a boundary of this many bytes.
pub const AREA_ALIGN: u32 = 4096;
/// Each ring (control block and slots) is padded to this many bytes.
pub const RING_ALIGN: u32 = 64;

const HDR: &str = "dl_ctl_header";

/// The geometry of a control area: what `struct dl_ctl_header` says.
///
/// A value of this type always satisfies layout v1: the parameters are
/// within the header's limits, the offsets and strides are the ones
/// computed from them, and the rings fit in `total_size`. Build one with
/// [`CtlLayout::new`] (the ivshmem server) or [`CtlLayout::parse`] (anyone
/// reading an area).
///
/// Layout v1, from the parameters `max_hosts`, `ring_slots`, `slot_size`:
///
/// ```text
/// hosts_off   = 4096
/// host_stride = 256                       (sizeof(struct dl_host_info))
/// rings_off   = align_up(hosts_off + max_hosts * host_stride, 4096)
/// ring_stride = align_up(128 + ring_slots * slot_size, 64)
/// rings_end   = rings_off + max_hosts * max_hosts * ring_stride <= total_size
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
    rings_off: u32,
    ring_stride: u32,
    fabric_id: u64,
}

/// Offsets computed from the parameters.
struct Derived {
    rings_off: u32,
    ring_stride: u32,
    rings_end: u64,
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
    // With the limits above none of this can overflow (the largest ring is
    // 128 + 1024 * 4096 bytes); checked arithmetic keeps it so if a limit
    // in the header grows.
    let hosts_end = u64::from(HOSTS_OFF) + u64::from(max_hosts) * u64::from(HOST_STRIDE);
    let rings_off = align_up(hosts_end, u64::from(AREA_ALIGN));
    let ring_stride = (u64::from(ring_slots) * u64::from(slot_size))
        .checked_add(DL_RING_CTRL_SIZE as u64)
        .and_then(|v| align_up(v, u64::from(RING_ALIGN)));
    let (Some(rings_off), Some(ring_stride)) = (rings_off, ring_stride) else {
        return Err(WireError::AreaTooSmall {
            total_size: 0,
            need: u64::MAX,
        });
    };
    let rings_end = (u64::from(max_hosts) * u64::from(max_hosts))
        .checked_mul(ring_stride)
        .and_then(|v| v.checked_add(rings_off));
    match (
        u32::try_from(rings_off),
        u32::try_from(ring_stride),
        rings_end,
    ) {
        (Ok(rings_off), Ok(ring_stride), Some(rings_end)) => Ok(Derived {
            rings_off,
            ring_stride,
            rings_end,
        }),
        _ => Err(WireError::AreaTooSmall {
            total_size: 0,
            need: u64::MAX,
        }),
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
        if total_size < d.rings_end {
            return Err(WireError::AreaTooSmall {
                total_size,
                need: d.rings_end,
            });
        }
        Ok(CtlLayout {
            total_size,
            max_hosts,
            ring_slots,
            slot_size,
            rings_off: d.rings_off,
            ring_stride: d.ring_stride,
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
    /// offset and stride is the one layout v1 derives from the parameters,
    /// that the rings fit in `total_size`, and that the reserved bytes are
    /// zero. It cannot know how much memory backs the area: check that with
    /// [`CtlLayout::check_fits`].
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
                "rings_off",
                get!(buf, dl_ctl_header, rings_off),
                d.rings_off,
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
        if total_size < d.rings_end {
            return Err(WireError::AreaTooSmall {
                total_size,
                need: d.rings_end,
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
            rings_off: d.rings_off,
            ring_stride: d.ring_stride,
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
        put!(buf, dl_ctl_header, rings_off, self.rings_off);
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

    /// Number of host slots, and of ring rows and columns.
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

    /// Offset of ring (0, 0).
    pub fn rings_off(&self) -> u32 {
        self.rings_off
    }

    /// Bytes between rings.
    pub fn ring_stride(&self) -> u32 {
        self.ring_stride
    }

    /// End of the last ring; the area may be larger.
    pub fn rings_end(&self) -> u64 {
        let rings = u64::from(self.max_hosts) * u64::from(self.max_hosts);
        u64::from(self.rings_off) + rings * u64::from(self.ring_stride)
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

    /// Offset of the `struct dl_host_info` of host `id`.
    pub fn host_offset(&self, id: u32) -> Result<u64, WireError> {
        self.check_host("host id", id)?;
        Ok(u64::from(HOSTS_OFF) + u64::from(id) * u64::from(HOST_STRIDE))
    }

    /// Offset of the ring carrying messages from host `src` to host `dst`
    /// (its `struct dl_ring_ctrl`; the slots follow it).
    pub fn ring_offset(&self, src: u32, dst: u32) -> Result<u64, WireError> {
        self.check_host("ring source", src)?;
        self.check_host("ring destination", dst)?;
        let ring = u64::from(src) * u64::from(self.max_hosts) + u64::from(dst);
        Ok(u64::from(self.rings_off) + ring * u64::from(self.ring_stride))
    }

    /// Slot number of ring index `index` (indices wrap at 2^32; slots at
    /// `ring_slots`).
    pub fn slot_of(&self, index: u32) -> u32 {
        index & (self.ring_slots - 1)
    }

    /// Offset of the slot holding ring index `index` of ring (`src`, `dst`).
    pub fn slot_offset(&self, src: u32, dst: u32, index: u32) -> Result<u64, WireError> {
        Ok(self.ring_offset(src, dst)?
            + DL_RING_CTRL_SIZE as u64
            + u64::from(self.slot_of(index)) * u64::from(self.slot_size))
    }
}

impl fmt::Display for CtlLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fabric {:#018x}: {} bytes, {} hosts, rings of {} x {}-byte slots at {:#x} (stride {:#x})",
            self.fabric_id,
            self.total_size,
            self.max_hosts,
            self.ring_slots,
            self.slot_size,
            self.rings_off,
            self.ring_stride
        )
    }
}

/// The indices of one ring (`struct dl_ring_ctrl`).
///
/// Both count messages and wrap at 2^32: occupancy is `prod - cons` in
/// wrapping arithmetic, and a ring whose occupancy exceeds its slot count
/// is corrupt.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingCtrl {
    /// Messages published by the sender.
    pub prod: u32,
    /// Messages consumed by the receiver.
    pub cons: u32,
}

impl RingCtrl {
    /// Reads a `struct dl_ring_ctrl` from the start of `buf`. The padding
    /// is not looked at.
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
        // 4096 + 8 * 256 = 6144 -> 8192
        assert_eq!(l.rings_off(), 8192);
        // 128 + 128 * 256 = 32896, already a multiple of 64
        assert_eq!(l.ring_stride(), 32896);
        assert_eq!(l.rings_end(), 8192 + 64 * 32896);
        assert_eq!(l.max_payload(), 256 - 32);
        assert_eq!(l.host_offset(0).unwrap(), 4096);
        assert_eq!(l.host_offset(7).unwrap(), 4096 + 7 * 256);
        assert_eq!(l.ring_offset(0, 0).unwrap(), 8192);
        assert_eq!(l.ring_offset(1, 2).unwrap(), 8192 + (8 + 2) * 32896);
        assert_eq!(l.ring_offset(7, 7).unwrap(), 8192 + 63 * 32896);
        assert_eq!(l.slot_offset(1, 2, 0).unwrap(), 8192 + 10 * 32896 + 128);
        // Index 130 of a 128-slot ring is slot 2.
        assert_eq!(
            l.slot_offset(1, 2, 130).unwrap(),
            8192 + 10 * 32896 + 128 + 512
        );
        assert_eq!(l.slot_of(u32::MAX), 127);
    }

    #[test]
    fn small_layouts_round_up() {
        // One host: 4096 + 256 -> 8192; 128 + 1 * 128 = 256.
        let l = CtlLayout::new(8192 + 256, 1, 1, 128).unwrap();
        assert_eq!(
            (l.rings_off(), l.ring_stride(), l.rings_end()),
            (8192, 256, 8448)
        );
        // 16 hosts would need more than a page of host slots; the limit is 8,
        // so the rings always start at 8192. Odd stride: 128 + 2 * 192 = 512.
        let l = CtlLayout::new(1 << 20, 3, 2, 192).unwrap();
        assert_eq!((l.rings_off(), l.ring_stride()), (8192, 512));
        // 128 + 4 * 4032 = 16256, a multiple of 64.
        let l = CtlLayout::new(1 << 20, 2, 4, 4032).unwrap();
        assert_eq!(l.ring_stride(), 16256);
    }

    #[test]
    fn largest_layout_does_not_overflow() {
        let err =
            CtlLayout::new(1 << 20, DL_MAX_HOSTS, DL_MAX_RING_SLOTS, DL_MAX_SLOT_SIZE).unwrap_err();
        let need = 8192 + 64 * (128 + 1024 * 4096);
        assert_eq!(
            err,
            WireError::AreaTooSmall {
                total_size: 1 << 20,
                need
            }
        );
        let l = CtlLayout::new(need, DL_MAX_HOSTS, DL_MAX_RING_SLOTS, DL_MAX_SLOT_SIZE).unwrap();
        assert_eq!(l.rings_end(), need);
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
        assert!(matches!(
            CtlLayout::new(8192, 2, 128, 256),
            Err(WireError::AreaTooSmall { .. })
        ));
    }

    #[test]
    fn header_round_trip() {
        let l = default_layout();
        let mut area = vec![0xaau8; 4096];
        l.format(&mut area).unwrap();
        // Only the header is written.
        assert!(area[DL_CTL_HEADER_SIZE..].iter().all(|&b| b == 0xaa));
        assert_eq!(&area[..8], b"DLFABRIC");
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
        for v in [0u32, 2, u32::MAX] {
            assert_eq!(
                parse_patched(offset_of!(H, layout_version), &v.to_le_bytes()),
                Err(WireError::UnsupportedLayoutVersion {
                    found: v,
                    supported: 1
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
                offset_of!(H, rings_off),
                &[0, 4096, 6144, 8256],
                "rings_off",
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
        // A consistent header with fewer hosts parses; it changes nothing
        // derived because the rings start at 8192 for any host count.
        let l = parse_patched(offset_of!(H, max_hosts), &2u32.to_le_bytes()).unwrap();
        assert_eq!(l.max_hosts(), 2);
        // Changing ring parameters without the stride is a mismatch.
        assert_eq!(
            parse_patched(offset_of!(H, ring_slots), &64u32.to_le_bytes()),
            Err(WireError::LayoutMismatch {
                field: "ring_stride",
                found: 32896,
                expected: 128 + 64 * 256
            })
        );
        for total in [0u64, 8192, 8192 + 64 * 32896 - 1] {
            assert!(matches!(
                parse_patched(offset_of!(H, total_size), &total.to_le_bytes()),
                Err(WireError::AreaTooSmall { need, .. }) if need == 8192 + 64 * 32896
            ));
        }
        // The smallest area that holds the rings is fine.
        let min = 8192u64 + 64 * 32896;
        assert_eq!(
            parse_patched(offset_of!(H, total_size), &min.to_le_bytes())
                .unwrap()
                .total_size(),
            min
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
        assert!(l.ring_offset(3, 0).is_err());
        assert!(l.ring_offset(0, 3).is_err());
        assert!(l.slot_offset(0, u32::MAX, 0).is_err());
        assert_eq!(
            l.slot_offset(2, 2, 9).unwrap(),
            l.ring_offset(2, 2).unwrap() + 128 + 128
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
