//! The topology file: which hosts a cluster has, how big they are, and which
//! devices each one carries to lend.
//!
//! ```toml
//! name = "two-host"
//! [[host]]
//! name = "lender"
//! memory = "1G"
//! iommu = true
//! [[host.nvme]]
//! id = "nvme0"
//! size = "256M"
//! pmr = "8M"         # optional: a persistent memory region from a file,
//!                    # which every other host gets a window onto
//! cmb = "16M"        # optional: a controller memory buffer (BAR 2)
//! [[host.igb]]       # a NIC to lend, on the network "lan0"
//! id = "nic0"
//! network = "lan0"
//! [[host.gpu]]       # a two-function device to lend: display + audio
//! id = "gpu0"
//! [[host]]
//! name = "borrower"
//! memory = "1G"
//! [[host.virtio_net]] # a NIC the host keeps, on the same network
//! id = "lan0"
//! network = "lan0"
//! [ntb]              # what the emulated NTB ports offer (optional)
//! windows = 2        # inbound memory windows per peer
//! window_size = "1G" # the largest translation one window takes
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Most hosts one fabric carries (the wire format's `DL_MAX_HOSTS`).
pub const MAX_HOSTS: usize = devlend_wire::DL_MAX_HOSTS as usize;

/// Errors in a topology file.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The file could not be read.
    #[error("cannot read topology {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("topology {path} is malformed: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: Box<toml::de::Error>,
    },
    /// The file parsed but describes something we cannot build.
    #[error("topology {name}: {what}")]
    Invalid {
        /// The topology's name.
        name: String,
        /// What is wrong, in words.
        what: String,
    },
}

/// A whole cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Short name, used in file names; `[a-z0-9-]`.
    pub name: String,
    /// The hosts, in host id order (host `i` gets fabric id `i`).
    #[serde(rename = "host")]
    pub hosts: Vec<HostSpec>,
    /// The limits of the emulated NTB ports, as a real adapter has them.
    #[serde(default)]
    pub ntb: NtbSpec,
}

/// Most inbound memory windows an emulated NTB port has per peer (the wire
/// format's `DL_NTB_MWS`).
pub const MAX_NTB_WINDOWS: u32 = devlend_wire::sys::DL_NTB_MWS;

/// What the emulated NTB ports (`devlend_ntb_emu.ko`) offer, so that they
/// refuse what a real adapter with these limits would (docs/ntb.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NtbSpec {
    /// Inbound memory windows per peer, 1 to [`MAX_NTB_WINDOWS`].
    #[serde(default = "ntb_windows")]
    pub windows: u32,
    /// The largest translation one window takes (a power of two, at least
    /// 4K); none: up to the host's RAM.
    #[serde(default)]
    pub window_size: Option<Size>,
}

fn ntb_windows() -> u32 {
    MAX_NTB_WINDOWS
}

impl Default for NtbSpec {
    fn default() -> Self {
        NtbSpec {
            windows: MAX_NTB_WINDOWS,
            window_size: None,
        }
    }
}

impl NtbSpec {
    /// The module parameters of `devlend_ntb_emu.ko` that set these limits.
    pub fn module_params(&self) -> String {
        format!(
            "mw_count={} mw_size_max={}",
            self.windows,
            self.window_size.map_or(0, |s| s.0)
        )
    }
}

