//! Foundation tests on the two-host cluster: the fabric links up, carries
//! messages intact and in order through rings in each receiver's RAM, the
//! borrower runs a KVM guest, and a host that dies is noticed while the
//! survivor keeps working.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::{self, counter};
use devlend_vmtests::guest;
use devlend_vmtests::{Check, Suite};
use devlend_wire::{ControlArea, CtlLayout, HostInfo, HostSlot, HostState, MsgHdr, RingCtrl};

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

/// With the link up, `count` pings of `size` bytes each way pass.
fn pings_pass_both_ways(c: &mut Cluster, count: u32, size: u32) -> anyhow::Result<()> {
    let (lid, bid) = fabric_up(c)?;
    for (host, peer) in [(LENDER, bid), (BORROWER, lid)] {
        let res = fabric::selftest(c.agent(host)?, peer, count, size, 8)?;
        ensure!(
            res.get("result").map(String::as_str) == Some("pass"),
            "{host}: {res:?}"
        );
    }
    Ok(())
}

/// A host's info slot, as the control area file holds it now.
fn host_info(area: &ControlArea, id: u32) -> anyhow::Result<HostInfo> {
    match area.read_host(id)? {
        HostSlot::Valid(h) => Ok(h),
        other => bail!("host {id}'s slot: {other:?}"),
    }
}

/// `len` bytes at `off` of a host's RAM file (its physical memory).
fn read_ram(c: &Cluster, host: &str, off: u64, len: usize) -> anyhow::Result<Vec<u8>> {
    let path = c.paths().ram_file(host);
    let mut buf = vec![0u8; len];
    File::open(&path)
        .and_then(|f| f.read_exact_at(&mut buf, off))
        .with_context(|| format!("reading {len} bytes at {off:#x} of {}", path.display()))?;
    Ok(buf)
}

/// The indices of `owner`'s inbox entry for `peer`, read in its RAM file.
fn inbox_ctrl(
    c: &Cluster,
    layout: &CtlLayout,
    owner: (&str, &HostInfo),
    peer: u32,
) -> anyhow::Result<(u64, RingCtrl)> {
    let entry = owner.1.inbox_offset(layout)? + layout.inbox_entry_offset(peer)?;
    let buf = read_ram(c, owner.0, entry, devlend_wire::sys::DL_RING_CTRL_SIZE)?;
    Ok((entry, RingCtrl::decode(&buf)?))
}

