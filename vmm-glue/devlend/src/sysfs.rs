//! The devlend sysfs interface, read and written under a root directory so
//! tests can use a fake tree (as mdevctl's tests do). The files are
//! declared in mdev-kmod/Documentation/ABI/testing/sysfs-devlend; their
//! paths are named in [`crate::abi`].

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{CliError, Result};
use crate::lendconf::Hosts;

use crate::abi::*;
pub use crate::abi::{
    type_for_class, FABRIC_CLASS, LENDER_DRIVER, MDEV_DEVICES, PCI_DEVICES, TYPE_PREFIX,
};

const HINT_MODULE: &str = "load devlend's modules on this host (modprobe devlend_ivshmem \
     devlend_lender devlend_borrower) and check `dmesg` for the fabric adapter";
const HINT_MDEV_OPEN: &str = "removing it now would make the kernel take it from the VM \
     (QEMU unplugs it from the running guest) or wait until the VMM lets go; detach it from \
     the guest first (`devlend detach`, `virsh detach-device`, `ch-remote remove-device`) or \
     stop the VM, then remove it";
const HINT_LENDER: &str =
    "load the lender on this host (modprobe devlend_lender) and check `dmesg`";

/// A sysfs tree rooted at `root` (`/` on a real host), and the fabric the
/// commands act on.
#[derive(Clone, Debug)]
pub struct Sysfs {
    root: PathBuf,
    /// The fabric's device by name (`devlend fabrics`), or the first.
    fabric: Option<String>,
}

/// This host on a fabric, and its peers.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Fabric {
    /// The fabric's device: the PCI address of the fabric adapter, or a
    /// device a backend made (`ntb-<NTB device>`).
    pub adapter: String,
    /// This host's id.
    pub host_id: u32,
    /// This host's name.
    pub hostname: String,
    /// The control area's fabric id.
    pub fabric_id: String,
    /// Highest protocol version spoken.
    pub proto: u32,
    /// The other hosts.
    pub peers: Vec<Peer>,
}

/// A peer host.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Peer {
    /// Host id.
    pub host_id: u32,
    /// Host name.
    pub name: String,
    /// `up` or `down`.
    pub state: String,
    /// Negotiated protocol (0 when down).
    pub proto: u32,
    /// PCI address of the window onto it, if bound.
    pub window: Option<String>,
    /// Milliseconds since its heartbeat moved, if watched.
    pub heartbeat_age_ms: Option<u64>,
    /// Answers to this host's requests it sent (cumulative), if the
    /// module tells.
    pub answers: Option<u64>,
    /// Their round trips, summed in nanoseconds (cumulative).
    pub answer_ns: Option<u64>,
}

/// A local PCI function and its lending state.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LocalDevice {
    /// PCI address.
    pub address: String,
    /// Vendor id, `0x....`.
    pub vendor: String,
    /// Device id, `0x....`.
    pub device: String,
    /// Class code, `0x......`.
    pub class: String,
    /// Bound driver, if any.
    pub driver: Option<String>,
    /// IOMMU group, if the device has an IOMMU.
    pub iommu_group: Option<u32>,
    /// Part of the fabric itself (the adapter or a memory window, bound to
    /// the `devlend` driver): never to be lent.
    pub fabric: bool,
    /// Lending state when lent: available, borrowed, returning, failed (its reset failed).
    pub lent: Option<Lent>,
    /// For an SR-IOV virtual function: its physical function's address.
    pub physfn: Option<String>,
    /// For an SR-IOV physical function: the VFs it has enabled.
    pub sriov_numvfs: Option<u32>,
}

impl LocalDevice {
    /// Its SR-IOV role for a table: `vf:<pf address>`, `pf:<enabled VFs>`
    /// or `-`.
    pub fn sriov(&self) -> String {
        match (&self.physfn, self.sriov_numvfs) {
            (Some(pf), _) => format!("vf:{pf}"),
            (None, Some(n)) => format!("pf:{n}"),
            (None, None) => "-".into(),
        }
    }
}

/// The PCI driver of the emulated fabric's adapter and windows
/// (devlend_ivshmem.ko).
pub const FABRIC_DRIVER: &str = "devlend";

/// A lent device's state (`<dev>/devlend/`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Lent {
    /// The lender's id for it.
    pub dev_id: u32,
    /// available, borrowed, returning or failed.
    pub state: String,
    /// Borrowing host id.
    pub borrower: Option<u32>,
    /// Bytes mapped for the borrower's DMA.
    pub dma_mapped_bytes: u64,
    /// Interrupt vectors allocated.
    pub irq_vectors: u32,
    /// Interrupts relayed since lent (cumulative), if the module tells.
    pub irq_fires: Option<u64>,
    /// The hosts it is lent to: `all` or host ids, if the module tells.
    pub allowed_hosts: Option<String>,
}

/// A device another host lends, as this host sees it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Remote {
    /// `<host-id>:<dev_id>`.
    pub id: String,
    /// Lender's host name.
    pub lender: String,
    /// PCI address on the lender.
    pub name: String,
    /// Vendor id.
    pub vendor: String,
    /// Device id.
    pub device: String,
    /// Class code.
    pub class: String,
    /// available, borrowed, returning, failed, gone ...
    pub state: String,
    /// Borrowing host id.
    pub borrower: Option<u32>,
    /// mdevs of this host that target it.
    pub mdevs: Vec<String>,
    /// For an SR-IOV virtual function: its physical function's address on
    /// the lender (which keeps it), if the lender says.
    pub pf: Option<String>,
}

impl Remote {
    /// The mdev type that stands for this device by default.
    pub fn default_type(&self) -> &'static str {
        let class = u32::from_str_radix(self.class.trim_start_matches("0x"), 16).unwrap_or(0);
        type_for_class(class)
    }
}