/// One emulated host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Host name, unique in the cluster; `[a-z0-9-]`.
    pub name: String,
    /// RAM size, a power of two ("512M", "1G"): peers see it through a PCI
    /// BAR, and BARs are powers of two.
    pub memory: Size,
    /// Virtual CPUs.
    #[serde(default = "one")]
    pub cpus: u32,
    /// Put an emulated Intel IOMMU in front of the host's devices: a lender
    /// needs one to isolate what it lends, and an NTB port translates its
    /// peers' stores through it (docs/ntb.md).
    #[serde(default)]
    pub iommu: bool,
    /// Most RAM below 4 GiB (QEMU's q35 `max-ram-below-4g`): the rest of
    /// `memory` lies from 4 GiB up, as on any server with more than about
    /// 3 GiB. A multiple of 256M, below `memory`; none: all of a small
    /// host's RAM is below 4 GiB.
    #[serde(default)]
    pub ram_below_4g: Option<Size>,
    /// NVMe drives this host carries.
    #[serde(default)]
    pub nvme: Vec<NvmeSpec>,
    /// Intel 82576 (igb) NICs this host carries; each has SR-IOV (7 VFs)
    /// and MSI-X.
    #[serde(default)]
    pub igb: Vec<NicSpec>,
    /// Intel 82540EM (e1000) NICs this host carries: conventional PCI,
    /// INTx only.
    #[serde(default)]
    pub e1000: Vec<NicSpec>,
    /// ICH9 AHCI (SATA) controllers this host carries, each with one disk:
    /// a device with MSI and no MSI-X.
    #[serde(default)]
    pub ahci: Vec<DiskControllerSpec>,
    /// LSI 53C895A SCSI controllers (conventional PCI, INTx only), each
    /// with one disk: a device whose driver (`sym53c8xx`) has it DMA to its
    /// own BARs (its SCRIPTS run from its RAM BAR).
    #[serde(default)]
    pub lsi: Vec<DiskControllerSpec>,
    /// virtio-blk disks, modern only (`disable-legacy=on`: vendor-specific
    /// capabilities and a notification BAR, no I/O BAR), lendable.
    #[serde(default)]
    pub virtio_blk: Vec<DiskControllerSpec>,
    /// NVMe controllers with SR-IOV (QEMU's `sriov_max_vfs` in an NVM
    /// subsystem), one private namespace per VF, none attached at boot.
    #[serde(default)]
    pub nvme_sriov: Vec<NvmeSriovSpec>,
    /// virtio-net NICs the host uses itself (not lendable: no root port of
    /// their own), e.g. its end of a network a lent NIC is on.
    #[serde(default)]
    pub virtio_net: Vec<NicSpec>,
    /// Display adapters (QEMU's `secondary-vga`), not lent: 16 MiB of
    /// VRAM in BAR 0 that no driver of the host claims, so a test can map
    /// it from userspace as a PCI BAR that holds what is written to it
    /// (the peer-to-peer check's target).
    #[serde(default)]
    pub vga: Vec<VgaSpec>,
    /// Multi-function display and audio devices to lend, one slot each:
    /// function 0 a display adapter (QEMU's `virtio-gpu-pci`,
    /// `multifunction=on`, `iommu_platform=on`), function 1 an HDA controller (`intel-hda`)
    /// with a codec (`hda-duplex`). Neither function has ACS, so Linux puts
    /// both in one IOMMU group: the devices of the group-lending check
    /// (docs/groups.md).
    #[serde(default)]
    pub gpu: Vec<GpuSpec>,
}

/// An emulated two-function device: a display adapter at function 0 and
/// an HDA audio controller at function 1 of one slot, behind a root port of
/// its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Device id, unique in the host; `[a-z0-9-]`. It names the display
    /// function; the audio function is [`GpuSpec::hda_id`].
    pub id: String,
}

impl GpuSpec {
    /// The QEMU id of the audio function (`<id>-hda`), unique in the host
    /// like a device id.
    pub fn hda_id(&self) -> String {
        format!("{}-hda", self.id)
    }
}

/// An emulated display adapter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VgaSpec {
    /// Device id, unique in the host; `[a-z0-9-]`.
    pub id: String,
}

/// An emulated disk controller (AHCI, LSI, virtio-blk) with one disk, backed by a file on
/// the outer machine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskControllerSpec {
    /// Device id, unique in the host; `[a-z0-9-]`.
    pub id: String,
    /// Size of the disk's backing file created for this run.
    pub size: Size,
    /// virtio only: without VIRTIO_F_ACCESS_PLATFORM (QEMU's
    /// `iommu_platform=off`), a device whose DMA bypasses the IOMMU, which
    /// the lender must refuse. Otherwise a virtio device has the feature.
    #[serde(default)]
    pub bypasses_iommu: bool,
}

