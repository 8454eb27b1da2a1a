//! A fake sysfs tree like a borrower's and a lender's, in a temp dir,
//! built from the paths the command declares (`devlend::abi`, checked
//! against the ABI file), so the fake and the command cannot disagree on
//! a name. What the kernel would lay out itself (the `/sys/devices` tree
//! and the bus links) is spelled here.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use devlend::abi::*;

pub const ADAPTER: &str = "0000:00:03.0";
pub const UUID: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

pub fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, s).unwrap();
}

pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn adapter(&self) -> PathBuf {
        self.p(&format!("sys/devices/pci0000:00/{ADAPTER}"))
    }

    /// Sets the `open` of mdev `uuid` as the borrower shows a VMM's open
    /// (`true`) or close.
    pub fn set_mdev_open(&self, uuid: &str, open: bool) {
        write(
            &self.adapter().join(uuid).join(MDEV_OPEN),
            if open { "1\n" } else { "0\n" },
        );
    }

    /// Runs devlend against the tree.
    pub fn devlend(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_devlend"))
            .args(args)
            .env("DEVLEND_SYSFS_ROOT", self.root())
            .output()
            .unwrap()
    }

    /// Adds an mdev as the kernel would after a write to `create`.
    pub fn add_mdev(&self, uuid: &str, mtype: &str, remote: &str) {
        let d = self.adapter().join(uuid);
        write(&d.join(MDEV_REMOTE_DEVICE), &format!("{remote}\n"));
        write(&d.join(MDEV_STATE), "idle\n");
        write(&d.join(MDEV_OPEN), "0\n");
        write(&d.join(MDEV_REMOVE), "");
        symlink(
            format!("../mdev_supported_types/{mtype}"),
            d.join(MDEV_TYPE),
        )
        .unwrap();
        symlink("../../../kernel/iommu_groups/12", d.join(MDEV_IOMMU_GROUP)).unwrap();
        fs::create_dir_all(self.p(MDEV_DEVICES)).unwrap();
        symlink(
            format!("../../../devices/pci0000:00/{ADAPTER}/{uuid}"),
            self.p(MDEV_DEVICES).join(uuid),
        )
        .unwrap();
    }
}

fn pci_dev(t: &Tree, bdf: &str, vendor: &str, device: &str, class: &str) -> PathBuf {
    let d = t.p(&format!("sys/devices/pci0000:00/{bdf}"));
    write(&d.join(PCI_VENDOR), &format!("{vendor}\n"));
    write(&d.join(PCI_DEVICE), &format!("{device}\n"));
    write(&d.join(PCI_CLASS), &format!("{class}\n"));
    fs::create_dir_all(t.p(PCI_DEVICES)).unwrap();
    symlink(
        format!("../../../devices/pci0000:00/{bdf}"),
        t.p(PCI_DEVICES).join(bdf),
    )
    .unwrap();
    d
}

/// A borrower (host 1) that sees lender (host 0) up and its NVMe 0:1.
pub fn borrower() -> Tree {
    let t = Tree {
        dir: tempfile::tempdir().unwrap(),
    };
    write(&t.p(HOSTNAME), "borrower\n");
    let a = pci_dev(&t, ADAPTER, "0x1af4", "0x1110", "0x050000");
    pci_dev(&t, "0000:00:01.0", "0x8086", "0x29c0", "0x060000");
    let f = a.join(FABRIC);
    write(&f.join(HOST_ID), "1\n");
    write(&f.join(FABRIC_ID), "00c0ffee00c0ffee\n");
    write(&f.join(FABRIC_PROTO), "1\n");
    write(&f.join(PEERS).join("0").join(PEER_STATE), "up\n");
    write(&f.join(PEERS).join("0").join(PEER_NAME), "lender\n");
    write(&f.join(PEERS).join("0").join(PEER_PROTO), "1\n");
    write(&f.join(PEERS).join("0").join(PEER_WINDOW), "0000:00:04.0\n");
    write(
        &f.join(PEERS).join("0").join(PEER_HEARTBEAT_AGE_MS),
        "120\n",
    );
    write(&f.join(PEERS).join("0").join(PEER_ANSWERS), "400\n");
    write(&f.join(PEERS).join("0").join(PEER_ANSWER_NS), "100000000\n");
    let r = a.join(FABRIC_REMOTE).join("0:1");
    write(&r.join(REMOTE_LENDER), "lender\n");
    write(&r.join(REMOTE_NAME), "0000:01:00.0\n");
    write(&r.join(REMOTE_VENDOR), "0x1b36\n");
    write(&r.join(REMOTE_DEVICE), "0x0010\n");
    write(&r.join(REMOTE_CLASS), "0x010802\n");
    write(&r.join(REMOTE_STATE), "available\n");
    write(&r.join(REMOTE_BORROWER), "\n");
    // The types of the shared table; every one but net has an instance.
    for ty in MDEV_TYPES {
        let (id, name) = (ty.dir, ty.pretty_name);
        let avail = if ty.name == "net" { "0" } else { "1" };
        let d = a.join(MDEV_SUPPORTED_TYPES).join(id);
        write(&d.join(TYPE_NAME), &format!("{name}\n"));
        write(
            &d.join(TYPE_DESCRIPTION),
            "a PCI device lent by another host\n",
        );
        write(&d.join(TYPE_DEVICE_API), "vfio-pci\n");
        write(&d.join(TYPE_AVAILABLE_INSTANCES), &format!("{avail}\n"));
        write(&d.join(TYPE_CREATE), "");
        fs::create_dir_all(d.join("devices")).unwrap();
    }
    t
}

