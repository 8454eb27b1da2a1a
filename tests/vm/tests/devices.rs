//! Devices besides the NVMe (issue 10), each lent whole by the lender of
//! `devices.toml` and used by a KVM guest on the borrower through its own
//! Linux driver, the bytes checked where they landed: the lender's backing
//! file of a disk, the lender's end of a network.
//!
//! Devices of a class share one guest, so that the cluster boots a guest
//! once per class, not once per device:
//! `disks_msi_ahci_virtio_blk_p2p_lsi_in_one_guest` (`./test.sh msi`,
//! `virtio` or `p2p` select it) lends three disk controllers to one guest:
//! QEMU's ICH9 AHCI (MSI, no MSI-X) driven by the guest's `ahci`; a
//! modern-only virtio-blk-pci (vendor-specific capabilities that locate its
//! registers in a memory BAR, notifications written there, MSI-X) driven by
//! `virtio-pci` and `virtio_blk`, after one whose DMA bypasses the IOMMU
//! (no VIRTIO_F_ACCESS_PLATFORM) is refused by its host; and an LSI
//! 53C895A (INTx only) whose `sym53c8xx` runs the chip's SCRIPTS from the
//! chip's RAM BAR and has them move its registers by their bus addresses,
//! which the lender maps onto the BARs (`DL_MSG_BAR_DMA`). Each of VFIO's
//! unmaps returns late there, and the borrower must hold its re-pins back
//! until they return.
//! `nic_igb_and_intx_e1000_in_one_guest` (`./test.sh nic` or `intx`) lends
//! two NICs to one guest: the lender's igb (82576) PF (MSI-X) driven by the
//! guest's `igb`, on a network that the second borrower's own NIC is on
//! (another host: the cluster's network switch carries the frames), and
//! QEMU's e1000 (82540EM, INTx only) driven by `e1000`, on a network where
//! the lender has a NIC of its own.
//! `./test.sh nvme_sriov` two VFs of an NVMe controller with SR-IOV,
//! each with a namespace of its own, lent to guests on two borrowers at
//! once (`devlend_vmtests::nvme_sriov`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::{self, sh, sh_timeout};
use devlend_vmtests::guest::{self, GuestOpts};
use devlend_vmtests::lending;
use devlend_vmtests::nvme_sriov;
use devlend_vmtests::pool;
use devlend_vmtests::sriov;
use devlend_vmtests::twohost::{self, log_marks, BORROWER, LENDER, WAIT};
use devlend_vmtests::{Check, Suite};

/// The mdev type for a device of any class.
const ANY_TYPE: &str = "devlend-any";

/// A device of `devices.toml`, lent whole and driven by a guest driver that
/// uses one interrupt mode.
struct Device {
    /// What the check calls it.
    what: &'static str,
    /// Its PCI class (sysfs spelling).
    class: &'static str,
    /// Its PCI vendor (another device of the class may be there).
    vendor: &'static str,
    /// Its PCI device id.
    device: &'static str,
    /// The guest driver that must take it.
    driver: &'static str,
    /// What its `/proc/interrupts` lines contain in the guest.
    irq_name: &'static str,
    /// The lender's `irq_type` while the guest runs.
    lender_irq: &'static str,
}

/// QEMU's ICH9 AHCI: MSI, no MSI-X.
const AHCI: Device = Device {
    what: "AHCI controller",
    class: "0x010601",
    vendor: "0x8086",
    device: "0x2922",
    driver: "ahci",
    irq_name: "ahci",
    lender_irq: "msi",
};
/// Its id in `devices.toml`: its disk's backing file.
const AHCI_ID: &str = "sata0";
/// MiB the disk check writes and reads back: AHCI commands through
/// devlend under TCG are slow (with 64 MiB the check took 150 to 200 s),
/// and more bytes prove nothing more.
const DISK_MIB: u64 = 4;

/// QEMU's LSI 53C895A: conventional PCI, INTx only; its driver has it DMA
/// to its own BARs.
const LSI: Device = Device {
    what: "LSI 53C895A SCSI controller",
    class: "0x010000",
    vendor: "0x1000",
    device: "0x0012",
    driver: "sym53c8xx",
    irq_name: "sym53c8xx",
    lender_irq: "intx",
};
/// Its id in `devices.toml`: its disk's backing file.
const LSI_ID: &str = "scsi0";

/// QEMU's virtio-blk-pci, modern only, with VIRTIO_F_ACCESS_PLATFORM: the
/// guest's `virtio-pci` finds its common, notify, ISR and device registers
/// through the vendor-specific capabilities, in BAR 4. Its interrupts are
/// `virtio0-config` and `virtio0-req.0` (the guest's only virtio device).
const VIRTIO_BLK: Device = Device {
    what: "virtio-blk (modern)",
    class: "0x010000",
    vendor: "0x1af4",
    device: "0x1042",
    driver: "virtio-pci",
    irq_name: "virtio0",
    lender_irq: "msix",
};
/// Its id in `devices.toml`.
const VIRTIO_BLK_ID: &str = "vblk0";

