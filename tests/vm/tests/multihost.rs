//! Four hosts on one fabric (`four-host.toml`): every host sees the three
//! others up, and two borrowers take "any NVMe" from two lenders' pool, a
//! third request waiting for one to come back (`devlend_vmtests::pool`).
//! Then devlend's NTB backend runs on the four ports of one emulated NTB
//! switch; one lender's NVMe reads into the other's RAM-backed BAR
//! (peer-to-peer across two lenders); a frozen lender's quarantine stops
//! the borrower from borrowing from the other lender past its cap; and
//! last a peer floods one host while a third pings it
//! (`third_host_pings_unhurt_by_a_flooding_peer`). `./test.sh multihost`
//! runs these with the devices suite's multi-host checks; `./test.sh ntb`
//! selects the NTB one, `./test.sh p2p` the peer-to-peer one,
//! `./test.sh flood` the flood.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, grew, sh};
use devlend_vmtests::lending::{self, wait_until};
use devlend_vmtests::p2p::{self, P2P_BAR_ADDR, PMR_BYTES};
use devlend_vmtests::tool::{fuzz_peer_args, LineTool};
use devlend_vmtests::{ntb, ownership, pool, twohost, Check, Scope, Suite};

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

/// The flood check's hosts: the peer that floods (its QEMU killed,
/// `devlend-fuzz-peer --flood` in its place), the host it floods, and a
/// third host that pings the flooded one meanwhile.
const FLOODER: &str = "borrower2";
const FLOODED: &str = "borrower";
const PINGER: &str = "lender";
/// Pings of each round, one at a time.
const FLOOD_PINGS: u32 = 1000;
/// The liveness bound: the third host's pings do not wait behind the
/// flood for a second. Every ping must come back (the self-test gives each
/// 5 s), and 99% of them within this; the percentile, not the maximum, so
/// that a ping caught by a stall of an emulated host itself (seen up to
/// 3 s on a busy machine) does not fail the check. Before the fix, each
/// hello of the flood that the flooded host answered kept its receive work
/// waiting 1 s for ring room, up to 128 in a row, and the pings timed
/// out; on these TCG hosts a ping takes milliseconds, flood or not.
const FLOOD_P99_BOUND_NS: u64 = 1_000_000_000;

/// The counters of the flood check: the flooded host's for the flooder
/// and for the pinger, and the pinger's for the flooded host.
struct FloodCounters {
    flooder: HashMap<String, String>,
    pinger: HashMap<String, String>,
    seen_by_pinger: HashMap<String, String>,
}

fn flood_counters(c: &Cluster, ids: &FloodIds) -> anyhow::Result<FloodCounters> {
    let f = c.agent(FLOODED)?;
    Ok(FloodCounters {
        flooder: fabric::peer_counters(f, ids.flooder)?,
        pinger: fabric::peer_counters(f, ids.pinger)?,
        seen_by_pinger: fabric::peer_counters(c.agent(PINGER)?, ids.flooded)?,
    })
}

struct FloodIds {
    flooder: u32,
    flooded: u32,
    pinger: u32,
}

/// One round of the pinger's self-test toward the flooded host: the
/// errors it shows (every ping answered intact, 99% of them within
/// [`FLOOD_P99_BOUND_NS`]), and a line for the log.
fn ping_round(c: &Cluster, ids: &FloodIds, what: &str) -> anyhow::Result<(Vec<String>, String)> {
    let r = fabric::selftest_outcome(
        c.agent(PINGER)?,
        ids.flooded,
        FLOOD_PINGS,
        64,
        1,
        Duration::from_secs(120),
    )
    .with_context(|| format!("{PINGER}'s pings {what}"))?;
    let num = |k: &str| fabric::counter(&r, k).unwrap_or(u64::MAX);
    let line = format!(
        "{PINGER} -> {FLOODED} {what}: ok={} errors={} timeouts={} p50={} us p99={} us max={} us",
        r.get("ok").map_or("?", String::as_str),
        r.get("errors").map_or("?", String::as_str),
        r.get("timeouts").map_or("?", String::as_str),
        num("p50_ns") / 1000,
        num("p99_ns") / 1000,
        num("max_ns") / 1000,
    );
    let mut errors = Vec::new();
    if r.get("write_ok").map(String::as_str) != Some("true")
        || r.get("result").map(String::as_str) != Some("pass")
        || num("ok") != u64::from(FLOOD_PINGS)
        || num("count") != u64::from(FLOOD_PINGS)
    {
        errors.push(format!(
            "not every ping of {PINGER} was answered intact {what} (a ping waits 5 s): {r:?}"
        ));
    } else if num("p99_ns") >= FLOOD_P99_BOUND_NS {
        errors.push(format!(
            "more than 1% of {PINGER}'s pings waited {} ms or longer {what}: {r:?}",
            FLOOD_P99_BOUND_NS / 1_000_000
        ));
    }
    Ok((errors, line))
}

