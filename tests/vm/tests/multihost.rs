//! Four hosts on one fabric (`four-host.toml`): every host sees the three
//! others up, and two borrowers take "any NVMe" from two lenders' pool, a
//! third request waiting for one to come back (`devlend_vmtests::pool`).
//! `./test.sh multihost` runs these with the devices suite's multi-host
//! checks.

use anyhow::ensure;
use devlend_cluster::Cluster;
use devlend_vmtests::{fabric, lending, pool, Check, Suite};

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

fn main() {
    let checks = vec![
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
