//! Foundation tests on the two-host cluster: the fabric links up, carries
//! messages intact and in order, the borrower runs a KVM guest, and a host
//! that dies is noticed while the survivor keeps working.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::{self, counter};
use devlend_vmtests::guest;
use devlend_vmtests::{Check, Suite};

const LENDER: &str = "lender";
const BORROWER: &str = "borrower";
const LINK_TIMEOUT: Duration = Duration::from_secs(60);

fn boot() -> anyhow::Result<Cluster> {
    devlend_vmtests::boot_topology("two-host")
}

/// Module loaded on both hosts and each sees the other up.
fn fabric_up(c: &mut Cluster) -> anyhow::Result<(u32, u32)> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    fabric::ensure_module(l)?;
    fabric::ensure_module(b)?;
    let (lid, bid) = (fabric::host_id(l)?, fabric::host_id(b)?);
    fabric::wait_peer_state(l, bid, "up", LINK_TIMEOUT).context("lender's view")?;
    fabric::wait_peer_state(b, lid, "up", LINK_TIMEOUT).context("borrower's view")?;
    Ok((lid, bid))
}

/// (a) Two hosts boot, the module loads on both, each lists the other as a
/// peer with link up.
fn fabric_peers_up(c: &mut Cluster) -> anyhow::Result<()> {
    let (lid, bid) = fabric_up(c)?;
    ensure!(lid != bid, "both hosts claim fabric id {lid}");
    // The ids are the topology's order: the launcher's socket per host.
    ensure!(
        (lid, bid) == (0, 1),
        "ids {lid},{bid} do not follow the topology"
    );
    let names = fabric::sh(
        c.agent(BORROWER)?,
        &format!("cat /sys/bus/pci/devices/*/fabric/peers/{lid}/name"),
    )?;
    ensure!(
        names.trim() == LENDER,
        "borrower calls peer {lid} {names:?}"
    );
    Ok(())
}

const MESSAGES: u32 = 10_000;

/// (b) 10 000 messages each way, complete, in order, none lost or
/// duplicated, checksums verified; round-trip latency printed.
fn fabric_messages_each_way(c: &mut Cluster) -> anyhow::Result<()> {
    let (lid, bid) = fabric_up(c)?;
    let before_l = fabric::peer_counters(c.agent(LENDER)?, bid)?;
    let before_b = fabric::peer_counters(c.agent(BORROWER)?, lid)?;
    // Both directions at once.
    let (from_l, from_b) = std::thread::scope(|s| {
        let l = s.spawn(|| fabric::selftest(c.agent(LENDER)?, bid, MESSAGES, 200, 16));
        let b = s.spawn(|| fabric::selftest(c.agent(BORROWER)?, lid, MESSAGES, 200, 16));
        (
            l.join().expect("lender thread"),
            b.join().expect("borrower thread"),
        )
    });
    for (who, res) in [("lender->borrower", from_l?), ("borrower->lender", from_b?)] {
        println!(
            "  {who}: {} round trips, p50 {} us, p99 {} us, max {} us",
            res.get("ok").map_or("?", String::as_str),
            counter(&res, "p50_ns")? / 1000,
            counter(&res, "p99_ns")? / 1000,
            counter(&res, "max_ns")? / 1000,
        );
        ensure!(
            res.get("result").map(String::as_str) == Some("pass"),
            "{who}: {res:?}"
        );
        ensure!(
            counter(&res, "ok")? == u64::from(MESSAGES),
            "{who}: {res:?}"
        );
        ensure!(
            counter(&res, "errors")? == 0 && counter(&res, "timeouts")? == 0,
            "{who}: {res:?}"
        );
    }
    // The receivers' own accounting: every ping arrived once, in order, intact.
    for (who, host, peer, before) in [
        ("lender", LENDER, bid, before_l),
        ("borrower", BORROWER, lid, before_b),
    ] {
        let after = fabric::peer_counters(c.agent(host)?, peer)?;
        let got = counter(&after, "ping_rx")? - counter(&before, "ping_rx")?;
        ensure!(
            got == u64::from(MESSAGES),
            "{who} received {got} pings: {after:?}"
        );
        for k in [
            "ping_crc_errors",
            "ping_order_errors",
            "rx_seq_errors",
            "rx_bad_msgs",
        ] {
            ensure!(
                counter(&after, k)? == counter(&before, k)?,
                "{who}: {k} grew: {after:?}"
            );
        }
    }
    Ok(())
}

/// (c) Inside the borrower a KVM guest boots and runs a command whose
/// output we check.
fn nested_kvm_guest(c: &mut Cluster) -> anyhow::Result<()> {
    let b = c.agent(BORROWER)?;
    fabric::sh(b, "modprobe kvm_amd && test -c /dev/kvm")
        .context("KVM in the borrower (needs -cpu max under TCG for SVM)")?;
    let cmd = "echo guest-says-$((6*7)); dmesg | grep -o 'Hypervisor detected: KVM'";
    let run = guest::run(b, &tools::guest_images_dir()?, cmd, "")?;
    println!("  nested guest ran in {:.1} s", run.elapsed.as_secs_f64());
    ensure!(run.rc == 0, "guest command failed: {run:?}");
    ensure!(
        run.output.contains("guest-says-42"),
        "guest output: {}",
        run.output
    );
    ensure!(
        run.output.contains("Hypervisor detected: KVM"),
        "not under KVM: {}",
        run.output
    );
    Ok(())
}