/// A peer that floods one host with messages whose handlers post answers
/// back to it, and never takes them, must not hold up that host's other
/// peers (issue 26 item 4). `borrower2`'s QEMU is killed and
/// `devlend-fuzz-peer --flood` takes its place toward `borrower`, whose
/// emulated NTB port (`devlend_ntb_emu.ko`) answers every NTB hello that
/// asks (`DL_NTB_F_ASK`) with a hello of its own. The tool never takes
/// `borrower`'s messages: its consumer index of the ring back stays put,
/// so after the first answers fill what posted messages may use of that
/// ring, each answer finds no room. Meanwhile `lender` pings `borrower`
/// (the fabric self-test, 1000 pings one at a time), twice: while the
/// hellos pour in (first round), and after the tool has filled the whole
/// ring back with the answers to pings of its own, so that `borrower`
/// holds its messages back (second round). Asserted:
///
/// - the flood was taken and held back: the tool saw the ring back fill
///   with `borrower`'s hellos up to the posted share and then whole
///   (`share_full`, `held`); `borrower` counted for the flooder exactly the
///   messages the tool saw taken (`rx_msgs`), among them every hello and
///   the pings taken (`ping_rx`), more than a ring of hellos taken during
///   the first round, answers that found no room (`tx_ring_full`) and
///   the backpressure (`rx_held_back`);
/// - in both rounds every ping of `lender` was answered intact (each
///   within the self-test's 5 s) and 99% of them within a second
///   (`p99_ns`; see [`FLOOD_P99_BOUND_NS`]); the maximum and the mean
///   round trip (`answer_ns` / `answers`) printed;
/// - no link went down: `borrower`'s for the flooder and for `lender`,
///   `lender`'s for `borrower` (`link_downs`); `borrower`'s kernel logged no
///   WARN, BUG, oops, lockup or stall;
/// - `borrower2` boots again and `borrower` sees it up.
///
/// Before the fix (c8189b1), the handler answered each hello itself and
/// waited up to 1 s for ring room, 128 hellos a pass: the first round's
/// pings timed out.
fn third_host_pings_unhurt_by_a_flooding_peer(c: &mut Cluster) -> anyhow::Result<()> {
    for h in [FLOODED, PINGER, FLOODER] {
        lending::ensure_module(c.agent(h)?)?;
    }
    let params = c.topology().ntb.module_params();
    ntb::load_emulated_port(c.agent(FLOODED)?, &params)
        .with_context(|| format!("{FLOODED}'s NTB port"))?;
    let ids = FloodIds {
        flooder: fabric::host_id(c.agent(FLOODER)?)?,
        flooded: fabric::host_id(c.agent(FLOODED)?)?,
        pinger: fabric::host_id(c.agent(PINGER)?)?,
    };
    let wait = devlend_vmtests::twohost::WAIT;
    fabric::wait_peer_state(c.agent(FLOODED)?, ids.flooder, "up", wait)?;
    fabric::wait_peer_state(c.agent(FLOODED)?, ids.pinger, "up", wait)?;
    fabric::wait_peer_state(c.agent(PINGER)?, ids.flooded, "up", wait)?;
    // For comparison; it must pass.
    let (calm_errors, calm) = ping_round(c, &ids, "without a flood")?;
    println!("  {calm}");
    ensure!(calm_errors.is_empty(), "{}", calm_errors.join("\n"));
    let mark = ownership::kernel_log_lines(c.agent(FLOODED)?)?;

    c.kill_host(FLOODER)?;
    let bin = env!("CARGO_BIN_EXE_devlend-fuzz-peer");
    let mut args = fuzz_peer_args(c, (FLOODED, ids.flooded), (FLOODER, ids.flooder));
    args.push("--flood".to_owned());
    let mut tool = LineTool::spawn("flood tool", bin, &args)?;
    let stage = Duration::from_secs(120);
    let line = |tool: &LineTool, prefix: &str| -> anyhow::Result<serde_json::Value> {
        let v = tool.line(prefix, stage)?;
        println!("  | {prefix}{v}");
        Ok(v)
    };
    line(&tool, "FLOOD-READY ")?;
    let before = flood_counters(c, &ids)?;
    tool.say("flood")?;
    let flooding = line(&tool, "FLOOD-FLOODING ")?;
    let (mut errors, flooding_line) = ping_round(c, &ids, "while the flooder's hellos poured in")?;
    let mid = flood_counters(c, &ids)?;
    tool.say("hold")?;
    let held = line(&tool, "FLOOD-HELD ")?;
    let (held_errors, held_line) = ping_round(c, &ids, "while the flooder was held back")?;
    // Read while the tool still keeps the flooder up.
    let after = flood_counters(c, &ids)?;
    tool.say("quit")?;
    let done = line(&tool, "FLOOD-DONE ")?;
    let status = tool.finish()?;
    ensure!(status.success(), "the flood tool failed ({status})");
    errors.extend(held_errors);

    let num = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0) as i64;
    let slots = num(&done, "ring_slots");
    let (hellos, pings, taken) = (
        num(&done, "hellos"),
        num(&done, "pings"),
        num(&done, "taken"),
    );
    let (fl_b, fl_m, fl_a) = (&before.flooder, &mid.flooder, &after.flooder);
    let taken_in_round = grew(fl_b, fl_m, "rx_msgs") - num(&flooding, "taken");
    let mean_us = |b: &FloodCounters, a: &FloodCounters| {
        let n = grew(&b.seen_by_pinger, &a.seen_by_pinger, "answers");
        grew(&b.seen_by_pinger, &a.seen_by_pinger, "answer_ns") / n.max(1) / 1000
    };
    println!("  {flooding_line}; mean {} us", mean_us(&before, &mid));
    println!("  {held_line}; mean {} us", mean_us(&mid, &after));
    println!(
        "  the flooder wrote {hellos} hellos and {pings} pings, {FLOODED} took {taken} \
         ({taken_in_round} hellos during the first round); waiting for the flooder in the ring \
         back: {} when the pings began, {} when held back",
        flooding["waiting_kinds"], held["waiting_kinds"]
    );
    let show = |k: &str| format!("{k}=+{}", grew(fl_b, fl_a, k));
    println!(
        "  {FLOODED}'s counters for the flooder: {}",
        [
            "rx_msgs",
            "ping_rx",
            "tx_msgs",
            "tx_ring_full",
            "rx_held_back",
            "link_downs"
        ]
        .map(show)
        .join(" ")
    );

    if flooding["share_full"] != true {
        errors.push(format!(
            "{FLOODED}'s answers to the hellos never filled the posted share of the ring back: {flooding}"
        ));
    }
    if held["held"] != true {
        errors.push(format!(
            "{FLOODED} was never seen holding the flooder's messages back: {held}"
        ));
    }
    if num(&done, "taken") != num(&held, "taken") {
        errors.push(format!(
            "{FLOODED} took the flooder's messages while holding them back: {held} then {done}"
        ));
    }
    if grew(fl_b, fl_a, "rx_msgs") != taken {
        errors.push(format!(
            "{FLOODED} counted {} messages from the flooder (rx_msgs), the flooder saw {taken} taken",
            grew(fl_b, fl_a, "rx_msgs")
        ));
    }
    if taken < hellos || grew(fl_b, fl_a, "ping_rx") != taken - hellos {
        errors.push(format!(
            "{FLOODED} took {taken} of the flooder's {hellos} hellos and {pings} pings, \
             and counted {} pings (ping_rx)",
            grew(fl_b, fl_a, "ping_rx")
        ));
    }
    if taken_in_round <= slots {
        errors.push(format!(
            "{FLOODED} took only {taken_in_round} hellos while {PINGER} pinged it: no flood"
        ));
    }
    for key in ["tx_ring_full", "rx_held_back"] {
        if grew(fl_b, fl_a, key) < 1 {
            errors.push(format!("{FLOODED} did not count {key} for the flooder"));
        }
    }
    for (who, b, a) in [
        (format!("{FLOODED}'s link to the flooder"), fl_b, fl_a),
        (
            format!("{FLOODED}'s link to {PINGER}"),
            &before.pinger,
            &after.pinger,
        ),
        (
            format!("{PINGER}'s link to {FLOODED}"),
            &before.seen_by_pinger,
            &after.seen_by_pinger,
        ),
    ] {
        if grew(b, a, "link_downs") != 0 {
            errors.push(format!("{who} went down during the flood"));
        }
    }
    let trouble = ownership::kernel_trouble(c.agent(FLOODED)?, mark, false)?;
    if !trouble.is_empty() {
        errors.push(format!("{FLOODED}'s kernel log:\n{}", trouble.join("\n")));
    }

    // The flooder's host boots again: its new incarnation comes up.
    c.restart_host(FLOODER)?;
    lending::ensure_module(c.agent(FLOODER)?)?;
    let ups = fabric::counter(&after.flooder, "link_ups")?;
    wait_until(
        &format!("{FLOODED} sees {FLOODER}'s new incarnation up"),
        wait,
        || {
            let kv = fabric::peer_counters(c.agent(FLOODED)?, ids.flooder)?;
            let up = kv.get("state").map(String::as_str) == Some("up")
                && fabric::counter(&kv, "link_ups")? > ups;
            Ok(if up { "up" } else { "not yet" }.to_owned())
        },
        "up",
    )?;
    ensure!(errors.is_empty(), "{}", errors.join("\n"));
    Ok(())
}