/// QEMU's igb (82576) PF: MSI-X. Its interrupts are named after its
/// interface, `$n` in its block of the guest script.
const IGB: Device = Device {
    what: "igb NIC",
    class: "0x020000",
    vendor: "0x8086",
    device: "0x10c9",
    driver: "igb",
    irq_name: "$n",
    lender_irq: "msix",
};

/// QEMU's e1000 (82540EM): conventional PCI, INTx only. Its interrupt is
/// named after its interface, `$n` in its block of the guest script.
const E1000: Device = Device {
    what: "e1000 NIC",
    class: "0x020000",
    vendor: "0x8086",
    device: "0x100e",
    driver: "e1000",
    irq_name: "$n",
    lender_irq: "intx",
};

/// A NIC's network in `devices.toml`: the host whose own NIC is the other
/// end of the guest's traffic, that NIC (by its MAC), and the addresses of
/// both ends.
struct Network {
    peer_host: &'static str,
    peer_mac: &'static str,
    peer_ip: &'static str,
    guest_ip: &'static str,
}

/// The igb's network `lan0`: its other end is the second borrower's
/// virtio-net, in another QEMU.
const IGB_NET: Network = Network {
    peer_host: sriov::BORROWER2,
    peer_mac: "52:54:00:d1:02:00",
    peer_ip: "10.77.0.1",
    guest_ip: "10.77.0.2",
};

/// The e1000's network: the lender's own virtio-net on the e1000's hub.
const E1000_NET: Network = Network {
    peer_host: LENDER,
    peer_mac: "52:54:00:d1:00:03",
    peer_ip: "10.78.0.1",
    guest_ip: "10.78.0.2",
};

/// The port the guest's and the lender's HTTP servers listen on.
const HTTP_PORT: u16 = 8080;
/// Bytes sent each way over the network: thousands of packets and
/// interrupts each way (16 MiB cost a minute more per NIC under TCG and
/// proved nothing more).
const NET_BYTES: u64 = 4 << 20;

