//! Little-endian field access tied to the generated structs.
//!
//! `get!(buf, dl_host_info, heartbeat)` reads the field at
//! `offset_of!(sys::dl_host_info, heartbeat)` with the width of its
//! generated type, so offsets and widths always come from the C header.
//! The caller has checked that `buf` holds the whole struct; an access
//! outside it is a bug in this crate and panics.

use std::mem::size_of;

/// An integer stored little-endian on the wire.
pub(crate) trait Le: Copy {
    fn read_le(bytes: &[u8]) -> Self;
    fn write_le(self, bytes: &mut [u8]);
}

macro_rules! impl_le {
    ($($t:ty),*) => {$(
        impl Le for $t {
            fn read_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(&bytes[..size_of::<$t>()]);
                <$t>::from_le_bytes(raw)
            }

            fn write_le(self, bytes: &mut [u8]) {
                bytes[..size_of::<$t>()].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

impl_le!(u16, u32, u64);

/// Reads the field at `off` whose type is that of `_field`'s result.
pub(crate) fn read_field<S, T: Le>(buf: &[u8], off: usize, _field: fn(S) -> T) -> T {
    T::read_le(&buf[off..off + size_of::<T>()])
}

/// Writes `value` to the field at `off` whose type is that of `_field`'s result.
pub(crate) fn write_field<S, T: Le>(buf: &mut [u8], off: usize, _field: fn(S) -> T, value: T) {
    value.write_le(&mut buf[off..off + size_of::<T>()]);
}

/// Size of the field `_field` projects out of its struct.
pub(crate) const fn field_len<S, T>(_field: fn(S) -> T) -> usize {
    size_of::<T>()
}

/// Reads a little-endian integer field of a generated struct from a byte slice.
macro_rules! get {
    ($buf:expr, $ty:ident, $field:ident) => {
        $crate::bytes::read_field(
            $buf,
            ::std::mem::offset_of!($crate::sys::$ty, $field),
            |s: $crate::sys::$ty| s.$field,
        )
    };
}

/// Writes a little-endian integer field of a generated struct into a byte slice.
macro_rules! put {
    ($buf:expr, $ty:ident, $field:ident, $value:expr) => {
        $crate::bytes::write_field(
            $buf,
            ::std::mem::offset_of!($crate::sys::$ty, $field),
            |s: $crate::sys::$ty| s.$field,
            $value,
        )
    };
}

/// Byte range of a field (typically an array) of a generated struct.
macro_rules! field_range {
    ($ty:ident, $field:ident) => {{
        let off = ::std::mem::offset_of!($crate::sys::$ty, $field);
        off..off + $crate::bytes::field_len(|s: $crate::sys::$ty| s.$field)
    }};
}

/// Checks that `buf` holds at least `need` bytes of `what`.
pub(crate) fn check_len(
    what: &'static str,
    buf_len: usize,
    need: usize,
) -> Result<(), crate::WireError> {
    if buf_len < need {
        return Err(crate::WireError::Truncated {
            what,
            need,
            got: buf_len,
        });
    }
    Ok(())
}

/// Rounds `v` up to a multiple of `align`, a power of two; `None` on overflow.
pub(crate) const fn align_up(v: u64, align: u64) -> Option<u64> {
    match v.checked_add(align - 1) {
        Some(x) => Some(x & !(align - 1)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_round_trip_and_byte_order() {
        let mut buf = [0u8; 8];
        0x0102_0304_0506_0708u64.write_le(&mut buf);
        assert_eq!(buf, [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(u64::read_le(&buf), 0x0102_0304_0506_0708);
        assert_eq!(u32::read_le(&buf), 0x0506_0708);
        assert_eq!(u16::read_le(&buf[6..]), 0x0102);
    }

    #[test]
    fn align_up_rounds_and_detects_overflow() {
        assert_eq!(align_up(0, 64), Some(0));
        assert_eq!(align_up(1, 64), Some(64));
        assert_eq!(align_up(4096, 4096), Some(4096));
        assert_eq!(align_up(4097, 4096), Some(8192));
        assert_eq!(align_up(u64::MAX, 64), None);
    }

    #[test]
    fn field_macros_use_header_offsets() {
        let mut buf = [0u8; crate::DL_HOST_INFO_SIZE];
        put!(&mut buf, dl_host_info, heartbeat, 0x1122_3344_5566_7788u64);
        assert_eq!(&buf[24..32], &0x1122_3344_5566_7788u64.to_le_bytes());
        let hb: u64 = get!(&buf, dl_host_info, heartbeat);
        assert_eq!(hb, 0x1122_3344_5566_7788);
        assert_eq!(field_range!(dl_host_info, name), 80..112);
    }
}