/// The borrower's fabric counters line (debugfs `devlend/borrower`).
fn borrower_line(b: &devlend_agent::AgentClient) -> anyhow::Result<HashMap<String, String>> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    text.lines()
        .find(|l| l.starts_with("borrower "))
        .map(fabric::parse_kv)
        .with_context(|| format!("no borrower line in:\n{text}"))
}

const QUARANTINE_MAX: &str = "/sys/module/devlend_borrower/parameters/quarantine_max_pages";

/// A stalled lender keeps pages of the borrower in quarantine, and the
/// borrower caps them (issue 26): while `quarantine_max_pages` or more are
/// quarantined, no new borrow is made through the fabric, from any lender.
/// The lender's NVMe is read by the userspace driver on the borrower; the
/// lender is frozen past the peer timeout, the driver fails and its pages
/// are quarantined. With the cap set to that many pages, a borrow of
/// lender2's NVMe is refused: the driver fails, the borrower counts the
/// refusal and says why, and lender2 never grants it. With the default cap
/// (a quarter of RAM) the same mdev does verified I/O. The frozen lender
/// resumes, the lease settles and the quarantine empties.
fn stall_lender_quarantine_full_refuses_borrows(c: &mut Cluster) -> anyhow::Result<()> {
    for h in HOSTS {
        lending::ensure_module(c.agent(h)?)?;
    }
    let mut nvme = Vec::new();
    for h in ["lender", "lender2"] {
        let a = c.agent(h)?;
        let n = lending::find_by_class(a, lending::NVME_CLASS)?;
        lending::ensure_lent(a, &n.addr)?;
        nvme.push(n);
    }
    let b = c.agent("borrower")?;
    lending::wait_remote_listed(b, &nvme[0].addr, "the lenders' NVMe on the borrower")?;
    let drv = devlend_vmtests::twohost::host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let marks = ownership::kernel_log_lines(b)?;
    let log = "/tmp/quarantine-cap.log";
    let mut s = Scope::new(c);
    s.defer("default quarantine cap", |c| {
        sh(c.agent("borrower")?, &format!("echo 0 > {QUARANTINE_MAX}")).map(drop)
    });
    ownership::start_reader(&mut s, "borrower", &format!("lender/{}", nvme[0].addr), log)?;
    let l = s.agent("lender")?;
    wait_until(
        "lender's NVMe borrowed and mapped",
        Duration::from_secs(120),
        || Ok((!ownership::lender_mapped_pages(l)?.is_empty()).to_string()),
        "true",
    )?;
    let held =
        ownership::stall_lender(&mut s, "lender", "borrower", log, Duration::from_secs(30))?.held;
    ensure!(
        held.quarantined > 0,
        "nothing quarantined after the lender stalled:\n{}",
        held.text
    );

    let b = s.agent("borrower")?;
    sh(b, &format!("echo {} > {QUARANTINE_MAX}", held.quarantined))?;
    let before = fabric::counter(&borrower_line(b)?, "quarantine_refusals")?;
    let u2 = s.mdev(
        "borrower",
        "devlend-nvme",
        Some(&format!("lender2/{}", nvme[1].addr)),
    )?;
    let b = s.agent("borrower")?;
    let out = b.sh(
        &format!("{drv} --mdev {u2} --blocks 64 --ios 20"),
        Duration::from_secs(120),
    )?;
    ensure!(
        out.exit_code != Some(0),
        "lender2's NVMe was borrowed with {} pages quarantined and a cap of as many: {out:?}",
        held.quarantined
    );
    let after = fabric::counter(&borrower_line(b)?, "quarantine_refusals")?;
    ensure!(
        after > before,
        "the driver failed, but not on the quarantine cap (refusals {before} -> {after}): {out:?}"
    );
    let said = sh(
        b,
        &format!(
            "dmesg | tail -n +{} | grep -c 'no new borrow: lenders may still reach' || true",
            marks + 1
        ),
    )?;
    ensure!(
        said.trim().parse::<u32>().unwrap_or(0) >= 1,
        "the borrower did not say why it refused"
    );
    let l2 = s.agent("lender2")?;
    ensure!(
        lending::lent_state(l2, &nvme[1].addr)? == "available",
        "lender2 granted its NVMe although the borrower refused to borrow"
    );
    println!(
        "  {} pages quarantined, cap {0}: borrowing lender2's NVMe refused ({} refusals)",
        held.quarantined,
        after - before
    );

    sh(b, &format!("echo 0 > {QUARANTINE_MAX}"))?;
    let out = b.sh(
        &format!("{drv} --mdev {u2} --blocks 64 --ios 200"),
        Duration::from_secs(300),
    )?;
    ensure!(
        out.exit_code == Some(0),
        "with the default cap, verified I/O on lender2's NVMe failed: {out:?}"
    );
    println!("  with the default cap (a quarter of RAM) the same mdev does verified I/O");

    s.thaw("lender")?;
    let b = s.agent("borrower")?;
    let settled =
        ownership::wait_quarantine_empty(b, "after the lender resumed", Duration::from_secs(120))?;
    println!(
        "  the lender resumed; the quarantine emptied {:.1} s later",
        settled.as_secs_f64()
    );
    let t = ownership::kernel_trouble(b, marks, false)?;
    ensure!(t.is_empty(), "borrower's kernel log:\n{}", t.join("\n"));
    Ok(())
}