/// The guest script's lines for one device, whose output keys end in
/// `-<tag>` (its driver's name, one per guest): find the device, run
/// `ready`, print `pci-<tag> <vendor> <device> driver=<driver>`,
/// `irq-<tag> <its /proc/interrupts lines, joined by " | ">` and
/// `irqs-<tag> <their interrupts>`, run `body`, print `irqs-after-<tag>`.
fn device_block(dev: &Device, ready: &str, body: &str) -> String {
    let (vendor, device, irq, tag) = (dev.vendor, dev.device, dev.irq_name, dev.driver);
    format!(
        "p=
for d in /sys/bus/pci/devices/*; do
  [ \"$(cat $d/vendor)\" = {vendor} ] && [ \"$(cat $d/device)\" = {device} ] && p=$d
done
[ -n \"$p\" ] || {{ echo no-device-{tag}; exit 3; }}
{ready}
echo \"pci-{tag} $(cat $p/vendor) $(cat $p/device) driver=$(basename $(readlink $p/driver))\"
irqs() {{ grep {irq} /proc/interrupts | awk '{{for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i}} END {{print s + 0}}'; }}
echo \"irq-{tag} $(grep {irq} /proc/interrupts | tr -s ' ' | tr '\\n' '|' | sed 's/|$//; s/|/ | /g')\"
echo \"irqs-{tag} $(irqs)\"
{body}
echo \"irqs-after-{tag} $(irqs)\"
"
    )
}

/// Guest script: `blocks` ([`device_block`]s) one after the other, then
/// `done`, then `linger` seconds (for the host to look at the lender, or
/// to reach the guest).
fn guest_script(blocks: &[String], linger: u32) -> String {
    format!("set -e\n{}echo done\nsleep {linger}", blocks.concat())
}

/// The value of output key `key-<dev's tag>`.
fn field<'a>(out: &'a str, key: &str, dev: &Device) -> anyhow::Result<&'a str> {
    lending::output_field(out, &format!("{key}-{} ", dev.driver))
}

/// A disk controller's block: its disk is the block device found under
/// it (a SATA or SCSI `sd*`, a virtio `vd*`: the guest may have several),
/// `DISK_MIB` written and read back, printed as `written-<tag>` and
/// `read-<tag>`.
fn disk_block(dev: &Device) -> String {
    let tag = dev.driver;
    let io = lending::write_and_read_keyed("$disk", DISK_MIB, &format!("-{tag}"));
    device_block(
        dev,
        &format!(
            "disk=
for i in $(seq 300); do
  disk=$(find $p/ -path '*/block/*' -name '[sv]d[a-z]' 2>/dev/null | head -n 1)
  [ -n \"$disk\" ] && break; sleep 0.2
done
[ -n \"$disk\" ] || {{ echo no-disk-{tag}; exit 4; }}
disk=/dev/$(basename $disk)"
        ),
        &io,
    )
}

/// Whether a guest's `/proc/interrupts` line is of the interrupt mode the
/// device's driver must use.
fn guest_irq_mode_ok(dev: &Device, line: &str) -> bool {
    match dev.lender_irq {
        "msi" => line.contains("PCI-MSI") && !line.contains("MSIX"),
        "msix" => line.contains("PCI-MSIX"),
        // A level-triggered line of the guest's IO-APIC.
        "intx" => line.contains("IO-APIC") && line.contains("fasteoi"),
        _ => false,
    }
}

/// The lender's device of `dev`'s class and vendor behind a root port:
/// q35's own AHCI (00:1f.2) shares its IOMMU group with the LPC bridge and
/// SMBus, and the lender refuses it.
fn lenders_device(l: &AgentClient, dev: &Device) -> anyhow::Result<lending::PciDev> {
    lending::find_all_by_class(l, dev.class)?
        .into_iter()
        .find(|d| {
            d.vendor == dev.vendor && d.device == dev.device && !d.addr.starts_with("0000:00:")
        })
        .with_context(|| format!("no {} behind a root port on the lender", dev.what))
}

/// What the guest proved of `dev`: the lender took its interrupt mode,
/// the guest's driver took it, the guest's interrupt line is of that
/// mode and counted during the guest's work.
fn guest_used(
    l: &AgentClient,
    pci: &lending::PciDev,
    dev: &Device,
    out: &str,
) -> anyhow::Result<()> {
    let lent = twohost::lender_device(l, pci)?;
    ensure!(
        lent.get("irq_type").map(String::as_str) == Some(dev.lender_irq),
        "the lender did not take {} for the guest's {}: {lent:?}",
        dev.lender_irq,
        dev.what
    );
    let found = field(out, "pci", dev)?;
    ensure!(
        found.ends_with(&format!("driver={}", dev.driver)),
        "the guest's {} driver did not take the device: {found}",
        dev.driver
    );
    let irq = field(out, "irq", dev)?;
    ensure!(
        guest_irq_mode_ok(dev, irq),
        "the guest's {} does not use {}: {irq:?}",
        dev.driver,
        dev.lender_irq
    );
    let count = |key| -> anyhow::Result<u64> {
        let v = field(out, key, dev)?;
        v.parse().with_context(|| format!("{key} {v:?}"))
    };
    let (before, after) = (count("irqs")?, count("irqs-after")?);
    ensure!(
        after > before,
        "no interrupt of the {} reached the guest during its work: {before} -> {after} ({irq})",
        dev.what
    );
    Ok(())
}

/// `devs` lent whole to one guest that runs `script`: each guest driver
/// takes its device, its interrupts are of the device's mode on both
/// sides (the guest's line, counting during the guest's work, and the
/// lender's vectors); `check` then looks at the guest's output and the
/// lender while the guest lingers, and the guest is stopped; afterwards
/// each device is back in the pool with nothing mapped, the lender
/// relayed its interrupts, and neither kernel logged trouble. Returns the
/// lender's view of each device at the end.
fn lent_whole_to_a_guest(
    c: &mut Cluster,
    devs: &[&Device],
    script: &str,
    check: &mut dyn FnMut(&Cluster, &str) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<HashMap<String, String>>> {
    let marks = log_marks(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    lending::ensure_module(l)?;
    lending::ensure_module(b)?;
    sh(b, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let mut lent = Vec::new();
    for dev in devs {
        let pci = lenders_device(l, dev)?;
        lending::lend(l, &pci.addr)?;
        lending::wait_remote_listed(
            b,
            &pci.addr,
            &format!("remote {} on the borrower", dev.what),
        )?;
        let fires = twohost::lender_counter(l, &pci, "irq_fires")?;
        lent.push((pci, fires));
    }
    let mut uuids = Vec::new();
    let made = lent.iter().try_for_each(|(pci, _)| {
        let remote = format!("{LENDER}/{}", pci.addr);
        uuids.push(lending::create_mdev(b, ANY_TYPE, Some(&remote))?);
        Ok::<_, anyhow::Error>(())
    });
    let res = made.and_then(|()| {
        let args: Vec<_> = uuids.iter().map(|u| lending::vfio_arg(u)).collect();
        let console = format!("/tmp/{}.console", devs[0].driver);
        let g = guest::spawn(
            b,
            &tools::guest_images_dir()?,
            script,
            &GuestOpts {
                mem_mib: 256,
                extra_qemu_args: &args.join(" "),
                qmp: None,
                kernel_args: "",
            },
            &console,
        )?;
        let res = (|| -> anyhow::Result<()> {
            let out = g.wait_for(b, "\ndone", Duration::from_secs(600))?;
            for (dev, (pci, _)) in devs.iter().zip(&lent) {
                guest_used(l, pci, dev, &out)?;
            }
            // The script's steps ran (`set -e`, `done` printed); its
            // linger is only for `check`, so the guest is stopped now
            // rather than waited for (the lending suite covers a guest's
            // clean power-off).
            check(c, &out)
        })()
        .map_err(|e| match g.console(b) {
            Ok(console) => e.context(format!("guest console:\n{console}")),
            Err(_) => e,
        });
        let _ = g.kill(b);
        res
    });
    // Every mdev is removed, even after one could not be.
    let removed: Vec<_> = uuids.iter().map(|u| lending::remove_mdev(b, u)).collect();
    res?;
    removed.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let mut views = Vec::new();
    for (dev, (pci, fires_before)) in devs.iter().zip(&lent) {
        lending::wait_until(
            &format!("{} back in the pool", dev.what),
            WAIT,
            || lending::lent_state(l, &pci.addr),
            "available",
        )?;
        let view = twohost::lender_device(l, pci)?;
        ensure!(
            view.get("irq_vectors").map(String::as_str) == Some("0")
                && view.get("dma_maps").map(String::as_str) == Some("0"),
            "the lender still holds vectors or mappings of the {}: {view:?}",
            dev.what
        );
        let fires = fabric::counter(&view, "irq_fires")?;
        ensure!(
            fires > *fires_before,
            "the lender relayed no interrupt of the {} ({fires_before} -> {fires})",
            dev.what
        );
        println!(
            "  {}: {} {} interrupts relayed",
            dev.what,
            fires - fires_before,
            dev.lender_irq
        );
        views.push(view);
    }
    twohost::no_kernel_trouble(c, marks, None)?;
    Ok(views)
}

/// Disk controllers lent whole to one guest (its lender's `disk_ids`
/// give their backing files): on each, `DISK_MIB` written and read back
/// by the guest match and are in the lender's backing file.
fn disks_lent_whole(
    c: &mut Cluster,
    disks: &[(&Device, &str)],
) -> anyhow::Result<Vec<HashMap<String, String>>> {
    let devs: Vec<&Device> = disks.iter().map(|(d, _)| *d).collect();
    let blocks: Vec<String> = devs.iter().map(|d| disk_block(d)).collect();
    let script = guest_script(&blocks, 15);
    lent_whole_to_a_guest(c, &devs, &script, &mut |c, out| {
        for (dev, id) in disks {
            let written = field(out, "written", dev)?;
            ensure!(
                field(out, "read", dev)? == written,
                "the guest read back other bytes from its {}",
                dev.what
            );
            ensure!(
                lending::file_sha256_mib(&c.paths().disk_file(LENDER, id), DISK_MIB)? == written,
                "the lender's backing file does not hold the bytes the guest wrote to its {}",
                dev.what
            );
            println!(
                "  {}: {DISK_MIB} MiB found in the lender's backing file",
                dev.what
            );
        }
        Ok(())
    })
}

/// The second borrower's virtio-blk without VIRTIO_F_ACCESS_PLATFORM, whose
/// DMA would reach that host's memory past its IOMMU: lending it fails, the
/// kernel says why, and it goes back to its driver.
fn virtio_bypass_refused(c: &Cluster) -> anyhow::Result<()> {
    let h = c.agent(sriov::BORROWER2)?;
    lending::ensure_module(h)?;
    let dev = lenders_device(h, &VIRTIO_BLK)?;
    let features = sh(
        h,
        &format!("cat /sys/bus/pci/devices/{}/virtio*/features", dev.addr),
    )?;
    ensure!(
        features.trim().chars().nth(33) == Some('0'),
        "{}'s virtio device offers VIRTIO_F_ACCESS_PLATFORM: {features}",
        sriov::BORROWER2
    );
    ensure!(
        lending::lend(h, &dev.addr).is_err(),
        "{} lent a virtio device whose DMA bypasses the IOMMU",
        sriov::BORROWER2
    );
    let said = sh(
        h,
        "dmesg | grep -c 'without VIRTIO_F_ACCESS_PLATFORM: its DMA bypasses the IOMMU' || true",
    )?;
    ensure!(
        said.trim().parse::<u32>().unwrap_or(0) > 0,
        "the refusal was not explained in the kernel log"
    );
    let driver = sh(
        h,
        &format!(
            "basename \"$(readlink /sys/bus/pci/devices/{}/driver)\"",
            dev.addr
        ),
    )?;
    ensure!(
        driver.trim() == "virtio-pci",
        "the refused device did not go back to virtio-pci: {driver:?}"
    );
    ensure!(
        lending::lent_state(h, &dev.addr).is_err(),
        "the refused device shows as lent"
    );
    println!("  the virtio device without VIRTIO_F_ACCESS_PLATFORM refused");
    Ok(())
}

