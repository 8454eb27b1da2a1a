//! Four hosts on one fabric (`four-host.toml`): every host sees the three
//! others up, and two borrowers take "any NVMe" from two lenders' pool, a
//! third request waiting for one to come back (`devlend_vmtests::pool`).
//! Then devlend's NTB backend runs on the four ports of one emulated NTB
//! switch. `./test.sh multihost` runs these with the devices suite's
//! multi-host checks; `./test.sh ntb` selects the NTB one.

use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::lending::{self, wait_until};
use devlend_vmtests::{ntb, pool, Check, Suite};

/// The hosts of `four-host.toml`.
const HOSTS: [&str; 4] = ["lender", "lender2", "borrower", "borrower2"];

/// Every host has the three others up: six links, each seen from both
/// ends, after the modules load on all four.
fn multihost_four_hosts_all_peers_up(c: &mut Cluster) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for h in HOSTS {
        let a = c.agent(h)?;
        lending::ensure_module(a)?;
        ids.push((h, fabric::host_id(a)?));
    }
    for (h, me) in &ids {
        let a = c.agent(h)?;
        for (other, id) in &ids {
            if id == me {
                continue;
            }
            fabric::wait_peer_state(a, *id, "up", devlend_vmtests::twohost::WAIT)?;
            ensure!(
                fabric::peer_state(a, *id)?.as_deref() == Some("up"),
                "{h} does not see {other} up"
            );
        }
    }
    println!("  each of the 4 hosts sees the 3 others up");
    Ok(())
}

/// Two borrowers ask for any NVMe from the two lenders' pool and get one
/// each; a third request is refused, then waits and takes the one given
/// back.
fn multihost_four_hosts_any_nvme_from_two_lenders(c: &mut Cluster) -> anyhow::Result<()> {
    pool::any_nvme_from_a_pool_of_two(
        c,
        pool::PoolHosts {
            lenders: ["lender", "lender2"],
            borrowers: ["borrower", "borrower2"],
        },
        &|step| println!("  {step}"),
    )
}

