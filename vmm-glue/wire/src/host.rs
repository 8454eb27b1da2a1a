//! Host info slots (`struct dl_host_info`).

use std::fmt;

use crate::bytes::check_len;
use crate::sys::{
    DL_HOST_ABSENT, DL_HOST_INFO_SIZE, DL_HOST_INIT, DL_HOST_MAGIC, DL_HOST_UP, DL_MAX_HOSTS,
    DL_PROTO_MAX, DL_PROTO_MIN,
};
use crate::{CtlLayout, WireError, INBOX_ALIGN};

/// Bytes of the `name` field, NUL padding included.
pub const HOST_NAME_LEN: usize = 32;

/// Entries of the `bound` field: one per possible host id.
pub const BOUND_LEN: usize = DL_MAX_HOSTS as usize;

const INFO: &str = "dl_host_info";
/// A page: what `ident_phys` and `inbox_phys` are aligned to.
const PAGE: u64 = INBOX_ALIGN;

/// `enum dl_host_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostState {
    /// Never attached, or left cleanly.
    Absent,
    /// Attaching: the other fields may be changing.
    Init,
    /// Fields valid, heartbeat running.
    Up,
}

impl HostState {
    /// The state with wire value `raw`, if there is one.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            DL_HOST_ABSENT => Some(HostState::Absent),
            DL_HOST_INIT => Some(HostState::Init),
            DL_HOST_UP => Some(HostState::Up),
            _ => None,
        }
    }

    /// The wire value.
    pub fn raw(self) -> u32 {
        match self {
            HostState::Absent => DL_HOST_ABSENT,
            HostState::Init => DL_HOST_INIT,
            HostState::Up => DL_HOST_UP,
        }
    }
}

impl fmt::Display for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostState::Absent => "ABSENT",
            HostState::Init => "INIT",
            HostState::Up => "UP",
        })
    }
}

/// Where a host's RAM sits in its physical address space, which is how a
/// peer's window onto that RAM is laid out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RamLayout {
    /// Bytes of RAM: the size of a peer's window onto it.
    pub size: u64,
    /// RAM mapped at physical 0.
    pub low_size: u64,
    /// Physical base of the rest (above the PCI hole).
    pub high_base: u64,
}

impl RamLayout {
    /// Bytes of RAM above the hole.
    pub fn high_size(&self) -> u64 {
        self.size.saturating_sub(self.low_size)
    }

    /// Offset in the window of physical address `phys`, if `phys` is RAM.
    ///
    /// Below `low_size` the window maps RAM one to one; from `high_base`
    /// on it continues at `low_size`.
    pub fn window_offset(&self, phys: u64) -> Option<u64> {
        if phys < self.low_size {
            return Some(phys);
        }
        let off = phys.checked_sub(self.high_base)?;
        (off < self.high_size()).then(|| self.low_size + off)
    }

    /// Offset in the window of the range of `len` bytes at physical
    /// address `phys`, if the whole range is RAM in one part of the layout
    /// (below `low_size`, or in high RAM): a range in the hole, past the
    /// end of RAM, or across the split has none.
    pub fn window_range(&self, phys: u64, len: u64) -> Option<u64> {
        let end = phys.checked_add(len)?;
        if end <= self.low_size {
            return Some(phys);
        }
        let off = phys.checked_sub(self.high_base)?;
        (off.checked_add(len)? <= self.high_size()).then(|| self.low_size + off)
    }

    /// Checks that the layout is possible: some RAM, low RAM within it,
    /// and high RAM (if any) above low RAM without wrapping the address
    /// space.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.size == 0 {
            return Err(WireError::invalid(
                INFO,
                "ram_size",
                0u64,
                "must not be zero",
            ));
        }
        if self.low_size > self.size {
            return Err(WireError::invalid(
                INFO,
                "ram_low_size",
                self.low_size,
                "exceeds ram_size",
            ));
        }
        // Like the kernel, even without high RAM: the high base is where
        // the hole ends, which is never below the end of low RAM.
        if self.high_base < self.low_size {
            return Err(WireError::invalid(
                INFO,
                "ram_high_base",
                self.high_base,
                "lies below the end of low RAM",
            ));
        }
        if self.high_base.checked_add(self.high_size()).is_none() {
            return Err(WireError::invalid(
                INFO,
                "ram_high_base",
                self.high_base,
                "high RAM wraps the address space",
            ));
        }
        Ok(())
    }
}