/// The rings live in each receiver's RAM (control area layout 2). After
/// pings one way, read on the outer machine: the receiver's inbox entry
/// for the sender, in the receiver's RAM file, has its producer index
/// moved by exactly the messages the sender counted, and its last slot
/// holds a message from the sender's incarnation; the consumer index
/// mirrored into the sender's inbox says the receiver took them all; and
/// each host's slot binds the other's incarnation.
fn fabric_rings_in_receivers_ram(c: &mut Cluster) -> anyhow::Result<()> {
    let (lid, bid) = fabric_up(c)?;
    let area = ControlArea::open(c.paths().ctl_file())?;
    let layout = *area.layout();
    for (sid, sname, rid, rname) in [(lid, LENDER, bid, BORROWER), (bid, BORROWER, lid, LENDER)] {
        let (s, r) = (host_info(&area, sid)?, host_info(&area, rid)?);
        ensure!(
            r.bound_to(sid) == Some(s.incarnation) && s.bound_to(rid) == Some(r.incarnation),
            "{sname} and {rname} are not bound to each other: {:?} / {:?}",
            s.bound,
            r.bound
        );
        let tx_before = counter(&fabric::peer_counters(c.agent(sname)?, rid)?, "tx_msgs")?;
        let (_, before) = inbox_ctrl(c, &layout, (rname, &r), sid)?;
        let res = fabric::selftest(c.agent(sname)?, rid, 500, 64, 8)?;
        ensure!(
            res.get("result").map(String::as_str) == Some("pass"),
            "{sname}: {res:?}"
        );
        let tx_after = counter(&fabric::peer_counters(c.agent(sname)?, rid)?, "tx_msgs")?;
        let (entry, after) = inbox_ctrl(c, &layout, (rname, &r), sid)?;
        let moved = after.prod.wrapping_sub(before.prod);
        ensure!(
            u64::from(moved) == tx_after - tx_before && moved >= 500,
            "{sname} -> {rname}: the producer index in {rname}'s RAM moved by {moved},              {sname} sent {} messages",
            tx_after - tx_before
        );
        let last = layout.inbox_slot_offset(sid, after.prod.wrapping_sub(1))?
            - layout.inbox_entry_offset(sid)?;
        let slot = read_ram(c, rname, entry + last, layout.slot_size() as usize)?;
        let hdr = MsgHdr::decode(&slot)?;
        ensure!(
            hdr.src == sid && hdr.epoch == s.incarnation as u32,
            "{sname}'s last message in {rname}'s RAM: {hdr:?}"
        );
        // Its consumer index, mirrored into the sender's inbox, catches up.
        let t0 = Instant::now();
        loop {
            let (_, mirror) = inbox_ctrl(c, &layout, (sname, &s), rid)?;
            if mirror.cons == after.prod {
                break;
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(10),
                "{rname} consumed {} of {sname}'s ring, which holds {}",
                mirror.cons,
                after.prod
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        println!(
            "  {sname} -> {rname}: {moved} messages in {rname}'s RAM at {:#x}, last seq {}",
            r.inbox_phys, hdr.seq
        );
    }
    Ok(())
}

/// A peer's slot that stops vouching for its inbox gets no more stores:
/// while the borrower floods the lender with pings, the lender's slot is
/// made, behind its back, to no longer bind the borrower (its `bound`
/// entry zeroed in the control area file). The borrower refuses its next
/// store (counted `tx_fenced`), and from then on its entry in the
/// lender's inbox, read in the lender's RAM file, does not move; its link
/// goes down and the flood fails. With the entry put back, the link comes
/// up again on the same ring pair and pings pass both ways.
fn fabric_stores_stop_when_slot_stops_vouching(c: &mut Cluster) -> anyhow::Result<()> {
    let (lid, bid) = fabric_up(c)?;
    let area = ControlArea::open(c.paths().ctl_file())?;
    let layout = *area.layout();
    let l = host_info(&area, lid)?;
    let bound = l
        .bound_to(bid)
        .context("the lender does not bind the borrower")?;
    let bound_at = layout.host_offset(lid)?
        + std::mem::offset_of!(devlend_wire::sys::dl_host_info, bound) as u64
        + 8 * u64::from(bid);
    let ctl = std::fs::OpenOptions::new()
        .write(true)
        .open(c.paths().ctl_file())?;
    let fenced = || -> anyhow::Result<u64> {
        counter(
            &fabric::peer_counters(c.agent(BORROWER)?, lid)?,
            "tx_fenced",
        )
    };
    let prod = || -> anyhow::Result<u32> { Ok(inbox_ctrl(c, &layout, (LENDER, &l), bid)?.1.prod) };
    let fenced_before = fenced()?;
    let b = c.agent(BORROWER)?;
    let (res, flood) = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            b.sh(
                &format!(
                    "echo 'peer={lid} count=1000000 size=64 window=8' > /sys/kernel/debug/devlend/selftest"
                ),
                Duration::from_secs(300),
            )
        });
        let res = (|| {
            let p0 = prod()?;
            let t0 = Instant::now();
            while prod()?.wrapping_sub(p0) < 100 {
                ensure!(
                    t0.elapsed() < Duration::from_secs(30),
                    "the flood does not flow"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            ctl.write_all_at(&0u64.to_le_bytes(), bound_at)?;
            let t0 = Instant::now();
            while fenced()? == fenced_before {
                ensure!(
                    t0.elapsed() < Duration::from_secs(10),
                    "no store refused while the lender's slot does not bind the borrower"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let p1 = prod()?;
            std::thread::sleep(Duration::from_secs(1));
            let p2 = prod()?;
            ensure!(
                p1 == p2,
                "the borrower stored into the lender's inbox after its check failed: prod {p1} -> {p2}"
            );
            fabric::wait_peer_state(b, lid, "down", Duration::from_secs(10))
                .context("the borrower's link to the lender")?;
            Ok(p2)
        })();
        ctl.write_all_at(&bound.to_le_bytes(), bound_at)
            .expect("putting the lender's binding back");
        (res, flood.join().expect("flood thread"))
    });
    let p = res?;
    let flood = flood?;
    ensure!(
        flood.exit_code != Some(0),
        "the flood went through a fenced ring: {flood:?}"
    );
    println!(
        "  refused {} store(s); the lender's inbox stayed at {p}",
        fenced()? - fenced_before
    );
    pings_pass_both_ways(c, 200, 64).context("with the binding back")?;
    let after = inbox_ctrl(c, &layout, (LENDER, &l), bid)?.1.prod;
    ensure!(
        after.wrapping_sub(p) >= 200,
        "the same ring pair goes on: prod {p} -> {after}"
    );
    Ok(())
}

/// A host that leaves frees its inbox only once its peer has stopped
/// writing into it: the borrower's modules unloaded while the lender is
/// up, the lender drops its binding to the borrower, and the borrower's
/// kernel frees its inbox (no "leaked"). Loaded again, the two bind anew
/// and carry messages.
fn fabric_leave_waits_for_peers(c: &mut Cluster) -> anyhow::Result<()> {
    let (lid, bid) = fabric_up(c)?;
    let b = c.agent(BORROWER)?;
    let mark: usize = fabric::sh(b, "dmesg | wc -l")?.trim().parse()?;
    let t0 = Instant::now();
    fabric::unload_modules(b)?;
    let took = t0.elapsed();
    let log = fabric::sh(b, &format!("dmesg | tail -n +{}", mark + 1))?;
    ensure!(
        log.contains("left fabric") && !log.contains("leaked"),
        "the borrower's kernel log on leaving:\n{log}"
    );
    let area = ControlArea::open(c.paths().ctl_file())?;
    let l = host_info(&area, lid)?;
    ensure!(
        l.bound_to(bid).is_none(),
        "the lender still binds the borrower that left: {:?}",
        l.bound
    );
    match area.read_host(bid)? {
        HostSlot::Valid(h) if h.state == HostState::Absent => {}
        other => bail!("the borrower's slot after leaving: {other:?}"),
    }
    println!("  left in {:.1} s, its inbox freed", took.as_secs_f64());
    pings_pass_both_ways(c, 200, 64).context("after the borrower came back")
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
    let area = ControlArea::open(c.paths().ctl_file())?;
    let old = host_info(&area, lid)?.incarnation;
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
    // A new ring pair, bound to the new incarnation on both sides.
    let (l, b) = (host_info(&area, lid)?, host_info(&area, bid)?);
    ensure!(
        l.incarnation != old
            && b.bound_to(lid) == Some(l.incarnation)
            && l.bound_to(bid) == Some(b.incarnation),
        "after the restart: lender {:#x} (was {old:#x}) bound {:?}, borrower bound {:?}",
        l.incarnation,
        l.bound,
        b.bound
    );
    pings_pass_both_ways(c, 1000, 128)
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
    // Reports of earlier checks (a host slow under a loaded machine, as a
    // nested guest can make it) stay for their own artifacts; only a new
    // one counts here.
    let earlier = c.freeze_reports();
    if !earlier.is_empty() {
        println!("  earlier watchdog reports, left alone: {earlier:?}");
    }
    let new_reports = || -> Vec<std::path::PathBuf> {
        c.freeze_reports()
            .into_iter()
            .filter(|r| !earlier.contains(r))
            .collect()
    };
    qmp("stop")?;
    // Reported at 4 s of silence; resumed before the lender's 8 s.
    let t0 = Instant::now();
    let mut reports = Vec::new();
    while reports.is_empty() && t0.elapsed() < Duration::from_secs(7) {
        std::thread::sleep(Duration::from_millis(200));
        reports = new_reports();
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
    suite().run(boot)
}

/// The checks of this suite, with its reset; `twohost` runs them on the
/// cluster it shares with the other two-host suites.
pub fn suite() -> Suite {
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
            name: "fabric_rings_in_receivers_ram",
            run: fabric_rings_in_receivers_ram,
        },
        Check {
            name: "fabric_stores_stop_when_slot_stops_vouching",
            run: fabric_stores_stop_when_slot_stops_vouching,
        },
        Check {
            name: "fabric_leave_waits_for_peers",
            run: fabric_leave_waits_for_peers,
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
    Suite::new("fabric", checks).reset(devlend_vmtests::fixture::reset_hosts)
}