/// Three disk controllers lent whole to one guest (one guest boot for
/// three devices), each disk's bytes checked in the lender's backing file:
/// - `msi`: QEMU's ICH9 AHCI (MSI, no MSI-X) to the guest's `ahci`;
/// - `virtio`: a modern-only virtio-blk to the guest's `virtio-pci` and
///   `virtio_blk`, its registers found through the vendor-specific
///   capabilities, its queue notified through BAR 4, MSI-X; before it,
///   one whose DMA bypasses the IOMMU is refused;
/// - `p2p`: an LSI 53C895A to the guest's `sym53c8xx`, which gives the
///   chip the guest's addresses of its own RAM BAR (SCRIPTS) and register
///   BAR: the disk's bytes land in the lender's backing file only if the
///   lender mapped those BARs for the device's DMA where the guest put
///   them, which its counters must show; none of those maps refused.
///
/// SeaBIOS drives all three disks (bus mastering on) before it
/// write-protects its shadow area, which QEMU does by unmapping and mapping
/// guest memory again: each mdev keeps its pages and pins them again
/// later. Every dma_unmap() is made to return `UNMAP_DELAY_MS` late (the
/// borrower's `fault_unmap_delay_ms`), as one waiting on a slow lender
/// would, so that each re-pin falls inside an unmap that has not returned:
/// VFIO would find pages pinned again, tell the mdevs again, and after ten
/// rounds BUG() the borrower's kernel. The borrower must hold those re-pins
/// back (`repin_held`) until the unmap returns.
fn disks_msi_ahci_virtio_blk_p2p_lsi_in_one_guest(c: &mut Cluster) -> anyhow::Result<()> {
    virtio_bypass_refused(c)?;
    let b = c.agent(BORROWER)?;
    lending::ensure_module(b)?;
    let held_before = borrower_counter(b, "repin_held")?;
    set_unmap_delay(b, UNMAP_DELAY_MS)?;
    let res = disks_lent_whole(
        c,
        &[
            (&AHCI, AHCI_ID),
            (&VIRTIO_BLK, VIRTIO_BLK_ID),
            (&LSI, LSI_ID),
        ],
    );
    let reset = set_unmap_delay(c.agent(BORROWER)?, 0);
    let views = res?;
    reset?;
    let held = borrower_counter(c.agent(BORROWER)?, "repin_held")? - held_before;
    println!("  {held} re-pins held back until VFIO's unmap returned");
    ensure!(
        held > 0,
        "no re-pin fell inside an unmap that had not returned: the delay proved nothing"
    );
    let lsi = &views[2];
    let maps = fabric::counter(lsi, "bar_dma_maps")?;
    let refused = fabric::counter(lsi, "rej_bar_dma")?;
    // Its RAM BAR (the SCRIPTS) and its register BAR (moved by address).
    ensure!(
        maps >= 2 && refused == 0,
        "the lender did not map both of the LSI's BARs for its own DMA: {maps} maps, {refused} refused"
    );
    ensure!(
        fabric::counter(lsi, "bar_dma_unmaps")? >= maps,
        "the LSI's BAR mappings did not go with the device: {lsi:?}"
    );
    println!("  LSI: {maps} BARs mapped for the device's own DMA");
    // The three are one VM's devices of one lender: the borrower has each
    // one's BARs mapped for the others' DMA (DL_MSG_P2P_DMA), and every
    // such mapping went with the devices.
    let total =
        |key| -> anyhow::Result<u64> { views.iter().map(|v| fabric::counter(v, key)).sum() };
    let (p2p_maps, p2p_unmaps) = (total("p2p_maps")?, total("p2p_unmaps")?);
    println!(
        "  BARs of one disk controller mapped for another's DMA: {p2p_maps}, undone: {p2p_unmaps}"
    );
    ensure!(
        p2p_maps > 0,
        "no disk controller's BAR was mapped for another's DMA: {views:?}"
    );
    ensure!(
        p2p_unmaps == p2p_maps,
        "{p2p_maps} P2P mappings made, {p2p_unmaps} undone"
    );
    Ok(())
}