/// A decoded `struct dl_host_info`: what a host tells its peers.
///
/// Only `state`, `host_id`, `incarnation` and `heartbeat` mean something
/// in every state; the rest is checked, and meaningful, only when the host
/// is [`HostState::Up`] (during `Init` its owner may be rewriting it).
/// What depends on the control area's geometry (the inbox's extent, which
/// `bound` entries may be set) is checked by [`HostInfo::check_layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// The owner's state.
    pub state: HostState,
    /// The owner's id; equals its slot index.
    pub host_id: u32,
    /// Random, new each time the owner attaches.
    pub incarnation: u64,
    /// Bumped by the owner every `DL_HEARTBEAT_MS`.
    pub heartbeat: u64,
    /// Lowest message protocol version the owner speaks.
    pub proto_min: u16,
    /// Highest message protocol version the owner speaks.
    pub proto_max: u16,
    /// The owner's RAM, as its peers' windows show it.
    pub ram: RamLayout,
    /// Physical address of the page holding `ident_token`.
    pub ident_phys: u64,
    /// Random token identifying the owner's RAM in a window.
    pub ident_token: u64,
    /// The owner's host name, at most 32 bytes, for humans only. Decoding
    /// replaces every byte that is not printable ASCII other than space
    /// and `=` with `?` (as the kernel module does), so it is one word
    /// safe to print.
    pub name: String,
    /// Physical address of the owner's inbox (`inbox_size` bytes of its
    /// RAM, page aligned): entry `p` holds the ring from host `p` to the
    /// owner.
    pub inbox_phys: u64,
    /// Entry `p`: the incarnation of host `p` the owner has bound a ring
    /// pair to, 0 if none. Its inbox entry `p` is then ready for that
    /// incarnation, and the owner may write into host `p`'s inbox.
    pub bound: [u64; BOUND_LEN],
}