/// The tag both lenders give lender2's PMR window in `bar_windows`.
const P2P_PMR_TAG: u32 = 3;

/// Peer-to-peer between devices of two lenders (`./test.sh p2p`,
/// docs/p2p.md case 3): the userspace driver on the borrower holds
/// lender's NVMe (X) and lender2's (Y, whose PMR BAR is RAM from a file
/// that lender has a window onto), puts Y's PMR BAR at an address of its
/// DMA space and has X read a block it wrote into that address. lender2
/// shows the BAR to lender (`DL_MSG_P2P_EXPORT`), lender asks it where
/// (`DL_MSG_P2P_LOOKUP`) and maps X's IOVA onto its window: the block's
/// bytes must be in lender2's PMR file on the outer machine. Then Y goes
/// back to lender2, which has lender drop the mapping before Y's reset
/// (`DL_MSG_P2P_REVOKE`): the same read leaves a sentinel in the file
/// and faults at lender's IOMMU. Last, the same with lender leaving
/// that REVOKE unanswered: lender2's NVMe is lent to nobody until lender
/// answers.
/// What the two-lender P2P checks share: lender's NVMe (X) and lender2's
/// (Y) lent and available, Y's PMR BAR, lender's window onto it, and
/// lender2's host id; the BAR windows are shown once [`P2pAcross::show`]
/// runs.
struct P2pAcross {
    x: lending::PciDev,
    y: lending::PciDev,
    ybar: u32,
    win: String,
    l2_id: u32,
}