/// The peer host's own NIC on `net` (virtio-net), up at its address;
/// serves `NET_BYTES` random bytes over HTTP. Returns their sha256.
fn peer_up(l: &AgentClient, net: &Network) -> anyhow::Result<String> {
    let (mac, ip) = (net.peer_mac, net.peer_ip);
    let out = sh(
        l,
        &format!(
            "set -e; modprobe virtio_net; n=
for i in $(seq 50); do
  for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac} ] && n=${{d##*/}}; done
  [ -n \"$n\" ] && break; sleep 0.1
done
[ -n \"$n\" ] || {{ echo no NIC with MAC {mac} >&2; exit 1; }}
# Quiet until asked (no IPv6 chatter): while the lent NIC does not
# receive, QEMU's hub holds what this one sends, and its queue times out.
sysctl -q -w net.ipv6.conf.$n.disable_ipv6=1
ip addr flush dev $n; ip addr add {ip}/24 dev $n; ip link set $n up
w=/tmp/net-{ip}; rm -rf $w; mkdir $w
head -c {NET_BYTES} /dev/urandom > $w/down
setsid busybox httpd -f -p {ip}:{HTTP_PORT} -h $w </dev/null >/dev/null 2>&1 & echo $! > $w.pid
sha256sum $w/down | cut -d' ' -f1"
        ),
    )?;
    Ok(out.trim().to_owned())
}

/// Stops what `peer_up` started.
fn peer_down(l: &AgentClient, net: &Network) -> anyhow::Result<()> {
    let w = format!("/tmp/net-{}", net.peer_ip);
    sh(
        l,
        &format!("kill $(cat {w}.pid) 2>/dev/null; rm -rf {w} {w}.pid {w}.up"),
    )
    .map(drop)
}

/// How long a NIC check's guest serves its bytes after `done`: far longer
/// than the peer's fetch may take (`PEER_FETCH_TIMEOUT`), as the check stops
/// the guest itself once the peer has them. A guest that powered off under
/// a slow fetch would look like a NIC that stopped.
const NIC_LINGER_S: u32 = 900;

/// How long the peer may take to fetch `NET_BYTES` from the guest: the
/// NIC is emulated by QEMU in a host that runs under TCG, on a shared
/// machine.
const PEER_FETCH_TIMEOUT: Duration = Duration::from_secs(600);

/// A NIC check's guest: the NIC's interface up at the guest's address;
/// pings the peer (`ping <summary>`), downloads the peer's bytes
/// (`down <sha256>`), and serves bytes of its own (`up <sha256>`) for the
/// A NIC's block of the guest script: its interface (found under the
/// device) at the guest's address on `net`; a ping to the peer host, its
/// `NET_BYTES` downloaded, as many served (`ping-<tag>`, `down-<tag>`,
/// `up-<tag>`, the checksums).
fn nic_block(dev: &Device, net: &Network) -> String {
    let (peer, guest, tag) = (net.peer_ip, net.guest_ip, dev.driver);
    // The driver requests its interrupts when the interface goes up.
    device_block(
        dev,
        &format!(
            "n=
for i in $(seq 100); do n=$(ls $p/net 2>/dev/null) && [ -n \"$n\" ] && break; sleep 0.1; done
[ -n \"$n\" ] || {{ echo no-interface-{tag}; exit 4; }}
ip addr add {guest}/24 dev $n; ip link set $n up"
        ),
        &format!(
            "for i in $(seq 60); do ping -c 1 -W 1 {peer} >/dev/null 2>&1 && break; done
echo \"ping-{tag} $(ping -c 5 -W 2 {peer} | grep 'packets')\"
wget -q -O /tmp/down-{tag} http://{peer}:{HTTP_PORT}/down
echo \"down-{tag} $(sha256sum /tmp/down-{tag} | cut -d' ' -f1)\"
mkdir -p /tmp/www-{tag}; head -c {NET_BYTES} /dev/urandom > /tmp/www-{tag}/up
echo \"up-{tag} $(sha256sum /tmp/www-{tag}/up | cut -d' ' -f1)\"
httpd -p {guest}:{HTTP_PORT} -h /tmp/www-{tag}"
        ),
    )
}

/// What the guest's traffic over `dev` on `net` proved: no ping lost, the
/// bytes downloaded are those `net`'s peer served (`down`, its sha256),
/// and the peer fetches from the guest the bytes the guest served.
fn nic_traffic_checked(
    c: &Cluster,
    out: &str,
    dev: &Device,
    net: &Network,
    down: &str,
) -> anyhow::Result<()> {
    let ping = field(out, "ping", dev)?;
    ensure!(
        ping.contains(" 0% packet loss"),
        "the guest's pings to {} over its {} were lost: {ping}",
        net.peer_host,
        dev.what
    );
    ensure!(
        field(out, "down", dev)? == down,
        "the guest downloaded other bytes than {} served",
        net.peer_host
    );
    let up = field(out, "up", dev)?;
    let started = Instant::now();
    let got = sh_timeout(
        c.agent(net.peer_host)?,
        &format!(
            "w=/tmp/net-{}.up; busybox wget -q -O $w http://{}:{HTTP_PORT}/up && \
             sha256sum $w | cut -d' ' -f1",
            net.peer_ip, net.guest_ip
        ),
        PEER_FETCH_TIMEOUT,
    )
    .with_context(|| format!("{} fetching the guest's bytes", net.peer_host))?;
    let fetch_s = started.elapsed().as_secs_f64();
    ensure!(
        got.trim() == up,
        "{} fetched other bytes than the guest served",
        net.peer_host
    );
    println!(
        "  {} with {}: {ping}; {NET_BYTES} bytes each way, checksums match \
         (the peer's fetch took {fetch_s:.1} s)",
        dev.what, net.peer_host
    );
    Ok(())
}

/// NICs lent whole to one guest, each on a network where a host (the
/// lender or another) has a NIC of its own: over each the guest pings
/// that host, `NET_BYTES` go each way over HTTP (the guest downloads from
/// the peer, then the peer from the guest) and arrive with the sha256 they
/// left with. Returns the lender's view of each NIC at the end.
fn nics_lent_whole(
    c: &mut Cluster,
    nics: &[(&Device, &Network)],
) -> anyhow::Result<Vec<HashMap<String, String>>> {
    let mut downs = Vec::new();
    let up = nics.iter().try_for_each(|(_, net)| {
        downs.push(peer_up(c.agent(net.peer_host)?, net)?);
        Ok::<_, anyhow::Error>(())
    });
    let res = up.and_then(|()| {
        let devs: Vec<&Device> = nics.iter().map(|(d, _)| *d).collect();
        let blocks: Vec<String> = nics.iter().map(|(d, n)| nic_block(d, n)).collect();
        let script = guest_script(&blocks, NIC_LINGER_S);
        lent_whole_to_a_guest(c, &devs, &script, &mut |c, out| {
            for ((dev, net), down) in nics.iter().zip(&downs) {
                nic_traffic_checked(c, out, dev, net, down)?;
            }
            Ok(())
        })
    });
    // Every peer's NIC goes down, even after one could not.
    let downed: Vec<_> = nics
        .iter()
        .map(|(_, net)| peer_down(c.agent(net.peer_host)?, net))
        .collect();
    let views = res?;
    downed.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    Ok(views)
}
/// Two NICs lent whole to one guest (one guest boot for both):
/// - `nic`: the lender's igb (82576 PF, MSI-X) to the guest's `igb`; the
///   traffic's other end is the second borrower, on the igb's network
///   through the cluster's switch;
/// - `intx`: an e1000 (INTx only) to the guest's `e1000`, its traffic's
///   other end the lender's own NIC: the lender masks INTx at the device
///   when it fires, and it is ended by the borrower's unmask (VFIO's,
///   from KVM's resampler at the guest's EOI), not by BAR accesses. Every
///   `INTX_FAULT_EVERY`th unmask is made to find the lender's ring full
///   (the borrower's `fault_intx_unmask_every`), as a stalled lender
///   would: the borrower must send it again, or INTx stays masked and the
///   traffic stops.
fn nic_igb_and_intx_e1000_in_one_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    let pci = lenders_device(l, &E1000)?;
    // Counters of an earlier lend in this cluster, if any.
    let unmasks_before = twohost::lender_counter(l, &pci, "intx_unmasks").unwrap_or(0);
    let b = c.agent(BORROWER)?;
    lending::ensure_module(b)?;
    let retries_before = borrower_counter(b, "intx_unmask_retries")?;
    set_unmask_fault(b, INTX_FAULT_EVERY)?;
    let res = nics_lent_whole(c, &[(&IGB, &IGB_NET), (&E1000, &E1000_NET)]);
    let reset = set_unmask_fault(c.agent(BORROWER)?, 0);
    let views = res?;
    reset?;
    let e1000 = &views[1];
    let unmasks = fabric::counter(e1000, "intx_unmasks")? - unmasks_before;
    let retries = borrower_counter(c.agent(BORROWER)?, "intx_unmask_retries")? - retries_before;
    println!(
        "  e1000: {unmasks} unmasks from the borrower ended its INTx, {retries} sent again after a full ring"
    );
    ensure!(
        unmasks > 0,
        "no INTx was ended by an unmask from the borrower: {e1000:?}"
    );
    ensure!(
        retries > 0,
        "no unmask was made to find the ring full ({unmasks} unmasks, every {INTX_FAULT_EVERY}th to fail)"
    );
    Ok(())
}

/// How late each dma_unmap() returns in the disks check: longer than the
/// borrower waits before it pins again (`DL_REPIN_DELAY_MS`, 100 ms).
const UNMAP_DELAY_MS: u32 = 300;

/// Sets the borrower's test-only module parameter `name` (a fault
/// injection; 0 turns it off).
fn set_borrower_fault(b: &AgentClient, name: &str, value: u32) -> anyhow::Result<()> {
    sh(
        b,
        &format!("echo {value} > /sys/module/devlend_borrower/parameters/{name}"),
    )
    .map(drop)
    .with_context(|| format!("the borrower's {name}"))
}

fn set_unmap_delay(b: &AgentClient, ms: u32) -> anyhow::Result<()> {
    set_borrower_fault(b, "fault_unmap_delay_ms", ms)
}

/// Every how many INTx unmasks one finds the lender's ring full in the
/// e1000 check: often enough to happen many times, rarely enough that
/// the retries (`DL_INTX_RETRY_MS`, 100 ms each) do not slow the check
/// much (with 4 MiB each way: some 45 retries).
const INTX_FAULT_EVERY: u32 = 15;

fn set_unmask_fault(b: &AgentClient, every: u32) -> anyhow::Result<()> {
    set_borrower_fault(b, "fault_intx_unmask_every", every)
}

/// A counter of the borrower's, over all its mdevs ever (debugfs
/// `devlend/borrower`): `intx_unmask_retries`, unmasks sent again after
/// a full ring; `repin_held`, re-pins held back by an unmap that had not
/// returned yet.
fn borrower_counter(b: &AgentClient, key: &str) -> anyhow::Result<u64> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("borrower "))
        .with_context(|| format!("no borrower line in {text:?}"))?;
    fabric::counter(&fabric::parse_kv(line), key)
}

/// Two VFs of the lender's igb lent to guests on both borrowers at once
/// (`devlend_vmtests::sriov`); the first guest also has the second
/// borrower's NVMe, which that host lends while it borrows a VF (the
/// multi-host cases: one guest with devices from two lenders, a host that
/// lends and borrows at once).
fn sriov_multihost_vfs_to_two_borrowers_and_an_nvme_from_one(
    c: &mut Cluster,
) -> anyhow::Result<()> {
    let pf = lenders_device(c.agent(LENDER)?, &IGB)?.addr;
    let b2 = c.agent(sriov::BORROWER2)?;
    lending::ensure_module(b2)?;
    let nvme = sriov::SecondLender {
        host: sriov::BORROWER2,
        addr: lending::find_by_class(b2, lending::NVME_CLASS)?.addr,
        file: c.paths().nvme_file(sriov::BORROWER2, "nvme0"),
    };
    sriov::two_guests_share_a_nic(c, &pf, Some(&nvme), &|step| println!("  {step}"))
}

/// Two VFs of the lender's NVMe with SR-IOV, each with a private
/// namespace, used by guests on two borrowers at once, each namespace's
/// bytes checked in its backing file.
fn nvme_sriov_vfs_with_own_namespaces_to_two_borrowers(c: &mut Cluster) -> anyhow::Result<()> {
    // The namespaces' files, from the lender's `[[host.nvme_sriov]]`.
    let spec = c
        .topology()
        .hosts
        .iter()
        .find(|h| h.name == LENDER)
        .and_then(|h| h.nvme_sriov.first())
        .context("devices.toml gives the lender no NVMe with SR-IOV")?
        .clone();
    let files: Vec<_> = (1..=spec.vfs)
        .map(|nsid| c.paths().disk_file(LENDER, &spec.ns_id(nsid)))
        .collect();
    nvme_sriov::two_vfs_to_two_borrowers(c, &files, &|step| println!("  {step}"))
}

/// Each borrower asks for any NVMe from a pool of two (the lender's and
/// the second borrower's) and gets one; a third request is refused, then
/// waits and takes the one given back (`devlend_vmtests::pool`).
fn multihost_any_nvme_from_a_pool_of_two(c: &mut Cluster) -> anyhow::Result<()> {
    pool::any_nvme_from_a_pool_of_two(c, pool::DEVICES_POOL, &|step| println!("  {step}"))
}

fn main() {
    let checks = vec![
        Check {
            name: "disks_msi_ahci_virtio_blk_p2p_lsi_in_one_guest",
            run: disks_msi_ahci_virtio_blk_p2p_lsi_in_one_guest,
        },
        Check {
            name: "nic_igb_and_intx_e1000_in_one_guest",
            run: nic_igb_and_intx_e1000_in_one_guest,
        },
        Check {
            name: "sriov_multihost_vfs_to_two_borrowers_and_an_nvme_from_one",
            run: sriov_multihost_vfs_to_two_borrowers_and_an_nvme_from_one,
        },
        Check {
            name: "multihost_any_nvme_from_a_pool_of_two",
            run: multihost_any_nvme_from_a_pool_of_two,
        },
        Check {
            name: "nvme_sriov_vfs_with_own_namespaces_to_two_borrowers",
            run: nvme_sriov_vfs_with_own_namespaces_to_two_borrowers,
        },
    ];
    Suite::new("devices", checks)
        .reset(devlend_vmtests::fixture::reset_hosts)
        .run(|| devlend_vmtests::boot_topology("devices"))
}
