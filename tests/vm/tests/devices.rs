//! Devices besides the NVMe (issue 10), each lent whole by the lender of
//! `devices.toml` and used by a KVM guest on the borrower through its own
//! Linux driver, the bytes checked where they landed: the lender's backing
//! file of a disk, the lender's end of a network.
//!
//! `./test.sh msi` selects the device with MSI and no MSI-X: QEMU's ICH9
//! AHCI controller with one SATA disk, driven by the guest's `ahci`.
//! `./test.sh nic` the lender's igb (82576) PF (MSI-X), driven by the
//! guest's `igb`, on a network that the second borrower's own NIC is on
//! (another host: the cluster's network switch carries the frames).
//! `./test.sh intx` the device with INTx only: QEMU's e1000 (82540EM, no
//! MSI), driven by the guest's `e1000`, on a network where the lender has
//! a NIC of its own.
//! `./test.sh p2p` a device that DMAs to its own BARs: QEMU's LSI 53C895A
//! (INTx only), whose driver `sym53c8xx` runs the chip's SCRIPTS from the
//! chip's RAM BAR and has them move its registers by their bus addresses,
//! which the lender maps onto the BARs (`DL_MSG_BAR_DMA`).
//! `./test.sh virtio` a virtio device lent whole: QEMU's virtio-blk-pci,
//! modern only (vendor-specific capabilities that locate its registers in
//! a memory BAR, notifications written there, MSI-X), driven by the
//! guest's `virtio-pci` and `virtio_blk`; and one whose DMA bypasses the
//! IOMMU (no VIRTIO_F_ACCESS_PLATFORM), which its host refuses to lend.
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

/// QEMU's igb (82576) PF: MSI-X. Its interrupts are named after the
/// interface (the guest's only one).
const IGB: Device = Device {
    what: "igb NIC",
    class: "0x020000",
    vendor: "0x8086",
    device: "0x10c9",
    driver: "igb",
    irq_name: "eth0",
    lender_irq: "msix",
};