impl P2pAcross {
    fn new(c: &Cluster) -> anyhow::Result<Self> {
        let (l1, l2, b) = (
            c.agent("lender")?,
            c.agent("lender2")?,
            c.agent("borrower")?,
        );
        for a in [l1, l2, b] {
            lending::ensure_module(a)?;
        }
        let nvme = |a| -> anyhow::Result<lending::PciDev> {
            lending::find_all_by_class(a, lending::NVME_CLASS)?
                .into_iter()
                .next()
                .context("no NVMe")
        };
        let (x, y) = (nvme(l1)?, nvme(l2)?);
        for (a, d) in [(l1, &x), (l2, &y)] {
            lending::ensure_lent(a, &d.addr)?;
            wait_until(
                "the NVMe available",
                devlend_vmtests::twohost::WAIT,
                || lending::lent_state(a, &d.addr),
                "available",
            )?;
        }
        let ybar = p2p::bar_of_size(l2, &y.addr, PMR_BYTES).context("lender2's PMR BAR")?;
        let win = p2p::ivshmem_window_of_size(l1, PMR_BYTES).context("lender's window onto it")?;
        let l2_id = fabric::host_id(l2)?;
        Ok(P2pAcross {
            x,
            y,
            ybar,
            win,
            l2_id,
        })
    }