/// An emulated NIC (igb, e1000 or virtio-net). Its wire is a QEMU hub of
/// its own in the host's QEMU; `network` joins that hub to NICs of other
/// hosts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// Device id, unique in the host; `[a-z0-9-]`.
    pub id: String,
    /// Also give the host its own NIC (virtio-net, not lendable: no root
    /// port of its own) on this NIC's network: the peer a guest that
    /// borrows the NIC exchanges traffic with.
    #[serde(default)]
    pub peer: bool,
    /// The cluster-wide network (`[a-z0-9-]`) this NIC is on: every NIC
    /// naming it, on any host, shares one Ethernet segment (a switch in
    /// the cluster process, [`crate::netswitch`]). A network must join at
    /// least two NICs.
    #[serde(default)]
    pub network: Option<String>,
}

impl HostSpec {
    /// The host's lendable NICs with their QEMU device models.
    pub fn lendable_nics(&self) -> impl Iterator<Item = (&'static str, &NicSpec)> {
        let igb = self.igb.iter().map(|n| ("igb", n));
        igb.chain(self.e1000.iter().map(|n| ("e1000", n)))
    }

    /// All the host's NICs with their QEMU device models: the lendable
    /// ones, then its own virtio-net ones.
    pub fn nics(&self) -> impl Iterator<Item = (&'static str, &NicSpec)> {
        let own = self.virtio_net.iter().map(|n| ("virtio-net-pci", n));
        self.lendable_nics().chain(own)
    }
}

fn one() -> u32 {
    1
}

/// An emulated NVMe drive backed by a file on the outer machine.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeSpec {
    /// Device id, unique in the host; `[a-z0-9-]`.
    pub id: String,
    /// Size of the backing file created for this run.
    pub size: Size,
    /// NVMe serial number; defaults to `devlend-<host>-<id>`.
    #[serde(default)]
    pub serial: Option<String>,
    /// A persistent memory region (QEMU's `pmrdev`, a BAR backed by a
    /// file on the outer machine) of this size, a power of two from 4K;
    /// every other host gets an `ivshmem-plain` onto the same file: a
    /// window onto a RAM-backed BAR, what the BAR window check uses.
    #[serde(default)]
    pub pmr: Option<Size>,
    /// A controller memory buffer (QEMU's `cmb_size_mb`, BAR 2, with the
    /// CMBMSC register of NVMe 1.4) of this size, whole MiB: a guest
    /// driver built with PCI peer-to-peer DMA keeps its submission queues
    /// there.
    #[serde(default)]
    pub cmb: Option<Size>,
}

/// An emulated NVMe controller with SR-IOV: a primary controller (the PF)
/// in an NVM subsystem of its own, with flexible queue and interrupt
/// resources for `vfs` secondary controllers (2 queues, 1 vector each)
/// and `vfs` private namespaces (nsid 1 to `vfs`), each backed by a file
/// on the outer machine and attached to no controller at boot: the
/// lender attaches namespace k to VF k with NVMe's Namespace Attachment
/// and puts the VF online with Virtualization Management.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeSriovSpec {
    /// Device id, unique in the host; `[a-z0-9-]`.
    pub id: String,
    /// VFs (secondary controllers) and namespaces: 1 to 7.
    pub vfs: u32,
    /// Size of each namespace's backing file.
    pub size: Size,
}

impl NvmeSriovSpec {
    /// The id of namespace `nsid`'s backing file (`<id>-ns<nsid>`).
    pub fn ns_id(&self, nsid: u32) -> String {
        format!("{}-ns{nsid}", self.id)
    }
}

