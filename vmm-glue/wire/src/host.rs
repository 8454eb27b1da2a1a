//! Host info slots (`struct dl_host_info`).

use std::fmt;

use crate::bytes::check_len;
use crate::sys::{
    DL_HOST_ABSENT, DL_HOST_INFO_SIZE, DL_HOST_INIT, DL_HOST_MAGIC, DL_HOST_UP, DL_PROTO_MAX,
    DL_PROTO_MIN,
};
use crate::WireError;

/// Bytes of the `name` field, NUL padding included.
pub const HOST_NAME_LEN: usize = 32;

const INFO: &str = "dl_host_info";
const PAGE: u64 = 4096;

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
}

impl HostInfo {
    /// Decodes a `struct dl_host_info` from the start of `buf`.
    ///
    /// Rejects a slot without [`crate::DL_HOST_MAGIC`] (never written, or
    /// garbage) and an unknown state. When the state is `Up` it also checks
    /// what peers rely on: `proto_min <= proto_max`, both nonzero; a
    /// possible RAM layout; `ident_phys` a page of that RAM; a nonzero
    /// `ident_token`. The name is sanitized, not checked (see
    /// [`HostInfo::name`]); reserved bytes are ignored.
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
        if self.ident_phys % PAGE != 0 {
            return Err(WireError::invalid(
                INFO,
                "ident_phys",
                self.ident_phys,
                "is not page aligned",
            ));
        }
        match self.ram.window_offset(self.ident_phys) {
            Some(off) if self.ram.size - off >= PAGE => {}
            _ => {
                return Err(WireError::invalid(
                    INFO,
                    "ident_phys",
                    self.ident_phys,
                    "is not a page of the host's RAM",
                ))
            }
        }
        if self.ident_token == 0 {
            return Err(WireError::invalid(
                INFO,
                "ident_token",
                0u64,
                "must not be zero",
            ));
        }
        Ok(())
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
        }
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
        assert!(buf[90..].iter().all(|&b| b == 0));
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
                ..up_host()
            };
            assert_eq!(HostInfo::decode(&encoded(&h)).unwrap(), h);
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
        assert!(patched(offset_of!(H, reserved0), &[1, 2, 3, 4]).is_ok());
        assert!(patched(offset_of!(H, reserved) + 143, &[9]).is_ok());
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
