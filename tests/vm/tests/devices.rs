//! Devices besides the NVMe (issue 10), each lent whole by the lender of
//! `devices.toml` and used by a KVM guest on the borrower through its own
//! Linux driver, the bytes checked where they landed: the lender's backing
//! file of a disk, the lender's end of a network.
//!
//! `./test.sh msi` selects the device with MSI and no MSI-X: QEMU's ICH9
//! AHCI controller with one SATA disk, driven by the guest's `ahci`.
//! `./test.sh nic` the lender's igb (82576) PF (MSI-X), driven by the
//! guest's `igb`, on a network where the lender has a NIC of its own.
//! `./test.sh intx` the device with INTx only: QEMU's e1000 (82540EM, no
//! MSI), driven by the guest's `e1000`, the same way.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::guest::{self, GuestOpts};
use devlend_vmtests::lending;
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

/// A NIC's network in `devices.toml`: the lender's own NIC on it (by its
/// MAC) and the addresses of both ends.
struct Network {
    peer_mac: &'static str,
    lender_ip: &'static str,
    guest_ip: &'static str,
}

const IGB_NET: Network = Network {
    peer_mac: "52:54:00:d1:00:01",
    lender_ip: "10.77.0.1",
    guest_ip: "10.77.0.2",
};

const E1000_NET: Network = Network {
    peer_mac: "52:54:00:d1:00:03",
    lender_ip: "10.78.0.1",
    guest_ip: "10.78.0.2",
};

/// The port the guest's and the lender's HTTP servers listen on.
const HTTP_PORT: u16 = 8080;
/// Bytes sent each way over the network.
const NET_BYTES: u64 = 16 << 20;

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