/// An mdev type of the adapter.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MdevType {
    /// Directory name (`devlend-nvme`).
    pub id: String,
    /// `name`.
    pub name: String,
    /// `description`.
    pub description: String,
    /// `device_api`.
    pub device_api: String,
    /// `available_instances`.
    pub available_instances: u32,
}

/// An mdev.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Mdev {
    /// UUID.
    pub uuid: String,
    /// Type directory name.
    pub mdev_type: Option<String>,
    /// Parent device.
    pub parent: Option<String>,
    /// `remote_device`: `any` or `<host-id>:<dev_id>`.
    pub remote_device: Option<String>,
    /// idle, borrowed or lost.
    pub state: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// `migration`: `incoming` (opened as a migration's destination), its
    /// VFIO migration state (`running`, `stop`, ...), or `unsupported`
    /// (the host's VFIO cannot report the device's dirty pages).
    pub migration: Option<String>,
    /// The path a VMM opens.
    pub sysfs_path: String,
}

/// How often `mdev create --wait` looks for a free device again.
pub const WAIT_POLL: Duration = Duration::from_millis(500);

/// An mdev that `mdev create --wait` made, with what it was made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// Its type, as it was when the mdev was made.
    pub mtype: MdevType,
    /// The remote device it is pinned to, if one was named.
    pub remote: Option<Remote>,
    /// The mdev.
    pub mdev: Mdev,
}

/// One try at creating an mdev.
enum Attempt {
    /// Created (and pinned to its device when one was named).
    Made(Mdev),
    /// Another request has the device: no instance left, or the kernel
    /// refused with ENOSPC or EBUSY. The error is what to report when not
    /// waiting.
    Taken(CliError),
}

/// Checks a PCI address `dddd:bb:ss.f`.
pub fn check_bdf(s: &str) -> Result<()> {
    let b = s.as_bytes();
    let ok = b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
        && (b'0'..=b'7').contains(&b[11]);
    if ok {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{s:?} is not a PCI address; write it in full, like 0000:01:00.0 (see `lspci -D`)"
        )))
    }
}

