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
const ANY_TYPE: &str = "devlend-any";
/// The port the guests' HTTP servers listen on.
const HTTP_PORT: u16 = 8080;
/// Bytes each guest serves the other.
pub const NET_BYTES: u64 = 16 << 20;

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
pub fn two_guests_share_a_nic(c: &Cluster, pf: &str, step: &dyn Fn(&str)) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    for h in [LENDER, BORROWER, BORROWER2] {
        lending::ensure_module(c.agent(h)?)?;
    }
    step(&format!(
        "the lender's igb PF {pf} stays with its igb driver, up at {SRIOV_PF_IP}; it enables 2 VFs"
    ));
    let vfs = pf_with_vfs(l, pf, 2)?;
    let mut guests: Vec<VfGuest> = Vec::new();
    let res = sriov_run(c, pf, &vfs, &mut guests, step).map_err(|e| {
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
  [ -e \"$v\" ] || continue
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
        step(&format!(
            "a KVM guest on {host} gets VF {} through mdev {uuid}; its igbvf drives it at {}",
            vfs[i], SRIOV_GUEST_IPS[i]
        ));
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
    step(&format!(
        "the guests pinged the PF and each other (0% loss) and exchanged {NET_BYTES} bytes each way through the lender's NIC; sha256 equal at both ends"
    ));

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