/// (d) A peer whose host is killed is reported down within a bounded time,
/// and the survivor keeps working: requests to the dead peer fail at once,
/// and when the host comes back the link comes up and carries messages.
fn fabric_peer_down_and_back(c: &mut Cluster) -> anyhow::Result<()> {
    let (lid, _bid) = fabric_up(c)?;
    c.kill_host(LENDER)?;
    let b = c.agent(BORROWER)?;
    let took = fabric::wait_peer_state(b, lid, "down", Duration::from_secs(30))
        .context("dead lender not reported down")?;
    println!(
        "  dead peer reported down after {:.1} s",
        took.as_secs_f64()
    );
    // A request to the dead peer fails promptly with an error, not a hang.
    let t0 = Instant::now();
    let res = b.sh(
        &format!(
            "echo 'peer={lid} count=10 size=64 window=1' > /sys/kernel/debug/devlend/selftest"
        ),
        Duration::from_secs(30),
    )?;
    ensure!(
        res.exit_code != Some(0),
        "self-test to a dead peer succeeded: {res:?}"
    );
    ensure!(
        t0.elapsed() < Duration::from_secs(15),
        "took {:?} to fail",
        t0.elapsed()
    );
    // The survivor is fine: it answers and its fabric adapter still works.
    ensure!(fabric::host_id(b)? == 1);
    // The lender comes back: link up again, messages flow both ways.
    c.restart_host(LENDER)?;
    let (lid, bid) = fabric_up(c)?;
    for (host, peer) in [(LENDER, bid), (BORROWER, lid)] {
        let res = fabric::selftest(c.agent(host)?, peer, 1000, 128, 8)?;
        ensure!(
            res.get("result").map(String::as_str) == Some("pass"),
            "{host}: {res:?}"
        );
    }
    Ok(())
}

/// A host that stops beating while its QEMU runs (here: paused over QMP,
/// which the cluster is not told about) is written down by the cluster's
/// watchdog: QEMU's threads, the VM's state, registers and local APICs;
/// and it notes when the host beats again.
fn watchdog_writes_down_a_silent_host(c: &mut Cluster) -> anyhow::Result<()> {
    let (_lid, bid) = fabric_up(c)?;
    let downs = counter(&fabric::peer_counters(c.agent(LENDER)?, bid)?, "link_downs")?;
    let qmp_sock = c.paths().qmp_sock(BORROWER);
    let qmp = |cmd: &str| -> anyhow::Result<()> {
        let mut q = devlend::qmp::Qmp::connect(&qmp_sock, Duration::from_secs(10))?;
        q.execute(cmd, None, Duration::from_secs(10))?;
        Ok(())
    };
    ensure!(c.freeze_reports().is_empty(), "{:?}", c.freeze_reports());
    qmp("stop")?;
    // Reported at 4 s of silence; resumed before the lender's 8 s.
    let t0 = Instant::now();
    let mut reports = Vec::new();
    while reports.is_empty() && t0.elapsed() < Duration::from_secs(7) {
        std::thread::sleep(Duration::from_millis(200));
        reports = c.freeze_reports();
    }
    // The report is written while QEMU's monitor is ours: wait for it.
    qmp("cont")?;
    ensure!(
        !reports.is_empty(),
        "no report of a host silent for {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let text = std::fs::read_to_string(&reports[0])?;
    for want in [
        "== host borrower: heartbeat",
        "CPU 0/TCG",
        "\"status\":\"paused\"",
        "RIP=",
        "dumping local APIC state for CPU 0",
    ] {
        ensure!(
            text.contains(want),
            "no {want:?} in {}:\n{text}",
            reports[0].display()
        );
    }
    println!(
        "  report after {:.1} s of silence: {} ({} lines)",
        t0.elapsed().as_secs_f64(),
        reports[0].display(),
        text.lines().count()
    );
    // The host beats again, the report says so, and its peer saw no outage.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&reports[0])?;
        if text.contains("heartbeat moved again") {
            break;
        }
        ensure!(Instant::now() < deadline, "resumed host not noted:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let l = c.agent(LENDER)?;
    fabric::wait_peer_state(l, bid, "up", LINK_TIMEOUT)?;
    let downs_after = counter(&fabric::peer_counters(l, bid)?, "link_downs")?;
    ensure!(
        downs_after == downs,
        "the lender took the silent borrower down ({downs} -> {downs_after} link downs)"
    );
    c.clear_freeze_reports();
    ensure!(!reports[0].exists(), "report not cleared");
    Ok(())
}

fn main() {
    let checks = vec![
        Check {
            name: "fabric_peers_up",
            run: fabric_peers_up,
        },
        Check {
            name: "fabric_messages_each_way",
            run: fabric_messages_each_way,
        },
        Check {
            name: "nested_kvm_guest",
            run: nested_kvm_guest,
        },
        Check {
            name: "watchdog_writes_down_a_silent_host",
            run: watchdog_writes_down_a_silent_host,
        },
        Check {
            name: "fabric_peer_down_and_back",
            run: fabric_peer_down_and_back,
        },
    ];
    Suite::new("fabric", checks).run(boot)
}
