//! SR-IOV across hosts on `devices.toml`: the lender's igb keeps its PF
//! with the lender's `igb` driver and lends two of its VFs one by one; a
//! guest on each borrower gets one at the same time and drives it with
//! Linux's `igbvf`, and the two guests talk through the lender's NIC. Shared
//! by the devices suite's `sriov` check and `./demo.sh --sriov`.

use std::time::Duration;

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};

use crate::fabric::{self, sh};
use crate::guest::{self, GuestOpts};
use crate::lending;
use crate::twohost::{self, BORROWER, LENDER, WAIT};

/// The mdev type the guests' VFs are given through.
pub const ANY_TYPE: &str = "devlend-any";
/// The port the guests' HTTP servers listen on.
const HTTP_PORT: u16 = 8080;
/// Bytes each guest serves the other: enough for thousands of packets
/// and interrupts each way, checksummed at both ends; more bytes proved
/// nothing more and cost a minute of CI under TCG.
pub const NET_BYTES: u64 = 4 << 20;

/// MiB the guest with an NVMe writes and reads back.
const NVME_MIB: u64 = 4;

/// The second borrower of `devices.toml`.
pub const BORROWER2: &str = "borrower2";

/// QEMU's igb VF (82576 VF): MSI-X, no INTx; driven by the guest's
/// `igbvf`.
pub const IGB_VF: &str = "0x10ca";

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
drv() {{ basename \"$(readlink $d/driver)\" 2>/dev/null; }}
# Lent whole by an earlier check: taken back (then igb takes it).
[ \"$(drv)\" != devlend-lender ] || echo {pf} > {lender}/unlend
[ \"$(drv)\" = igb ] || echo {pf} > /sys/bus/pci/drivers/igb/bind
for i in $(seq 100); do n=$(ls $d/net 2>/dev/null) && [ -n \"$n\" ] && break; sleep 0.1; done
[ -n \"$n\" ] || {{ echo the PF has no interface >&2; exit 1; }}
sysctl -q -w net.ipv6.conf.$n.disable_ipv6=1
ip addr flush dev $n; ip addr add {SRIOV_PF_IP}/24 dev $n; ip link set $n up
echo 0 > $d/sriov_drivers_autoprobe
echo {n} > $d/sriov_numvfs
for i in $(seq 0 $(({n} - 1))); do basename $(readlink $d/virtfn$i); done",
            lender = lending::LENDER_DRIVER
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
/// <sha256>`); with an NVMe too (`nvme`), then writes `NVME_MIB` to it and
/// reads them back (`nvme-pci`, `written`, `read`): after the network, so
/// that the other guest, which lingers a fixed time, is not kept waiting;
/// then lingers so the other can finish.
fn vf_script(me: &str, other: &str, nvme: bool) -> String {
    let nvme = if nvme {
        format!(
            "q=
for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/class)\" = {} ] && q=$d; done
[ -n \"$q\" ] || {{ echo no-nvme; exit 5; }}
for i in $(seq 150); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
echo \"nvme-pci $(cat $q/vendor) $(cat $q/device) driver=$(basename $(readlink $q/driver))\"
{}
",
            lending::NVME_CLASS,
            lending::write_and_read("/dev/nvme0n1", NVME_MIB)
        )
    } else {
        String::new()
    };
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
{nvme}echo done
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

/// An NVMe that a host other than the NIC's lender lends to the first
/// guest, beside its VF: one guest with devices from two lenders, and a
/// host (the second borrower) that lends one device while it borrows
/// another.
#[derive(Debug, Clone)]
pub struct SecondLender {
    /// The host that lends it (it borrows a VF meanwhile).
    pub host: &'static str,
    /// Its PCI address there.
    pub addr: String,
    /// Its backing file, where the guest's bytes must land.
    pub file: std::path::PathBuf,
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

/// A guest of the SR-IOV check: its host, mdevs and QEMU.
struct VfGuest {
    host: &'static str,
    uuids: Vec<String>,
    guest: guest::BackgroundGuest,
}

impl VfGuest {
    /// Stops the guest and removes its mdevs: the devices go back.
    fn stop(&self, c: &Cluster) -> anyhow::Result<()> {
        let b = c.agent(self.host)?;
        let _ = self.guest.kill(b);
        let mut res = Ok(());
        for u in &self.uuids {
            res = res.and(lending::remove_mdev(b, u));
        }
        res
    }
}

/// The first guest's NVMe from the second lender: its bytes read back and
/// in the backing file; meanwhile that host lends it (to the first
/// borrower) while it borrows a VF itself.
fn nvme_verified(c: &Cluster, n: &SecondLender, vfs: &[String], out: &str) -> anyhow::Result<()> {
    let found = lending::output_field(out, "nvme-pci")?;
    ensure!(
        found.ends_with("driver=nvme"),
        "the guest's nvme did not take {}'s NVMe: {found}",
        n.host
    );
    let written = lending::output_field(out, "written")?;
    ensure!(
        lending::output_field(out, "read")? == written,
        "the guest read other bytes back from {}'s NVMe",
        n.host
    );
    ensure!(
        lending::file_sha256_mib(&n.file, NVME_MIB)? == written,
        "{}'s NVMe backing file does not hold the guest's bytes",
        n.host
    );
    let nl = c.agent(n.host)?;
    let lent = lending::lent_state(nl, &n.addr)?;
    let borrowed_vf = sh(
        c.agent(LENDER)?,
        &format!(
            "cat /sys/bus/pci/devices/{}/devlend/state /sys/bus/pci/devices/{}/devlend/borrower",
            vfs[1], vfs[1]
        ),
    )?;
    let me = fabric::host_id(nl)?.to_string();
    ensure!(
        lent == "borrowed" && borrowed_vf.split_whitespace().eq(["borrowed", me.as_str()]),
        "{} does not lend and borrow at once: its NVMe {lent}, the VF it borrows: {borrowed_vf:?}",
        n.host
    );
    Ok(())
}

/// Removes every VF of `pf` on the lender (`sriov_numvfs` to 0), taking
/// back any still lent first (`force`): what a check does whatever
/// happened before.
pub fn remove_vfs(l: &AgentClient, pf: &str) -> anyhow::Result<()> {
    let left = sh(
        l,
        &format!(
            "d=/sys/bus/pci/devices/{pf}
for v in $d/virtfn*; do
  [ -e \"$v\" ] || continue
  a=$(basename $(readlink $v))
  [ -e {drv}/$a ] && echo \"$a force\" > {drv}/unlend
done
echo 0 > $d/sriov_numvfs && cat $d/sriov_numvfs",
            drv = lending::LENDER_DRIVER
        ),
    )?;
    ensure!(
        left.trim() == "0",
        "the VFs of {pf} could not be removed once back: sriov_numvfs {left:?}"
    );
    Ok(())
}

/// A lent device back in its lender's pool, then unlent.
fn back_and_unlent(l: &AgentClient, addr: &str) -> anyhow::Result<()> {
    if lending::driver_of(l, addr)?.as_deref() != Some("devlend-lender") {
        return Ok(());
    }
    lending::wait_until(
        &format!("{addr} back in the pool"),
        WAIT,
        || lending::lent_state(l, addr),
        "available",
    )?;
    lending::unlend(l, addr)
}

/// Two VFs of the lender's igb, lent one by one while the PF stays with
/// the lender's igb driver, each borrowed by a guest on a different
/// borrower at the same time (Linux's `igbvf`): the guests ping each other
/// and the PF and fetch each other's `NET_BYTES` through the lender's NIC,
/// checksums compared at both ends. Meanwhile the PF cannot be lent nor
/// its VFs removed. Then one VF goes back and is unlent while the other
/// guest still runs, which the lender then reaches through its PF; once
/// both are back, the VFs can be removed, the one still lent with them.
pub fn two_guests_share_a_nic(
    c: &Cluster,
    pf: &str,
    nvme: Option<&SecondLender>,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    for h in [LENDER, BORROWER, BORROWER2] {
        lending::ensure_module(c.agent(h)?)?;
    }
    step(&format!(
        "the lender's igb PF {pf} stays with its igb driver, up at {SRIOV_PF_IP}; it enables 2 VFs"
    ));
    let vfs = pf_with_vfs(l, pf, 2)?;
    let mut guests: Vec<VfGuest> = Vec::new();
    let res = sriov_run(c, pf, &vfs, nvme, &mut guests, step).map_err(|e| {
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
    if let Some(n) = nvme {
        let _ = back_and_unlent(c.agent(n.host)?, &n.addr);
    }
    // The VFs go whatever happened (a lent one is taken back first).
    let removed = remove_vfs(l, pf);
    res?;
    removed?;
    Ok(())
}

fn sriov_run(
    c: &Cluster,
    pf: &str,
    vfs: &[String],
    nvme: Option<&SecondLender>,
    guests: &mut Vec<VfGuest>,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    let pf_dir = format!("/sys/bus/pci/devices/{pf}");
    let refused = sysfs_write(l, &format!("{}/lend", lending::LENDER_DRIVER), pf)?;
    ensure!(
        refused.is_some() && lending::driver_of(l, pf)?.as_deref() == Some("igb"),
        "the lender took a PF with VFs enabled"
    );
    step(&format!(
        "lending the PF is refused while it has VFs; its VFs {} are lent one by one",
        vfs.join(" and ")
    ));
    for vf in vfs {
        lending::lend(l, vf)?;
    }
    let devlend = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    vf_listed_with_its_pf(c, pf, vfs, &devlend)?;
    step(&format!(
        "both borrowers list the VFs with their PF ({LENDER}/{pf}), as does `devlend remote`"
    ));
    // The first guest's NVMe, from the second borrower.
    let mut nvme_mdev = None;
    if let Some(n) = nvme {
        let (b, nl) = (c.agent(BORROWER)?, c.agent(n.host)?);
        lending::lend(nl, &n.addr)?;
        lending::wait_remote_listed(b, &n.addr, &format!("{}'s NVMe on {BORROWER}", n.host))?;
        let uuid =
            lending::create_mdev(b, "devlend-nvme", Some(&format!("{}/{}", n.host, n.addr)))?;
        step(&format!(
            "{} lends its NVMe {}; {BORROWER}'s guest will have it beside its VF (mdev {uuid})",
            n.host, n.addr
        ));
        nvme_mdev = Some(uuid);
    }

    let images = tools::guest_images_dir()?;
    for (i, host) in [BORROWER, BORROWER2].into_iter().enumerate() {
        let b = c.agent(host)?;
        sh(b, "modprobe kvm_amd").context("KVM for the borrowers' guests")?;
        let uuid = lending::create_mdev(b, ANY_TYPE, Some(&format!("{LENDER}/{}", vfs[i])))?;
        let with_nvme = nvme_mdev.as_ref().filter(|_| i == 0);
        let mut args = lending::vfio_arg(&uuid);
        if let Some(n) = with_nvme {
            args = format!("{args} {}", lending::vfio_arg(n));
        }
        let g = guest::spawn(
            b,
            &images,
            &vf_script(
                SRIOV_GUEST_IPS[i],
                SRIOV_GUEST_IPS[1 - i],
                with_nvme.is_some(),
            ),
            &GuestOpts {
                mem_mib: 256,
                extra_qemu_args: &args,
                qmp: None,
                kernel_args: "",
            },
            "/tmp/igbvf.console",
        );
        step(&format!(
            "a KVM guest on {host} gets VF {} through mdev {uuid}; its igbvf drives it at {}",
            vfs[i], SRIOV_GUEST_IPS[i]
        ));
        let mut uuids = vec![uuid];
        uuids.extend(with_nvme.cloned());
        match g {
            Ok(guest) => guests.push(VfGuest { host, uuids, guest }),
            Err(e) => {
                for u in &uuids {
                    let _ = lending::remove_mdev(b, u);
                }
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
    step(&format!(
        "the guests pinged the PF and each other (0% loss) and exchanged {NET_BYTES} bytes each way through the lender's NIC; sha256 equal at both ends"
    ));
    if let Some(n) = nvme {
        nvme_verified(c, n, vfs, &outs[0])?;
        step(&format!(
            "{BORROWER}'s guest also wrote and read back {NVME_MIB} MiB on {}'s NVMe, found in its backing file; {} lent that NVMe while it borrowed a VF",
            n.host, n.host
        ));
    }

    // While both are borrowed: MSI-X relayed for each, and the PF's VFs
    // cannot be removed.
    for vf in vfs {
        let dev = lending::PciDev {
            addr: vf.clone(),
            vendor: "0x8086".into(),
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
    step(&format!(
        "removing the VFs while they are borrowed is refused: {}",
        why.trim()
    ));

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
    step(&format!(
        "{}'s guest stopped: its VF is back and unlent; guest 1 runs on and the lender reaches it through the PF",
        guests[0].host
    ));
    guests[1].stop(c)?;
    lending::wait_until(
        &format!("VF {} back in the pool", vfs[1]),
        WAIT,
        || lending::lent_state(l, &vfs[1]),
        "available",
    )?;
    guests.clear();
    if let Some(n) = nvme {
        back_and_unlent(c.agent(n.host)?, &n.addr)?;
    }
    // The second VF, lent but not borrowed, goes with the others: the
    // lender lets it go and the borrowers stop listing it.
    if let Some(e) = sysfs_write(l, &format!("{pf_dir}/sriov_numvfs"), "0")? {
        bail!("the VFs could not be removed once back: {e}");
    }
    step(
        "the second guest stopped, its VF back; the VFs are removed, the one still lent with them",
    );
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

#[cfg(test)]
mod tests {
    use super::{vf_script, SRIOV_GUEST_IPS};
    use crate::guest::{kernel_cmdline, KERNEL_CMDLINE_MAX};

    /// The scripts fit the guest's kernel command line (gzipped when
    /// they must be): a longer one hangs the guest before Linux prints.
    #[test]
    fn vf_scripts_fit_the_kernel_command_line() {
        for nvme in [false, true] {
            let s = vf_script(SRIOV_GUEST_IPS[0], SRIOV_GUEST_IPS[1], nvme);
            let line = kernel_cmdline(&s).unwrap();
            assert!(line.len() <= KERNEL_CMDLINE_MAX, "{}", line.len());
        }
    }
}