/// QEMU's e1000 (82540EM): conventional PCI, INTx only. Its interrupt is
/// named after the interface.
const E1000: Device = Device {
    what: "e1000 NIC",
    class: "0x020000",
    vendor: "0x8086",
    device: "0x100e",
    driver: "e1000",
    irq_name: "eth0",
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

/// Guest script: finds the device, runs `ready`, prints `pci <vendor>
/// <device> driver=<driver>`, `irq <its /proc/interrupts lines, joined by
/// " | ">` and `irqs <their interrupts>`, runs `body`, prints `irqs-after`,
/// says `done` and waits `linger` seconds (for the host to look at the
/// lender, or to reach the guest).
fn guest_script(dev: &Device, ready: &str, body: &str, linger: u32) -> String {
    let (vendor, device, irq) = (dev.vendor, dev.device, dev.irq_name);
    format!(
        "set -e
p=
for d in /sys/bus/pci/devices/*; do
  [ \"$(cat $d/vendor)\" = {vendor} ] && [ \"$(cat $d/device)\" = {device} ] && p=$d
done
[ -n \"$p\" ] || {{ echo no-device; exit 3; }}
{ready}
echo \"pci $(cat $p/vendor) $(cat $p/device) driver=$(basename $(readlink $p/driver))\"
irqs() {{ grep {irq} /proc/interrupts | awk '{{for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i}} END {{print s + 0}}'; }}
echo \"irq $(grep {irq} /proc/interrupts | tr -s ' ' | tr '\\n' '|' | sed 's/|$//; s/|/ | /g')\"
echo \"irqs $(irqs)\"
{body}
echo \"irqs-after $(irqs)\"
echo done
sleep {linger}"
    )
}

/// The disk check's body: its disk, `disk` (`/dev/sda`, the guest's only
/// SCSI disk, or `/dev/vda`, its only virtio one).
fn disk_script(dev: &Device, disk: &str) -> String {
    guest_script(
        dev,
        &format!(
            "for i in $(seq 300); do [ -b {disk} ] && break; sleep 0.2; done
[ -b {disk} ] || {{ echo no-disk; exit 4; }}"
        ),
        &lending::write_and_read(disk, DISK_MIB),
        15,
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

/// `dev` lent whole to a guest that runs `script`: the guest's driver takes
/// it, its interrupts are of the device's mode on both sides (the guest's
/// line, counting during the guest's work, and the lender's vectors);
/// `check` then looks at the guest's output and the lender while the guest
/// lingers, and the guest is stopped; afterwards the device is back in the
/// pool with nothing mapped,
/// the lender relayed interrupts, and neither kernel logged trouble.
/// Returns the lender's view of the device at the end.
fn lent_whole_to_a_guest(
    c: &mut Cluster,
    dev: &Device,
    script: &str,
    check: &mut dyn FnMut(&Cluster, &str) -> anyhow::Result<()>,
) -> anyhow::Result<HashMap<String, String>> {
    let marks = log_marks(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    lending::ensure_module(l)?;
    lending::ensure_module(b)?;
    let pci = lenders_device(l, dev)?;
    lending::lend(l, &pci.addr)?;
    let remote = format!("{LENDER}/{}", pci.addr);
    lending::wait_remote_listed(
        b,
        &pci.addr,
        &format!("remote {} on the borrower", dev.what),
    )?;
    let fires_before = twohost::lender_counter(l, &pci, "irq_fires")?;
    sh(b, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    let uuid = lending::create_mdev(b, ANY_TYPE, Some(&remote))?;
    let console = format!("/tmp/{}.console", dev.driver);
    let g = guest::spawn(
        b,
        &tools::guest_images_dir()?,
        script,
        &GuestOpts {
            mem_mib: 256,
            extra_qemu_args: &lending::vfio_arg(&uuid),
            qmp: None,
        },
        &console,
    )?;
    let res = (|| -> anyhow::Result<()> {
        let out = g.wait_for(b, "\ndone", Duration::from_secs(600))?;
        let lent = twohost::lender_device(l, &pci)?;
        ensure!(
            lent.get("irq_type").map(String::as_str) == Some(dev.lender_irq),
            "the lender did not take {} for the guest: {lent:?}",
            dev.lender_irq
        );
        let found = lending::output_field(&out, "pci")?;
        ensure!(
            found.ends_with(&format!("driver={}", dev.driver)),
            "the guest's {} driver did not take the device: {found}",
            dev.driver
        );
        let irq = lending::output_field(&out, "irq")?;
        ensure!(
            guest_irq_mode_ok(dev, irq),
            "the guest's {} does not use {}: {irq:?}",
            dev.driver,
            dev.lender_irq
        );
        let count = |key| -> anyhow::Result<u64> {
            let v = lending::output_field(&out, key)?;
            v.parse().with_context(|| format!("{key} {v:?}"))
        };
        let (before, after) = (count("irqs")?, count("irqs-after")?);
        ensure!(
            after > before,
            "no interrupt reached the guest during its work: {before} -> {after} ({irq})"
        );
        // The script's steps ran (`set -e`, `done` printed); its linger is
        // only for `check`, so the guest is stopped now rather than waited
        // for (the lending suite covers a guest's clean power-off).
        check(c, &out)
    })()
    .map_err(|e| match g.console(b) {
        Ok(console) => e.context(format!("guest console:\n{console}")),
        Err(_) => e,
    });
    let _ = g.kill(b);
    let removed = lending::remove_mdev(b, &uuid);
    res?;
    removed?;
    lending::wait_until(
        &format!("{} back in the pool", dev.what),
        WAIT,
        || lending::lent_state(l, &pci.addr),
        "available",
    )?;
    let lent = twohost::lender_device(l, &pci)?;
    ensure!(
        lent.get("irq_vectors").map(String::as_str) == Some("0")
            && lent.get("dma_maps").map(String::as_str) == Some("0"),
        "the lender still holds vectors or mappings: {lent:?}"
    );
    let fires = fabric::counter(&lent, "irq_fires")?;
    ensure!(
        fires > fires_before,
        "the lender relayed no interrupt ({fires_before} -> {fires})"
    );
    println!(
        "  {} {} interrupts relayed",
        fires - fires_before,
        dev.lender_irq
    );
    twohost::no_kernel_trouble(c, marks, None)?;
    Ok(lent)
}

/// A disk controller lent whole: `DISK_MIB` written and read back by the guest
/// match and are in the lender's backing file of disk `id`.
fn disk_lent_whole(
    c: &mut Cluster,
    dev: &Device,
    id: &str,
    disk: &str,
) -> anyhow::Result<HashMap<String, String>> {
    lent_whole_to_a_guest(c, dev, &disk_script(dev, disk), &mut |c, out| {
        let written = lending::output_field(out, "written")?;
        ensure!(
            lending::output_field(out, "read")? == written,
            "the guest read back other bytes"
        );
        ensure!(
            lending::file_sha256_mib(&c.paths().disk_file(LENDER, id), DISK_MIB)? == written,
            "the lender's backing file does not hold the guest's bytes"
        );
        Ok(())
    })
}

/// An AHCI controller (MSI, no MSI-X) lent whole to a guest's `ahci`.
fn msi_ahci_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    disk_lent_whole(c, &AHCI, AHCI_ID, "/dev/sda").map(drop)
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

/// A modern-only virtio-blk lent whole to a guest's `virtio-pci` and
/// `virtio_blk`: its registers found through the vendor-specific
/// capabilities, its queue notified through BAR 4, MSI-X; and one whose
/// DMA bypasses the IOMMU refused.
fn virtio_blk_modern_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    virtio_bypass_refused(c)?;
    disk_lent_whole(c, &VIRTIO_BLK, VIRTIO_BLK_ID, "/dev/vda").map(drop)
}

/// An LSI 53C895A lent whole to a guest's `sym53c8xx`, which gives the chip
/// the guest's addresses of its own RAM BAR (SCRIPTS) and register BAR:
/// the disk's bytes land in the lender's backing file only if the lender
/// mapped those BARs for the device's DMA where the guest put them, which
/// its counters must show; none of those maps refused.
fn p2p_lsi_dma_to_its_own_bars(c: &mut Cluster) -> anyhow::Result<()> {
    let lent = disk_lent_whole(c, &LSI, LSI_ID, "/dev/sda")?;
    let maps = fabric::counter(&lent, "bar_dma_maps")?;
    let refused = fabric::counter(&lent, "rej_bar_dma")?;
    // Its RAM BAR (the SCRIPTS) and its register BAR (moved by address).
    ensure!(
        maps >= 2 && refused == 0,
        "the lender did not map both BARs for the device's own DMA: {maps} maps, {refused} refused"
    );
    ensure!(
        fabric::counter(&lent, "bar_dma_unmaps")? >= maps,
        "the BARs' mappings did not go with the device: {lent:?}"
    );
    println!("  {maps} BARs mapped for the device's own DMA");
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
/// peer to fetch while it lingers.
fn nic_script(dev: &Device, net: &Network) -> String {
    let (peer, guest) = (net.peer_ip, net.guest_ip);
    // The driver requests its interrupts when the interface goes up.
    guest_script(
        dev,
        &format!(
            "for i in $(seq 100); do n=$(ls $p/net 2>/dev/null) && [ -n \"$n\" ] && break; sleep 0.1; done
[ -n \"$n\" ] || {{ echo no-interface; exit 4; }}
ip addr add {guest}/24 dev $n; ip link set $n up"
        ),
        &format!(
            "for i in $(seq 60); do ping -c 1 -W 1 {peer} >/dev/null 2>&1 && break; done
echo \"ping $(ping -c 5 -W 2 {peer} | grep 'packets')\"
wget -q -O /tmp/down http://{peer}:{HTTP_PORT}/down
echo \"down $(sha256sum /tmp/down | cut -d' ' -f1)\"
mkdir -p /tmp/www; head -c {NET_BYTES} /dev/urandom > /tmp/www/up
echo \"up $(sha256sum /tmp/www/up | cut -d' ' -f1)\"
httpd -p {guest}:{HTTP_PORT} -h /tmp/www"
        ),
        NIC_LINGER_S,
    )
}

/// A NIC lent whole to a guest, on a network where a host (the lender or
/// another) has a NIC of its own: the guest pings that host, `NET_BYTES`
/// go each way over HTTP (the guest downloads from the peer, then the peer
/// from the guest) and arrive with the sha256 they left with.
fn nic_lent_whole(
    c: &mut Cluster,
    dev: &Device,
    net: &Network,
) -> anyhow::Result<HashMap<String, String>> {
    let down = peer_up(c.agent(net.peer_host)?, net)?;
    let res = lent_whole_to_a_guest(c, dev, &nic_script(dev, net), &mut |c, out| {
        let ping = lending::output_field(out, "ping")?;
        ensure!(
            ping.contains(" 0% packet loss"),
            "the guest's pings to {} were lost: {ping}",
            net.peer_host
        );
        ensure!(
            lending::output_field(out, "down")? == down,
            "the guest downloaded other bytes than {} served",
            net.peer_host
        );
        let up = lending::output_field(out, "up")?;
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
            "  with {}: {ping}; {NET_BYTES} bytes each way, checksums match \
             (the peer's fetch took {fetch_s:.1} s)",
            net.peer_host
        );
        Ok(())
    });
    let down = peer_down(c.agent(net.peer_host)?, net);
    let lent = res?;
    down?;
    Ok(lent)
}

/// The lender's igb (82576 PF, MSI-X) lent whole to a guest's `igb`; the
/// traffic's other end is the second borrower, on the igb's network
/// through the cluster's switch.
fn nic_igb_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    nic_lent_whole(c, &IGB, &IGB_NET).map(drop)
}

/// An e1000 (INTx only) lent whole to a guest's `e1000`: the lender masks
/// INTx at the device when it fires, and it is ended by the borrower's
/// unmask (VFIO's, from KVM's resampler at the guest's EOI), not by BAR
/// accesses. Every `INTX_FAULT_EVERY`th unmask is made to find the
/// lender's ring full (the borrower's `fault_intx_unmask_every`), as a
/// stalled lender would: the borrower must send it again, or INTx stays
/// masked and the traffic stops.
fn intx_e1000_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    let pci = lenders_device(l, &E1000)?;
    // Counters of an earlier lend in this cluster, if any.
    let unmasks_before = twohost::lender_counter(l, &pci, "intx_unmasks").unwrap_or(0);
    let b = c.agent(BORROWER)?;
    lending::ensure_module(b)?;
    let retries_before = unmask_retries(b)?;
    set_unmask_fault(b, INTX_FAULT_EVERY)?;
    let res = nic_lent_whole(c, &E1000, &E1000_NET);
    let reset = set_unmask_fault(c.agent(BORROWER)?, 0);
    let lent = res?;
    reset?;
    let unmasks = fabric::counter(&lent, "intx_unmasks")? - unmasks_before;
    let retries = unmask_retries(c.agent(BORROWER)?)? - retries_before;
    println!(
        "  {unmasks} unmasks from the borrower ended them, {retries} sent again after a full ring"
    );
    ensure!(
        unmasks > 0,
        "no INTx was ended by an unmask from the borrower: {lent:?}"
    );
    ensure!(
        retries > 0,
        "no unmask was made to find the ring full ({unmasks} unmasks, every {INTX_FAULT_EVERY}th to fail)"
    );
    Ok(())
}

/// Every how many INTx unmasks one finds the lender's ring full in the
/// e1000 check: often enough to happen many times, rarely enough that
/// the retries (`DL_INTX_RETRY_MS`, 100 ms each) do not slow the check
/// much (with 4 MiB each way: some 45 retries).
const INTX_FAULT_EVERY: u32 = 15;

const FAULT_PARAM: &str = "/sys/module/devlend_borrower/parameters/fault_intx_unmask_every";

fn set_unmask_fault(b: &AgentClient, every: u32) -> anyhow::Result<()> {
    sh(b, &format!("echo {every} > {FAULT_PARAM}"))
        .map(drop)
        .context("the borrower's INTx unmask fault injection")
}

/// Unmasks the borrower sent again after a full ring, over all its mdevs
/// ever (debugfs `devlend/borrower`).
fn unmask_retries(b: &AgentClient) -> anyhow::Result<u64> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("borrower "))
        .with_context(|| format!("no borrower line in {text:?}"))?;
    fabric::counter(&fabric::parse_kv(line), "intx_unmask_retries")
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
            name: "msi_ahci_lent_whole_to_a_guest",
            run: msi_ahci_lent_whole_to_a_guest,
        },
        Check {
            name: "virtio_blk_modern_lent_whole_to_a_guest",
            run: virtio_blk_modern_lent_whole_to_a_guest,
        },
        Check {
            name: "p2p_lsi_dma_to_its_own_bars",
            run: p2p_lsi_dma_to_its_own_bars,
        },
        Check {
            name: "intx_e1000_lent_whole_to_a_guest",
            run: intx_e1000_lent_whole_to_a_guest,
        },
        Check {
            name: "nic_igb_lent_whole_to_a_guest",
            run: nic_igb_lent_whole_to_a_guest,
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