    /// lender2 shows Y's PMR BAR through the fabric, lender takes the
    /// window onto it (the emulated fabric's `bar_windows`).
    fn show(&self, c: &Cluster) -> anyhow::Result<()> {
        let param = p2p::BAR_WINDOWS_PARAM;
        sh(
            c.agent("lender2")?,
            &format!(
                "echo lend:{}/{}={P2P_PMR_TAG} > {param}",
                self.y.addr, self.ybar
            ),
        )?;
        sh(
            c.agent("lender")?,
            &format!(
                "echo show:{}={}/{P2P_PMR_TAG} > {param}",
                self.win, self.l2_id
            ),
        )?;
        Ok(())
    }

    /// Undoes [`P2pAcross::show`].
    fn hide(c: &Cluster) -> anyhow::Result<()> {
        let param = p2p::BAR_WINDOWS_PARAM;
        let off1 = sh(c.agent("lender")?, &format!("echo > {param}"));
        let off2 = sh(c.agent("lender2")?, &format!("echo > {param}"));
        off1?;
        off2?;
        Ok(())
    }

    /// The remote names of X and Y on the borrower.
    fn remotes(&self) -> (String, String) {
        (
            format!("lender/{}", self.x.addr),
            format!("lender2/{}", self.y.addr),
        )
    }
}

fn p2p_across_lenders_nvme_reads_into_another_lenders_pmr(c: &mut Cluster) -> anyhow::Result<()> {
    let p = P2pAcross::new(c)?;
    let (l1, l2, b) = (
        c.agent("lender")?,
        c.agent("lender2")?,
        c.agent("borrower")?,
    );
    let (x, y, ybar) = (&p.x, &p.y, p.ybar);
    let maps0 = twohost::lender_counter(l1, x, "p2p_maps")?;
    let drops0 = twohost::lender_counter(l1, x, "p2p_remote_drops")?;
    let exports0 = twohost::lender_counter(l2, y, "p2p_exports")?;
    let lookups0 = twohost::lender_counter(l2, y, "p2p_lookups")?;
    let revokes0 = twohost::lender_counter(l2, y, "p2p_export_revokes")?;
    let faults0 = p2p::dmar_faults_at(l1, P2P_BAR_ADDR)?;
    p.show(c)?;
    let pmr = c.paths().pmr_file("lender2", "nvme0");
    let (remote_x, remote_y) = p.remotes();
    // What lender had mapped, and its IOMMU's faults, at the first read.
    let probe = || -> anyhow::Result<String> {
        Ok(format!(
            "lender's NVMe {:?}; lender's DMAR faults: {}",
            twohost::lender_device(l1, x)?,
            sh(l1, "dmesg | grep 'DMAR:.*fault addr' | tail -n 3")?
        ))
    };
    // The read, then what it must have done, before the second run writes
    // its own block.
    let first = || -> anyhow::Result<String> {
        let r = p2p::read_with_two_mdevs(b, &remote_x, &remote_y, ybar, &pmr, &probe)?;
        let grew_by = |a, d, key, before| -> anyhow::Result<u64> {
            Ok(twohost::lender_counter(a, d, key)? - before)
        };
        let maps = grew_by(l1, x, "p2p_maps", maps0)?;
        let drops = grew_by(l1, x, "p2p_remote_drops", drops0)?;
        let exports = grew_by(l2, y, "p2p_exports", exports0)?;
        let lookups = grew_by(l2, y, "p2p_lookups", lookups0)?;
        let revokes = grew_by(l2, y, "p2p_export_revokes", revokes0)?;
        let faults = p2p::dmar_faults_at(l1, P2P_BAR_ADDR)? - faults0;
        let lba = p2p::check_block_landed(&r, &c.paths().nvme_file("lender", "nvme0"))
            .with_context(|| {
                format!(
                    "lender's p2p_maps +{maps}, p2p_remote_drops +{drops}, {faults} DMAR faults \
                     at {P2P_BAR_ADDR:#x}; lender2's p2p_exports +{exports}, p2p_lookups \
                     +{lookups}; the driver: {}",
                    r.report["p2p"]
                )
            })?;
        ensure!(maps >= 1, "lender made no P2P mapping for its NVMe");
        ensure!(exports >= 1, "lender2 showed lender no BAR");
        ensure!(lookups >= 1, "lender never asked lender2 where the BAR is");
        ensure!(revokes >= 1, "lender2's take-back revoked no export");
        ensure!(drops >= 1, "lender dropped no mapping at lender2's word");
        ensure!(
            faults > 0,
            "lender's IOMMU logged no fault for the read after the release"
        );
        Ok(format!(
            "4 KiB of lender's NVMe block {lba} found in lender2's PMR file: lender2 showed the \
             BAR {exports} time(s) and told lender where {lookups} time(s), lender mapped it \
             {maps} time(s); when it went back lender2 revoked {revokes} export(s), lender \
             dropped {drops} mapping(s), and the read after faulted ({faults} DMAR faults at \
             {P2P_BAR_ADDR:#x}) leaving the sentinel"
        ))
    };
    let run = first().and_then(|seen| {
        println!("  {seen}");
        fenced_until_answered(l1, l2, b, y, [&remote_x, &remote_y], ybar, &pmr)
    });
    let hidden = P2pAcross::hide(c);
    let (unanswered, refusals) = run?;
    hidden?;
    println!(
        "  with lender leaving the REVOKE unanswered, lender2 counted it ({unanswered}) and \
         refused {refusals} ACQUIRE(s) of its NVMe until lender answered when asked again"
    );
    Ok(())
}