/// Waits a moment for the mdev `uuid` just written to `type_dir`'s
/// `create` to show in sysfs at `d` (the kernel creates the device before
/// the write returns).
fn wait_for_mdev(d: &Path, type_dir: &Path, uuid: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !d.exists() {
        if Instant::now() > deadline {
            return Err(CliError::not_found(
                format!(
                    "mdev {uuid} did not appear after writing it to {}",
                    type_dir.join(TYPE_CREATE).display()
                ),
                "check `dmesg`",
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Checks a UUID `8-4-4-4-12` hex digits (any case).
pub fn check_uuid(s: &str) -> Result<()> {
    let ok = s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if ok {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{s:?} is not a UUID (like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001); see `devlend mdev list`"
        )))
    }
}

/// The UUID given (checked, lower-cased), or a new one.
pub fn given_or_new_uuid(given: Option<&str>) -> Result<String> {
    match given {
        Some(u) => {
            check_uuid(u)?;
            Ok(u.to_ascii_lowercase())
        }
        None => Ok(new_uuid()),
    }
}

/// A new random (version 4) UUID.
pub fn new_uuid() -> String {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `b`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n > 0 {
            got += n as usize;
        }
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn opt(s: String) -> Option<String> {
    let s = s.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl Sysfs {
    /// A tree rooted at `root`; commands act on its first fabric.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs {
            root: root.into(),
            fabric: None,
        }
    }

    /// The same tree, commands acting on the fabric whose device is named
    /// `fabric` (a PCI adapter's address, or `ntb-<NTB device>`); `None`:
    /// the first.
    pub fn with_fabric(mut self, fabric: Option<String>) -> Self {
        self.fabric = fabric;
        self
    }

    /// `root` + an absolute-looking path.
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        let rel = rel.as_ref();
        self.root.join(rel.strip_prefix("/").unwrap_or(rel))
    }

    /// Reads an attribute, trimmed.
    pub fn read(&self, path: &Path) -> Result<String> {
        fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|source| CliError::Sysfs {
                action: "reading".into(),
                path: path.to_path_buf(),
                source,
                hint: String::new(),
            })
    }

    fn read_opt(&self, path: &Path) -> Option<String> {
        fs::read_to_string(path).ok().and_then(opt)
    }

    fn read_num(&self, path: &Path) -> Option<u64> {
        self.read_opt(path).and_then(|s| parse_num(&s))
    }

    /// Writes `value` to an attribute, as `echo` would (one write).
    pub fn write(&self, path: &Path, value: &str, hint: &str) -> Result<()> {
        let res = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .and_then(|mut f| f.write_all(value.as_bytes()));
        res.map_err(|source| CliError::Sysfs {
            action: format!("writing {value:?} to"),
            path: path.to_path_buf(),
            source,
            hint: hint.to_string(),
        })
    }

    fn dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut v: Vec<PathBuf> = fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        v.sort();
        Ok(v)
    }

    /// Every fabric's device: PCI adapters (functions with a `fabric/`
    /// directory) first, then the fabric devices backends make themselves
    /// (`/sys/class/devlend/`, e.g. the NTB backend's), each in name order.
    pub fn adapters(&self) -> Vec<PathBuf> {
        let has_fabric = |d: &PathBuf| d.join(FABRIC_HOST_ID).exists();
        let pci = self.dir(&self.path(PCI_DEVICES)).unwrap_or_default();
        let class = self.dir(&self.path(FABRIC_CLASS)).unwrap_or_default();
        pci.into_iter()
            .filter(has_fabric)
            .chain(class.into_iter().filter(has_fabric))
            .collect()
    }

    /// The fabric's device the commands act on: the one named with
    /// [`Sysfs::with_fabric`], or the first of [`Sysfs::adapters`].
    pub fn adapter(&self) -> Result<PathBuf> {
        let all = self.adapters();
        match &self.fabric {
            Some(name) => {
                let names: Vec<String> = all.iter().map(|a| file_name(a)).collect();
                all.into_iter()
                    .find(|a| file_name(a) == *name)
                    .ok_or_else(|| {
                        CliError::not_found(
                            format!("no fabric {name:?} on this host"),
                            if names.is_empty() {
                                HINT_MODULE.to_string()
                            } else {
                                format!("its fabrics are {}", names.join(", "))
                            },
                        )
                    })
            }
            None => all.into_iter().next().ok_or_else(|| {
                CliError::not_found(
                    "no devlend fabric adapter on this host (no PCI device and nothing in /sys/class/devlend has fabric/host_id)",
                    HINT_MODULE,
                )
            }),
        }
    }

    /// This host on the fabric the commands act on, and its peers.
    pub fn fabric(&self) -> Result<Fabric> {
        self.fabric_at(&self.adapter()?)
    }

    /// This host on every fabric it has, as [`Sysfs::adapters`] orders them.
    pub fn fabrics(&self) -> Result<Vec<Fabric>> {
        self.adapters().iter().map(|a| self.fabric_at(a)).collect()
    }

    fn fabric_at(&self, adapter: &Path) -> Result<Fabric> {
        let f = adapter.join(FABRIC);
        let mut peers = Vec::new();
        for p in self.dir(&f.join(PEERS)).unwrap_or_default() {
            let Some(host_id) = parse_num(&file_name(&p)) else {
                continue;
            };
            peers.push(Peer {
                host_id: host_id as u32,
                name: self.read_opt(&p.join(PEER_NAME)).unwrap_or_default(),
                state: self
                    .read_opt(&p.join(PEER_STATE))
                    .unwrap_or_else(|| "unknown".into()),
                proto: self
                    .read_opt(&p.join(PEER_PROTO))
                    .and_then(|s| parse_num(&s))
                    .unwrap_or(0) as u32,
                window: self.read_opt(&p.join(PEER_WINDOW)),
                heartbeat_age_ms: self
                    .read_opt(&p.join(PEER_HEARTBEAT_AGE_MS))
                    .and_then(|s| parse_num(&s)),
                answers: self.read_num(&p.join(PEER_ANSWERS)),
                answer_ns: self.read_num(&p.join(PEER_ANSWER_NS)),
            });
        }
        peers.sort_by_key(|p| p.host_id);
        let host_id = self.read(&f.join(HOST_ID))?;
        Ok(Fabric {
            adapter: file_name(adapter),
            host_id: parse_num(&host_id).unwrap_or(u64::MAX) as u32,
            hostname: self.read_opt(&self.path(HOSTNAME)).unwrap_or_default(),
            fabric_id: self.read_opt(&f.join(FABRIC_ID)).unwrap_or_default(),
            proto: self
                .read_opt(&f.join(FABRIC_PROTO))
                .and_then(|s| parse_num(&s))
                .unwrap_or(0) as u32,
            peers,
        })
    }

    fn lent(&self, dev: &Path) -> Option<Lent> {
        let d = dev.join(LENT);
        let dev_id = parse_num(&self.read_opt(&d.join(LENT_DEV_ID))?)? as u32;
        Some(Lent {
            dev_id,
            state: self
                .read_opt(&d.join(LENT_STATE))
                .unwrap_or_else(|| "unknown".into()),
            borrower: self
                .read_opt(&d.join(LENT_BORROWER))
                .and_then(|s| parse_num(&s))
                .map(|b| b as u32),
            dma_mapped_bytes: self
                .read_opt(&d.join(LENT_DMA_MAPPED_BYTES))
                .and_then(|s| parse_num(&s))
                .unwrap_or(0),
            irq_vectors: self
                .read_opt(&d.join(LENT_IRQ_VECTORS))
                .and_then(|s| parse_num(&s))
                .unwrap_or(0) as u32,
            irq_fires: self.read_num(&d.join(LENT_IRQ_FIRES)),
            allowed_hosts: self.read_opt(&d.join(LENT_ALLOWED_HOSTS)),
        })
    }

    fn local_device(&self, d: &Path) -> LocalDevice {
        let link_name = |l: &str| fs::read_link(d.join(l)).ok().map(|p| file_name(&p));
        let driver = link_name(PCI_DRIVER);
        LocalDevice {
            address: file_name(d),
            vendor: self.read_opt(&d.join(PCI_VENDOR)).unwrap_or_default(),
            device: self.read_opt(&d.join(PCI_DEVICE)).unwrap_or_default(),
            class: self.read_opt(&d.join(PCI_CLASS)).unwrap_or_default(),
            fabric: driver.as_deref() == Some(FABRIC_DRIVER) || d.join(FABRIC_HOST_ID).exists(),
            driver,
            iommu_group: link_name(PCI_IOMMU_GROUP).and_then(|g| g.parse().ok()),
            lent: self.lent(d),
            physfn: link_name(PCI_PHYSFN),
            sriov_numvfs: self.read_num(&d.join(PCI_SRIOV_NUMVFS)).map(|n| n as u32),
        }
    }

    /// Local PCI functions that could be lent (bridges left out) or are lent.
    pub fn local_devices(&self, all: bool) -> Result<Vec<LocalDevice>> {
        let pci = self.path(PCI_DEVICES);
        let devs = self.dir(&pci).map_err(|source| CliError::Sysfs {
            action: "listing".into(),
            path: pci.clone(),
            source,
            hint: "is sysfs mounted?".into(),
        })?;
        Ok(devs
            .iter()
            .map(|d| self.local_device(d))
            .filter(|d| {
                let class = parse_num(&d.class).unwrap_or(0);
                d.lent.is_some() || all || class >> 16 != 0x06
            })
            .collect())
    }

    fn pci_device(&self, bdf: &str) -> Result<PathBuf> {
        check_bdf(bdf)?;
        let d = self.path(PCI_DEVICES).join(bdf);
        if !d.exists() {
            return Err(CliError::not_found(
                format!("no PCI device {bdf} on this host"),
                "list the candidates with `devlend devices`",
            ));
        }
        Ok(d)
    }

    fn lender_file(&self, name: &str) -> Result<PathBuf> {
        let p = self.path(LENDER_DRIVER).join(name);
        if !p.exists() {
            return Err(CliError::not_found(
                format!(
                    "the devlend lender is not loaded here ({} is missing)",
                    p.display()
                ),
                HINT_LENDER,
            ));
        }
        Ok(p)
    }

    /// Lends a local device.
    pub fn lend(&self, bdf: &str) -> Result<LocalDevice> {
        let d = self.pci_device(bdf)?;
        if self.local_device(&d).fabric {
            return Err(CliError::usage(format!(
                "{bdf} is part of the fabric (the adapter or a memory window); lend a device from `devlend devices` whose state is not \"fabric\""
            )));
        }
        if let Some(l) = self.lent(&d) {
            return Err(CliError::busy(
                format!("{bdf} is already lent (dev_id {}, {})", l.dev_id, l.state),
                "nothing to do; `devlend unlend` takes it back",
            ));
        }
        // The lender refuses a PF with VFs enabled (lender/driver.c
        // dl_lender_vfs_check(), the authority), but only with EBUSY, which
        // it also gives for other reasons, and its reason goes to dmesg.
        // Asking first says how many VFs and what to do instead; the rule
        // is the kernel's (tests/abi.rs checks it is), and a PF whose VFs
        // appear between this check and the write gets the same message
        // from the kernel's answer below.
        let sriov_refusal = |n: u64| {
            CliError::busy(
                format!("{bdf} is an SR-IOV physical function with {n} VFs enabled"),
                "lend its VFs one by one (`devlend devices` lists them as vf:<pf>); the PF stays with its driver. To lend the PF whole, disable its VFs first (echo 0 > sriov_numvfs)",
            )
        };
        let numvfs = || self.read_num(&d.join(PCI_SRIOV_NUMVFS)).filter(|&n| n > 0);
        if let Some(n) = numvfs() {
            return Err(sriov_refusal(n));
        }
        let f = self.lender_file(LEND)?;
        self.write(
            &f,
            bdf,
            "the lender needs the device alone in its IOMMU group behind an IOMMU (intel_iommu=on); `dmesg | grep devlend` says why it refused",
        )
        .map_err(|e| match (&e, numvfs()) {
            (CliError::Sysfs { source, .. }, Some(n))
                if source.raw_os_error() == Some(libc::EBUSY) =>
            {
                sriov_refusal(n)
            }
            _ => e,
        })?;
        Ok(self.local_device(&d))
    }

    /// Sets the hosts a lent device is lent to; others stop seeing it (a
    /// holder keeps it until it returns it).
    pub fn set_allowed_hosts(&self, bdf: &str, hosts: &Hosts) -> Result<LocalDevice> {
        let d = self.pci_device(bdf)?;
        if self.lent(&d).is_none() {
            return Err(CliError::not_found(
                format!("{bdf} is not lent"),
                "lend it first: `devlend lend`",
            ));
        }
        let f = d.join(LENT).join(LENT_ALLOWED_HOSTS);
        if !f.exists() {
            return Err(CliError::not_found(
                format!(
                    "the loaded lender cannot restrict borrowers ({} is missing)",
                    f.display()
                ),
                "load the devlend_lender of this version",
            ));
        }
        self.write(&f, &hosts.to_sysfs(), "host ids are 0 to 7")?;
        Ok(self.local_device(&d))
    }

    /// Takes a lent device back; `force` even from a borrower.
    pub fn unlend(&self, bdf: &str, force: bool) -> Result<LocalDevice> {
        let d = self.pci_device(bdf)?;
        let Some(l) = self.lent(&d) else {
            return Err(CliError::not_found(
                format!("{bdf} is not lent"),
                "`devlend devices` shows what is lent",
            ));
        };
        let f = self.lender_file(UNLEND)?;
        let value = if force {
            format!("{bdf} force")
        } else {
            bdf.to_string()
        };
        self.write(&f, &value, "").map_err(|e| match e {
            CliError::Sysfs { ref source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
                CliError::busy(
                    format!(
                        "{bdf} is borrowed by host {}",
                        l.borrower.map_or("?".into(), |b| b.to_string())
                    ),
                    "wait for the borrower to let go, or `devlend unlend --force` (its guest sees the device fail)",
                )
            }
            e => e,
        })?;
        Ok(self.local_device(&d))
    }

    /// Remote devices, with the local mdevs that target each.
    pub fn remotes(&self) -> Result<Vec<Remote>> {
        let adapter = self.adapter()?;
        let mdevs = self.mdevs().unwrap_or_default();
        let mut out = Vec::new();
        for r in self.dir(&adapter.join(FABRIC_REMOTE)).unwrap_or_default() {
            let id = file_name(&r);
            let rd = |a: &str| self.read_opt(&r.join(a)).unwrap_or_default();
            out.push(Remote {
                lender: rd(REMOTE_LENDER),
                name: rd(REMOTE_NAME),
                vendor: rd(REMOTE_VENDOR),
                device: rd(REMOTE_DEVICE),
                class: rd(REMOTE_CLASS),
                state: rd(REMOTE_STATE),
                borrower: self
                    .read_opt(&r.join(REMOTE_BORROWER))
                    .and_then(|s| parse_num(&s))
                    .map(|b| b as u32),
                mdevs: mdevs
                    .iter()
                    .filter(|m| m.remote_device.as_deref() == Some(id.as_str()))
                    .map(|m| m.uuid.clone())
                    .collect(),
                pf: self.read_opt(&r.join(REMOTE_PF)),
                id,
            });
        }
        Ok(out)
    }

    /// Finds a remote device by `<host-id>:<dev_id>` or `<lender>/<pci-address>`.
    pub fn find_remote(&self, spec: &str) -> Result<Remote> {
        let remotes = self.remotes()?;
        remotes
            .into_iter()
            .find(|r| {
                r.id == spec
                    || spec
                        .split_once('/')
                        .is_some_and(|(l, n)| l == r.lender && n == r.name)
            })
            .ok_or_else(|| {
                CliError::not_found(
                    format!("no remote device {spec:?}"),
                    "`devlend remote` lists them as <host-id>:<dev_id> and <lender>/<pci-address>; is the lender up and the device lent?",
                )
            })
    }

    /// The adapter's devlend mdev types.
    pub fn mdev_types(&self) -> Result<Vec<MdevType>> {
        let adapter = self.adapter()?;
        let dir = adapter.join(MDEV_SUPPORTED_TYPES);
        let types = self.dir(&dir).map_err(|_| {
            CliError::not_found(
                format!("the adapter {} has no mdev types", file_name(&adapter)),
                "the borrower registers them: load it (modprobe devlend_borrower) and check `dmesg`",
            )
        })?;
        Ok(types
            .iter()
            .filter(|t| file_name(t).starts_with(TYPE_PREFIX))
            .map(|t| MdevType {
                id: file_name(t),
                name: self.read_opt(&t.join(TYPE_NAME)).unwrap_or_default(),
                description: self.read_opt(&t.join(TYPE_DESCRIPTION)).unwrap_or_default(),
                device_api: self.read_opt(&t.join(TYPE_DEVICE_API)).unwrap_or_default(),
                available_instances: self
                    .read_opt(&t.join(TYPE_AVAILABLE_INSTANCES))
                    .and_then(|s| parse_num(&s))
                    .unwrap_or(0) as u32,
            })
            .collect())
    }

    /// Resolves `nvme` or `devlend-nvme` to a type directory.
    pub fn find_type(&self, name: &str) -> Result<(PathBuf, MdevType)> {
        let adapter = self.adapter()?;
        let id = if name.starts_with(TYPE_PREFIX) {
            name.to_string()
        } else {
            format!("{TYPE_PREFIX}{name}")
        };
        let t = self
            .mdev_types()?
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| {
                CliError::not_found(
                    format!("no mdev type {id}"),
                    "`devlend mdev types` lists them (devlend-any, devlend-nvme, devlend-net)",
                )
            })?;
        Ok((adapter.join(MDEV_SUPPORTED_TYPES).join(&id), t))
    }

    fn mdev(&self, d: &Path) -> Mdev {
        let uuid = file_name(d);
        let parent = fs::canonicalize(d)
            .ok()
            .and_then(|p| p.parent().map(file_name));
        Mdev {
            mdev_type: fs::read_link(d.join(MDEV_TYPE)).ok().map(|p| file_name(&p)),
            parent,
            remote_device: self.read_opt(&d.join(MDEV_REMOTE_DEVICE)),
            state: self.read_opt(&d.join(MDEV_STATE)),
            iommu_group: fs::read_link(d.join(MDEV_IOMMU_GROUP))
                .ok()
                .and_then(|p| file_name(&p).parse().ok()),
            migration: self.read_opt(&d.join(MDEV_MIGRATION)),
            sysfs_path: format!("/{MDEV_DEVICES}/{uuid}"),
            uuid,
        }
    }

    /// This host's devlend mdevs (other mdevs are left out).
    pub fn mdevs(&self) -> Result<Vec<Mdev>> {
        let dir = self.path(MDEV_DEVICES);
        Ok(self
            .dir(&dir)
            .unwrap_or_default()
            .iter()
            .map(|d| self.mdev(d))
            .filter(|m| {
                m.mdev_type
                    .as_deref()
                    .is_some_and(|t| t.starts_with(TYPE_PREFIX))
                    || m.remote_device.is_some()
            })
            .collect())
    }

    /// The mdev `uuid`, which must exist.
    pub fn find_mdev(&self, uuid: &str) -> Result<Mdev> {
        check_uuid(uuid)?;
        let uuid = uuid.to_ascii_lowercase();
        let d = self.path(MDEV_DEVICES).join(&uuid);
        if !d.exists() {
            return Err(CliError::not_found(
                format!("no mdev {uuid} on this host"),
                "`devlend mdev list` shows the mdevs; `devlend mdev create` makes one",
            ));
        }
        Ok(self.mdev(&d))
    }

    /// Creates an mdev of `type_dir` as mdevctl does: writes the UUID to
    /// `create`, then the attributes in order, and removes the mdev again if
    /// one of them fails. Like mdevctl it refuses when the type has no
    /// instance available: every mdev takes one when it is created.
    pub fn mdev_create(
        &self,
        type_dir: &Path,
        mtype: &MdevType,
        uuid: &str,
        remote: Option<&str>,
    ) -> Result<Mdev> {
        match self.mdev_create_attempt(type_dir, mtype, uuid, remote)? {
            Attempt::Made(m) => Ok(m),
            Attempt::Taken(e) => Err(e),
        }
    }

    /// One try at [`Sysfs::mdev_create`] that tells a device taken by
    /// another request (no instance left, or the kernel refusing the
    /// create or the pinning with ENOSPC or EBUSY) from other failures:
    /// the former are `Attempt::Taken`, with the error a caller that does
    /// not wait reports.
    fn mdev_create_attempt(
        &self,
        type_dir: &Path,
        mtype: &MdevType,
        uuid: &str,
        remote: Option<&str>,
    ) -> Result<Attempt> {
        check_uuid(uuid)?;
        let none_available = || {
            CliError::busy(
                format!("no {} device is available (available_instances is 0)", mtype.id),
                "each mdev takes an available device of its type when it is created; `devlend mdev list` shows this host's mdevs (remove an idle one), `devlend remote` which remote devices exist and who holds them; lend one on its host with `devlend lend`, or queue for one with `devlend mdev create --wait SECONDS`",
            )
        };
        if mtype.available_instances == 0 {
            return Ok(Attempt::Taken(none_available()));
        }
        let d = self.new_mdev_dir(uuid)?;
        if let Err(e) = self.write(
            &type_dir.join(TYPE_CREATE),
            uuid,
            "`dmesg` says why the borrower refused",
        ) {
            return match e {
                // Taken since the count was read.
                CliError::Sysfs { ref source, .. }
                    if source.raw_os_error() == Some(libc::ENOSPC) =>
                {
                    Ok(Attempt::Taken(none_available()))
                }
                CliError::Sysfs { ref source, .. }
                    if source.raw_os_error() == Some(libc::EBUSY) =>
                {
                    Ok(Attempt::Taken(e))
                }
                e => Err(e),
            };
        }
        wait_for_mdev(&d, type_dir, uuid)?;
        if let Some(spec) = remote {
            if let Err(e) = self.write(
                &d.join(MDEV_REMOTE_DEVICE),
                spec,
                "the mdev was removed again; `devlend remote` shows whether the device is free, of this type, and not the target of another mdev of this host (EBUSY)",
            ) {
                let mut e = e;
                if let Err(kept) = self.remove_unless_open(&d, uuid) {
                    if let CliError::Sysfs { ref mut hint, .. } = e {
                        *hint = format!(
                            "the mdev was not removed again ({kept}); `devlend mdev remove {uuid}` once no VMM has it open"
                        );
                    }
                }
                return match e {
                    // Another mdev of this host took the device in between.
                    CliError::Sysfs { ref source, .. }
                        if matches!(source.raw_os_error(), Some(libc::EBUSY | libc::ENOSPC)) =>
                    {
                        Ok(Attempt::Taken(e))
                    }
                    e => Err(e),
                };
            }
        }
        Ok(Attempt::Made(self.mdev(&d)))
    }

    /// Where the mdev `uuid`, about to be created, will be; refused when
    /// an mdev of that UUID exists already.
    pub fn new_mdev_dir(&self, uuid: &str) -> Result<PathBuf> {
        let d = self.path(MDEV_DEVICES).join(uuid);
        if d.exists() {
            return Err(CliError::busy(
                format!("an mdev {uuid} exists already"),
                "pick another UUID, or leave --uuid out",
            ));
        }
        Ok(d)
    }

    /// Creates the mdev `uuid` of `type_dir` as the live migration
    /// destination for remote device `r`, which the migration's source
    /// (another host) may hold: names it in the device's `incoming_mdev`
    /// first, so that the kernel gives it that device rather than a free
    /// one of its type (there is none while the source holds the only
    /// one), then creates it. Checks that it came out `incoming` for `r`,
    /// and removes it again otherwise.
    pub fn mdev_create_incoming(&self, type_dir: &Path, uuid: &str, r: &Remote) -> Result<Mdev> {
        check_uuid(uuid)?;
        let d = self.new_mdev_dir(uuid)?;
        let named = self
            .adapter()?
            .join(FABRIC_REMOTE)
            .join(&r.id)
            .join(REMOTE_INCOMING_MDEV);
        if !named.exists() {
            return Err(CliError::not_found(
                format!("remote device {} has no incoming_mdev", r.id),
                "the borrower module predates creating a migration's destination for a held device: load this version's devlend_borrower",
            ));
        }
        self.write(&named, uuid, "")?;
        let made = self
            .write(
                &type_dir.join(TYPE_CREATE),
                uuid,
                "`dmesg` says why the borrower refused (EBUSY: another mdev of this host targets the device)",
            )
            .map_err(|e| match e {
                CliError::Sysfs { ref source, .. }
                    if source.raw_os_error() == Some(libc::EOPNOTSUPP) =>
                {
                    CliError::not_found(
                        format!("remote device {} cannot migrate to this host", r.id),
                        "this kernel's VFIO cannot report a device's dirty pages (it needs CONFIG_IOMMUFD_DRIVER, which Debian's 6.12 lacks; docs/migration.md)",
                    )
                }
                e => e,
            })
            .and_then(|()| wait_for_mdev(&d, type_dir, uuid));
        if let Err(e) = made {
            // Taken back, or a later mdev of that UUID would take it.
            let _ = self.write(&named, "none", "");
            return Err(e);
        }
        let m = self.mdev(&d);
        if m.remote_device.as_deref() != Some(r.id.as_str())
            || m.migration.as_deref() != Some("incoming")
        {
            let kept = self.remove_unless_open(&d, uuid);
            return Err(CliError::not_found(
                format!(
                    "mdev {uuid} came out for {} ({}), not as {}'s migration destination{}",
                    m.remote_device.as_deref().unwrap_or("?"),
                    m.migration.as_deref().unwrap_or("no migration"),
                    r.id,
                    if kept.is_ok() { "; removed again" } else { "" }
                ),
                "`dmesg` may say why",
            ));
        }
        Ok(m)
    }

    /// Why an mdev of type `mtype` (for the remote device named `spec`,
    /// found as `device`, if one is named) cannot be created now, or `None`
    /// when it can be tried: the device is not offered, not `available`
    /// on its lender, or the target of another mdev of this host; or the
    /// type has no available instance. Worded to follow "did not become
    /// free: ".
    pub fn not_free_because(
        mtype: &MdevType,
        spec: Option<&str>,
        device: Option<&Remote>,
    ) -> Option<String> {
        match (spec, device) {
            (Some(_), None) => {
                return Some("it is not offered now (`devlend remote` does not list it)".into())
            }
            (_, Some(r)) if !r.mdevs.is_empty() => {
                return Some(format!(
                    "it ({}) is the target of mdev {} on this host",
                    r.id,
                    r.mdevs.join(", ")
                ))
            }
            (_, Some(r)) if r.state != "available" => {
                return Some(format!(
                    "it ({}) is {}{}",
                    r.id,
                    r.state,
                    r.borrower
                        .map_or(String::new(), |b| format!(" by host {b}"))
                ))
            }
            _ => {}
        }
        (mtype.available_instances == 0).then(|| match spec {
            Some(_) => format!(
                "its type {} has no available instance (available_instances is 0)",
                mtype.id
            ),
            None => format!(
                "every {} device is held by another borrower or targeted by an mdev of this host (available_instances is 0)",
                mtype.id
            ),
        })
    }

    /// `mdev create --wait`: creates an mdev of `type_name` (pinned to the
    /// remote device `device`, `<host-id>:<dev_id>` or
    /// `<lender>/<pci-address>`, if given) as soon as one is free, looking
    /// again every [`WAIT_POLL`] for up to `wait`. Free means: the type has
    /// an available instance and, with `device`, that device is offered,
    /// `available` on its lender and not the target of another mdev of
    /// this host. sysfs is read afresh each time (a device one borrower
    /// returns goes to whichever request asks first); a create the kernel
    /// refuses because another request took the device in between is a
    /// lost race, not a failure, and the wait goes on. After `wait`: a
    /// [`CliError::Timeout`] that names the type or device.
    pub fn mdev_create_waiting(
        &self,
        type_name: &str,
        device: Option<&str>,
        uuid: &str,
        wait: Duration,
    ) -> Result<Created> {
        let deadline = Instant::now() + wait;
        loop {
            let (dir, mtype) = self.find_type(type_name)?;
            let remote = match device {
                Some(spec) => match self.find_remote(spec) {
                    Ok(r) => Some(r),
                    // Not offered at the moment (it may come back).
                    Err(CliError::NotFound { .. }) => None,
                    Err(e) => return Err(e),
                },
                None => None,
            };
            let why = match Self::not_free_because(&mtype, device, remote.as_ref()) {
                Some(why) => why,
                None => match self.mdev_create_attempt(
                    &dir,
                    &mtype,
                    uuid,
                    remote.as_ref().map(|r| r.id.as_str()),
                )? {
                    Attempt::Made(mdev) => {
                        return Ok(Created {
                            mtype,
                            remote,
                            mdev,
                        })
                    }
                    Attempt::Taken(e) => {
                        format!("the kernel gave it to another request first ({e})")
                    }
                },
            };
            let now = Instant::now();
            if now >= deadline {
                // Display of a float: "1" for 1 s, "0.5" for half a second.
                let secs = wait.as_secs_f64();
                return Err(match device {
                    Some(spec) => CliError::Timeout {
                        msg: format!(
                            "remote device {spec} did not become free within {secs} s: {why}"
                        ),
                        hint: "`devlend remote` shows who holds it and which mdev of this host targets it; wait longer with a larger --wait, or take any free device of its type (--type without --device)".into(),
                    },
                    None => CliError::Timeout {
                        msg: format!("no {} device became free within {secs} s: {why}", mtype.id),
                        hint: "`devlend remote` shows who holds the remote devices and which mdevs of this host target them, `devlend mdev list` this host's mdevs (remove an idle one); wait longer with a larger --wait, or lend another device of the type on its host".into(),
                    },
                });
            }
            std::thread::sleep(WAIT_POLL.min(deadline - now));
        }
    }

    /// Makes the next open of the mdev `uuid` a live migration's
    /// destination (`incoming`: it takes its device over from the
    /// migration's source when the guest's state arrives), or not.
    pub fn mdev_set_incoming(&self, uuid: &str, incoming: bool) -> Result<Mdev> {
        let m = self.find_mdev(uuid)?;
        let d = self.path(MDEV_DEVICES).join(&m.uuid);
        if m.migration.is_none() {
            return Err(CliError::not_found(
                format!("mdev {} has no migration attribute", m.uuid),
                "the borrower module predates live migration: load this version's devlend_borrower",
            ));
        }
        if m.migration.as_deref() == Some("unsupported") {
            return Err(CliError::not_found(
                format!("mdev {} cannot migrate on this host", m.uuid),
                "this kernel's VFIO cannot report a device's dirty pages (it needs CONFIG_IOMMUFD_DRIVER, which Debian's 6.12 lacks; docs/migration.md)",
            ));
        }
        if incoming && m.remote_device.as_deref().map_or(true, |r| r == "any") {
            return Err(CliError::usage(format!(
                "mdev {} stands for any device: a migration's destination must name its source's (`devlend mdev create --device ... --incoming`)",
                m.uuid
            )));
        }
        self.write(
            &d.join(MDEV_MIGRATION),
            if incoming { "incoming" } else { "none" },
            "refused while a VMM has the mdev open; `dmesg` may say why",
        )?;
        Ok(self.mdev(&d))
    }

    /// Removes an mdev, unless a VMM has it open (see
    /// [`Sysfs::remove_unless_open`]).
    pub fn mdev_remove(&self, uuid: &str) -> Result<()> {
        let m = self.find_mdev(uuid)?;
        self.remove_unless_open(&self.path(MDEV_DEVICES).join(&m.uuid), &m.uuid)
    }

    /// Whether a VMM has the mdev in `d` open: its `open`, or `None` when
    /// there is none to read (a borrower module older than `open`, another
    /// parent's mdev, or an mdev whose removal has begun: the kernel takes
    /// the driver's attributes away first).
    pub fn mdev_open(&self, d: &Path) -> Option<bool> {
        self.read_num(&d.join(MDEV_OPEN)).map(|n| n != 0)
    }

    /// Writes `1` to the `remove` of the mdev `uuid` in `d`, unless it
    /// says it is open (exit 4, nothing written). The kernel does not
    /// refuse the remove of an open mdev: it asks the VMM to let go (QEMU
    /// unplugs the device from the running guest) and the write waits,
    /// past any signal, until the VMM has closed it (forever under a VMM
    /// that does not answer, like cloud-hypervisor). Reading `open` and
    /// writing `remove` are two steps: a VMM that opens the mdev in
    /// between gets the kernel's behaviour.
    pub fn remove_unless_open(&self, d: &Path, uuid: &str) -> Result<()> {
        if self.mdev_open(d) == Some(true) {
            return Err(CliError::busy(
                format!("mdev {uuid} is open in a VMM"),
                HINT_MDEV_OPEN,
            ));
        }
        self.write(&d.join(MDEV_REMOVE), "1", "`dmesg` may say why")
            .map_err(|e| match e {
                CliError::Sysfs { ref source, .. }
                    if source.raw_os_error() == Some(libc::EBUSY) =>
                {
                    CliError::busy(format!("mdev {uuid} is in use"), HINT_MDEV_OPEN)
                }
                // mdev core: a remove of this mdev is under way.
                CliError::Sysfs { ref source, .. }
                    if source.raw_os_error() == Some(libc::EAGAIN) =>
                {
                    CliError::busy(
                        format!("mdev {uuid} is being removed already"),
                        "an earlier remove waits until the VMM that has it open closes it; detach the device from the guest or stop the VM",
                    )
                }
                e => e,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses() {
        assert!(check_bdf("0000:01:00.0").is_ok());
        assert!(check_bdf("0000:00:1f.7").is_ok());
        for bad in [
            "01:00.0",
            "0000:01:00.8",
            "0000:01:00:0",
            "0000:0g:00.0",
            "",
            "0000:01:00.00",
        ] {
            assert!(
                matches!(check_bdf(bad), Err(CliError::Usage { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn uuids() {
        assert!(check_uuid("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001").is_ok());
        assert!(check_uuid("83B8F4F2-509F-382F-3C1E-E6BFE0FA1001").is_ok());
        for bad in [
            "83b8f4f2509f382f3c1ee6bfe0fa1001",
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100",
            "x3b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
        ] {
            assert!(check_uuid(bad).is_err(), "{bad}");
        }
        let a = new_uuid();
        let b = new_uuid();
        assert_ne!(a, b);
        assert!(check_uuid(&a).is_ok(), "{a}");
        assert_eq!(&a[14..15], "4", "version 4: {a}");
        assert!("89ab".contains(&a[19..20]), "variant: {a}");
    }

    #[test]
    fn numbers_in_sysfs_spellings() {
        assert_eq!(parse_num("0x010802\n"), Some(0x010802));
        assert_eq!(parse_num(" 42 "), Some(42));
        assert_eq!(parse_num(""), None);
        assert_eq!(parse_num("up"), None);
    }

    #[test]
    fn what_a_waiting_create_waits_for() {
        let t = MdevType {
            id: "devlend-nvme".into(),
            name: String::new(),
            description: String::new(),
            device_api: "vfio-pci".into(),
            available_instances: 1,
        };
        let r = Remote {
            id: "0:1".into(),
            lender: "lender".into(),
            name: "0000:01:00.0".into(),
            vendor: "0x1b36".into(),
            device: "0x0010".into(),
            class: "0x010802".into(),
            state: "available".into(),
            borrower: None,
            mdevs: Vec::new(),
            pf: None,
        };
        assert_eq!(Sysfs::not_free_because(&t, None, None), None);
        assert_eq!(Sysfs::not_free_because(&t, Some("0:1"), Some(&r)), None);
        let held = Remote {
            state: "borrowed".into(),
            borrower: Some(2),
            ..r.clone()
        };
        assert_eq!(
            Sysfs::not_free_because(&t, Some("0:1"), Some(&held)).as_deref(),
            Some("it (0:1) is borrowed by host 2")
        );
        let targeted = Remote {
            mdevs: vec!["u1".into()],
            ..r.clone()
        };
        assert_eq!(
            Sysfs::not_free_because(&t, Some("0:1"), Some(&targeted)).as_deref(),
            Some("it (0:1) is the target of mdev u1 on this host")
        );
        assert!(Sysfs::not_free_because(&t, Some("0:1"), None)
            .unwrap()
            .contains("not offered now"));
        let none = MdevType {
            available_instances: 0,
            ..t
        };
        assert!(Sysfs::not_free_because(&none, None, None)
            .unwrap()
            .contains("every devlend-nvme device is held by another borrower"));
        assert!(Sysfs::not_free_because(&none, Some("0:1"), Some(&r))
            .unwrap()
            .contains("its type devlend-nvme has no available instance"));
    }

    #[test]
    fn paths_stay_under_the_root() {
        let s = Sysfs::new("/tmp/x");
        assert_eq!(
            s.path("/sys/bus/mdev"),
            PathBuf::from("/tmp/x/sys/bus/mdev")
        );
        assert_eq!(s.path("sys/bus/mdev"), PathBuf::from("/tmp/x/sys/bus/mdev"));
    }
}
