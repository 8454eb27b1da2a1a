//! A read-only view of a control area file, for tools on the outer machine.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::sys::{DL_CTL_HEADER_SIZE, DL_HOST_INFO_SIZE, DL_RING_CTRL_SIZE};
use crate::{CtlLayout, HostInfo, HostState, RingCtrl, WireError};

/// Errors of reading a control area file.
#[derive(Debug, thiserror::Error)]
pub enum AreaError {
    /// The file could not be opened.
    #[error("cannot open control area {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file's size could not be read.
    #[error("cannot stat control area {path}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading bytes of the file failed.
    #[error("cannot read {len} bytes at offset {offset:#x} of control area {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// How many bytes.
        len: usize,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The header is invalid, or the file is smaller than it says.
    #[error("control area {path} is not valid")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: WireError,
    },
    /// A host id or ring index is out of range.
    #[error("bad index into control area {path}")]
    Index {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: WireError,
    },
}

/// A control area file (the ivshmem server's `--ctl-path`), read with
/// `pread`: never mapped, never written.
///
/// The hosts keep writing the area while it is read, so a multi-byte field
/// may be seen half-updated; every read is validated like any other
/// untrusted input, and a tool wanting a consistent picture of a host
/// reads it twice.
#[derive(Debug)]
pub struct ControlArea {
    file: File,
    path: PathBuf,
    layout: CtlLayout,
}

/// What a host info slot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostSlot {
    /// All zero: the host never attached since the area was formatted.
    Empty,
    /// A well-formed host info.
    Valid(HostInfo),
    /// Something else: a host that is faulty or mid-update, or garbage.
    Invalid(WireError),
}

/// The indices of one ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingStatus {
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// The indices as read.
    pub ctrl: RingCtrl,
    /// Messages waiting, or `None` if the indices are corrupt.
    pub occupancy: Option<u32>,
}

/// Everything [`ControlArea::snapshot`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricSnapshot {
    /// The area's layout.
    pub layout: CtlLayout,
    /// Slot `i` is host `i`.
    pub hosts: Vec<HostSlot>,
    /// Every ring between two different hosts, ordered by (src, dst).
    pub rings: Vec<RingStatus>,
}

impl ControlArea {
    /// Opens `path` read-only and validates its header and size.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, AreaError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| AreaError::Open {
            path: path.clone(),
            source,
        })?;
        Self::from_file(file, path)
    }

    /// Validates an already open control area; `path` is for messages.
    pub fn from_file(file: File, path: PathBuf) -> Result<Self, AreaError> {
        let size = file
            .metadata()
            .map_err(|source| AreaError::Metadata {
                path: path.clone(),
                source,
            })?
            .len();
        let mut header = [0u8; DL_CTL_HEADER_SIZE];
        read_exact_at(&file, &path, &mut header, 0)?;
        let layout = CtlLayout::parse(&header)
            .and_then(|layout| layout.check_fits(size).map(|()| layout))
            .map_err(|source| AreaError::Invalid {
                path: path.clone(),
                source,
            })?;
        Ok(ControlArea { file, path, layout })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated layout.
    pub fn layout(&self) -> &CtlLayout {
        &self.layout
    }

    fn index_err(&self, source: WireError) -> AreaError {
        AreaError::Index {
            path: self.path.clone(),
            source,
        }
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), AreaError> {
        read_exact_at(&self.file, &self.path, buf, offset)
    }

    /// Reads and decodes host slot `id`.
    pub fn read_host(&self, id: u32) -> Result<HostSlot, AreaError> {
        let off = self.layout.host_offset(id).map_err(|e| self.index_err(e))?;
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        self.read_at(&mut buf, off)?;
        if buf.iter().all(|&b| b == 0) {
            return Ok(HostSlot::Empty);
        }
        Ok(match HostInfo::decode_slot(&buf, id) {
            Ok(info) => HostSlot::Valid(info),
            Err(e) => HostSlot::Invalid(e),
        })
    }

    /// Reads the indices of the ring from `src` to `dst`.
    pub fn read_ring(&self, src: u32, dst: u32) -> Result<RingCtrl, AreaError> {
        let off = self
            .layout
            .ring_offset(src, dst)
            .map_err(|e| self.index_err(e))?;
        let mut buf = [0u8; DL_RING_CTRL_SIZE];
        self.read_at(&mut buf, off)?;
        RingCtrl::decode(&buf).map_err(|e| self.index_err(e))
    }

    /// Copies the slot holding ring index `index` of the ring from `src`
    /// to `dst`; decode it with [`crate::MsgHdr::decode_message`].
    pub fn read_slot(&self, src: u32, dst: u32, index: u32) -> Result<Vec<u8>, AreaError> {
        let off = self
            .layout
            .slot_offset(src, dst, index)
            .map_err(|e| self.index_err(e))?;
        let mut buf = vec![0u8; self.layout.slot_size() as usize];
        self.read_at(&mut buf, off)?;
        Ok(buf)
    }

    /// Reads every host slot and every ring between two different hosts.
    pub fn snapshot(&self) -> Result<FabricSnapshot, AreaError> {
        let n = self.layout.max_hosts();
        let hosts = (0..n)
            .map(|id| self.read_host(id))
            .collect::<Result<Vec<_>, _>>()?;
        let mut rings = Vec::new();
        for src in 0..n {
            for dst in (0..n).filter(|&d| d != src) {
                let ctrl = self.read_ring(src, dst)?;
                rings.push(RingStatus {
                    src,
                    dst,
                    ctrl,
                    occupancy: ctrl.occupancy(self.layout.ring_slots()).ok(),
                });
            }
        }
        Ok(FabricSnapshot {
            layout: self.layout,
            hosts,
            rings,
        })
    }
}

fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<(), AreaError> {
    file.read_exact_at(buf, offset)
        .map_err(|source| AreaError::Read {
            path: path.to_path_buf(),
            offset,
            len: buf.len(),
            source,
        })
}

impl FabricSnapshot {
    /// Hosts that are up.
    pub fn hosts_up(&self) -> impl Iterator<Item = &HostInfo> {
        self.hosts.iter().filter_map(|slot| match slot {
            HostSlot::Valid(info) if info.state == HostState::Up => Some(info),
            _ => None,
        })
    }
}

impl fmt::Display for FabricSnapshot {
    /// One line for the area, one per host, one per ring that ever carried
    /// a message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.layout)?;
        for (id, slot) in self.hosts.iter().enumerate() {
            match slot {
                HostSlot::Empty => writeln!(f, "host {id}: empty")?,
                HostSlot::Invalid(e) => writeln!(f, "host {id}: invalid: {e}")?,
                HostSlot::Valid(h) => writeln!(
                    f,
                    "host {id}: {:<6} {:?} incarnation {:#018x} heartbeat {} proto {}..{} \
                     ram {} MiB (low {} MiB, high at {:#x})",
                    h.state.to_string(),
                    h.name,
                    h.incarnation,
                    h.heartbeat,
                    h.proto_min,
                    h.proto_max,
                    h.ram.size >> 20,
                    h.ram.low_size >> 20,
                    h.ram.high_base
                )?,
            }
        }
        for r in &self.rings {
            if r.ctrl.prod == 0 && r.ctrl.cons == 0 {
                continue;
            }
            match r.occupancy {
                Some(n) => writeln!(
                    f,
                    "ring {}->{}: {n}/{} queued (prod {}, cons {})",
                    r.src,
                    r.dst,
                    self.layout.ring_slots(),
                    r.ctrl.prod,
                    r.ctrl.cons
                )?,
                None => writeln!(
                    f,
                    "ring {}->{}: CORRUPT (prod {}, cons {})",
                    r.src, r.dst, r.ctrl.prod, r.ctrl.cons
                )?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::RamLayout;

    fn area_file(layout: &CtlLayout, size: u64) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(size).unwrap();
        f.write_all(&layout.to_bytes()).unwrap();
        f
    }

    fn host(id: u32, state: HostState) -> HostInfo {
        HostInfo {
            state,
            host_id: id,
            incarnation: 0x1111 * u64::from(id + 1),
            heartbeat: 7,
            proto_min: 1,
            proto_max: 1,
            ram: RamLayout {
                size: 512 << 20,
                low_size: 512 << 20,
                high_base: 1 << 32,
            },
            ident_phys: 0x10_0000,
            ident_token: 0x5eed,
            name: format!("host{id}"),
        }
    }

    #[test]
    fn reads_hosts_and_rings() {
        let layout = CtlLayout::new(1 << 20, 3, 16, 128)
            .unwrap()
            .with_fabric_id(0xabcd);
        let f = area_file(&layout, 1 << 20);
        let file = f.as_file();
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        host(0, HostState::Up).encode(&mut buf).unwrap();
        file.write_all_at(&buf, layout.host_offset(0).unwrap())
            .unwrap();
        // Host 2 writes garbage into its state.
        host(2, HostState::Up).encode(&mut buf).unwrap();
        buf[8] = 9;
        file.write_all_at(&buf, layout.host_offset(2).unwrap())
            .unwrap();

        let mut ring = [0u8; DL_RING_CTRL_SIZE];
        RingCtrl { prod: 5, cons: 3 }.encode(&mut ring).unwrap();
        file.write_all_at(&ring, layout.ring_offset(0, 1).unwrap())
            .unwrap();
        RingCtrl { prod: 100, cons: 3 }.encode(&mut ring).unwrap();
        file.write_all_at(&ring, layout.ring_offset(1, 0).unwrap())
            .unwrap();

        let mut slot = [0u8; 128];
        let hdr = crate::MsgHdr {
            msg_type: 1,
            proto: 1,
            src: 0,
            seq: 4,
            req_id: 9,
            ..Default::default()
        };
        hdr.encode_message(b"hello", &mut slot).unwrap();
        file.write_all_at(&slot, layout.slot_offset(0, 1, 4).unwrap())
            .unwrap();

        let area = ControlArea::open(f.path()).unwrap();
        assert_eq!(area.layout(), &layout);
        assert_eq!(
            area.read_host(0).unwrap(),
            HostSlot::Valid(host(0, HostState::Up))
        );
        assert_eq!(area.read_host(1).unwrap(), HostSlot::Empty);
        assert!(matches!(
            area.read_host(2).unwrap(),
            HostSlot::Invalid(WireError::InvalidField { field: "state", .. })
        ));
        assert!(matches!(area.read_host(3), Err(AreaError::Index { .. })));
        let copy = area.read_slot(0, 1, 4 + 16).unwrap();
        let (h, payload) = crate::MsgHdr::decode_message(&copy).unwrap();
        assert_eq!((h.seq, payload), (4, &b"hello"[..]));

        let snap = area.snapshot().unwrap();
        assert_eq!(snap.hosts.len(), 3);
        assert_eq!(snap.rings.len(), 6);
        assert_eq!(snap.hosts_up().count(), 1);
        let r01 = snap
            .rings
            .iter()
            .find(|r| (r.src, r.dst) == (0, 1))
            .unwrap();
        assert_eq!(r01.occupancy, Some(2));
        let r10 = snap
            .rings
            .iter()
            .find(|r| (r.src, r.dst) == (1, 0))
            .unwrap();
        assert_eq!(r10.occupancy, None);
        let text = snap.to_string();
        assert!(text.contains("host 0: UP     \"host0\""), "{text}");
        assert!(text.contains("host 1: empty"), "{text}");
        assert!(text.contains("host 2: invalid"), "{text}");
        assert!(text.contains("ring 0->1: 2/16 queued"), "{text}");
        assert!(text.contains("ring 1->0: CORRUPT"), "{text}");
        assert!(!text.contains("ring 0->2"), "{text}");
    }

    #[test]
    fn rejects_bad_files() {
        let layout = CtlLayout::new(1 << 20, 2, 16, 128).unwrap();
        // Smaller than the header says.
        let f = area_file(&layout, (1 << 20) - 4096);
        assert!(matches!(
            ControlArea::open(f.path()),
            Err(AreaError::Invalid {
                source: WireError::AreaTruncated { .. },
                ..
            })
        ));
        // Not formatted.
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(1 << 20).unwrap();
        assert!(matches!(
            ControlArea::open(f.path()),
            Err(AreaError::Invalid {
                source: WireError::BadMagic { .. },
                ..
            })
        ));
        // Shorter than a header.
        f.as_file().set_len(100).unwrap();
        assert!(matches!(
            ControlArea::open(f.path()),
            Err(AreaError::Read { .. })
        ));
        let err = ControlArea::open("/nonexistent/ctl").unwrap_err();
        assert!(matches!(err, AreaError::Open { .. }));
        assert!(err.to_string().contains("/nonexistent/ctl"));
    }
}