/// The NTB backend's fabric device of `borrower()`'s tree, beside its PCI
/// adapter's fabric.
pub const NTB_FABRIC: &str = "ntb-0000:00:03.0";

/// Adds a second fabric to a borrower tree, as devlend's NTB backend makes
/// it (`/sys/class/devlend/ntb-<NTB device>`): this host is port 3 there,
/// and sees lender port 2 with its NVMe as 2:1 and the types of that
/// parent.
pub fn add_ntb_fabric(t: &Tree) -> PathBuf {
    let d = t.p(&format!(
        "sys/devices/pci0000:00/{ADAPTER}/{ADAPTER}/{NTB_FABRIC}"
    ));
    let f = d.join(FABRIC);
    write(&f.join(HOST_ID), "3\n");
    write(&f.join(FABRIC_ID), "00000000deadbeef\n");
    write(&f.join(FABRIC_PROTO), "1\n");
    write(&f.join(PEERS).join("2").join(PEER_STATE), "up\n");
    write(&f.join(PEERS).join("2").join(PEER_NAME), "lender\n");
    let r = d.join(FABRIC_REMOTE).join("2:1");
    write(&r.join(REMOTE_LENDER), "lender\n");
    write(&r.join(REMOTE_NAME), "0000:01:00.0\n");
    write(&r.join(REMOTE_CLASS), "0x010802\n");
    write(&r.join(REMOTE_STATE), "available\n");
    let ty = d.join(MDEV_SUPPORTED_TYPES).join(type_for_class(0x010802));
    write(&ty.join(TYPE_NAME), "devlend remote NVMe controller\n");
    write(&ty.join(TYPE_AVAILABLE_INSTANCES), "1\n");
    write(&ty.join(TYPE_CREATE), "");
    fs::create_dir_all(t.p(FABRIC_CLASS)).unwrap();
    symlink(
        format!("../../devices/pci0000:00/{ADAPTER}/{ADAPTER}/{NTB_FABRIC}"),
        t.p(FABRIC_CLASS).join(NTB_FABRIC),
    )
    .unwrap();
    d
}

/// A lender (host 0) with an NVMe at 0000:01:00.0, not lent.
pub fn lender() -> Tree {
    let t = Tree {
        dir: tempfile::tempdir().unwrap(),
    };
    let a = pci_dev(&t, ADAPTER, "0x1af4", "0x1110", "0x050000");
    write(&a.join(FABRIC_HOST_ID), "0\n");
    let w = pci_dev(&t, "0000:00:05.0", "0x1af4", "0x1110", "0x050000");
    fs::create_dir_all(t.p("sys/bus/pci/drivers/devlend")).unwrap();
    symlink("../../../bus/pci/drivers/devlend", w.join(PCI_DRIVER)).unwrap();
    let n = pci_dev(&t, "0000:01:00.0", "0x1b36", "0x0010", "0x010802");
    fs::create_dir_all(t.p("sys/bus/pci/drivers/nvme")).unwrap();
    symlink("../../../bus/pci/drivers/nvme", n.join(PCI_DRIVER)).unwrap();
    symlink("../../../kernel/iommu_groups/8", n.join(PCI_IOMMU_GROUP)).unwrap();
    write(&t.p(LENDER_DRIVER).join(LEND), "");
    write(&t.p(LENDER_DRIVER).join(UNLEND), "");
    pci_dev(&t, "0000:00:1c.0", "0x1b36", "0x000c", "0x060400");
    t
}

/// Marks 0000:01:00.0 of a lender tree lent.
pub fn mark_lent(t: &Tree, state: &str, borrower: &str) {
    let d = t.p("sys/devices/pci0000:00/0000:01:00.0").join(LENT);
    write(&d.join(LENT_DEV_ID), "1\n");
    write(&d.join(LENT_STATE), &format!("{state}\n"));
    write(&d.join(LENT_BORROWER), &format!("{borrower}\n"));
    write(&d.join(LENT_DMA_MAPPED_BYTES), "1048576\n");
    write(&d.join(LENT_IRQ_VECTORS), "2\n");
    write(&d.join(LENT_IRQ_FIRES), "1000\n");
    write(&d.join(LENT_ALLOWED_HOSTS), "all\n");
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
