//! Messages: `struct dl_msg_hdr` and the `struct dl_ping` payload.

use std::fmt;

use crate::bytes::check_len;
use crate::sys::{
    DL_MSG_F_RESPONSE, DL_MSG_HDR_SIZE, DL_MSG_PING, DL_PING_SIZE, DL_STATUS_EBUSY,
    DL_STATUS_EINVAL, DL_STATUS_EIO, DL_STATUS_ENODEV, DL_STATUS_ENOTSUPP, DL_STATUS_ETIMEDOUT,
    DL_STATUS_OK,
};
use crate::WireError;

const HDR: &str = "dl_msg_hdr";

/// Flags this build knows; any other bit makes a header malformed.
const KNOWN_FLAGS: u16 = DL_MSG_F_RESPONSE;

/// `enum dl_msg_type`. Unknown types are not malformed: the receiver
/// answers them with [`MsgStatus::NotSupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgType {
    /// Echo request; payload [`Ping`].
    Ping,
}

impl MsgType {
    /// The type with wire value `raw`, if this build knows it.
    pub fn from_raw(raw: u16) -> Option<Self> {
        match u32::from(raw) {
            DL_MSG_PING => Some(MsgType::Ping),
            _ => None,
        }
    }

    /// The wire value.
    pub fn raw(self) -> u16 {
        let raw = match self {
            MsgType::Ping => DL_MSG_PING,
        };
        // The enum's values are small; the header holds 16 bits.
        raw as u16
    }
}

/// `enum dl_msg_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgStatus {
    /// Success.
    Ok,
    /// Malformed or out-of-range request.
    Invalid,
    /// Unknown type or version.
    NotSupported,
    /// Resource held by someone else.
    Busy,
    /// No such device.
    NoDevice,
    /// The operation failed on the device.
    Io,
    /// The device did not settle in time (a migration's quiesce).
    TimedOut,
}

impl MsgStatus {
    const ALL: [(MsgStatus, u32); 7] = [
        (MsgStatus::Ok, DL_STATUS_OK),
        (MsgStatus::Invalid, DL_STATUS_EINVAL),
        (MsgStatus::NotSupported, DL_STATUS_ENOTSUPP),
        (MsgStatus::Busy, DL_STATUS_EBUSY),
        (MsgStatus::NoDevice, DL_STATUS_ENODEV),
        (MsgStatus::Io, DL_STATUS_EIO),
        (MsgStatus::TimedOut, DL_STATUS_ETIMEDOUT),
    ];

    /// The status with wire value `raw`, if there is one.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Self::ALL.iter().find(|(_, r)| *r == raw).map(|(s, _)| *s)
    }

    /// The wire value.
    pub fn raw(self) -> u32 {
        Self::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map(|(_, r)| *r)
            .expect("every status is in the table")
    }
}

/// A decoded `struct dl_msg_hdr`.
///
/// Type and status are kept raw: whether they are known is for the
/// protocol to decide (see [`MsgType::from_raw`], [`MsgStatus::from_raw`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MsgHdr {
    /// An `enum dl_msg_type`.
    pub msg_type: u16,
    /// Protocol version the message is encoded with.
    pub proto: u16,
    /// Payload bytes after the header.
    pub len: u16,
    /// `DL_MSG_F_*`.
    pub flags: u16,
    /// Sender's host id.
    pub src: u32,
    /// Low 32 bits of the sender's incarnation.
    pub epoch: u32,
    /// Per-ring sequence number.
    pub seq: u32,
    /// An `enum dl_msg_status`, in responses.
    pub status: u32,
    /// Request id; nonzero in requests and their responses.
    pub req_id: u64,
}

impl MsgHdr {
    /// Decodes the header at the start of `slot`, a copy of a whole ring
    /// slot, and checks that the payload it announces lies within `slot`
    /// and that no unknown flag is set.
    pub fn decode(slot: &[u8]) -> Result<Self, WireError> {
        check_len(HDR, slot.len(), DL_MSG_HDR_SIZE)?;
        let hdr = MsgHdr {
            msg_type: get!(slot, dl_msg_hdr, type_),
            proto: get!(slot, dl_msg_hdr, proto),
            len: get!(slot, dl_msg_hdr, len),
            flags: get!(slot, dl_msg_hdr, flags),
            src: get!(slot, dl_msg_hdr, src),
            epoch: get!(slot, dl_msg_hdr, epoch),
            seq: get!(slot, dl_msg_hdr, seq),
            status: get!(slot, dl_msg_hdr, status),
            req_id: get!(slot, dl_msg_hdr, req_id),
        };
        let max = slot.len() - DL_MSG_HDR_SIZE;
        if usize::from(hdr.len) > max {
            return Err(WireError::invalid(
                HDR,
                "len",
                hdr.len,
                "payload extends past the end of the slot",
            ));
        }
        if hdr.flags & !KNOWN_FLAGS != 0 {
            return Err(WireError::invalid(
                HDR,
                "flags",
                hdr.flags,
                "unknown flag set",
            ));
        }
        Ok(hdr)
    }