/// The same read, with lender leaving lender2's REVOKE unanswered (the
/// test-only `fault_p2p_revoke_ignore`): lender2 must count it and lend
/// its NVMe to nobody (fenced) until lender answers, then lend it again.
/// Returns the unanswered REVOKEs and the borrows refused.
fn fenced_until_answered(
    l1: &devlend_agent::AgentClient,
    l2: &devlend_agent::AgentClient,
    b: &devlend_agent::AgentClient,
    y: &lending::PciDev,
    [remote_x, remote_y]: [&str; 2],
    ybar: u32,
    pmr: &std::path::Path,
) -> anyhow::Result<(u64, u64)> {
    let ignore = "/sys/module/devlend_lender/parameters/fault_p2p_revoke_ignore";
    let unanswered0 = twohost::lender_counter(l2, y, "p2p_revokes_unanswered")?;
    let refusals0 = twohost::lender_counter(l2, y, "p2p_fence_refusals")?;
    sh(l1, &format!("echo 1 > {ignore}"))?;
    let refused = p2p::read_with_two_mdevs(b, remote_x, remote_y, ybar, pmr, &|| Ok(String::new()))
        .and_then(|_| Ok(!p2p::borrows(b, remote_y)?));
    let answering = sh(l1, &format!("echo 0 > {ignore}"));
    let refused = refused?;
    answering?;
    ensure!(
        refused,
        "lender2's NVMe was borrowed while lender had not said it dropped its mapping onto it"
    );
    // Each refusal asks lender again, which now answers.
    wait_until(
        "lender2's NVMe borrowed once lender answered",
        Duration::from_secs(60),
        || {
            Ok(if p2p::borrows(b, remote_y)? {
                "yes"
            } else {
                "no"
            }
            .to_owned())
        },
        "yes",
    )?;
    let unanswered = twohost::lender_counter(l2, y, "p2p_revokes_unanswered")? - unanswered0;
    let refusals = twohost::lender_counter(l2, y, "p2p_fence_refusals")? - refusals0;
    ensure!(unanswered >= 1, "lender2 counted no unanswered REVOKE");
    ensure!(refusals >= 1, "lender2 refused no borrow while fenced");
    Ok((unanswered, refusals))
}

/// The borrower's count of P2P maps its lenders refused.
fn borrower_p2p_refused(b: &devlend_agent::AgentClient) -> anyhow::Result<u64> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("borrower "))
        .with_context(|| format!("no borrower line in debugfs:\n{text}"))?;
    fabric::parse_kv(line)
        .get("p2p_refused")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no p2p_refused in {line:?}"))
}

/// lender2's test-only LOOKUP stall (`fault_p2p_lookup_stall_ms`).
const LOOKUP_STALL: &str = "/sys/module/devlend_lender/parameters/fault_p2p_lookup_stall_ms";

