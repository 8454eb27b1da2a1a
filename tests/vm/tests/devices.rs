//! Devices besides the NVMe (issue 10), each lent whole by the lender of
//! `devices.toml` and used by a KVM guest on the borrower through its own
//! Linux driver, the bytes checked in the lender's backing file.
//!
//! `./test.sh msi` selects the device with MSI and no MSI-X: QEMU's ICH9
//! AHCI controller with one SATA disk, driven by the guest's `ahci`.

use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::sh;
use devlend_vmtests::guest::{self, GuestOpts};
use devlend_vmtests::lending;
use devlend_vmtests::twohost::{self, log_marks, BORROWER, LENDER, WAIT};
use devlend_vmtests::{Check, Suite};

/// PCI class of an AHCI SATA controller.
const AHCI_CLASS: &str = "0x010601";
/// The mdev type for a device of any class.
const ANY_TYPE: &str = "devlend-any";
/// The AHCI controller's id in `devices.toml`: its disk's backing file.
const AHCI_ID: &str = "sata0";

/// Guest script: finds the AHCI controller and its disk, prints
/// `pci <vendor> <device> driver=<driver>` and `irq <its /proc/interrupts
/// line>`, writes random data with O_DIRECT and reads it back (`written`,
/// `read`), then says `done` and waits for the host to look at the lender.
fn ahci_guest_script() -> String {
    let io = lending::WRITE_AND_READ.replace("/dev/nvme0n1", "/dev/sda");
    format!(
        "set -e
p=
for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/class)\" = {AHCI_CLASS} ] && p=$d; done
[ -n \"$p\" ] || {{ echo no-ahci; exit 3; }}
for i in $(seq 300); do [ -b /dev/sda ] && break; sleep 0.2; done
[ -b /dev/sda ] || {{ echo no-disk; exit 4; }}
echo \"pci $(cat $p/vendor) $(cat $p/device) driver=$(basename $(readlink $p/driver))\"
echo \"irq $(grep ahci /proc/interrupts | tr -s ' ')\"
{io}
echo \"irq-after $(grep ahci /proc/interrupts | tr -s ' ')\"
echo done
sleep 15"
    )
}

/// Interrupts a `/proc/interrupts` line counts (the CPU columns after the
/// IRQ number).
fn irq_count(line: &str) -> u64 {
    line.split_whitespace()
        .skip(1)
        .map_while(|f| f.parse::<u64>().ok())
        .sum()
}

/// An AHCI controller (MSI, no MSI-X) lent whole: the guest's `ahci` driver
/// takes it, its interrupts are MSI on both sides (the guest's line and the
/// lender's vectors), 64 MiB written and read back match and are in the
/// lender's backing file; afterwards the device is back in the pool with
/// nothing mapped, and neither kernel logged trouble.
fn msi_ahci_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let marks = log_marks(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    lending::ensure_module(l)?;
    lending::ensure_module(b)?;
    // The topology's controller, behind its own root port: q35's own AHCI
    // (00:1f.2) shares its IOMMU group with the LPC bridge and SMBus, and
    // the lender refuses it.
    let ahci = lending::find_all_by_class(l, AHCI_CLASS)?
        .into_iter()
        .find(|d| !d.addr.starts_with("0000:00:"))
        .context("no AHCI controller behind a root port on the lender")?;
    lending::lend(l, &ahci.addr)?;
    let remote = format!("{LENDER}/{}", ahci.addr);
    lending::wait_remote_listed(b, &ahci.addr, "remote AHCI controller on the borrower")?;
    let fires_before = twohost::lender_counter(l, &ahci, "irq_fires")?;
    sh(b, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let uuid = lending::create_mdev(b, ANY_TYPE, Some(&remote))?;
    let g = guest::spawn(
        b,
        &tools::guest_images_dir()?,
        &ahci_guest_script(),
        &GuestOpts {
            mem_mib: 256,
            extra_qemu_args: &lending::vfio_arg(&uuid),
            qmp: None,
        },
        "/tmp/ahci.console",
    )?;
    let res = (|| -> anyhow::Result<()> {
        g.wait_for(b, "\ndone", Duration::from_secs(600))?;
        let lent = twohost::lender_device(l, &ahci)?;
        ensure!(
            lent.get("irq_type").map(String::as_str) == Some("msi"),
            "the lender did not take MSI vectors for the guest: {lent:?}"
        );
        let run = g.wait(b, Duration::from_secs(120))?;
        ensure!(run.rc == 0, "guest failed:\n{}", run.console);
        let out = &run.output;
        let pci = lending::output_field(out, "pci")?;
        ensure!(
            pci.ends_with("driver=ahci"),
            "the guest's ahci driver did not take the controller: {pci}"
        );
        let (irq, after) = (
            lending::output_field(out, "irq")?,
            lending::output_field(out, "irq-after")?,
        );
        ensure!(
            irq.contains("PCI-MSI") && !irq.contains("MSIX"),
            "the guest's ahci does not use MSI: {irq}"
        );
        ensure!(
            irq_count(after) > irq_count(irq),
            "no interrupt reached the guest during its I/O: {irq} -> {after}"
        );
        let written = lending::output_field(out, "written")?;
        ensure!(
            lending::output_field(out, "read")? == written,
            "the guest read back other bytes"
        );
        ensure!(
            lending::file_sha256(&c.paths().disk_file(LENDER, AHCI_ID))? == written,
            "the lender's backing file does not hold the guest's bytes"
        );
        Ok(())
    })();
    let _ = g.kill(b);
    let removed = lending::remove_mdev(b, &uuid);
    res?;
    removed?;
    lending::wait_until(
        "AHCI controller back in the pool",
        WAIT,
        || lending::lent_state(l, &ahci.addr),
        "available",
    )?;
    let lent = twohost::lender_device(l, &ahci)?;
    ensure!(
        lent.get("irq_vectors").map(String::as_str) == Some("0")
            && lent.get("dma_maps").map(String::as_str) == Some("0"),
        "the lender still holds vectors or mappings: {lent:?}"
    );
    let fires = twohost::lender_counter(l, &ahci, "irq_fires")?;
    ensure!(
        fires > fires_before,
        "the lender relayed no interrupt ({fires_before} -> {fires})"
    );
    println!("  {} MSI interrupts relayed", fires - fires_before);
    twohost::no_kernel_trouble(c, marks, None)
}

fn main() {
    let checks = vec![Check {
        name: "msi_ahci_lent_whole_to_a_guest",
        run: msi_ahci_lent_whole_to_a_guest,
    }];
    Suite::new("devices", checks).run(|| devlend_vmtests::boot_topology("devices"))
}