    /// Writes the header to the start of `slot`; `slot` must also have
    /// room for the `len` payload bytes announced.
    pub fn encode(&self, slot: &mut [u8]) -> Result<(), WireError> {
        check_len(HDR, slot.len(), DL_MSG_HDR_SIZE + usize::from(self.len))?;
        put!(slot, dl_msg_hdr, type_, self.msg_type);
        put!(slot, dl_msg_hdr, proto, self.proto);
        put!(slot, dl_msg_hdr, len, self.len);
        put!(slot, dl_msg_hdr, flags, self.flags);
        put!(slot, dl_msg_hdr, src, self.src);
        put!(slot, dl_msg_hdr, epoch, self.epoch);
        put!(slot, dl_msg_hdr, seq, self.seq);
        put!(slot, dl_msg_hdr, status, self.status);
        put!(slot, dl_msg_hdr, req_id, self.req_id);
        Ok(())
    }

    /// Whether this is a response.
    pub fn is_response(&self) -> bool {
        self.flags & DL_MSG_F_RESPONSE != 0
    }

    /// Decodes a whole message from a copy of its slot: the header and the
    /// `len` payload bytes after it.
    pub fn decode_message(slot: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let hdr = Self::decode(slot)?;
        let payload = &slot[DL_MSG_HDR_SIZE..DL_MSG_HDR_SIZE + usize::from(hdr.len)];
        Ok((hdr, payload))
    }

    /// Writes a message into `slot`: this header with `len` set to the
    /// payload's length, then the payload. Returns the bytes written.
    pub fn encode_message(&self, payload: &[u8], slot: &mut [u8]) -> Result<usize, WireError> {
        let max = slot
            .len()
            .saturating_sub(DL_MSG_HDR_SIZE)
            .min(u16::MAX.into());
        let len = u16::try_from(payload.len())
            .ok()
            .filter(|&l| usize::from(l) <= max)
            .ok_or(WireError::PayloadTooLong {
                len: payload.len(),
                max,
            })?;
        MsgHdr { len, ..*self }.encode(slot)?;
        let end = DL_MSG_HDR_SIZE + payload.len();
        slot[DL_MSG_HDR_SIZE..end].copy_from_slice(payload);
        Ok(end)
    }
}

impl fmt::Display for MsgHdr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "type {} v{} len {} flags {:#x} src {} epoch {:#x} seq {} status {} req {:#x}",
            self.msg_type,
            self.proto,
            self.len,
            self.flags,
            self.src,
            self.epoch,
            self.seq,
            self.status,
            self.req_id
        )
    }
}

/// A decoded `struct dl_ping` (its fixed part; the data follows it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// The sender's count of pings in this test run.
    pub test_seq: u32,
    /// crc32 (IEEE, as zlib) of the data.
    pub data_crc: u32,
    /// Random per test run.
    pub nonce: u64,
}

impl Ping {
    /// A ping carrying `data`, with its checksum.
    pub fn for_data(test_seq: u32, nonce: u64, data: &[u8]) -> Self {
        Ping {
            test_seq,
            data_crc: crc32fast::hash(data),
            nonce,
        }
    }

    /// Decodes a ping payload (the message's `len` bytes): the fixed part
    /// and the data after it. Does not check the checksum; see
    /// [`Ping::verify`].
    pub fn decode(payload: &[u8]) -> Result<(Self, &[u8]), WireError> {
        check_len("dl_ping", payload.len(), DL_PING_SIZE)?;
        let ping = Ping {
            test_seq: get!(payload, dl_ping, test_seq),
            data_crc: get!(payload, dl_ping, data_crc),
            nonce: get!(payload, dl_ping, nonce),
        };
        Ok((ping, &payload[DL_PING_SIZE..]))
    }

    /// Writes the ping and `data` to the start of `buf`; returns the
    /// payload length.
    pub fn encode(&self, data: &[u8], buf: &mut [u8]) -> Result<usize, WireError> {
        let len = DL_PING_SIZE + data.len();
        check_len("dl_ping", buf.len(), len)?;
        put!(buf, dl_ping, test_seq, self.test_seq);
        put!(buf, dl_ping, data_crc, self.data_crc);
        put!(buf, dl_ping, nonce, self.nonce);
        buf[DL_PING_SIZE..len].copy_from_slice(data);
        Ok(len)
    }