impl HostInfo {
    /// Decodes a `struct dl_host_info` from the start of `buf`.
    ///
    /// Rejects a slot without [`crate::DL_HOST_MAGIC`] (never written, or
    /// garbage) and an unknown state. When the state is `Up` it also checks
    /// what peers rely on: `proto_min <= proto_max`, both nonzero; a
    /// possible RAM layout; `ident_phys` a page of that RAM; a nonzero
    /// `ident_token`; `inbox_phys` page aligned and RAM. The name is
    /// sanitized, not checked (see [`HostInfo::name`]); reserved bytes are
    /// ignored. The checks that need the control area's layout are
    /// [`HostInfo::check_layout`]'s.
    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        check_len(INFO, buf.len(), DL_HOST_INFO_SIZE)?;
        let magic: u64 = get!(buf, dl_host_info, magic);
        if magic != DL_HOST_MAGIC {
            return Err(WireError::BadMagic {
                what: INFO,
                found: magic,
                expected: DL_HOST_MAGIC,
            });
        }
        let raw_state: u32 = get!(buf, dl_host_info, state);
        let state = HostState::from_raw(raw_state)
            .ok_or_else(|| WireError::invalid(INFO, "state", raw_state, "unknown host state"))?;
        let info = HostInfo {
            state,
            host_id: get!(buf, dl_host_info, host_id),
            incarnation: get!(buf, dl_host_info, incarnation),
            heartbeat: get!(buf, dl_host_info, heartbeat),
            proto_min: get!(buf, dl_host_info, proto_min),
            proto_max: get!(buf, dl_host_info, proto_max),
            ram: RamLayout {
                size: get!(buf, dl_host_info, ram_size),
                low_size: get!(buf, dl_host_info, ram_low_size),
                high_base: get!(buf, dl_host_info, ram_high_base),
            },
            ident_phys: get!(buf, dl_host_info, ident_phys),
            ident_token: get!(buf, dl_host_info, ident_token),
            name: decode_name(&buf[field_range!(dl_host_info, name)]),
            inbox_phys: get!(buf, dl_host_info, inbox_phys),
            bound: decode_bound(&buf[field_range!(dl_host_info, bound)]),
        };
        if info.state == HostState::Up {
            info.validate_up()?;
        }
        Ok(info)
    }

    /// Decodes host slot `slot` and checks that its owner claims that id.
    pub fn decode_slot(buf: &[u8], slot: u32) -> Result<Self, WireError> {
        let info = Self::decode(buf)?;
        if info.host_id != slot {
            return Err(WireError::invalid(
                INFO,
                "host_id",
                info.host_id,
                "differs from the slot index",
            ));
        }
        Ok(info)
    }

    fn validate_up(&self) -> Result<(), WireError> {
        if self.proto_min == 0 {
            return Err(WireError::invalid(
                INFO,
                "proto_min",
                0u16,
                "must not be zero",
            ));
        }
        if self.proto_min > self.proto_max {
            return Err(WireError::invalid(
                INFO,
                "proto_max",
                self.proto_max,
                "is below proto_min",
            ));
        }
        self.ram.validate()?;
        self.check_page("ident_phys", self.ident_phys)?;
        if self.ident_token == 0 {
            return Err(WireError::invalid(
                INFO,
                "ident_token",
                0u64,
                "must not be zero",
            ));
        }
        self.check_page("inbox_phys", self.inbox_phys)?;
        Ok(())
    }

    /// Checks that `phys` is page aligned and that the page there is RAM
    /// in the owner's layout.
    fn check_page(&self, field: &'static str, phys: u64) -> Result<(), WireError> {
        if phys % PAGE != 0 {
            return Err(WireError::invalid(INFO, field, phys, "is not page aligned"));
        }
        if self.ram.window_range(phys, PAGE).is_none() {
            return Err(WireError::invalid(
                INFO,
                field,
                phys,
                "is not a page of the host's RAM",
            ));
        }
        Ok(())
    }

    /// Checks what a host info must satisfy in an area of layout `layout`
    /// (besides what [`HostInfo::decode`] checks): the owner's id is one of
    /// its host slots and, when the owner is `Up`, its whole inbox is RAM
    /// in one part of its layout (see [`HostInfo::inbox_offset`]) and it
    /// has bound nothing to itself or to a host id beyond `max_hosts`.
    pub fn check_layout(&self, layout: &CtlLayout) -> Result<(), WireError> {
        if self.host_id >= layout.max_hosts() {
            return Err(WireError::invalid(
                INFO,
                "host_id",
                self.host_id,
                "is not below max_hosts",
            ));
        }
        if self.state != HostState::Up {
            return Ok(());
        }
        self.inbox_offset(layout)?;
        for (peer, &inc) in (0u32..).zip(self.bound.iter()) {
            if inc != 0 && (peer == self.host_id || peer >= layout.max_hosts()) {
                return Err(WireError::invalid(
                    INFO,
                    "bound",
                    peer,
                    "entry set for the owner itself or for no host",
                ));
            }
        }
        Ok(())
    }

    /// Offset of the owner's inbox in a window onto its RAM (which is the
    /// offset in its RAM file), for an area of layout `layout`. Fails
    /// unless the `inbox_size` bytes at `inbox_phys` are page aligned RAM
    /// in one part of the owner's layout.
    pub fn inbox_offset(&self, layout: &CtlLayout) -> Result<u64, WireError> {
        if self.inbox_phys % INBOX_ALIGN != 0 {
            return Err(WireError::invalid(
                INFO,
                "inbox_phys",
                self.inbox_phys,
                "is not page aligned",
            ));
        }
        self.ram
            .window_range(self.inbox_phys, u64::from(layout.inbox_size()))
            .ok_or_else(|| {
                WireError::invalid(
                    INFO,
                    "inbox_phys",
                    self.inbox_phys,
                    "the inbox is not within one part of the host's RAM",
                )
            })
    }

    /// The incarnation of host `peer` the owner has bound a ring pair to,
    /// if any.
    pub fn bound_to(&self, peer: u32) -> Option<u64> {
        let inc = *self.bound.get(usize::try_from(peer).ok()?)?;
        (inc != 0).then_some(inc)
    }

    /// Writes this as a `struct dl_host_info` (magic set, reserved bytes
    /// zeroed) to the start of `buf`. Fails if the name is longer than 31
    /// bytes (the kernel writes it NUL-terminated) or would not decode to
    /// itself; the other fields are written as they are.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        check_len(INFO, buf.len(), DL_HOST_INFO_SIZE)?;
        let name = self.name.as_bytes();
        if name.len() >= HOST_NAME_LEN {
            return Err(WireError::invalid(
                INFO,
                "name",
                name.len() as u64,
                "longer than 31 bytes",
            ));
        }
        if let Some(pos) = name.iter().position(|b| !is_name_byte(*b)) {
            return Err(WireError::invalid(
                INFO,
                "name",
                pos as u64,
                "byte at this index is not printable ASCII or is '='",
            ));
        }
        let buf = &mut buf[..DL_HOST_INFO_SIZE];
        buf.fill(0);
        put!(buf, dl_host_info, magic, DL_HOST_MAGIC);
        put!(buf, dl_host_info, state, self.state.raw());
        put!(buf, dl_host_info, host_id, self.host_id);
        put!(buf, dl_host_info, incarnation, self.incarnation);
        put!(buf, dl_host_info, heartbeat, self.heartbeat);
        put!(buf, dl_host_info, proto_min, self.proto_min);
        put!(buf, dl_host_info, proto_max, self.proto_max);
        put!(buf, dl_host_info, ram_size, self.ram.size);
        put!(buf, dl_host_info, ram_low_size, self.ram.low_size);
        put!(buf, dl_host_info, ram_high_base, self.ram.high_base);
        put!(buf, dl_host_info, ident_phys, self.ident_phys);
        put!(buf, dl_host_info, ident_token, self.ident_token);
        let name_field = field_range!(dl_host_info, name);
        buf[name_field.start..name_field.start + name.len()].copy_from_slice(name);
        put!(buf, dl_host_info, inbox_phys, self.inbox_phys);
        let bound = &mut buf[field_range!(dl_host_info, bound)];
        for (chunk, inc) in bound.chunks_exact_mut(8).zip(self.bound) {
            chunk.copy_from_slice(&inc.to_le_bytes());
        }
        Ok(())
    }

    /// The highest message protocol version both this host and this build
    /// speak, if any.
    pub fn common_proto(&self) -> Option<u16> {
        let hi = self.proto_max.min(DL_PROTO_MAX);
        let lo = self.proto_min.max(DL_PROTO_MIN);
        (lo <= hi).then_some(hi)
    }
}