/// A lender that stalls while another asks it where its BAR is
/// (`./test.sh p2p` or `stall`, docs/p2p.md case 3): lender2 answers
/// LOOKUPs 1.5 s late, its receive work held up as a stalled host's
/// (the test-only `fault_p2p_lookup_stall_ms`). lender gives up after 1 s,
/// half the holder's timeout, so the holder hears "no" in time (the
/// borrower counts a refusal) and nothing is mapped; lender2's answer comes
/// late and lender drops it (`late_responses` on its link to lender2).
/// The read into the BAR must fault at lender's IOMMU and leave lender2's
/// PMR file as it was. (That the same read lands once lender2 answers at
/// once again passed alone, but failed after the other two-lender check in
/// a full run: not understood yet, so not claimed here; docs/p2p.md.)
fn p2p_stall_lookup_across_lenders_maps_nothing(c: &mut Cluster) -> anyhow::Result<()> {
    let p = P2pAcross::new(c)?;
    let (l1, l2, b) = (
        c.agent("lender")?,
        c.agent("lender2")?,
        c.agent("borrower")?,
    );
    let (remote_x, remote_y) = p.remotes();
    let pmr = c.paths().pmr_file("lender2", "nvme0");
    let late = || -> anyhow::Result<u64> {
        fabric::counter(&fabric::peer_counters(l1, p.l2_id)?, "late_responses")
    };
    let (maps0, lookups0, late0) = (
        twohost::lender_counter(l1, &p.x, "p2p_maps")?,
        twohost::lender_counter(l2, &p.y, "p2p_lookups")?,
        late()?,
    );
    let (refused0, faults0) = (
        borrower_p2p_refused(b)?,
        p2p::dmar_faults_at(l1, P2P_BAR_ADDR)?,
    );
    p.show(c)?;
    let stalled = sh(l2, &format!("echo 1500 > {LOOKUP_STALL}")).and_then(|_| {
        p2p::read_with_two_mdevs(b, &remote_x, &remote_y, p.ybar, &pmr, &|| Ok(String::new()))
    });
    let answering = sh(l2, &format!("echo 0 > {LOOKUP_STALL}"));
    let stalled = stalled.and_then(|r| {
        answering?;
        let maps = twohost::lender_counter(l1, &p.x, "p2p_maps")? - maps0;
        let refused = borrower_p2p_refused(b)? - refused0;
        let faults = p2p::dmar_faults_at(l1, P2P_BAR_ADDR)? - faults0;
        let seen = format!(
            "the read: {}; lender's p2p_maps +{maps}, the borrower's p2p_refused +{refused}, \
             {faults} DMAR faults at {P2P_BAR_ADDR:#x}",
            r.report["p2p"]
        );
        ensure!(
            r.landed.iter().all(|&w| w == 0),
            "the read landed in lender2's PMR file though lender2 never answered in time ({seen})"
        );
        // Not the NVMe's status: QEMU's NVMe reports success for a read
        // whose DMA its IOMMU faulted, as the read after a release shows.
        ensure!(
            maps == 0,
            "lender mapped lender2's BAR without its answer ({seen})"
        );
        ensure!(refused >= 1, "the holder was not told no ({seen})");
        ensure!(faults > 0, "lender's IOMMU logged no fault ({seen})");
        // lender2's answer comes after lender gave up: dropped as late.
        wait_until(
            "lender2's late answer",
            Duration::from_secs(30),
            || Ok(if late()? > late0 { "late" } else { "not yet" }.to_owned()),
            "late",
        )?;
        let lookups = twohost::lender_counter(l2, &p.y, "p2p_lookups")? - lookups0;
        ensure!(lookups >= 1, "lender2 answered no LOOKUP ({seen})");
        Ok(format!(
            "with lender2 stalled 1.5 s on the LOOKUP, lender told the holder no in time \
             (refused +{refused}), mapped nothing, dropped lender2's late answer ({} late), and \
             the read faulted ({faults} DMAR faults) leaving lender2's PMR file as it was",
            late()? - late0
        ))
    });
    let hidden = P2pAcross::hide(c);
    let seen = stalled?;
    hidden?;
    println!("  {seen}");
    Ok(())
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
        Check {
            name: "p2p_across_lenders_nvme_reads_into_another_lenders_pmr",
            run: p2p_across_lenders_nvme_reads_into_another_lenders_pmr,
        },
        Check {
            name: "p2p_stall_lookup_across_lenders_maps_nothing",
            run: p2p_stall_lookup_across_lenders_maps_nothing,
        },
        Check {
            name: "stall_lender_quarantine_full_refuses_borrows",
            run: stall_lender_quarantine_full_refuses_borrows,
        },
        // Last: it kills borrower2 and boots it again.
        Check {
            name: "third_host_pings_unhurt_by_a_flooding_peer",
            run: third_host_pings_unhurt_by_a_flooding_peer,
        },
    ];
    Suite::new("multihost", checks)
        .reset(devlend_vmtests::fixture::reset_hosts)
        .run(|| devlend_vmtests::boot_topology("four-host"))
}