    /// Checks `data` against the checksum.
    pub fn verify(&self, data: &[u8]) -> Result<(), WireError> {
        let computed = crc32fast::hash(data);
        if computed != self.data_crc {
            return Err(WireError::CrcMismatch {
                computed,
                expected: self.data_crc,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> MsgHdr {
        MsgHdr {
            msg_type: MsgType::Ping.raw(),
            proto: 1,
            len: 0,
            flags: 0,
            src: 2,
            epoch: 0x89ab_cdef,
            seq: 17,
            status: 0,
            req_id: 0x1234_5678_9abc_def0,
        }
    }

    #[test]
    fn header_layout_and_round_trip() {
        let mut slot = [0u8; 256];
        let h = MsgHdr { len: 10, ..hdr() };
        h.encode(&mut slot).unwrap();
        assert_eq!(&slot[0..2], &1u16.to_le_bytes());
        assert_eq!(&slot[4..6], &10u16.to_le_bytes());
        assert_eq!(&slot[8..12], &2u32.to_le_bytes());
        assert_eq!(&slot[24..32], &0x1234_5678_9abc_def0u64.to_le_bytes());
        assert_eq!(MsgHdr::decode(&slot).unwrap(), h);
        assert!(!h.is_response());
        let r = MsgHdr {
            flags: DL_MSG_F_RESPONSE,
            status: MsgStatus::NotSupported.raw(),
            ..h
        };
        r.encode(&mut slot).unwrap();
        let back = MsgHdr::decode(&slot).unwrap();
        assert!(back.is_response());
        assert_eq!(
            MsgStatus::from_raw(back.status),
            Some(MsgStatus::NotSupported)
        );
    }

    #[test]
    fn message_round_trip_with_ping() {
        let data: Vec<u8> = (0..100u8).collect();
        let ping = Ping::for_data(5, 0x0bad_cafe, &data);
        let mut payload = [0u8; 224];
        let n = ping.encode(&data, &mut payload).unwrap();
        assert_eq!(n, 16 + 100);

        let mut slot = [0xeeu8; 256];
        let written = hdr().encode_message(&payload[..n], &mut slot).unwrap();
        assert_eq!(written, 32 + 116);

        let (h, p) = MsgHdr::decode_message(&slot).unwrap();
        assert_eq!(h, MsgHdr { len: 116, ..hdr() });
        assert_eq!(MsgType::from_raw(h.msg_type), Some(MsgType::Ping));
        let (back, back_data) = Ping::decode(p).unwrap();
        assert_eq!(back, ping);
        assert_eq!(back_data, &data[..]);
        back.verify(back_data).unwrap();
        // crc32 of "123456789" is the IEEE check value.
        assert_eq!(Ping::for_data(0, 0, b"123456789").data_crc, 0xcbf4_3926);
    }

    #[test]
    fn rejects_bad_lengths_and_flags() {
        let mut slot = [0u8; 256];
        hdr().encode(&mut slot).unwrap();
        assert!(matches!(
            MsgHdr::decode(&slot[..31]),
            Err(WireError::Truncated {
                need: 32,
                got: 31,
                ..
            })
        ));
        // len up to the end of the slot is fine, one more is not.
        slot[4..6].copy_from_slice(&224u16.to_le_bytes());
        assert_eq!(MsgHdr::decode(&slot).unwrap().len, 224);
        for len in [225u16, 4096, u16::MAX] {
            slot[4..6].copy_from_slice(&len.to_le_bytes());
            assert_eq!(MsgHdr::decode(&slot).unwrap_err().field(), Some("len"));
        }
        slot[4..6].copy_from_slice(&0u16.to_le_bytes());
        for flags in [2u16, 0x8000, 0xffff] {
            slot[6..8].copy_from_slice(&flags.to_le_bytes());
            assert_eq!(MsgHdr::decode(&slot).unwrap_err().field(), Some("flags"));
        }
        // Unknown types and statuses are for the protocol to answer.
        slot[6..8].copy_from_slice(&0u16.to_le_bytes());
        slot[0..2].copy_from_slice(&999u16.to_le_bytes());
        slot[20..24].copy_from_slice(&999u32.to_le_bytes());
        let h = MsgHdr::decode(&slot).unwrap();
        assert_eq!(MsgType::from_raw(h.msg_type), None);
        assert_eq!(MsgStatus::from_raw(h.status), None);

        // Encoding checks room for the payload.
        assert!(MsgHdr { len: 225, ..hdr() }.encode(&mut slot).is_err());
        assert_eq!(
            hdr().encode_message(&[0u8; 225], &mut slot),
            Err(WireError::PayloadTooLong { len: 225, max: 224 })
        );
        assert!(hdr().encode_message(&[], &mut [0u8; 31]).is_err());
    }

    #[test]
    fn ping_rejects_short_payloads_and_bad_crc() {
        assert!(matches!(
            Ping::decode(&[0u8; 15]),
            Err(WireError::Truncated {
                need: 16,
                got: 15,
                ..
            })
        ));
        let (p, data) = Ping::decode(&[0u8; 16]).unwrap();
        assert!(data.is_empty());
        // crc32 of no data is 0, so an all-zero ping is consistent.
        assert!(p.verify(data).is_ok());
    }

    #[test]
    fn ping_crc_mismatch() {
        let ping = Ping::for_data(1, 2, b"abc");
        assert!(ping.verify(b"abc").is_ok());
        assert!(matches!(
            ping.verify(b"abd"),
            Err(WireError::CrcMismatch { .. })
        ));
        assert!(ping.encode(b"abc", &mut [0u8; 18]).is_err());
    }

    #[test]
    fn statuses_and_types() {
        for (s, raw) in MsgStatus::ALL {
            assert_eq!(MsgStatus::from_raw(raw), Some(s));
            assert_eq!(s.raw(), raw);
        }
        assert_eq!(MsgType::from_raw(1), Some(MsgType::Ping));
        assert_eq!(MsgType::from_raw(0), None);
    }
}
