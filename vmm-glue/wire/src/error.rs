//! Errors of decoding, validating and encoding wire data.

/// Why bytes from the fabric, or parameters for it, were rejected.
///
/// `what` and `field` name the C struct and field (`"dl_ctl_header"`,
/// `"ring_slots"`), so a log line points straight at the header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A buffer is shorter than the structure or message read from or
    /// written to it.
    #[error("{what}: buffer of {got} bytes is too short, need {need}")]
    Truncated {
        /// What was being read or written.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// A magic number is wrong: not a structure of this format, or not
    /// written yet.
    #[error("{what}: bad magic {found:#018x}, expected {expected:#018x}")]
    BadMagic {
        /// The structure.
        what: &'static str,
        /// The magic found.
        found: u64,
        /// The magic expected.
        expected: u64,
    },
    /// The control area has a layout version this build does not speak.
    #[error("dl_ctl_header: unsupported layout version {found}, this build speaks {supported}")]
    UnsupportedLayoutVersion {
        /// The version found.
        found: u32,
        /// The version this build speaks ([`crate::DL_CTL_LAYOUT_VERSION`]).
        supported: u32,
    },
    /// A field holds a value outside what the format allows.
    #[error("{what}.{field} = {value:#x}: {reason}")]
    InvalidField {
        /// The structure.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// The value found (widened).
        value: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A derived field of the control area header differs from what its
    /// parameters give under this layout version.
    #[error(
        "dl_ctl_header.{field} = {found:#x}, layout {} requires {expected:#x}",
        crate::sys::DL_CTL_LAYOUT_VERSION
    )]
    LayoutMismatch {
        /// The field.
        field: &'static str,
        /// The value found.
        found: u64,
        /// The value the layout requires.
        expected: u64,
    },
    /// The area is too small for its host info slots.
    #[error("control area of {total_size} bytes cannot hold its layout, which needs {need}")]
    AreaTooSmall {
        /// The area's size.
        total_size: u64,
        /// The size its layout needs.
        need: u64,
    },
    /// The memory actually available is smaller than the header says.
    #[error("control area header says {total_size} bytes, but only {available} are mapped")]
    AreaTruncated {
        /// The size in the header.
        total_size: u64,
        /// The size available.
        available: u64,
    },
    /// A host id or ring index is not below its limit.
    #[error("{what} {value} out of range (limit {limit})")]
    OutOfRange {
        /// What kind of index.
        what: &'static str,
        /// The index.
        value: u64,
        /// The exclusive limit.
        limit: u64,
    },
    /// A ring's producer is more than a ring ahead of its consumer (or
    /// behind it): a peer wrote garbage.
    #[error("corrupt ring: prod {prod} - cons {cons} exceeds {ring_slots} slots")]
    RingCorrupt {
        /// Producer index.
        prod: u32,
        /// Consumer index.
        cons: u32,
        /// Slots in the ring.
        ring_slots: u32,
    },
    /// A payload does not fit in a slot (or in the 16-bit length field).
    #[error("payload of {len} bytes exceeds the maximum of {max}")]
    PayloadTooLong {
        /// The payload's length.
        len: usize,
        /// The largest payload that fits.
        max: usize,
    },
    /// A ping's data does not match its checksum.
    #[error("dl_ping: data crc {computed:#010x} differs from data_crc {expected:#010x}")]
    CrcMismatch {
        /// crc32 of the data received.
        computed: u32,
        /// The checksum the ping carried.
        expected: u32,
    },
}

impl WireError {
    pub(crate) fn invalid(
        what: &'static str,
        field: &'static str,
        value: impl Into<u64>,
        reason: &'static str,
    ) -> Self {
        WireError::InvalidField {
            what,
            field,
            value: value.into(),
            reason,
        }
    }

    /// The field an [`WireError::InvalidField`] or
    /// [`WireError::LayoutMismatch`] is about, if any.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            WireError::InvalidField { field, .. } | WireError::LayoutMismatch { field, .. } => {
                Some(field)
            }
            _ => None,
        }
    }
}