/// The `bound` array, little-endian u64 entries.
fn decode_bound(raw: &[u8]) -> [u64; BOUND_LEN] {
    let mut bound = [0u64; BOUND_LEN];
    for (inc, chunk) in bound.iter_mut().zip(raw.chunks_exact(8)) {
        *inc = u64::from_le_bytes(chunk.try_into().expect("chunks of 8 bytes"));
    }
    bound
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_graphic() && b != b'='
}

/// The name up to its first NUL (or all 32 bytes), with every byte that is
/// not [`is_name_byte`] replaced by `?`.
fn decode_name(raw: &[u8]) -> String {
    raw.iter()
        .take_while(|&&b| b != 0)
        .map(|&b| if is_name_byte(b) { char::from(b) } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use super::*;
    use crate::sys::dl_host_info as H;

    const GIB: u64 = 1 << 30;

    fn up_host() -> HostInfo {
        HostInfo {
            state: HostState::Up,
            host_id: 3,
            incarnation: 0x0123_4567_89ab_cdef,
            heartbeat: 42,
            proto_min: 1,
            proto_max: 1,
            ram: RamLayout {
                size: 3 * GIB,
                low_size: 2 * GIB,
                high_base: 4 * GIB,
            },
            ident_phys: 4 * GIB + 0x10_0000,
            ident_token: 0xdead_beef_cafe_f00d,
            name: "borrower-1".into(),
            inbox_phys: 4 * GIB + 0x20_0000,
            bound: [0x1111, 0x2222, 0, 0, 0, 0, 0, 0],
        }
    }

    /// An area for `max_hosts` hosts with rings of 128 slots of 256 bytes:
    /// inboxes of `max_hosts * 32896` bytes.
    fn layout(max_hosts: u32) -> CtlLayout {
        CtlLayout::new(1 << 20, max_hosts, 128, 256).unwrap()
    }

    fn encoded(h: &HostInfo) -> [u8; DL_HOST_INFO_SIZE] {
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        h.encode(&mut buf).unwrap();
        buf
    }

    fn patched(off: usize, bytes: &[u8]) -> Result<HostInfo, WireError> {
        let mut buf = encoded(&up_host());
        buf[off..off + bytes.len()].copy_from_slice(bytes);
        HostInfo::decode(&buf)
    }

    #[test]
    fn round_trip() {
        let h = up_host();
        let buf = encoded(&h);
        assert_eq!(&buf[..8], b"DLHOSTIN");
        assert_eq!(&buf[80..90], b"borrower-1");
        assert!(buf[90..112].iter().all(|&b| b == 0));
        assert!(buf[136..].iter().all(|&b| b == 0));
        assert_eq!(HostInfo::decode(&buf).unwrap(), h);
        assert_eq!(HostInfo::decode_slot(&buf, 3).unwrap(), h);
        // Trailing bytes beyond the struct are not looked at.
        let mut long = buf.to_vec();
        long.extend_from_slice(&[0xff; 64]);
        assert_eq!(HostInfo::decode(&long).unwrap(), h);

        for state in [HostState::Absent, HostState::Init] {
            // Outside UP the other fields are not validated.
            let h = HostInfo {
                state,
                proto_min: 0,
                proto_max: 0,
                ram: RamLayout::default(),
                ident_phys: 0,
                ident_token: 0,
                name: String::new(),
                inbox_phys: 3,
                ..up_host()
            };
            assert_eq!(HostInfo::decode(&encoded(&h)).unwrap(), h);
            assert!(h.check_layout(&layout(4)).is_ok());
        }
        let max_name = "x".repeat(31);
        let h = HostInfo {
            name: max_name.clone(),
            ..up_host()
        };
        assert_eq!(HostInfo::decode(&encoded(&h)).unwrap().name, max_name);
    }

    #[test]
    fn field_offsets_match_the_header() {
        let buf = encoded(&up_host());
        assert_eq!(&buf[8..12], &DL_HOST_UP.to_le_bytes());
        assert_eq!(&buf[12..16], &3u32.to_le_bytes());
        assert_eq!(&buf[24..32], &42u64.to_le_bytes());
        assert_eq!(&buf[40..48], &(3 * GIB).to_le_bytes());
        assert_eq!(&buf[72..80], &0xdead_beef_cafe_f00du64.to_le_bytes());
        assert_eq!(&buf[112..120], &(4 * GIB + 0x20_0000).to_le_bytes());
        assert_eq!(&buf[120..128], &0x1111u64.to_le_bytes());
        assert_eq!(&buf[128..136], &0x2222u64.to_le_bytes());
        assert_eq!(offset_of!(H, reserved), 184);
    }

    #[test]
    fn decode_rejects_malformed_fields() {
        let buf = encoded(&up_host());
        assert!(matches!(
            HostInfo::decode(&buf[..255]),
            Err(WireError::Truncated {
                need: 256,
                got: 255,
                ..
            })
        ));
        assert!(matches!(
            HostInfo::decode(&[0u8; 256]),
            Err(WireError::BadMagic { found: 0, .. })
        ));
        assert!(matches!(
            HostInfo::decode_slot(&buf, 2),
            Err(WireError::InvalidField {
                field: "host_id",
                value: 3,
                ..
            })
        ));

        let u32s: &[(usize, u32, &str)] = &[
            (offset_of!(H, state), 3, "state"),
            (offset_of!(H, state), u32::MAX, "state"),
        ];
        for &(off, v, field) in u32s {
            assert_eq!(
                patched(off, &v.to_le_bytes()).unwrap_err().field(),
                Some(field)
            );
        }
        let u16s: &[(usize, u16, &str)] = &[
            (offset_of!(H, proto_min), 0, "proto_min"),
            (offset_of!(H, proto_min), 2, "proto_max"),
            (offset_of!(H, proto_max), 0, "proto_max"),
        ];
        for &(off, v, field) in u16s {
            assert_eq!(
                patched(off, &v.to_le_bytes()).unwrap_err().field(),
                Some(field)
            );
        }
        let u64s: &[(usize, u64, &str)] = &[
            (offset_of!(H, magic), DL_HOST_MAGIC.swap_bytes(), "magic"),
            (offset_of!(H, ram_size), 0, "ram_size"),
            (offset_of!(H, ram_low_size), 4 * GIB, "ram_low_size"),
            (offset_of!(H, ram_high_base), GIB, "ram_high_base"),
            (
                offset_of!(H, ram_high_base),
                u64::MAX - GIB + 2,
                "ram_high_base",
            ),
            (offset_of!(H, ident_phys), 4 * GIB + 8, "ident_phys"),
            // In the hole between low and high RAM.
            (offset_of!(H, ident_phys), 3 * GIB, "ident_phys"),
            // Past the end of high RAM.
            (offset_of!(H, ident_phys), 5 * GIB, "ident_phys"),
            (offset_of!(H, ident_token), 0, "ident_token"),
            (offset_of!(H, inbox_phys), 4 * GIB + 0x20_0040, "inbox_phys"),
            (offset_of!(H, inbox_phys), 3 * GIB, "inbox_phys"),
            (offset_of!(H, inbox_phys), 5 * GIB, "inbox_phys"),
            (offset_of!(H, inbox_phys), u64::MAX - 4095, "inbox_phys"),
        ];
        for &(off, v, field) in u64s {
            let err = patched(off, &v.to_le_bytes()).unwrap_err();
            if field == "magic" {
                assert!(matches!(err, WireError::BadMagic { .. }), "{err}");
            } else {
                assert_eq!(err.field(), Some(field), "{field} = {v:#x}: {err}");
            }
        }

        let name = offset_of!(H, name);
        // Names are sanitized, not rejected, as in the kernel: all 32 bytes
        // without a NUL, bytes after the NUL ignored, odd bytes replaced.
        assert_eq!(patched(name, &[b'a'; 32]).unwrap().name, "a".repeat(32));
        assert_eq!(patched(name + 20, b"a").unwrap().name, "borrower-1");
        assert_eq!(
            patched(name + 2, b"\n\x1b =\x7f\xc3").unwrap().name,
            "bo??????-1"
        );
        // Reserved bytes are ignored.
        assert!(patched(offset_of!(H, inbound), &[1, 2, 3, 4]).is_ok());
        assert!(patched(offset_of!(H, reserved) + 71, &[9]).is_ok());
        // Bound incarnations are any value.
        assert_eq!(
            patched(offset_of!(H, bound) + 7 * 8, &u64::MAX.to_le_bytes())
                .unwrap()
                .bound[7],
            u64::MAX
        );
    }

    #[test]
    fn ram_layout_without_high_ram() {
        // The high base must not lie below low RAM even when unused.
        let h = HostInfo {
            ram: RamLayout {
                size: GIB,
                low_size: GIB,
                high_base: 0,
            },
            ident_phys: 0,
            ..up_host()
        };
        assert_eq!(
            HostInfo::decode(&encoded(&h)).unwrap_err().field(),
            Some("ram_high_base")
        );
        let h = HostInfo {
            ram: RamLayout {
                size: GIB,
                low_size: GIB,
                high_base: 4 * GIB,
            },
            ident_phys: GIB - PAGE,
            inbox_phys: GIB - 32 * PAGE,
            ..up_host()
        };
        assert_eq!(HostInfo::decode(&encoded(&h)).unwrap(), h);
        // The last page must be whole.
        let h = HostInfo {
            ident_phys: GIB,
            ..h
        };
        assert!(HostInfo::decode(&encoded(&h)).is_err());
    }

    #[test]
    fn inbox_in_the_layout() {
        let h = up_host();
        // 4 * (128 + 128 * 256) bytes from 4 GiB + 2 MiB: high RAM, which
        // starts at window offset 2 GiB.
        assert_eq!(layout(4).inbox_size(), 131_584);
        assert_eq!(h.inbox_offset(&layout(4)), Ok(2 * GIB + 0x20_0000));
        assert!(h.check_layout(&layout(4)).is_ok());
        // Bound entries beyond max_hosts, or for the owner itself, are not.
        let h = HostInfo {
            host_id: 1,
            ..up_host()
        };
        assert_eq!(
            h.check_layout(&layout(4)).unwrap_err(),
            WireError::invalid(
                "dl_host_info",
                "bound",
                1u32,
                "entry set for the owner itself or for no host"
            )
        );
        let h = HostInfo {
            bound: [0, 0, 0, 0, 0, 0, 0, 0x77],
            ..up_host()
        };
        assert_eq!(
            h.check_layout(&layout(4)).unwrap_err().field(),
            Some("bound")
        );
        assert!(h.check_layout(&layout(8)).is_ok());
        assert_eq!(h.bound_to(7), Some(0x77));
        assert_eq!(h.bound_to(0), None);
        assert_eq!(h.bound_to(8), None);
        assert_eq!(h.bound_to(u32::MAX), None);
        // The owner's id must be a slot of the area.
        assert_eq!(
            up_host().check_layout(&layout(3)).unwrap_err().field(),
            Some("host_id")
        );

        // The inbox must lie in one part of RAM: not across the end of low
        // RAM, not past the end of high RAM.
        let size = u64::from(layout(2).inbox_size());
        for phys in [2 * GIB - PAGE, 2 * GIB - 16 * PAGE, 5 * GIB - 16 * PAGE] {
            let h = HostInfo {
                inbox_phys: phys,
                ..up_host()
            };
            assert!(HostInfo::decode(&encoded(&h)).is_ok(), "{phys:#x}");
            assert_eq!(
                h.inbox_offset(&layout(2)).unwrap_err().field(),
                Some("inbox_phys"),
                "{phys:#x}"
            );
        }
        let h = HostInfo {
            inbox_phys: 2 * GIB - 17 * PAGE,
            ..up_host()
        };
        assert!(size <= 17 * PAGE);
        assert_eq!(h.inbox_offset(&layout(2)), Ok(2 * GIB - 17 * PAGE));
        let h = HostInfo {
            inbox_phys: 5 * GIB - 17 * PAGE,
            ..up_host()
        };
        assert_eq!(h.inbox_offset(&layout(2)), Ok(3 * GIB - 17 * PAGE));
        // Not page aligned: refused even outside UP, where decode does not
        // look.
        let h = HostInfo {
            inbox_phys: 0x800,
            ..up_host()
        };
        assert_eq!(
            h.inbox_offset(&layout(2)).unwrap_err().field(),
            Some("inbox_phys")
        );
    }

    #[test]
    fn window_offsets() {
        let ram = up_host().ram;
        assert_eq!(ram.window_offset(0), Some(0));
        assert_eq!(ram.window_offset(2 * GIB - 1), Some(2 * GIB - 1));
        assert_eq!(ram.window_offset(2 * GIB), None);
        assert_eq!(ram.window_offset(4 * GIB - 1), None);
        assert_eq!(ram.window_offset(4 * GIB), Some(2 * GIB));
        assert_eq!(ram.window_offset(5 * GIB - 1), Some(3 * GIB - 1));
        assert_eq!(ram.window_offset(5 * GIB), None);
        assert_eq!(ram.window_offset(u64::MAX), None);

        assert_eq!(ram.window_range(0, 2 * GIB), Some(0));
        assert_eq!(ram.window_range(1, 2 * GIB), None);
        assert_eq!(ram.window_range(2 * GIB - 8, 8), Some(2 * GIB - 8));
        assert_eq!(ram.window_range(2 * GIB - 8, 16), None);
        assert_eq!(ram.window_range(4 * GIB - 8, 16), None);
        assert_eq!(ram.window_range(4 * GIB, GIB), Some(2 * GIB));
        assert_eq!(ram.window_range(4 * GIB + 8, GIB), None);
        assert_eq!(ram.window_range(5 * GIB - 8, 8), Some(3 * GIB - 8));
        assert_eq!(ram.window_range(u64::MAX - 8, 16), None);
    }

    #[test]
    fn encode_rejects_bad_names() {
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        for name in [
            "x".repeat(32),
            "tab\there".into(),
            "two words".into(),
            "a=b".into(),
            "höst".into(),
        ] {
            let h = HostInfo { name, ..up_host() };
            assert_eq!(h.encode(&mut buf).unwrap_err().field(), Some("name"));
        }
        assert!(up_host().encode(&mut [0u8; 255]).is_err());
    }

    #[test]
    fn protocol_negotiation() {
        let h = |proto_min, proto_max| HostInfo {
            proto_min,
            proto_max,
            ..up_host()
        };
        assert_eq!(h(1, 1).common_proto(), Some(1));
        assert_eq!(h(1, 7).common_proto(), Some(DL_PROTO_MAX));
        assert_eq!(h(2, 7).common_proto(), None);
    }

    #[test]
    fn state_values() {
        for s in [HostState::Absent, HostState::Init, HostState::Up] {
            assert_eq!(HostState::from_raw(s.raw()), Some(s));
        }
        assert_eq!(HostState::from_raw(3), None);
        assert_eq!(HostState::Up.to_string(), "UP");
    }
}