/// A byte count written as "256M", "1G" or a plain number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl Size {
    /// Parses "4096", "64K", "256M", "1G" (binary multiples).
    pub fn parse(s: &str) -> Option<Size> {
        let s = s.trim();
        let (digits, shift) = match s.as_bytes().last()? {
            b'K' | b'k' => (&s[..s.len() - 1], 10),
            b'M' | b'm' => (&s[..s.len() - 1], 20),
            b'G' | b'g' => (&s[..s.len() - 1], 30),
            _ => (s, 0),
        };
        let n: u64 = digits.parse().ok()?;
        n.checked_mul(1u64 << shift).map(Size)
    }

    /// In mebibytes, rounded down.
    pub fn mib(self) -> u64 {
        self.0 >> 20
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(Size(n)),
            Raw::Text(t) => Size::parse(&t)
                .ok_or_else(|| serde::de::Error::custom(format!("bad size {t:?}: want e.g. 512M"))),
        }
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 31
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Topology {
    /// Reads and validates a topology file.
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
            path: path.to_owned(),
            source,
        })?;
        let topo: Topology = toml::from_str(&text).map_err(|e| TopologyError::Parse {
            path: path.to_owned(),
            source: Box::new(e),
        })?;
        topo.validate()?;
        Ok(topo)
    }

    /// Checks everything the launcher relies on.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let bad = |what: String| {
            Err(TopologyError::Invalid {
                name: self.name.clone(),
                what,
            })
        };
        if !is_name(&self.name) {
            return bad(format!("name {:?} must be 1-31 of [a-z0-9-]", self.name));
        }
        if self.hosts.is_empty() || self.hosts.len() > MAX_HOSTS {
            return bad(format!(
                "needs 1 to {MAX_HOSTS} hosts, has {}",
                self.hosts.len()
            ));
        }
        for (i, h) in self.hosts.iter().enumerate() {
            if !is_name(&h.name) {
                return bad(format!("host name {:?} must be 1-31 of [a-z0-9-]", h.name));
            }
            if self.hosts[..i].iter().any(|o| o.name == h.name) {
                return bad(format!("host name {:?} used twice", h.name));
            }
            let mem = h.memory.0;
            if !mem.is_power_of_two() || !(128 << 20..=2 << 30).contains(&mem) {
                return bad(format!(
                    "host {}: memory must be a power of two from 128M to 2G (it is a PCI BAR of every peer), not {mem}",
                    h.name
                ));
            }
            if let Some(Size(low)) = h.ram_below_4g {
                if low == 0 || low % (256 << 20) != 0 || low >= mem {
                    return bad(format!(
                        "host {}: ram_below_4g must be a multiple of 256M below memory, not {low}",
                        h.name
                    ));
                }
            }
            if h.cpus == 0 || h.cpus > 8 {
                return bad(format!("host {}: cpus must be 1 to 8", h.name));
            }
            let lends = !h.nvme.is_empty()
                || h.lendable_nics().next().is_some()
                || !h.ahci.is_empty()
                || !h.lsi.is_empty()
                || !h.virtio_blk.is_empty()
                || !h.nvme_sriov.is_empty()
                || !h.gpu.is_empty();
            if lends && !h.iommu {
                return bad(format!(
                    "host {}: a host that lends devices needs `iommu = true` to isolate them",
                    h.name
                ));
            }
            let ids: Vec<&str> = h
                .nvme
                .iter()
                .map(|d| d.id.as_str())
                .chain(h.nics().map(|(_, d)| d.id.as_str()))
                .chain(h.ahci.iter().map(|d| d.id.as_str()))
                .chain(h.lsi.iter().map(|d| d.id.as_str()))
                .chain(h.virtio_blk.iter().map(|d| d.id.as_str()))
                .chain(h.nvme_sriov.iter().map(|d| d.id.as_str()))
                .chain(h.vga.iter().map(|d| d.id.as_str()))
                .chain(h.gpu.iter().map(|d| d.id.as_str()))
                .collect();
            for (j, id) in ids.iter().enumerate() {
                if !is_name(id) || ids[..j].contains(id) {
                    return bad(format!("host {}: device id {id:?} bad or repeated", h.name));
                }
            }
            for d in &h.gpu {
                let hda = d.hda_id();
                if ids.contains(&hda.as_str()) {
                    return bad(format!(
                        "host {}: gpu {}'s audio function is named {hda:?}, which another device's id is",
                        h.name, d.id
                    ));
                }
            }
            let disks = h
                .nvme
                .iter()
                .map(|d| ("nvme", &d.id, d.size))
                .chain(h.ahci.iter().map(|d| ("ahci", &d.id, d.size)))
                .chain(h.lsi.iter().map(|d| ("lsi", &d.id, d.size)))
                .chain(h.virtio_blk.iter().map(|d| ("virtio_blk", &d.id, d.size)))
                .chain(h.nvme_sriov.iter().map(|d| ("nvme_sriov", &d.id, d.size)));
            if let Some(d) = h.ahci.iter().chain(&h.lsi).find(|d| d.bypasses_iommu) {
                return bad(format!(
                    "host {}: {}: bypasses_iommu is for virtio devices only",
                    h.name, d.id
                ));
            }
            for d in &h.nvme_sriov {
                if !(1..=7).contains(&d.vfs) {
                    return bad(format!(
                        "host {}: nvme_sriov {} vfs must be 1 to 7",
                        h.name, d.id
                    ));
                }
            }
            for d in &h.nvme {
                if let Some(pmr) = d.pmr {
                    if pmr.0 < 4096 || !pmr.0.is_power_of_two() {
                        return bad(format!(
                            "host {}: nvme {} pmr must be a power of two, at least 4K",
                            h.name, d.id
                        ));
                    }
                }
                if let Some(cmb) = d.cmb {
                    if cmb.0 == 0 || cmb.0 % (1 << 20) != 0 || cmb.0 > 1 << 30 {
                        return bad(format!(
                            "host {}: nvme {} cmb must be whole MiB, 1M to 1G",
                            h.name, d.id
                        ));
                    }
                }
            }
            for (kind, id, size) in disks {
                if size.0 < 1 << 20 || size.0 % 4096 != 0 {
                    return bad(format!(
                        "host {}: {kind} {id} size must be a multiple of 4K, at least 1M",
                        h.name
                    ));
                }
            }
        }
        for (net, ends) in self.networks() {
            if !is_name(net) || ends.len() < 2 {
                return bad(format!(
                    "network {net:?} must be named with [a-z0-9-] and join at least two NICs, joins {}",
                    ends.len()
                ));
            }
        }
        if !(1..=MAX_NTB_WINDOWS).contains(&self.ntb.windows) {
            return bad(format!(
                "ntb.windows must be 1 to {MAX_NTB_WINDOWS}, not {}",
                self.ntb.windows
            ));
        }
        if let Some(Size(w)) = self.ntb.window_size {
            if !w.is_power_of_two() || w < 4096 {
                return bad(format!(
                    "ntb.window_size must be a power of two of at least 4K, not {w}"
                ));
            }
        }
        Ok(())
    }

    /// The cluster-wide networks by name, each with its NICs as (host id,
    /// NIC id), in the order of the file.
    pub fn networks(&self) -> Vec<(&str, Vec<(usize, &str)>)> {
        let mut nets: Vec<(&str, Vec<(usize, &str)>)> = Vec::new();
        for (h, host) in self.hosts.iter().enumerate() {
            for (_, nic) in host.nics() {
                let Some(net) = nic.network.as_deref() else {
                    continue;
                };
                let end = (h, nic.id.as_str());
                match nets.iter_mut().find(|(n, _)| *n == net) {
                    Some((_, ends)) => ends.push(end),
                    None => nets.push((net, vec![end])),
                }
            }
        }
        nets
    }

    /// The host with this name, and its fabric id.
    pub fn host(&self, name: &str) -> Option<(usize, &HostSpec)> {
        self.hosts.iter().enumerate().find(|(_, h)| h.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Topology, TopologyError> {
        let t: Topology = toml::from_str(s).map_err(|e| TopologyError::Parse {
            path: "t".into(),
            source: Box::new(e),
        })?;
        t.validate()?;
        Ok(t)
    }

    #[test]
    fn sizes() {
        assert_eq!(Size::parse("4096"), Some(Size(4096)));
        assert_eq!(Size::parse("64K"), Some(Size(64 << 10)));
        assert_eq!(Size::parse("256M"), Some(Size(256 << 20)));
        assert_eq!(Size::parse("1G"), Some(Size(1 << 30)));
        assert_eq!(Size::parse(""), None);
        assert_eq!(Size::parse("G"), None);
        assert_eq!(Size::parse("1T"), None);
        assert_eq!(Size::parse("99999999999999999G"), None);
    }

    #[test]
    fn shipped_topology_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../qemu-scripts/topologies/two-host.toml");
        let t = Topology::load(&path).unwrap();
        assert_eq!(t.hosts.len(), 2);
        assert_eq!(t.host("borrower").unwrap().0, 1);
        assert_eq!(t.hosts[0].nvme[0].size, Size(256 << 20));
        assert_eq!(t.ntb.windows, 2);
        assert_eq!(t.ntb.window_size, Some(Size(1 << 30)));
        assert_eq!(t.ntb.module_params(), "mw_count=2 mw_size_max=1073741824");
    }

    #[test]
    fn ram_below_4g() {
        let base = "name='a'\n[[host]]\nname='h'\nmemory='1G'\n";
        assert_eq!(parse(base).unwrap().hosts[0].ram_below_4g, None);
        let t = parse(&format!("{base}ram_below_4g='512M'\n")).unwrap();
        assert_eq!(t.hosts[0].ram_below_4g, Some(Size(512 << 20)));
        for bad in ["'1G'", "'2G'", "'100M'", "'0'"] {
            let err = parse(&format!("{base}ram_below_4g={bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("ram_below_4g"), "{bad}: {err}");
        }
    }

    #[test]
    fn window_topology_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../qemu-scripts/topologies/window.toml");
        let t = Topology::load(&path).unwrap();
        assert_eq!(t.hosts.len(), 2);
        assert!(t.hosts.iter().all(|h| h.iommu));
        assert!(t
            .hosts
            .iter()
            .all(|h| h.ram_below_4g == Some(Size(512 << 20))));
        assert_eq!(t.ntb.window_size, Some(Size(256 << 20)));
    }

    #[test]
    fn migrate_topology_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../qemu-scripts/topologies/migrate.toml");
        let t = Topology::load(&path).unwrap();
        let names: Vec<&str> = t.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["lender", "borrower", "borrower2"]);
        assert!(t.hosts[0].iommu);
        assert_eq!(t.hosts[0].nvme[0].size, Size(128 << 20));
        // The NIC check's igb, its other end the lender's own NIC.
        assert!(t.hosts[0].igb.len() == 1 && t.hosts[0].igb[0].peer);
        // The migration stream's network joins the two borrowers' own NICs.
        assert_eq!(t.networks(), [("mig", vec![(1, "mig"), (2, "mig")])]);
    }

    #[test]
    fn ntb_limits() {
        let base = "name='a'\n[[host]]\nname='h'\nmemory='512M'\n";
        let t = parse(base).unwrap();
        assert_eq!(t.ntb.module_params(), "mw_count=2 mw_size_max=0");
        let t = parse(&format!("{base}[ntb]\nwindows=1\nwindow_size='64M'\n")).unwrap();
        assert_eq!(t.ntb.module_params(), "mw_count=1 mw_size_max=67108864");
        for (bad, why) in [
            ("[ntb]\nwindows=0\n", "ntb.windows"),
            ("[ntb]\nwindows=3\n", "ntb.windows"),
            ("[ntb]\nwindow_size='3M'\n", "power of two"),
            ("[ntb]\nwindow_size='1K'\n", "power of two"),
        ] {
            let err = parse(&format!("{base}{bad}")).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn networks_join_nics_of_different_hosts() {
        let t = parse(
            "name='a'\n[[host]]\nname='l'\nmemory='512M'\niommu=true\n\
             [[host.igb]]\nid='nic0'\nnetwork='lan0'\n[[host.e1000]]\nid='nic1'\npeer=true\n\
             [[host]]\nname='b'\nmemory='512M'\n\
             [[host.virtio_net]]\nid='lan0'\nnetwork='lan0'\n",
        )
        .unwrap();
        assert_eq!(t.networks(), [("lan0", vec![(0, "nic0"), (1, "lan0")])]);
        // A host that only has NICs of its own lends nothing: no IOMMU needed.
        assert_eq!(t.hosts[1].lendable_nics().count(), 0);
        assert_eq!(t.hosts[1].nics().next().unwrap().0, "virtio-net-pci");
        let base = "name='a'\n[[host]]\nname='l'\nmemory='512M'\niommu=true\n";
        for (bad, why) in [
            ("[[host.igb]]\nid='nic0'\nnetwork='lan0'\n", "at least two"),
            (
                "[[host.igb]]\nid='nic0'\nnetwork='Lan'\n[[host.virtio_net]]\nid='v'\nnetwork='Lan'\n",
                "[a-z0-9-]",
            ),
            (
                "[[host.igb]]\nid='n'\n[[host.virtio_net]]\nid='n'\n",
                "repeated",
            ),
        ] {
            let err = parse(&format!("{base}{bad}")).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn gpu_ids_are_unique_with_their_audio_function() {
        let base = "name='a'\n[[host]]\nname='l'\nmemory='512M'\niommu=true\n";
        let t = parse(&format!("{base}[[host.gpu]]\nid='gpu0'\n")).unwrap();
        assert_eq!(t.hosts[0].gpu[0].id, "gpu0");
        assert_eq!(t.hosts[0].gpu[0].hda_id(), "gpu0-hda");
        // Lent, so behind an IOMMU.
        let err = parse("name='a'\n[[host]]\nname='l'\nmemory='512M'\n[[host.gpu]]\nid='g'\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("iommu"), "{err}");
        for (bad, why) in [
            ("[[host.gpu]]\nid='g'\n[[host.gpu]]\nid='g'\n", "repeated"),
            ("[[host.gpu]]\nid='g'\n[[host.vga]]\nid='g'\n", "repeated"),
            ("[[host.gpu]]\nid='G'\n", "bad or repeated"),
            // The audio function's id is another device's.
            (
                "[[host.gpu]]\nid='g'\n[[host.lsi]]\nid='g-hda'\nsize='1M'\n",
                "audio function",
            ),
            ("[[host.gpu]]\nid='g'\nvram='16M'\n", "unknown field"),
        ] {
            let err = parse(&format!("{base}{bad}")).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn rejects_what_cannot_boot() {
        let ok = "name='a'\n[[host]]\nname='h'\nmemory='512M'\n";
        assert!(parse(ok).is_ok());
        for (bad, why) in [
            ("name='A'\n[[host]]\nname='h'\nmemory='512M'\n", "name"),
            (
                "name='a'\n[[host]]\nname='h'\nmemory='768M'\n",
                "power of two",
            ),
            (
                "name='a'\n[[host]]\nname='h'\nmemory='4G'\n",
                "power of two",
            ),
            (
                "name='a'\n[[host]]\nname='h'\nmemory='512M'\n[[host]]\nname='h'\nmemory='512M'\n",
                "twice",
            ),
            (
                "name='a'\n[[host]]\nname='h'\nmemory='512M'\n[[host.nvme]]\nid='n'\nsize='1M'\n",
                "iommu",
            ),
            (
                "name='a'\n[[host]]\nname='h'\nmemory='512M'\ncolour='red'\n",
                "unknown field",
            ),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