/// The disk check's body: its disk is the guest's only SCSI disk.
fn disk_script(dev: &Device) -> String {
    guest_script(
        dev,
        "for i in $(seq 300); do [ -b /dev/sda ] && break; sleep 0.2; done
[ -b /dev/sda ] || { echo no-disk; exit 4; }",
        &lending::WRITE_AND_READ.replace("/dev/nvme0n1", "/dev/sda"),
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
/// lingers; afterwards the device is back in the pool with nothing mapped,
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
        check(c, &out)?;
        let run = g.wait(b, Duration::from_secs(180))?;
        ensure!(run.rc == 0, "guest failed:\n{}", run.console);
        Ok(())
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

/// A disk controller lent whole: 64 MiB written and read back by the guest
/// match and are in the lender's backing file of disk `id`.
fn disk_lent_whole(
    c: &mut Cluster,
    dev: &Device,
    id: &str,
) -> anyhow::Result<HashMap<String, String>> {
    lent_whole_to_a_guest(c, dev, &disk_script(dev), &mut |c, out| {
        let written = lending::output_field(out, "written")?;
        ensure!(
            lending::output_field(out, "read")? == written,
            "the guest read back other bytes"
        );
        ensure!(
            lending::file_sha256(&c.paths().disk_file(LENDER, id))? == written,
            "the lender's backing file does not hold the guest's bytes"
        );
        Ok(())
    })
}

/// An AHCI controller (MSI, no MSI-X) lent whole to a guest's `ahci`.
fn msi_ahci_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    disk_lent_whole(c, &AHCI, AHCI_ID).map(drop)
}

/// The lender's own NIC on `net` (virtio-net, `peer = true` in
/// `devices.toml`), up at its address; serves `NET_BYTES` random bytes over
/// HTTP. Returns their sha256.
fn lender_peer_up(l: &AgentClient, net: &Network) -> anyhow::Result<String> {
    let (mac, ip) = (net.peer_mac, net.lender_ip);
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

/// Stops what `lender_peer_up` started.
fn lender_peer_down(l: &AgentClient, net: &Network) -> anyhow::Result<()> {
    let w = format!("/tmp/net-{}", net.lender_ip);
    sh(
        l,
        &format!("kill $(cat {w}.pid) 2>/dev/null; rm -rf {w} {w}.pid {w}.up"),
    )
    .map(drop)
}

/// A NIC check's guest: the NIC's interface up at the guest's address;
/// pings the lender (`ping <summary>`), downloads the lender's bytes
/// (`down <sha256>`), and serves bytes of its own (`up <sha256>`) for the
/// lender to fetch while it lingers.
fn nic_script(dev: &Device, net: &Network) -> String {
    let (lender, guest) = (net.lender_ip, net.guest_ip);
    // The driver requests its interrupts when the interface goes up.
    guest_script(
        dev,
        &format!(
            "for i in $(seq 100); do n=$(ls $p/net 2>/dev/null) && [ -n \"$n\" ] && break; sleep 0.1; done
[ -n \"$n\" ] || {{ echo no-interface; exit 4; }}
ip addr add {guest}/24 dev $n; ip link set $n up"
        ),
        &format!(
            "for i in $(seq 60); do ping -c 1 -W 1 {lender} >/dev/null 2>&1 && break; done
echo \"ping $(ping -c 5 -W 2 {lender} | grep 'packets')\"
wget -q -O /tmp/down http://{lender}:{HTTP_PORT}/down
echo \"down $(sha256sum /tmp/down | cut -d' ' -f1)\"
mkdir -p /tmp/www; head -c {NET_BYTES} /dev/urandom > /tmp/www/up
echo \"up $(sha256sum /tmp/www/up | cut -d' ' -f1)\"
httpd -p {guest}:{HTTP_PORT} -h /tmp/www"
        ),
        60,
    )
}

/// A NIC lent whole to a guest, on a network where the lender has a NIC of
/// its own: the guest pings the lender, `NET_BYTES` go each way over HTTP
/// (the guest downloads from the lender, then the lender from the guest)
/// and arrive with the sha256 they left with.
fn nic_lent_whole(
    c: &mut Cluster,
    dev: &Device,
    net: &Network,
) -> anyhow::Result<HashMap<String, String>> {
    let down = lender_peer_up(c.agent(LENDER)?, net)?;
    let res = lent_whole_to_a_guest(c, dev, &nic_script(dev, net), &mut |c, out| {
        let ping = lending::output_field(out, "ping")?;
        ensure!(
            ping.contains(" 0% packet loss"),
            "the guest's pings to the lender were lost: {ping}"
        );
        ensure!(
            lending::output_field(out, "down")? == down,
            "the guest downloaded other bytes than the lender served"
        );
        let up = lending::output_field(out, "up")?;
        let got = sh(
            c.agent(LENDER)?,
            &format!(
                "w=/tmp/net-{}.up; busybox wget -q -O $w http://{}:{HTTP_PORT}/up && \
                 sha256sum $w | cut -d' ' -f1",
                net.lender_ip, net.guest_ip
            ),
        )
        .context("the lender fetching the guest's bytes")?;
        ensure!(
            got.trim() == up,
            "the lender fetched other bytes than the guest served"
        );
        println!("  {ping}; {NET_BYTES} bytes each way, checksums match");
        Ok(())
    });
    let down = lender_peer_down(c.agent(LENDER)?, net);
    let lent = res?;
    down?;
    Ok(lent)
}

/// The lender's igb (82576 PF, MSI-X) lent whole to a guest's `igb`.
fn nic_igb_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    nic_lent_whole(c, &IGB, &IGB_NET).map(drop)
}

/// An e1000 (INTx only) lent whole to a guest's `e1000`: the lender masks
/// INTx at the device when it fires, and it is ended by the borrower's
/// unmask (VFIO's, from KVM's resampler at the guest's EOI), not by BAR
/// accesses.
fn intx_e1000_lent_whole_to_a_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    let pci = lenders_device(l, &E1000)?;
    // Counters of an earlier lend in this cluster, if any.
    let unmasks_before = twohost::lender_counter(l, &pci, "intx_unmasks").unwrap_or(0);
    let lent = nic_lent_whole(c, &E1000, &E1000_NET)?;
    let unmasks = fabric::counter(&lent, "intx_unmasks")? - unmasks_before;
    println!("  {unmasks} unmasks from the borrower ended them");
    ensure!(
        unmasks > 0,
        "no INTx was ended by an unmask from the borrower: {lent:?}"
    );
    Ok(())
}

/// The second borrower of `devices.toml`.
const BORROWER2: &str = "borrower2";

/// QEMU's igb VF (82576 VF): MSI-X, no INTx; driven by the guest's
/// `igbvf`.
const IGB_VF: &str = "0x10ca";

/// The SR-IOV check's network: the PF's address on the lender, and each
/// borrower's guest's.
const SRIOV_PF_IP: &str = "10.79.0.1";
const SRIOV_GUEST_IPS: [&str; 2] = ["10.79.0.11", "10.79.0.12"];

/// The igb PF with its driver, up at `SRIOV_PF_IP`, and `n` VFs enabled
/// (none bound on the lender); the VFs' addresses, in VF order.
fn pf_with_vfs(l: &AgentClient, pf: &str, n: u32) -> anyhow::Result<Vec<String>> {
    let out = sh(
        l,
        &format!(
            "set -e; d=/sys/bus/pci/devices/{pf}
modprobe igb
[ \"$(basename $(readlink $d/driver) 2>/dev/null)\" = igb ] || echo {pf} > /sys/bus/pci/drivers/igb/bind
for i in $(seq 100); do n=$(ls $d/net 2>/dev/null) && [ -n \"$n\" ] && break; sleep 0.1; done
[ -n \"$n\" ] || {{ echo the PF has no interface >&2; exit 1; }}
sysctl -q -w net.ipv6.conf.$n.disable_ipv6=1
ip addr flush dev $n; ip addr add {SRIOV_PF_IP}/24 dev $n; ip link set $n up
echo 0 > $d/sriov_drivers_autoprobe
echo {n} > $d/sriov_numvfs
for i in $(seq 0 $(({n} - 1))); do basename $(readlink $d/virtfn$i); done"
        ),
    )
    .context("the igb PF with its VFs on the lender")?;
    let vfs: Vec<String> = out.lines().map(str::to_owned).collect();
    ensure!(vfs.len() == n as usize, "VFs of {pf}: {out:?}");
    Ok(vfs)
}

/// A VF guest: its interface up at `me`; serves `NET_BYTES` of its own
/// (`up <sha256>`), pings the PF on the lender (`ping-pf`) and the other
/// guest (`ping-other`), downloads the other guest's bytes (`down
/// <sha256>`), then lingers so the other can finish.
fn vf_script(me: &str, other: &str) -> String {
    format!(
        "set -e
p=
for d in /sys/bus/pci/devices/*; do
  [ \"$(cat $d/vendor)\" = 0x8086 ] && [ \"$(cat $d/device)\" = {IGB_VF} ] && p=$d
done
[ -n \"$p\" ] || {{ echo no-device; exit 3; }}
for i in $(seq 100); do n=$(ls $p/net 2>/dev/null) && [ -n \"$n\" ] && break; sleep 0.1; done
[ -n \"$n\" ] || {{ echo no-interface; exit 4; }}
ip addr add {me}/24 dev $n; ip link set $n up
echo \"pci $(cat $p/vendor) $(cat $p/device) driver=$(basename $(readlink $p/driver))\"
mkdir -p /tmp/www; head -c {NET_BYTES} /dev/urandom > /tmp/www/up
echo \"up $(sha256sum /tmp/www/up | cut -d' ' -f1)\"
httpd -p {me}:{HTTP_PORT} -h /tmp/www
for i in $(seq 90); do ping -c 1 -W 1 {SRIOV_PF_IP} >/dev/null 2>&1 && break; done
echo \"ping-pf $(ping -c 3 -W 10 {SRIOV_PF_IP} | grep 'packets')\"
for i in $(seq 180); do ping -c 1 -W 1 {other} >/dev/null 2>&1 && break; done
echo \"ping-other $(ping -c 3 -W 10 {other} | grep 'packets')\"
for i in $(seq 60); do wget -q -O /tmp/down http://{other}:{HTTP_PORT}/up && break; sleep 1; done
echo \"down $(sha256sum /tmp/down | cut -d' ' -f1)\"
echo \"irqs $(grep -c eth0 /proc/interrupts) $(grep eth0 /proc/interrupts | awk '{{for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i}} END {{print s + 0}}')\"
echo done
sleep 150"
    )
}

/// The borrowers' view of a lent VF: listed with its PF, by sysfs and by
/// `devlend remote`; and the lender's, by `devlend devices`.
fn vf_listed_with_its_pf(
    c: &Cluster,
    pf: &str,
    vfs: &[String],
    devlend: &str,
) -> anyhow::Result<()> {
    for host in [BORROWER, BORROWER2] {
        let b = c.agent(host)?;
        for vf in vfs {
            lending::wait_remote_listed(b, vf, &format!("VF {vf} on {host}"))?;
        }
        let remotes = lending::remote_devices(b)?;
        for vf in vfs {
            let r = remotes
                .values()
                .find(|r| r.get("name") == Some(vf))
                .with_context(|| format!("{vf} not listed on {host}"))?;
            ensure!(
                r.get("pf").map(String::as_str) == Some(pf),
                "{host} does not list {vf} as a VF of {pf}: {r:?}"
            );
        }
        let json = sh(b, &format!("{devlend} remote --json"))?;
        let v: serde_json::Value = serde_json::from_str(&json).context("devlend remote --json")?;
        for vf in vfs {
            ensure!(
                v.as_array()
                    .is_some_and(|a| a.iter().any(|r| r["name"] == vf.as_str() && r["pf"] == pf)),
                "`devlend remote` on {host} does not show {vf} with its PF {pf}: {json}"
            );
        }
    }
    let json = sh(c.agent(LENDER)?, &format!("{devlend} devices --json"))?;
    let v: serde_json::Value = serde_json::from_str(&json).context("devlend devices --json")?;
    let dev = |a: &str| {
        v.as_array()
            .and_then(|d| d.iter().find(|d| d["address"] == a))
            .cloned()
            .unwrap_or_default()
    };
    ensure!(
        dev(pf)["sriov_numvfs"] == vfs.len() as u64 && dev(pf)["driver"] == "igb",
        "`devlend devices`: the PF {pf}: {}",
        dev(pf)
    );
    for vf in vfs {
        ensure!(
            dev(vf)["physfn"] == pf && dev(vf)["lent"]["state"].is_string(),
            "`devlend devices`: the VF {vf}: {}",
            dev(vf)
        );
    }
    Ok(())
}

/// Writes `value` to a sysfs file on a host; the error message if refused.
fn sysfs_write(agent: &AgentClient, file: &str, value: &str) -> anyhow::Result<Option<String>> {
    let out = agent.sh(&format!("echo {value} > {file}"), Duration::from_secs(60))?;
    Ok((out.exit_code != Some(0)).then(|| out.stderr.trim().to_owned()))
}

/// The lender fetches `NET_BYTES` from a guest's server through its PF;
/// their sha256.
fn fetch_through_pf(l: &AgentClient, guest_ip: &str) -> anyhow::Result<String> {
    let got = sh(
        l,
        &format!(
            "busybox wget -q -O /tmp/vf-up http://{guest_ip}:{HTTP_PORT}/up && \
             sha256sum /tmp/vf-up | cut -d' ' -f1; rm -f /tmp/vf-up"
        ),
    )
    .with_context(|| format!("the lender fetching {guest_ip}'s bytes through its PF"))?;
    Ok(got.trim().to_owned())
}

/// A guest of the SR-IOV check: its host, mdev and QEMU.
struct VfGuest {
    host: &'static str,
    uuid: String,
    guest: guest::BackgroundGuest,
}

impl VfGuest {
    /// Stops the guest and removes its mdev: the VF goes back to the lender.
    fn stop(&self, c: &Cluster) -> anyhow::Result<()> {
        let b = c.agent(self.host)?;
        let _ = self.guest.kill(b);
        lending::remove_mdev(b, &self.uuid)
    }
}

/// Two VFs of the lender's igb, lent one by one while the PF stays with
/// the lender's igb driver, each borrowed by a guest on a different
/// borrower at the same time (Linux's `igbvf`): the guests ping each other
/// and the PF and fetch each other's `NET_BYTES` through the lender's NIC,
/// checksums compared at both ends. Meanwhile the PF cannot be lent nor
/// its VFs removed. Then one VF goes back and is unlent while the other
/// guest still runs, which the lender then reaches through its PF; once
/// both are back, the VFs can be removed, the one still lent with them.
fn sriov_igb_vfs_lent_to_two_borrowers_at_once(c: &mut Cluster) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    for h in [LENDER, BORROWER, BORROWER2] {
        lending::ensure_module(c.agent(h)?)?;
    }
    let pf = lenders_device(l, &IGB)?.addr;
    let vfs = pf_with_vfs(l, &pf, 2)?;
    let mut guests: Vec<VfGuest> = Vec::new();
    let res = sriov_run(c, &pf, &vfs, &mut guests).map_err(|e| {
        let consoles: Vec<String> = guests
            .iter()
            .filter_map(|g| {
                let console = g.guest.console(c.agent(g.host).ok()?).ok()?;
                Some(format!("{}:\n{console}", g.host))
            })
            .collect();
        e.context(format!("guest consoles:\n{}", consoles.join("\n")))
    });
    for g in &guests {
        let _ = g.stop(c);
    }
    // The VFs go whatever happened (a lent one is taken back first).
    let removed = sh(
        l,
        &format!(
            "d=/sys/bus/pci/devices/{pf}
for v in $d/virtfn*; do
  a=$(basename $(readlink $v))
  [ -e {drv}/$a ] && echo \"$a force\" > {drv}/unlend
done
echo 0 > $d/sriov_numvfs && cat $d/sriov_numvfs",
            drv = lending::LENDER_DRIVER
        ),
    );
    res?;
    ensure!(
        removed?.trim() == "0",
        "the VFs could not be removed once back"
    );
    Ok(())
}

fn sriov_run(
    c: &Cluster,
    pf: &str,
    vfs: &[String],
    guests: &mut Vec<VfGuest>,
) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    let pf_dir = format!("/sys/bus/pci/devices/{pf}");
    let refused = sysfs_write(l, &format!("{}/lend", lending::LENDER_DRIVER), pf)?;
    ensure!(
        refused.is_some() && lending::driver_of(l, pf)?.as_deref() == Some("igb"),
        "the lender took a PF with VFs enabled"
    );
    for vf in vfs {
        lending::lend(l, vf)?;
    }
    let devlend = twohost::host_bin("devlend", "DEVLEND_BIN")?;
    vf_listed_with_its_pf(c, pf, vfs, &devlend)?;

    let images = tools::guest_images_dir()?;
    for (i, host) in [BORROWER, BORROWER2].into_iter().enumerate() {
        let b = c.agent(host)?;
        sh(b, "modprobe kvm_amd").context("KVM for the borrowers' guests")?;
        let uuid = lending::create_mdev(b, ANY_TYPE, Some(&format!("{LENDER}/{}", vfs[i])))?;
        let g = guest::spawn(
            b,
            &images,
            &vf_script(SRIOV_GUEST_IPS[i], SRIOV_GUEST_IPS[1 - i]),
            &GuestOpts {
                mem_mib: 256,
                extra_qemu_args: &lending::vfio_arg(&uuid),
                qmp: None,
            },
            "/tmp/igbvf.console",
        );
        match g {
            Ok(guest) => guests.push(VfGuest { host, uuid, guest }),
            Err(e) => {
                let _ = lending::remove_mdev(b, &uuid);
                return Err(e);
            }
        }
    }
    let mut outs = Vec::new();
    for g in guests.iter() {
        outs.push(
            g.guest
                .wait_for(c.agent(g.host)?, "\ndone", Duration::from_secs(600))?,
        );
    }
    for (i, out) in outs.iter().enumerate() {
        let found = lending::output_field(out, "pci")?;
        ensure!(
            found.ends_with("driver=igbvf"),
            "guest {i}: igbvf did not take the VF: {found}"
        );
        for key in ["ping-pf", "ping-other"] {
            let ping = lending::output_field(out, key)?;
            ensure!(ping.contains(" 0% packet loss"), "guest {i}: {key}: {ping}");
        }
        ensure!(
            lending::output_field(out, "down")? == lending::output_field(&outs[1 - i], "up")?,
            "guest {i} fetched other bytes than guest {} served",
            1 - i
        );
    }
    println!("  the guests exchanged {NET_BYTES} bytes each way through the lender's igb, checksums match");

    // While both are borrowed: MSI-X relayed for each, and the PF's VFs
    // cannot be removed.
    for vf in vfs {
        let dev = lending::PciDev {
            addr: vf.clone(),
            vendor: IGB.vendor.into(),
            device: IGB_VF.into(),
        };
        let lent = twohost::lender_device(l, &dev)?;
        ensure!(
            lent.get("irq_type").map(String::as_str) == Some("msix")
                && fabric::counter(&lent, "irq_fires")? > 0,
            "the lender relays no MSI-X for {vf}: {lent:?}"
        );
    }
    let removed = sysfs_write(l, &format!("{pf_dir}/sriov_numvfs"), "0")?;
    let numvfs = sh(l, &format!("cat {pf_dir}/sriov_numvfs"))?;
    ensure!(
        removed.is_some() && numvfs.trim() == "2",
        "the VFs of {pf} could be removed while borrowed ({numvfs:?})"
    );
    // The PF's driver says why (igb: "... while they are assigned ...").
    let why = sh(l, "dmesg | grep -i 'assigned' | tail -n 1")?;
    println!("  removing the VFs while borrowed: refused; {}", why.trim());

    // The first VF back and unlent; the second guest runs on, and the
    // lender reaches it through the PF.
    guests[0].stop(c)?;
    lending::wait_until(
        &format!("VF {} back in the pool", vfs[0]),
        WAIT,
        || lending::lent_state(l, &vfs[0]),
        "available",
    )?;
    lending::unlend(l, &vfs[0])?;
    ensure!(
        lending::lent_state(l, &vfs[1])? == "borrowed",
        "taking {} back disturbed {}",
        vfs[0],
        vfs[1]
    );
    ensure!(
        fetch_through_pf(l, SRIOV_GUEST_IPS[1])? == lending::output_field(&outs[1], "up")?,
        "after {} went back, the lender fetched other bytes from guest 1 than it served",
        vfs[0]
    );
    println!(
        "  {} back and unlent; guest 1 still reached through the PF",
        vfs[0]
    );
    guests[1].stop(c)?;
    lending::wait_until(
        &format!("VF {} back in the pool", vfs[1]),
        WAIT,
        || lending::lent_state(l, &vfs[1]),
        "available",
    )?;
    guests.clear();
    // The second VF, lent but not borrowed, goes with the others: the
    // lender lets it go and the borrowers stop listing it.
    if let Some(e) = sysfs_write(l, &format!("{pf_dir}/sriov_numvfs"), "0")? {
        bail!("the VFs could not be removed once back: {e}");
    }
    for host in [BORROWER, BORROWER2] {
        let b = c.agent(host)?;
        lending::wait_until(
            &format!("{} gone from {host}'s remote devices", vfs[1]),
            WAIT,
            || {
                Ok(lending::remote_devices(b)?
                    .values()
                    .any(|r| r.get("name") == Some(&vfs[1]))
                    .to_string())
            },
            "false",
        )?;
    }
    Ok(())
}

fn main() {
    let checks = vec![
        Check {
            name: "msi_ahci_lent_whole_to_a_guest",
            run: msi_ahci_lent_whole_to_a_guest,
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
            name: "sriov_igb_vfs_lent_to_two_borrowers_at_once",
            run: sriov_igb_vfs_lent_to_two_borrowers_at_once,
        },
    ];
    Suite::new("devices", checks).run(|| devlend_vmtests::boot_topology("devices"))
}