/// devlend's NTB backend on a switch: each host's emulated NTB port has
/// the three others as peers (peer index i is the i-th other port). On
/// every host the NTB fabric comes up with all three peers, each found by
/// the window that shows its ident token (the NTB API does not say which
/// outbound window leads where); port 0 owns the control area and the
/// others find it by its magic. Every host pings every other over it and
/// each ping comes back intact; the doorbells travel as NTB doorbell bit
/// <receiver's port>, as a switch routes them, and each port counts them.
fn ntb_switch_of_four_ports(c: &mut Cluster) -> anyhow::Result<()> {
    let params = c.topology().ntb.module_params();
    let mut hosts = Vec::new();
    for h in HOSTS {
        let a = c.agent(h)?;
        ntb::load_emulated_port(a, &params).with_context(|| format!("{h}'s NTB port"))?;
        let st = ntb::port_state(a)?;
        ensure!(
            st.get("ports").map(String::as_str) == Some("4"),
            "{h}: {st:?}"
        );
        hosts.push((h, fabric::host_id(a)?, ntb::ntb_device(a)?));
    }
    let ko = devlend_cluster::host_view(&fabric::module_dir().join("devlend_ntb.ko"));
    for (h, _, _) in &hosts {
        sh(
            c.agent(h)?,
            &format!(
                "grep -q '^devlend_ntb ' /proc/modules || insmod {}",
                ko.display()
            ),
        )
        .with_context(|| format!("loading devlend_ntb on {h}"))?;
    }
    let res = (|| {
        for (h, me, dev) in &hosts {
            let a = c.agent(h)?;
            for (_, id, _) in hosts.iter().filter(|(_, id, _)| id != me) {
                ntb::wait_ntb_fabric_peer_up(a, dev, *id, Duration::from_secs(90))
                    .with_context(|| format!("on {h}"))?;
            }
            let role = sh(
                a,
                "dmesg | grep -o 'NTB backend on port [0-9]* ([a-z]*' | tail -n 1",
            )?;
            let want = if *me == 0 { "owner" } else { "user" };
            ensure!(
                role.trim().ends_with(want),
                "{h} (port {me}): {role:?}, want {want}"
            );
        }
        println!("  the NTB fabric is up on the 4 ports, each sees the 3 others");
        // Every host pings every other through the NTB fabric.
        for (h, me, _) in &hosts {
            let a = c.agent(h)?;
            let dir = sh(a, "ls -d /sys/kernel/debug/devlend/fabric-*")?;
            let dir = dir.trim();
            ensure!(
                !dir.is_empty() && !dir.contains(char::is_whitespace),
                "{h}: NTB fabric's debugfs: {dir:?}"
            );
            for (other, id, _) in hosts.iter().filter(|(_, id, _)| id != me) {
                let before = ntb::port_state(c.agent(other)?)?;
                let out = sh(
                    a,
                    &format!(
                        "echo 'peer={id} count=200 size=96 window=8' > {dir}/selftest; cat {dir}/selftest"
                    ),
                )?;
                let r = fabric::parse_kv(out.trim());
                ensure!(
                    r.get("result").map(String::as_str) == Some("pass")
                        && fabric::counter(&r, "ok")? == 200,
                    "{h} -> {other} over NTB: {r:?}"
                );
                let after = ntb::port_state(c.agent(other)?)?;
                let rung = fabric::counter(&after, "db_rx")? - fabric::counter(&before, "db_rx")?;
                ensure!(
                    rung > 0,
                    "{other}'s port counted no doorbell for 200 pings from {h}"
                );
            }
        }
        println!("  200 pings each way between every pair of ports, all intact");
        // DMA and messages between two ports that own nothing: lender2's
        // NVMe, written through an mdev of borrower2's NTB fabric.
        let (l2, b2) = (c.agent("lender2")?, c.agent("borrower2")?);
        let dev_b2 = &hosts
            .iter()
            .find(|(h, _, _)| *h == "borrower2")
            .context("borrower2")?
            .2;
        let nvme = lending::find_by_class(l2, lending::NVME_CLASS)?;
        lending::lend(l2, &nvme.addr)?;
        let img = c.paths().nvme_file("lender2", "nvme0");
        let before = ntb::backing_range_sha256(&img, 16384, 64)?;
        let res = ntb::wait_listed_on_ntb_fabric(b2, dev_b2, &nvme.addr, Duration::from_secs(60))
            .and_then(|_| {
                ntb::nvme_writes_over_ntb_fabric(
                    b2,
                    dev_b2,
                    "--lba 16384 --range-blocks 64 --ios 200",
                )
            });
        let back = wait_until(
            "lender2's NVMe available again",
            Duration::from_secs(60),
            || lending::lent_state(l2, &nvme.addr),
            "available",
        )
        .and_then(|_| lending::unlend(l2, &nvme.addr));
        let r = res?;
        back?;
        ensure!(
            ntb::backing_range_sha256(&img, 16384, 64)? != before,
            "lender2's backing file unchanged where borrower2 wrote: {r}"
        );
        println!(
            "  borrower2 (port 3) wrote lender2's (port 1) NVMe over the NTB fabric: {} verified I/Os, the backing file changed",
            r["verified_ios"]
        );
        for (h, _, _) in &hosts {
            let st = ntb::port_state(c.agent(h)?)?;
            ensure!(
                st.get("rej").map(String::as_str) == Some("0"),
                "{h}'s port refused messages: {st:?}"
            );
        }
        Ok(())
    })();
    for (h, _, _) in &hosts {
        let _ = sh(c.agent(h)?, "rmmod devlend_ntb");
    }
    res
}

fn main() {
    // First: the emulated ports put the fabric adapters of hosts with an
    // IOMMU in identity domains, which only works before a driver binds
    // them (devlend_vmtests::ntb::load_emulated_port).
    let checks = vec![
        Check {
            name: "ntb_switch_of_four_ports",
            run: ntb_switch_of_four_ports,
        },
        Check {
            name: "multihost_four_hosts_all_peers_up",
            run: multihost_four_hosts_all_peers_up,
        },
        Check {
            name: "multihost_four_hosts_any_nvme_from_two_lenders",
            run: multihost_four_hosts_any_nvme_from_two_lenders,
        },
    ];
    Suite::new("multihost", checks).run(|| devlend_vmtests::boot_topology("four-host"))
}
