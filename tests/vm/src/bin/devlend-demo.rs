//! `devlend-demo`: the story of devlend on the emulated two-host cluster,
//! told step by step. Run by `./demo.sh`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use devlend_cluster::{tools, Topology};
use devlend_vmtests::{fabric, guest};

fn say(step: &str) {
    println!("\n==> {step}");
}

fn run() -> anyhow::Result<()> {
    let topo = Topology::load(&tools::repo_root().join("qemu-scripts/topologies/two-host.toml"))?;
    say("booting the emulated cluster: two QEMU hosts whose RAM files are shared");
    for (id, h) in topo.hosts.iter().enumerate() {
        println!(
            "  host {id} {:<9} {} MiB RAM{}{}",
            h.name,
            h.memory.mib(),
            if h.iommu {
                ", behind an emulated Intel IOMMU"
            } else {
                ""
            },
            h.nvme
                .iter()
                .map(|d| format!(", NVMe {} ({} MiB)", d.id, d.size.mib()))
                .collect::<String>()
        );
    }
    let t0 = Instant::now();
    let mut cluster = devlend_vmtests::boot_topology("two-host")?;
    println!(
        "  both hosts answer after {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    if let Err(e) = tell(&mut cluster) {
        devlend_vmtests::suite::collect_failure(&cluster, "demo", "demo");
        cluster.keep_logs(true);
        return Err(e);
    }
    say("tearing the cluster down");
    cluster.shutdown();
    println!("\ndemo complete: fabric up, messages intact, KVM guest ran on the borrower");
    Ok(())
}

/// The story, on a booted cluster.
fn tell(cluster: &mut devlend_cluster::Cluster) -> anyhow::Result<()> {
    say("loading devlend.ko on both hosts; each finds its fabric adapter and its peer");
    let (l, b) = (cluster.agent("lender")?, cluster.agent("borrower")?);
    // Both first: a host sees its peer up only once the peer's module runs.
    fabric::ensure_module(l)?;
    fabric::ensure_module(b)?;
    for (name, a) in [("lender", l), ("borrower", b)] {
        let id = fabric::host_id(a)?;
        let peer = 1 - id;
        fabric::wait_peer_state(a, peer, "up", Duration::from_secs(60))
            .with_context(|| format!("{name} never saw its peer"))?;
        let peer_name = fabric::sh(
            a,
            &format!("cat /sys/bus/pci/devices/*/fabric/peers/{peer}/name"),
        )?;
        let window = fabric::sh(
            a,
            &format!("cat /sys/bus/pci/devices/*/fabric/peers/{peer}/window"),
        )?;
        println!(
            "  {name:<9} is host {id}; peer {peer} ({}) is up, its RAM reachable through window {}",
            peer_name.trim(),
            window.trim()
        );
    }

    say("messages across the fabric: 2000 round trips each way, checked for integrity and order");
    for (name, a, peer) in [("lender", l, 1), ("borrower", b, 0)] {
        let r = fabric::selftest(a, peer, 2000, 200, 16)?;
        println!(
            "  {name:<9} -> peer {peer}: {} ok, {} errors, round trip p50 {} us, p99 {} us (TCG-emulated hosts)",
            r.get("ok").map_or("?", String::as_str),
            r.get("errors").map_or("?", String::as_str),
            fabric::counter(&r, "p50_ns")? / 1000,
            fabric::counter(&r, "p99_ns")? / 1000
        );
        anyhow::ensure!(
            r.get("result").map(String::as_str) == Some("pass"),
            "self-test failed: {r:?}"
        );
    }

    say("the borrower runs KVM guests: booting one inside it (nested under TCG)");
    fabric::sh(b, "modprobe kvm_amd")?;
    let cmd = "echo hello from a KVM guest on $(uname -n), kernel $(uname -r)";
    let run = guest::run(b, &tools::images_dir()?, cmd, "")?;
    for line in run.output.lines() {
        println!("  guest: {line}");
    }
    anyhow::ensure!(run.rc == 0, "guest command failed:\n{}", run.console);

    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ndemo FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
