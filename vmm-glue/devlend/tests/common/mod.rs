//! A fake sysfs tree like a borrower's and a lender's, in a temp dir.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
            &self.adapter().join(uuid).join("open"),
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
        write(&d.join("remote_device"), &format!("{remote}\n"));
        write(&d.join("state"), "idle\n");
        write(&d.join("open"), "0\n");
        write(&d.join("remove"), "");
        symlink(
            format!("../mdev_supported_types/{mtype}"),
            d.join("mdev_type"),
        )
        .unwrap();
        symlink("../../../kernel/iommu_groups/12", d.join("iommu_group")).unwrap();
        fs::create_dir_all(self.p("sys/bus/mdev/devices")).unwrap();
        symlink(
            format!("../../../devices/pci0000:00/{ADAPTER}/{uuid}"),
            self.p(&format!("sys/bus/mdev/devices/{uuid}")),
        )
        .unwrap();
    }
}

fn pci_dev(t: &Tree, bdf: &str, vendor: &str, device: &str, class: &str) -> PathBuf {
    let d = t.p(&format!("sys/devices/pci0000:00/{bdf}"));
    write(&d.join("vendor"), &format!("{vendor}\n"));
    write(&d.join("device"), &format!("{device}\n"));
    write(&d.join("class"), &format!("{class}\n"));
    fs::create_dir_all(t.p("sys/bus/pci/devices")).unwrap();
    symlink(
        format!("../../../devices/pci0000:00/{bdf}"),
        t.p(&format!("sys/bus/pci/devices/{bdf}")),
    )
    .unwrap();
    d
}

/// A borrower (host 1) that sees lender (host 0) up and its NVMe 0:1.
pub fn borrower() -> Tree {
    let t = Tree {
        dir: tempfile::tempdir().unwrap(),
    };
    write(&t.p("proc/sys/kernel/hostname"), "borrower\n");
    let a = pci_dev(&t, ADAPTER, "0x1af4", "0x1110", "0x050000");
    pci_dev(&t, "0000:00:01.0", "0x8086", "0x29c0", "0x060000");
    let f = a.join("fabric");
    write(&f.join("host_id"), "1\n");
    write(&f.join("fabric_id"), "00c0ffee00c0ffee\n");
    write(&f.join("proto"), "1\n");
    write(&f.join("peers/0/state"), "up\n");
    write(&f.join("peers/0/name"), "lender\n");
    write(&f.join("peers/0/proto"), "1\n");
    write(&f.join("peers/0/window"), "0000:00:04.0\n");
    write(&f.join("peers/0/heartbeat_age_ms"), "120\n");
    write(&f.join("peers/0/answers"), "400\n");
    write(&f.join("peers/0/answer_ns"), "100000000\n");
    let r = f.join("remote/0:1");
    write(&r.join("lender"), "lender\n");
    write(&r.join("name"), "0000:01:00.0\n");
    write(&r.join("vendor"), "0x1b36\n");
    write(&r.join("device"), "0x0010\n");
    write(&r.join("class"), "0x010802\n");
    write(&r.join("state"), "available\n");
    write(&r.join("borrower"), "\n");
    for (id, name, avail) in [
        ("devlend-any", "devlend remote PCI device", "1"),
        ("devlend-nvme", "devlend remote NVMe controller", "1"),
        ("devlend-net", "devlend remote network controller", "0"),
    ] {
        let d = a.join("mdev_supported_types").join(id);
        write(&d.join("name"), &format!("{name}\n"));
        write(
            &d.join("description"),
            "a PCI device lent by another host\n",
        );
        write(&d.join("device_api"), "vfio-pci\n");
        write(&d.join("available_instances"), &format!("{avail}\n"));
        write(&d.join("create"), "");
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
    let f = d.join("fabric");
    write(&f.join("host_id"), "3\n");
    write(&f.join("fabric_id"), "00000000deadbeef\n");
    write(&f.join("proto"), "1\n");
    write(&f.join("peers/2/state"), "up\n");
    write(&f.join("peers/2/name"), "lender\n");
    let r = f.join("remote/2:1");
    write(&r.join("lender"), "lender\n");
    write(&r.join("name"), "0000:01:00.0\n");
    write(&r.join("class"), "0x010802\n");
    write(&r.join("state"), "available\n");
    let ty = d.join("mdev_supported_types/devlend-nvme");
    write(&ty.join("name"), "devlend remote NVMe controller\n");
    write(&ty.join("available_instances"), "1\n");
    write(&ty.join("create"), "");
    fs::create_dir_all(t.p("sys/class/devlend")).unwrap();
    symlink(
        format!("../../devices/pci0000:00/{ADAPTER}/{ADAPTER}/{NTB_FABRIC}"),
        t.p(&format!("sys/class/devlend/{NTB_FABRIC}")),
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
    write(&a.join("fabric/host_id"), "0\n");
    let w = pci_dev(&t, "0000:00:05.0", "0x1af4", "0x1110", "0x050000");
    fs::create_dir_all(t.p("sys/bus/pci/drivers/devlend")).unwrap();
    symlink("../../../bus/pci/drivers/devlend", w.join("driver")).unwrap();
    let n = pci_dev(&t, "0000:01:00.0", "0x1b36", "0x0010", "0x010802");
    fs::create_dir_all(t.p("sys/bus/pci/drivers/nvme")).unwrap();
    symlink("../../../bus/pci/drivers/nvme", n.join("driver")).unwrap();
    symlink("../../../kernel/iommu_groups/8", n.join("iommu_group")).unwrap();
    write(&t.p("sys/bus/pci/drivers/devlend-lender/lend"), "");
    write(&t.p("sys/bus/pci/drivers/devlend-lender/unlend"), "");
    pci_dev(&t, "0000:00:1c.0", "0x1b36", "0x000c", "0x060400");
    t
}

/// Marks 0000:01:00.0 of a lender tree lent.
pub fn mark_lent(t: &Tree, state: &str, borrower: &str) {
    let d = t.p("sys/devices/pci0000:00/0000:01:00.0/devlend");
    write(&d.join("dev_id"), "1\n");
    write(&d.join("state"), &format!("{state}\n"));
    write(&d.join("borrower"), &format!("{borrower}\n"));
    write(&d.join("dma_mapped_bytes"), "1048576\n");
    write(&d.join("irq_vectors"), "2\n");
    write(&d.join("irq_fires"), "1000\n");
    write(&d.join("allowed_hosts"), "all\n");
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
