//! The server's parameters.

use std::path::PathBuf;

use devlend_wire::{
    DL_DB_VECTORS_MAX, DL_DEFAULT_CTL_SIZE, DL_DEFAULT_RING_SLOTS, DL_DEFAULT_SLOT_SIZE,
};

/// Most interrupt vectors per host the server hands out. Every connect
/// sends `hosts * vectors` descriptors, so keep it modest; devlend uses
/// [`DL_DB_VECTORS_MAX`].
pub const MAX_VECTORS: u32 = 64;

/// What the server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Directory of the `doorbell-<i>.sock` sockets.
    pub socket_dir: PathBuf,
    /// Number of hosts (sockets and host slots in the control area).
    pub hosts: u32,
    /// The control area file to create.
    pub ctl_path: PathBuf,
    /// Its size: a power of two (it becomes a PCI BAR).
    pub ctl_size: u64,
    /// Interrupt vectors (eventfds) per host.
    pub vectors: u32,
    /// Slots per message ring, announced in the control area's header (the
    /// rings themselves are in the hosts' inboxes, in their own RAM).
    pub ring_slots: u32,
    /// Bytes per ring slot, announced likewise.
    pub slot_size: u32,
    /// Reuse (truncate and reformat) an existing control area file instead
    /// of refusing to start.
    pub reuse: bool,
    /// Follow QEMU's spec to the letter: tell the other clients when a host
    /// disconnects, and give a host that connects again new eventfds.
    ///
    /// Off by default because QEMU's ivshmem device (at least up to 10.0)
    /// cannot take it with fixed ids: on a disconnect notification it frees
    /// the peer's eventfd array but keeps the pointer, and when the same id
    /// connects again it writes the new eventfds into the freed memory,
    /// corrupting its heap. By default every host id has one set of
    /// eventfds for the server's lifetime, a client learns each other
    /// host's eventfds once, and disconnects are not announced (the guest
    /// cannot see them anyway; devlend detects dead peers by heartbeat).
    pub notify_disconnects: bool,
}

impl Config {
    /// A configuration with devlend's defaults for everything but the
    /// paths and the host count.
    pub fn new(socket_dir: impl Into<PathBuf>, hosts: u32, ctl_path: impl Into<PathBuf>) -> Self {
        Config {
            socket_dir: socket_dir.into(),
            hosts,
            ctl_path: ctl_path.into(),
            ctl_size: DL_DEFAULT_CTL_SIZE,
            vectors: DL_DB_VECTORS_MAX,
            ring_slots: DL_DEFAULT_RING_SLOTS,
            slot_size: DL_DEFAULT_SLOT_SIZE,
            reuse: false,
            notify_disconnects: false,
        }
    }

    /// Path of the socket of host `id`.
    pub fn socket_path(&self, id: u32) -> PathBuf {
        self.socket_dir.join(crate::socket_name(id))
    }
}

/// Parses a size: bytes, or a number with a binary suffix `K`, `M` or `G`
/// (`KiB`, `MiB`, `GiB` and lower case accepted too), e.g. `4M`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(digits_end);
    let num: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or a number with K, M or G)"))?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => {
            return Err(format!(
                "{s:?}: unknown size suffix {suffix:?} (use K, M or G)"
            ))
        }
    };
    num.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        for bad in ["", "M", "4T", "-4M", "4.5M", "99999999999999999999G", "4 M"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
