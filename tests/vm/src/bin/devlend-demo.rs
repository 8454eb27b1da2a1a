//! `devlend-demo`: the story of devlend on the emulated cluster, told step
//! by step. Run by `./demo.sh`: a remote NVMe used by a KVM guest on the
//! two-host cluster; with `--sriov`, two guests on two hosts sharing one
//! NIC through its SR-IOV virtual functions (`devices.toml`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use devlend_cluster::topology::HostSpec;
use devlend_cluster::{tools, Topology};
use devlend_vmtests::{fabric, guest, lending, sriov};

fn say(step: &str) {
    println!("\n==> {step}");
}

/// Boots topology `name`, saying what each host has (`devices`: the
/// devices of a host the story is about).
fn boot(
    name: &str,
    devices: impl Fn(&HostSpec) -> String,
) -> anyhow::Result<devlend_cluster::Cluster> {
    let topo =
        Topology::load(&tools::repo_root().join(format!("qemu-scripts/topologies/{name}.toml")))?;
    say(&format!(
        "booting the emulated cluster: {} QEMU hosts whose RAM files are shared",
        topo.hosts.len()
    ));
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
            devices(h)
        );
    }
    let t0 = Instant::now();
    let cluster = devlend_vmtests::boot_topology(name)?;
    println!(
        "  the hosts answer after {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(cluster)
}

fn run() -> anyhow::Result<()> {
    let mut cluster = boot("two-host", |h| {
        h.nvme
            .iter()
            .map(|d| format!(", NVMe {} ({} MiB)", d.id, d.size.mib()))
            .collect()
    })?;
    if let Err(e) = tell(&mut cluster) {
        devlend_vmtests::suite::collect_failure(&cluster, "demo", "demo");
        cluster.keep_logs(true);
        return Err(e);
    }
    say("tearing the cluster down");
    cluster.shutdown();
    println!("\ndemo complete: a KVM guest on the borrower used the lender's NVMe with its own driver; the device is back in the pool");
    Ok(())
}

/// The story, on a booted cluster.
fn tell(cluster: &mut devlend_cluster::Cluster) -> anyhow::Result<()> {
    say("loading devlend's modules (fabric core, ivshmem backend, lender, borrower) on both hosts; each finds its fabric adapter and its peer");
    let (l, b) = (cluster.agent("lender")?, cluster.agent("borrower")?);
    // Both first: a host sees its peer up only once the peer's module runs.
    lending::ensure_module(l)?;
    lending::ensure_module(b)?;
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

    let cli = |a: &devlend_agent::AgentClient, args: &str| -> anyhow::Result<String> {
        let bin = devlend_cluster::host_view(&tools::our_binary("devlend", "DEVLEND_CLI")?);
        fabric::sh(a, &format!("{} {args}", bin.display()))
    };
    let show = |text: &str| {
        for line in text.lines() {
            println!("  | {line}");
        }
    };

    say("lender: lending its NVMe (devlend lend): it leaves the nvme driver for an IOMMU domain of its own");
    let nvme = lending::find_by_class(l, lending::NVME_CLASS)?;
    cli(l, &format!("lend {}", nvme.addr))?;
    show(&cli(l, "devices")?);

    say("borrower: the remote NVMe appears (devlend remote); an mdev stands for it");
    lending::wait_until(
        "remote NVMe",
        Duration::from_secs(60),
        || Ok(lending::available_instances(b, "devlend-nvme")?.to_string()),
        "1",
    )?;
    show(&cli(b, "remote")?);
    let uuid = cli(b, &format!("mdev create --device lender/{}", nvme.addr))?
        .trim()
        .to_owned();
    println!(
        "  mdev {uuid}; QEMU gets: {}",
        cli(b, &format!("qemu-args {uuid}"))?.trim()
    );

    say("borrower: a KVM guest boots with it; its own nvme driver writes 64 MiB with O_DIRECT and reads it back");
    fabric::sh(b, "modprobe kvm_amd")?;
    let run = guest::run_with(
        b,
        &tools::guest_images_dir()?,
        &lending::nvme_guest_script(&lending::nvme_write_and_read()),
        &guest::GuestOpts {
            mem_mib: 512,
            extra_qemu_args: &lending::vfio_arg(&uuid),
            qmp: None,
            kernel_args: "",
        },
    )?;
    for line in run.output.lines() {
        println!("  guest: {line}");
    }
    anyhow::ensure!(run.rc == 0, "guest failed:\n{}", run.console);
    let written = lending::output_field(&run.output, "written")?;
    anyhow::ensure!(
        lending::output_field(&run.output, "read")? == written,
        "read back differs"
    );

    say("outside every VM: the lender's backing file holds the guest's bytes");
    let file = cluster.paths().nvme_file("lender", "nvme0");
    let on_disk = lending::file_sha256(&file)?;
    println!(
        "  {} at {} MiB: sha256 {on_disk}",
        file.display(),
        lending::IO_OFFSET_MIB
    );
    anyhow::ensure!(
        on_disk == written,
        "the backing file does not hold the guest's bytes"
    );

    say("the guest powered off: the device is back in the pool");
    lending::wait_until(
        "lender state",
        Duration::from_secs(60),
        || lending::lent_state(l, &nvme.addr),
        "available",
    )?;
    cli(b, &format!("mdev remove {uuid}"))?;
    show(&cli(l, "devices")?);
    Ok(())
}

/// The second story: the lender's igb keeps its PF and lends two VFs, one
/// to a guest on each borrower; the guests talk through the lender's NIC.
fn run_sriov() -> anyhow::Result<()> {
    let mut cluster = boot("devices", |h| {
        h.igb
            .iter()
            .map(|n| format!(", an igb NIC (82576, SR-IOV) {}", n.id))
            .collect()
    })?;
    let res = (|| -> anyhow::Result<()> {
        say("loading devlend's modules on the three hosts; the lender finds its igb");
        let l = cluster.agent("lender")?;
        lending::ensure_module(l)?;
        let pf = lending::find_all_by_class(l, "0x020000")?
            .into_iter()
            .find(|d| d.device == "0x10c9")
            .context("no igb on the lender")?
            .addr;
        sriov::two_guests_share_a_nic(&cluster, &pf, None, &say)
    })();
    if let Err(e) = res {
        devlend_vmtests::suite::collect_failure(&cluster, "demo", "sriov");
        cluster.keep_logs(true);
        return Err(e);
    }
    say("tearing the cluster down");
    cluster.shutdown();
    println!("\ndemo complete: two KVM guests on two hosts shared the lender's NIC through its virtual functions, with their own igbvf driver; the PF stayed with the lender");
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => run(),
        ["--sriov"] => run_sriov(),
        _ => {
            eprintln!("usage: devlend-demo [--sriov]\n  (none)   a remote NVMe used by a KVM guest (two hosts)\n  --sriov  two guests on two hosts share one NIC through its VFs (three hosts)");
            return ExitCode::from(2);
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\ndemo FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
