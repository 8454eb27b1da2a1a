//! Every sysfs path the devlend command reads or writes, named once.
//!
//! [`DEVLEND`] are the files devlend's modules create; each is declared in
//! `mdev-kmod/Documentation/ABI/testing/sysfs-devlend`, and a test here
//! checks that it is (and `tests/abi.rs` that the C sources define what
//! that file declares). [`LINUX`] are the files of Linux's PCI and mdev
//! cores the command uses, from Linux's own Documentation/ABI. The rest of
//! the crate joins these names and spells no path of its own (a test
//! checks that too). The mdev types are generated from the borrower's
//! table, `mdev-kmod/include/uapi/devlend_mdev_types.h` (build.rs).

/// A path of this module: the name of its constant, and where it is, as
/// the ABI files spell it (`<...>` stands for any one name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiPath {
    /// The constant's name.
    pub name: &'static str,
    /// The full path, placeholders in `<>`.
    pub what: &'static str,
}

/// One of devlend's mdev types (`devlend_mdev_types.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdevTypeDef {
    /// The type's name; its directory is [`TYPE_PREFIX`] + this.
    pub name: &'static str,
    /// Its directory's name, [`TYPE_PREFIX`] + [`MdevTypeDef::name`].
    pub dir: &'static str,
    /// Its `name` attribute.
    pub pretty_name: &'static str,
    /// Its `description` attribute.
    pub description: &'static str,
    /// Bits of a device's class code (class << 8 | prog-if) compared.
    pub class_mask: u32,
    /// What they must be.
    pub class_val: u32,
}

impl MdevTypeDef {
    /// Whether a remote device of class code `class` is of this type.
    pub fn matches(&self, class: u32) -> bool {
        class & self.class_mask == self.class_val
    }
}

include!(concat!(env!("OUT_DIR"), "/mdev_types.rs"));

/// The type a remote device of class code `class` gets by default: the
/// most specific one it matches (the mask with most bits), as a directory
/// name (`devlend-nvme`).
pub fn type_for_class(class: u32) -> &'static str {
    MDEV_TYPES
        .iter()
        .filter(|t| t.matches(class))
        .max_by_key(|t| t.class_mask.count_ones())
        .expect("one type matches every class")
        .dir
}

