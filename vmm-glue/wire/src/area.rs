//! A read-only view of a control area file, for tools on the outer machine.
//!
//! The control area holds the header and the host info slots only; the
//! rings are in the hosts' inboxes, in their RAM (see [`CtlLayout`]).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::sys::{DL_CTL_HEADER_SIZE, DL_HOST_INFO_SIZE};
use crate::{CtlLayout, HostInfo, HostState, WireError};

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
    /// A host id is out of range.
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

/// A ring pair a host has bound to an incarnation of a peer: a nonzero
/// entry of its host info's `bound`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The host whose `bound` entry this is: its inbox entry `peer` is
    /// ready for that incarnation.
    pub owner: u32,
    /// The peer.
    pub peer: u32,
    /// The peer's incarnation bound to.
    pub incarnation: u64,
    /// The peer's slot says UP with this incarnation. If not, the binding
    /// is stale: the peer left or restarted and the owner has not let go
    /// yet.
    pub current: bool,
    /// The peer has bound back to the owner's incarnation: both rings of
    /// the pair may carry messages (each host writes into the other's
    /// inbox only while the other has bound to it).
    pub paired: bool,
}

/// Everything [`ControlArea::snapshot`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricSnapshot {
    /// The area's layout.
    pub layout: CtlLayout,
    /// Slot `i` is host `i`.
    pub hosts: Vec<HostSlot>,
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

    /// Reads and decodes host slot `id`, checked against the area's layout
    /// too ([`HostInfo::check_layout`]).
    pub fn read_host(&self, id: u32) -> Result<HostSlot, AreaError> {
        let off = self.layout.host_offset(id).map_err(|e| self.index_err(e))?;
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        self.read_at(&mut buf, off)?;
        if buf.iter().all(|&b| b == 0) {
            return Ok(HostSlot::Empty);
        }
        let decoded = HostInfo::decode_slot(&buf, id)
            .and_then(|info| info.check_layout(&self.layout).map(|()| info));
        Ok(match decoded {
            Ok(info) => HostSlot::Valid(info),
            Err(e) => HostSlot::Invalid(e),
        })
    }

    /// Reads every host slot.
    pub fn snapshot(&self) -> Result<FabricSnapshot, AreaError> {
        let hosts = (0..self.layout.max_hosts())
            .map(|id| self.read_host(id))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FabricSnapshot {
            layout: self.layout,
            hosts,
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

    /// Host `id`, if its slot is valid and says UP.
    pub fn host_up(&self, id: u32) -> Option<&HostInfo> {
        self.hosts_up().find(|h| h.host_id == id)
    }

    /// The ring pairs every host that is up has bound, ordered by (owner,
    /// peer).
    pub fn bindings(&self) -> Vec<Binding> {
        let mut out = Vec::new();
        for owner in self.hosts_up() {
            for peer in 0..self.layout.max_hosts() {
                let Some(incarnation) = owner.bound_to(peer) else {
                    continue;
                };
                let current = self.host_up(peer).filter(|p| p.incarnation == incarnation);
                out.push(Binding {
                    owner: owner.host_id,
                    peer,
                    incarnation,
                    current: current.is_some(),
                    paired: current
                        .is_some_and(|p| p.bound_to(owner.host_id) == Some(owner.incarnation)),
                });
            }
        }
        out
    }
}

impl fmt::Display for FabricSnapshot {
    /// One line for the area, one per host, one per ring pair bound.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.layout)?;
        for (id, slot) in self.hosts.iter().enumerate() {
            match slot {
                HostSlot::Empty => writeln!(f, "host {id}: empty")?,
                HostSlot::Invalid(e) => writeln!(f, "host {id}: invalid: {e}")?,
                HostSlot::Valid(h) => writeln!(
                    f,
                    "host {id}: {:<6} {:?} incarnation {:#018x} heartbeat {} proto {}..{} \
                     ram {} MiB (low {} MiB, high at {:#x}) inbox at {:#x}",
                    h.state.to_string(),
                    h.name,
                    h.incarnation,
                    h.heartbeat,
                    h.proto_min,
                    h.proto_max,
                    h.ram.size >> 20,
                    h.ram.low_size >> 20,
                    h.ram.high_base,
                    h.inbox_phys
                )?,
            }
        }
        for b in self.bindings() {
            let how = match (b.current, b.paired) {
                (false, _) => "stale",
                (true, false) => "one way",
                (true, true) => "paired",
            };
            writeln!(
                f,
                "bound {}->{}: incarnation {:#018x} ({how})",
                b.owner, b.peer, b.incarnation
            )?;
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
            inbox_phys: 0x20_0000,
            bound: [0; crate::BOUND_LEN],
        }
    }

    fn write_host(file: &std::fs::File, layout: &CtlLayout, h: &HostInfo) {
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        h.encode(&mut buf).unwrap();
        file.write_all_at(&buf, layout.host_offset(h.host_id).unwrap())
            .unwrap();
    }

    #[test]
    fn reads_hosts_and_bindings() {
        let layout = CtlLayout::new(1 << 20, 4, 16, 128)
            .unwrap()
            .with_fabric_id(0xabcd);
        let f = area_file(&layout, 1 << 20);
        let file = f.as_file();
        // Host 0 and host 1 bound to each other; host 0 also still to an
        // old incarnation of host 3, which is not up.
        let mut h0 = host(0, HostState::Up);
        let mut h1 = host(1, HostState::Up);
        h0.bound[1] = h1.incarnation;
        h0.bound[3] = 0x9999;
        h1.bound[0] = h0.incarnation;
        write_host(file, &layout, &h0);
        write_host(file, &layout, &h1);
        // Host 2 writes garbage into its state.
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        host(2, HostState::Up).encode(&mut buf).unwrap();
        buf[8] = 9;
        file.write_all_at(&buf, layout.host_offset(2).unwrap())
            .unwrap();

        let area = ControlArea::open(f.path()).unwrap();
        assert_eq!(area.layout(), &layout);
        assert_eq!(area.read_host(0).unwrap(), HostSlot::Valid(h0.clone()));
        assert_eq!(area.read_host(3).unwrap(), HostSlot::Empty);
        assert!(matches!(
            area.read_host(2).unwrap(),
            HostSlot::Invalid(WireError::InvalidField { field: "state", .. })
        ));
        assert!(matches!(area.read_host(4), Err(AreaError::Index { .. })));

        let snap = area.snapshot().unwrap();
        assert_eq!(snap.hosts.len(), 4);
        assert_eq!(snap.hosts_up().count(), 2);
        assert_eq!(snap.host_up(1), Some(&h1));
        assert_eq!(snap.host_up(2), None);
        let b = |owner, peer, incarnation, current, paired| Binding {
            owner,
            peer,
            incarnation,
            current,
            paired,
        };
        assert_eq!(
            snap.bindings(),
            vec![
                b(0, 1, h1.incarnation, true, true),
                b(0, 3, 0x9999, false, false),
                b(1, 0, h0.incarnation, true, true),
            ]
        );
        let text = snap.to_string();
        assert!(text.contains("4 hosts, inboxes of 0x2200 bytes"), "{text}");
        assert!(text.contains("host 0: UP     \"host0\""), "{text}");
        assert!(text.contains("inbox at 0x200000"), "{text}");
        assert!(text.contains("host 3: empty"), "{text}");
        assert!(text.contains("host 2: invalid"), "{text}");
        assert!(
            text.contains("bound 0->1: incarnation 0x0000000000002222 (paired)"),
            "{text}"
        );
        assert!(
            text.contains("bound 0->3: incarnation 0x0000000000009999 (stale)"),
            "{text}"
        );

        // Host 1 restarts: host 0's binding to it goes stale, and the new
        // incarnation has not bound back yet.
        let h1 = HostInfo {
            incarnation: 0x4242,
            bound: [0; crate::BOUND_LEN],
            ..h1
        };
        write_host(file, &layout, &h1);
        let snap = area.snapshot().unwrap();
        assert_eq!(snap.bindings()[0], b(0, 1, 0x2222, false, false));
        // Host 1 binds to host 0 again before host 0 does: one way.
        let h1 = HostInfo {
            bound: [h0.incarnation, 0, 0, 0, 0, 0, 0, 0],
            ..h1
        };
        write_host(file, &layout, &h1);
        let snap = area.snapshot().unwrap();
        assert_eq!(snap.bindings()[2], b(1, 0, h0.incarnation, true, false));
    }

    #[test]
    fn read_host_checks_the_layout() {
        let layout = CtlLayout::new(1 << 20, 2, 16, 128).unwrap();
        let f = area_file(&layout, 1 << 20);
        let file = f.as_file();
        // An inbox (2 * 2176 bytes) that runs past the end of RAM.
        let h0 = HostInfo {
            inbox_phys: (512 << 20) - 4096,
            ..host(0, HostState::Up)
        };
        write_host(file, &layout, &h0);
        // Bound to a host id the area has no slot for.
        let mut h1 = host(1, HostState::Up);
        h1.bound[5] = 1;
        write_host(file, &layout, &h1);
        let area = ControlArea::open(f.path()).unwrap();
        assert!(matches!(
            area.read_host(0).unwrap(),
            HostSlot::Invalid(WireError::InvalidField {
                field: "inbox_phys",
                ..
            })
        ));
        assert!(matches!(
            area.read_host(1).unwrap(),
            HostSlot::Invalid(WireError::InvalidField { field: "bound", .. })
        ));
        // A slot claiming another id than its index.
        write_host(file, &layout, &host(0, HostState::Init));
        let mut buf = [0u8; DL_HOST_INFO_SIZE];
        area.read_at(&mut buf, layout.host_offset(0).unwrap())
            .unwrap();
        file.write_all_at(&buf, layout.host_offset(1).unwrap())
            .unwrap();
        assert!(matches!(
            area.read_host(1).unwrap(),
            HostSlot::Invalid(WireError::InvalidField {
                field: "host_id",
                ..
            })
        ));
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