/// Declares path constants relative to their directory (`$rel`) and a
/// table of them with their full paths (`$dir` + `$rel`).
macro_rules! paths {
    ($(#[$tm:meta])* $table:ident; $($(#[$m:meta])* $name:ident = $dir:literal $rel:literal;)*) => {
        $($(#[$m])* pub const $name: &str = $rel;)*
        $(#[$tm])*
        pub const $table: &[AbiPath] = &[
            $(AbiPath { name: stringify!($name), what: concat!($dir, $rel) },)*
        ];
    };
}

paths! {
    /// The paths devlend's modules create.
    DEVLEND;
    /// Fabric devices a backend makes itself (the NTB backend's
    /// `ntb-<NTB device>`), besides PCI adapters.
    FABRIC_CLASS = "/" "sys/class/devlend";
    /// Where the lender driver's control files are.
    LENDER_DRIVER = "/" "sys/bus/pci/drivers/devlend-lender";
    /// Lends the device written.
    LEND = "/sys/bus/pci/drivers/devlend-lender/" "lend";
    /// Takes back the device written.
    UNLEND = "/sys/bus/pci/drivers/devlend-lender/" "unlend";
    /// A fabric device's directory of the fabric.
    FABRIC = "/sys/bus/pci/devices/<adapter>/" "fabric";
    /// The file that makes a device a fabric device.
    FABRIC_HOST_ID = "/sys/bus/pci/devices/<adapter>/" "fabric/host_id";
    /// This host's id, in [`FABRIC`].
    HOST_ID = "/sys/bus/pci/devices/<adapter>/fabric/" "host_id";
    /// The fabric id, in [`FABRIC`].
    FABRIC_ID = "/sys/bus/pci/devices/<adapter>/fabric/" "fabric_id";
    /// The protocol spoken, in [`FABRIC`].
    FABRIC_PROTO = "/sys/bus/pci/devices/<adapter>/fabric/" "proto";
    /// The peers' directories, in [`FABRIC`].
    PEERS = "/sys/bus/pci/devices/<adapter>/fabric/" "peers";
    /// A peer's name.
    PEER_NAME = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "name";
    /// A peer's link.
    PEER_STATE = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "state";
    /// A peer's protocol.
    PEER_PROTO = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "proto";
    /// The window onto a peer.
    PEER_WINDOW = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "window";
    /// A peer's heartbeat age.
    PEER_HEARTBEAT_AGE_MS = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "heartbeat_age_ms";
    /// A peer's answers.
    PEER_ANSWERS = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "answers";
    /// Their round trips.
    PEER_ANSWER_NS = "/sys/bus/pci/devices/<adapter>/fabric/peers/<id>/" "answer_ns";
    /// The remote devices' directories, under a fabric device.
    FABRIC_REMOTE = "/sys/bus/pci/devices/<adapter>/" "fabric/remote";
    /// A remote device's lender.
    REMOTE_LENDER = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "lender";
    /// Its address on the lender.
    REMOTE_NAME = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "name";
    /// Its vendor id.
    REMOTE_VENDOR = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "vendor";
    /// Its device id.
    REMOTE_DEVICE = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "device";
    /// Its class code.
    REMOTE_CLASS = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "class";
    /// Its state.
    REMOTE_STATE = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "state";
    /// Its borrower.
    REMOTE_BORROWER = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "borrower";
    /// Its PF, for a VF.
    REMOTE_PF = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "pf";
    /// The mdev to be created as its live migration destination.
    REMOTE_INCOMING_MDEV = "/sys/bus/pci/devices/<adapter>/fabric/remote/<id>:<dev_id>/" "incoming_mdev";
    /// A lent device's directory.
    LENT = "/sys/bus/pci/devices/<dev>/" "devlend";
    /// Its dev_id, in [`LENT`].
    LENT_DEV_ID = "/sys/bus/pci/devices/<dev>/devlend/" "dev_id";
    /// Its state.
    LENT_STATE = "/sys/bus/pci/devices/<dev>/devlend/" "state";
    /// Its borrower.
    LENT_BORROWER = "/sys/bus/pci/devices/<dev>/devlend/" "borrower";
    /// Its DMA bytes mapped.
    LENT_DMA_MAPPED_BYTES = "/sys/bus/pci/devices/<dev>/devlend/" "dma_mapped_bytes";
    /// Its interrupt vectors.
    LENT_IRQ_VECTORS = "/sys/bus/pci/devices/<dev>/devlend/" "irq_vectors";
    /// Its interrupts relayed.
    LENT_IRQ_FIRES = "/sys/bus/pci/devices/<dev>/devlend/" "irq_fires";
    /// The hosts it is lent to.
    LENT_ALLOWED_HOSTS = "/sys/bus/pci/devices/<dev>/devlend/" "allowed_hosts";
    /// The remote device an mdev stands for.
    MDEV_REMOTE_DEVICE = "/sys/bus/mdev/devices/<uuid>/" "remote_device";
    /// An mdev's state.
    MDEV_STATE = "/sys/bus/mdev/devices/<uuid>/" "state";
    /// Whether a VMM has an mdev open.
    MDEV_OPEN = "/sys/bus/mdev/devices/<uuid>/" "open";
    /// An mdev's live migration: `incoming`, its VFIO migration state, or
    /// `unsupported`; `incoming` or `none` written.
    MDEV_MIGRATION = "/sys/bus/mdev/devices/<uuid>/" "migration";
}

paths! {
    /// The paths of Linux's PCI and mdev cores (and procfs) the command
    /// uses.
    LINUX;
    /// Where PCI functions are.
    PCI_DEVICES = "/" "sys/bus/pci/devices";
    /// Where mdevs are.
    MDEV_DEVICES = "/" "sys/bus/mdev/devices";
    /// This host's name.
    HOSTNAME = "/" "proc/sys/kernel/hostname";
    /// A function's vendor id.
    PCI_VENDOR = "/sys/bus/pci/devices/<dev>/" "vendor";
    /// Its device id.
    PCI_DEVICE = "/sys/bus/pci/devices/<dev>/" "device";
    /// Its class code.
    PCI_CLASS = "/sys/bus/pci/devices/<dev>/" "class";
    /// Its driver (a link).
    PCI_DRIVER = "/sys/bus/pci/devices/<dev>/" "driver";
    /// Its IOMMU group (a link).
    PCI_IOMMU_GROUP = "/sys/bus/pci/devices/<dev>/" "iommu_group";
    /// A VF's PF (a link).
    PCI_PHYSFN = "/sys/bus/pci/devices/<dev>/" "physfn";
    /// A PF's VFs enabled.
    PCI_SRIOV_NUMVFS = "/sys/bus/pci/devices/<dev>/" "sriov_numvfs";
    /// An mdev parent's types.
    MDEV_SUPPORTED_TYPES = "/sys/bus/pci/devices/<adapter>/" "mdev_supported_types";
    /// A type's name.
    TYPE_NAME = "/sys/bus/pci/devices/<adapter>/mdev_supported_types/<type>/" "name";
    /// A type's description.
    TYPE_DESCRIPTION = "/sys/bus/pci/devices/<adapter>/mdev_supported_types/<type>/" "description";
    /// A type's device API.
    TYPE_DEVICE_API = "/sys/bus/pci/devices/<adapter>/mdev_supported_types/<type>/" "device_api";
    /// A type's available instances.
    TYPE_AVAILABLE_INSTANCES = "/sys/bus/pci/devices/<adapter>/mdev_supported_types/<type>/" "available_instances";
    /// Creates an mdev of the type.
    TYPE_CREATE = "/sys/bus/pci/devices/<adapter>/mdev_supported_types/<type>/" "create";
    /// An mdev's type (a link).
    MDEV_TYPE = "/sys/bus/mdev/devices/<uuid>/" "mdev_type";
    /// An mdev's IOMMU group (a link).
    MDEV_IOMMU_GROUP = "/sys/bus/mdev/devices/<uuid>/" "iommu_group";
    /// Removes an mdev.
    MDEV_REMOVE = "/sys/bus/mdev/devices/<uuid>/" "remove";
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// `<...>` replaced by `*`, so names of placeholders do not matter.
    fn normal(path: &str) -> String {
        let mut out = String::new();
        let mut in_ph = false;
        for c in path.chars() {
            match c {
                '<' => {
                    in_ph = true;
                    out.push('*');
                }
                '>' => in_ph = false,
                c if !in_ph => out.push(c),
                _ => {}
            }
        }
        out.trim_end_matches('/').to_string()
    }

    /// The `What:` paths of the ABI file.
    fn declared() -> Vec<String> {
        let p = repo().join("mdev-kmod/Documentation/ABI/testing/sysfs-devlend");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        text.lines()
            .filter_map(|l| l.strip_prefix("What:"))
            .map(|w| normal(w.trim()))
            .collect()
    }

    /// Whether `what` is declared: a file the ABI file names, or a
    /// directory of one.
    fn is_declared(decl: &[String], what: &str) -> bool {
        let w = normal(what);
        decl.iter()
            .any(|d| *d == w || d.starts_with(&format!("{w}/")))
    }

    #[test]
    fn every_path_of_devlend_is_in_the_abi_file() {
        let decl = declared();
        assert!(
            decl.len() > 30,
            "the ABI file declares {} paths",
            decl.len()
        );
        let missing: Vec<_> = DEVLEND
            .iter()
            .filter(|p| !is_declared(&decl, p.what))
            .collect();
        assert!(
            missing.is_empty(),
            "not declared in sysfs-devlend: {missing:#?}"
        );
        for t in MDEV_TYPES {
            let what = format!(
                "/sys/bus/pci/devices/<adapter>/mdev_supported_types/{TYPE_PREFIX}{}",
                t.name
            );
            assert!(
                is_declared(&decl, &what),
                "type {what} is not declared in sysfs-devlend"
            );
        }
    }

    #[test]
    fn linux_paths_are_not_devlends() {
        let decl = declared();
        for p in LINUX {
            // Directories of Linux hold devlend's files; a file is Linux's.
            let w = normal(p.what);
            assert!(
                !decl.contains(&w),
                "{} ({}) is Linux's, not devlend's",
                p.name,
                p.what
            );
        }
    }

    #[test]
    fn the_abi_check_finds_what_is_missing() {
        let decl = declared();
        assert!(is_declared(
            &decl,
            "/sys/bus/pci/devices/<x>/fabric/peers/<y>/state"
        ));
        assert!(is_declared(&decl, "/sys/bus/pci/devices/<x>/devlend"));
        assert!(!is_declared(
            &decl,
            "/sys/bus/pci/devices/<x>/fabric/peers/<y>/stat"
        ));
        assert!(!is_declared(
            &decl,
            "/sys/bus/pci/devices/<x>/devlend/nothing"
        ));
    }

    #[test]
    fn types_follow_the_class() {
        assert_eq!(type_for_class(0x010802), "devlend-nvme");
        assert_eq!(type_for_class(0x020000), "devlend-net");
        assert_eq!(type_for_class(0x028000), "devlend-net");
        assert_eq!(type_for_class(0x030000), "devlend-any");
        assert_eq!(type_for_class(0x010601), "devlend-any");
        assert_eq!(TYPE_PREFIX, "devlend-");
        assert_eq!(MDEV_TYPES.len(), 3);
        for t in MDEV_TYPES {
            assert_eq!(t.dir, format!("{TYPE_PREFIX}{}", t.name));
        }
    }

    /// The crate's sources but this file and the tests: no path of
    /// their own, only the names above (a path spelled elsewhere would
    /// escape the check against the ABI file).
    #[test]
    fn the_code_spells_no_sysfs_path() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![];
        let mut dirs = vec![src];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("abi.rs") {
                    files.push(p);
                }
            }
        }
        let mut found = vec![];
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (i, line) in code.lines().enumerate() {
                let l = line.trim_start();
                if l.starts_with("//") {
                    continue;
                }
                let literal_join = l.match_indices("join(\"").any(|(at, m)| {
                    l[at + m.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic())
                });
                if literal_join
                    || l.contains("path(\"")
                    || l.contains("\"/sys/")
                    || l.contains("\"sys/")
                {
                    found.push(format!("{}:{}: {l}", f.display(), i + 1));
                }
            }
        }
        assert!(
            found.is_empty(),
            "paths spelled outside abi.rs:\n{}",
            found.join("\n")
        );
    }
}
