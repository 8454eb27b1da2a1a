//! A malicious fabric peer (issue 7): the borrower's host dies, and
//! `devlend-fuzz-peer`, on the outer machine, takes its place on the
//! fabric. It keeps the dead host's heartbeat moving in the control area
//! file, so the lender keeps it up, and writes malformed, replayed,
//! oversized, out-of-order and stale messages straight into the ring from
//! the borrower to the lender (in the lender's inbox, through the lender's
//! RAM file; the lender's messages to the borrower it takes from the
//! borrower's inbox, in the dead borrower's RAM file), ringing the lender's
//! doorbell through the ivshmem server's socket of the dead host. The lender must not crash or
//! complain in its kernel log, must count every rejection where the
//! fuzzer's model of the receive path says it must, and must serve the
//! borrower's next incarnation afterwards.
//!
//! `./test.sh fuzz` selects it. `DEVLEND_FUZZ_MESSAGES` sets the number of
//! messages (default 10^6; the long run is 10^7), `DEVLEND_FUZZ_SEED` the
//! seed (default random, printed).

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::ownership;
use devlend_vmtests::peerfuzz::ParsedReport;
use devlend_vmtests::twohost::{self, boot, lent_nvme, verified_io, BORROWER, LENDER, WAIT};
use devlend_vmtests::{Check, Suite};

/// Messages of the default run; `DEVLEND_FUZZ_MESSAGES` sets another.
fn message_count() -> anyhow::Result<u64> {
    match std::env::var("DEVLEND_FUZZ_MESSAGES") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("DEVLEND_FUZZ_MESSAGES={v:?}")),
        Err(_) => Ok(1_000_000),
    }
}

/// The lender's debugfs counters: the `global` line (requests that named
/// no device) and the line of the lent device.
struct LenderCounters {
    global: HashMap<String, String>,
    dev: HashMap<String, String>,
}

fn lender_counters(l: &AgentClient, nvme: &PciDev) -> anyhow::Result<LenderCounters> {
    let text = sh(l, "cat /sys/kernel/debug/devlend/lender")?;
    let global = text
        .lines()
        .find_map(|l| l.strip_prefix("global "))
        .map(fabric::parse_kv)
        .with_context(|| format!("no global line in the lender's debugfs:\n{text}"))?;
    let dev = text
        .lines()
        .map(fabric::parse_kv)
        .find(|kv| kv.get("name") == Some(&nvme.addr))
        .with_context(|| format!("{} not in the lender's debugfs:\n{text}", nvme.addr))?;
    Ok(LenderCounters { global, dev })
}

/// `after - before` of every numeric key of `after`.
fn deltas(
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
) -> anyhow::Result<HashMap<String, i64>> {
    let mut d = HashMap::new();
    for (k, v) in after {
        let (Ok(a), Some(Ok(b))) = (v.parse::<i64>(), before.get(k).map(|b| b.parse::<i64>()))
        else {
            continue;
        };
        d.insert(k.clone(), a - b);
    }
    Ok(d)
}

fn sorted(d: &HashMap<String, i64>, prefix: &str) -> String {
    let mut v: Vec<_> = d
        .iter()
        .filter(|(k, n)| k.starts_with(prefix) && **n != 0)
        .map(|(k, n)| format!("{k}=+{n}"))
        .collect();
    v.sort();
    v.join(" ")
}

/// Runs the fuzzer binary against the lender as the dead borrower; its
/// report.
fn run_fuzzer(
    c: &Cluster,
    lender_id: u32,
    borrower_id: u32,
    dev_id: u32,
    messages: u64,
    seed: u64,
) -> anyhow::Result<ParsedReport> {
    let bin = env!("CARGO_BIN_EXE_devlend-fuzz-peer");
    let ctl = c.paths().ctl_file();
    let sock = c.paths().doorbell_sock(borrower_id as usize);
    let args = [
        "--ctl".to_owned(),
        ctl.display().to_string(),
        "--doorbell-sock".to_owned(),
        sock.display().to_string(),
        "--target".to_owned(),
        lender_id.to_string(),
        "--target-ram".to_owned(),
        c.paths().ram_file(LENDER).display().to_string(),
        "--peer".to_owned(),
        borrower_id.to_string(),
        "--peer-ram".to_owned(),
        c.paths().ram_file(BORROWER).display().to_string(),
        "--dev-id".to_owned(),
        dev_id.to_string(),
        "--messages".to_owned(),
        messages.to_string(),
        "--seed".to_owned(),
        format!("{seed:#x}"),
        "--json".to_owned(),
        "-v".to_owned(),
    ];
    println!("  {bin} {}", args.join(" "));
    let mut child = Command::new(bin)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {bin}"))?;
    let mut stdout = child.stdout.take().context("fuzzer stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    // A generous bound: 200 messages a second, plus setup.
    let limit = Duration::from_secs(120 + messages / 200);
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the fuzzer ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = reader.join().unwrap_or_default();
    for line in out.lines().filter(|l| !l.starts_with("FUZZ-REPORT ")) {
        println!("  | {line}");
    }
    ensure!(status.success(), "the fuzzer failed ({status})");
    let json = out
        .lines()
        .find_map(|l| l.strip_prefix("FUZZ-REPORT "))
        .context("the fuzzer printed no report")?;
    Ok(ParsedReport {
        json: serde_json::from_str(json).context("the fuzzer's report")?,
    })
}

/// The borrower's host dies, and the fuzzer writes
/// `DEVLEND_FUZZ_MESSAGES` (default 10^6) messages into the lender's ring
/// from it, as it. Asserted, with the lender's debugfs counters read before
/// and after:
///
/// - per-peer counters of the borrower (debugfs `peers`): `rx_msgs`,
///   `rx_bad_msgs`, `rx_stale`, `rx_seq_errors`, `rx_corrupt_ring` and
///   `rx_unknown` (requests of types nobody handles) grew
///   by exactly what the fuzzer's model of `fabric/ring.c`, `msg.c` and
///   `selftest.c` predicts for the bytes it wrote; `late_responses` by at
///   least its responses to ids never requested (or answered already) and
///   at most that plus its answers to the lender's own requests; the link
///   never went down;
/// - the lender's `global` rejections (debugfs `lender`): `rej_malformed`
///   grew by exactly the lending requests of a wrong length or with a
///   reserved field set, `rej_nodev` by exactly the well-formed ones
///   naming no device, every other `global rej_*` not at all;
/// - the lent device's `rej_*` grew in all by at least the refusals the
///   lender answered about it (a status other than OK and EIO), and by at
///   most that plus the requests about it that got no answer (posted BAR
///   writes), its DMA unmaps (cutting two mappings refuses twice) and its
///   EIO answers (a request while the device resets is counted `busy`);
/// - every request got exactly one response, in order (releases, resets
///   and config writes asking for FLR may be answered later, when the
///   device has reset), of its type, with
///   the status the model requires where it can tell (EINVAL for
///   malformed, ENODEV for no device, ENOTSUPP for unknown types, refusals
///   for requests out of range whatever the device's state);
/// - in each of the fuzzer's deaf phases (it stops taking the lender's
///   messages, answers included, while sending on) the lender held the
///   fuzzer's messages back (`rx_held_back`) rather than wait for room,
///   and took them once the fuzzer listened again: no answer lost;
/// - the lender logged no WARN, BUG, oops, lockup or stall;
/// - once the borrower has booted again, the lender has taken the device
///   back from the dead incarnation and a new user does verified I/O.
fn fuzz_peer_messages_into_lender(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (lender_id, borrower_id) = (
        fabric::host_id(c.agent(LENDER)?)?,
        fabric::host_id(c.agent(BORROWER)?)?,
    );
    let l = c.agent(LENDER)?;
    fabric::wait_peer_state(l, borrower_id, "up", WAIT)?;
    let before_lend = lender_counters(l, &nvme)?;
    let dev_id: u32 = before_lend
        .dev
        .get("dev_id")
        .context("dev_id")?
        .parse()
        .context("dev_id")?;
    let mark = ownership::kernel_log_lines(l)?;
    let messages = message_count()?;
    let seed = twohost::fuzz_seed()?;
    println!("  seed {seed:#x} (DEVLEND_FUZZ_SEED), {messages} messages, lent dev_id {dev_id}");

    c.kill_host(BORROWER)?;
    let l = c.agent(LENDER)?;
    let before_peer = fabric::peer_counters(l, borrower_id)?;
    let report = run_fuzzer(c, lender_id, borrower_id, dev_id, messages, seed);
    let l = c.agent(LENDER)?;
    // Read at once: the peer goes down 8 s after the last heartbeat.
    let after_peer = fabric::peer_counters(l, borrower_id)?;
    let after_lend = lender_counters(l, &nvme)?;
    let report = report?;

    let peer = deltas(&before_peer, &after_peer)?;
    let glob = deltas(&before_lend.global, &after_lend.global)?;
    let dev = deltas(&before_lend.dev, &after_lend.dev)?;
    let secs = report.json["secs"].as_f64().unwrap_or(0.0);
    println!(
        "  {} messages in {secs:.1} s ({:.0}/s); doorbell {}",
        report.num("/sent")?,
        report.num("/sent")? as f64 / secs.max(1e-9),
        report.json["doorbell"]
    );
    println!("  peer counters: {}", sorted(&peer, ""));
    println!("  lender global: {}", sorted(&glob, "rej_"));
    println!(
        "  lent device:   {}",
        sorted(&dev, "")
            .split(' ')
            .filter(|kv| !kv.starts_with("dma_bytes") && !kv.starts_with("dev_id"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("  expected:      {}", report.json["expected"]);
    println!("  responses:     {}", report.json["responses"]);

    let mut errors = Vec::new();
    let d = |m: &HashMap<String, i64>, k: &str| m.get(k).copied().unwrap_or(0);
    for (key, exp) in [
        ("rx_msgs", "/expected/rx_msgs"),
        ("rx_bad_msgs", "/expected/rx_bad_msgs"),
        ("rx_stale", "/expected/rx_stale"),
        ("rx_seq_errors", "/expected/rx_seq_errors"),
        ("rx_corrupt_ring", "/expected/rx_corrupt_ring"),
        ("rx_unknown", "/expected/rx_unknown"),
    ] {
        let want = report.num(exp)? as i64;
        if d(&peer, key) != want {
            errors.push(format!(
                "peer {key} grew by {}, expected {want}",
                d(&peer, key)
            ));
        }
    }
    let (late_min, late_max) = (
        report.num("/expected/late_min")? as i64,
        report.num("/expected/late_max")? as i64,
    );
    let (deaf, held) = (report.num("/deaf_phases")?, report.num("/deaf_held")?);
    println!(
        "  deaf phases: {deaf}, the lender seen holding back in {held}; rx_held_back +{}",
        d(&peer, "rx_held_back")
    );
    if deaf > 0 && held == 0 {
        errors.push(format!(
            "in none of {deaf} deaf phases did the lender hold the fuzzer's messages back"
        ));
    }
    if d(&peer, "rx_held_back") < held as i64 {
        errors.push(format!(
            "rx_held_back grew by {}, but the lender was seen holding back in {held} phases",
            d(&peer, "rx_held_back")
        ));
    }
    let late = d(&peer, "late_responses");
    if !(late_min..=late_max).contains(&late) {
        errors.push(format!(
            "late_responses grew by {late}, expected {late_min}..={late_max}"
        ));
    }
    if d(&peer, "link_downs") != 0 {
        errors.push("the lender took the fuzzer's peer down".into());
    }
    let malformed = report.num("/expected/rej_malformed")? as i64;
    let reserved = report.num("/expected/rej_malformed_reserved")? as i64;
    if d(&glob, "rej_malformed") != malformed {
        errors.push(format!(
            "global rej_malformed grew by {}, expected {malformed} ({reserved} of them only for a reserved field)",
            d(&glob, "rej_malformed")
        ));
    }
    let nodev = report.num("/expected/rej_nodev")? as i64;
    if d(&glob, "rej_nodev") != nodev {
        errors.push(format!(
            "global rej_nodev grew by {}, expected {nodev}",
            d(&glob, "rej_nodev")
        ));
    }
    for (k, n) in &glob {
        if k.starts_with("rej_") && k != "rej_malformed" && k != "rej_nodev" && *n != 0 {
            errors.push(format!("global {k} grew by {n}, expected 0"));
        }
    }
    let dev_rej: i64 = dev
        .iter()
        .filter(|(k, _)| k.starts_with("rej_"))
        .map(|(_, n)| n)
        .sum();
    let refusals = report.num("/real_dev_refusals")? as i64;
    let slack = (report.num("/expected/real_dev_posted")?
        + report.num("/expected/real_dev_unmaps")?
        + report.num("/real_dev_eio")?) as i64;
    if !(refusals..=refusals + slack).contains(&dev_rej) {
        errors.push(format!(
            "the lent device's rejections grew by {dev_rej}, expected {refusals}..={}",
            refusals + slack
        ));
    }
    for key in ["wrong_status", "missing_responses", "unexpected_responses"] {
        let n = report.num(&format!("/{key}"))?;
        if n != 0 {
            errors.push(format!("{key}: {n} {}", report.json["wrong_examples"]));
        }
    }
    let trouble = ownership::kernel_trouble(l, mark, false)?;
    if !trouble.is_empty() {
        errors.push(format!("lender's kernel log:\n{}", trouble.join("\n")));
    }

    // The borrower's next incarnation: the lender takes the device back
    // from the dead one and serves the new one.
    c.restart_host(BORROWER)?;
    let nvme = lent_nvme(c)?;
    let l = c.agent(LENDER)?;
    lending::wait_until(
        "device back in the pool",
        WAIT,
        || lending::lent_state(l, &nvme.addr),
        "available",
    )?;
    verified_io(c, &nvme)?;
    let trouble = ownership::kernel_trouble(c.agent(LENDER)?, mark, false)?;
    if !trouble.is_empty() {
        errors.push(format!(
            "lender's kernel log after the borrower came back:\n{}",
            trouble.join("\n")
        ));
    }
    ensure!(errors.is_empty(), "{}", errors.join("\n"));
    Ok(())
}

/// Rounds of the churn check; `DEVLEND_CHURN_ROUNDS` sets another. The
/// default is more than the page-table budget for a borrower of 1 GiB
/// (two-host.toml): a leaf table per 2 MiB of its RAM, 512, and 512 more
/// (`lender/dma.c`); and it keeps the IOVAs below the MSI window at
/// 0xfee00000 (a reserved region, refused for another reason).
fn churn_rounds() -> anyhow::Result<u64> {
    match std::env::var("DEVLEND_CHURN_ROUNDS") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("DEVLEND_CHURN_ROUNDS={v:?}")),
        Err(_) => Ok(1536),
    }
}

/// Pages the lender's page tables may move by for other reasons between
/// two readings (other IOMMU domains, per-CPU counters folded late).
const PT_SLACK: i64 = 64;

/// The lender's IOMMU page-table pages: `nr_sec_page_table_pages` of
/// /proc/vmstat (where Linux 6.12 counts them, `drivers/iommu/iommu-pages.h`)
/// and `nr_iommu_pages`, after folding the per-CPU counters in.
fn lender_pt_pages(l: &AgentClient) -> anyhow::Result<(i64, i64)> {
    let text = sh(
        l,
        "echo 1 > /proc/sys/vm/stat_refresh 2>/dev/null; \
         grep -E '^(nr_sec_page_table_pages|nr_iommu_pages) ' /proc/vmstat",
    )?;
    let get = |key: &str| -> anyhow::Result<i64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .with_context(|| format!("no {key} in the lender's /proc/vmstat:\n{text}"))
    };
    Ok((get("nr_sec_page_table_pages ")?, get("nr_iommu_pages ")?))
}

/// The churn tool's next line starting with `prefix`, as JSON; its other
/// lines printed.
fn churn_line(
    lines: &std::sync::mpsc::Receiver<String>,
    prefix: &str,
    limit: Duration,
) -> anyhow::Result<serde_json::Value> {
    let t0 = Instant::now();
    loop {
        let left = limit.saturating_sub(t0.elapsed());
        let line = lines
            .recv_timeout(left)
            .with_context(|| format!("the churn tool printed no {prefix} within {limit:?}"))?;
        if let Some(json) = line.strip_prefix(prefix) {
            return serde_json::from_str(json).with_context(|| format!("{prefix}{json}"));
        }
        println!("  | {line}");
    }
}

/// A holder that maps and unmaps one page at IOVA k << 21 for k = 1, 2,
/// ... (issue 26): every round costs the lender a leaf page table that an
/// exact unmap does not free. The borrower's host dies and
/// `devlend-fuzz-peer --churn` takes its place, takes the lent NVMe, keeps
/// a page mapped at IOVA 0 and churns `DEVLEND_CHURN_ROUNDS` (default
/// 1536) rounds. Asserted, with the lender's IOMMU page-table pages
/// (/proc/vmstat) and debugfs counters read before, while it holds the
/// device, and after it released it:
///
/// - the lender refused maps once the holder's tables reached their
///   budget, each refusal counted `rej_dma_tables`, and every round's
///   unmap succeeded;
/// - while held: one leaf region counted per accepted map (and the
///   anchor), page-table pages grew (by at least half the accepted maps:
///   the tables are real) but by no more than the regions counted;
/// - after the release: no region counted, the tables freed
///   (`dma_table_frees` moved) and the page-table pages back within
///   `PT_SLACK` of the baseline;
/// - the lender logged no WARN, BUG, oops, lockup or stall, and the
///   borrower's next incarnation does verified I/O on the device.
///
/// Before the fix, no map was refused (the tables grew by a page a round)
/// and the pages stayed after the release.
fn fuzz_peer_map_unmap_churn_bounded(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (lender_id, borrower_id) = (
        fabric::host_id(c.agent(LENDER)?)?,
        fabric::host_id(c.agent(BORROWER)?)?,
    );
    let l = c.agent(LENDER)?;
    fabric::wait_peer_state(l, borrower_id, "up", WAIT)?;
    let before = lender_counters(l, &nvme)?;
    let dev_id: u32 = before
        .dev
        .get("dev_id")
        .context("dev_id")?
        .parse()
        .context("dev_id")?;
    let mark = ownership::kernel_log_lines(l)?;
    let rounds = churn_rounds()?;
    let base = lender_pt_pages(l)?;
    println!(
        "  device {dev_id}, {rounds} rounds; lender page tables before: \
         nr_sec_page_table_pages={} nr_iommu_pages={}",
        base.0, base.1
    );

    c.kill_host(BORROWER)?;
    let bin = env!("CARGO_BIN_EXE_devlend-fuzz-peer");
    let args = [
        "--ctl".to_owned(),
        c.paths().ctl_file().display().to_string(),
        "--doorbell-sock".to_owned(),
        c.paths()
            .doorbell_sock(borrower_id as usize)
            .display()
            .to_string(),
        "--target".to_owned(),
        lender_id.to_string(),
        "--target-ram".to_owned(),
        c.paths().ram_file(LENDER).display().to_string(),
        "--peer".to_owned(),
        borrower_id.to_string(),
        "--peer-ram".to_owned(),
        c.paths().ram_file(BORROWER).display().to_string(),
        "--dev-id".to_owned(),
        dev_id.to_string(),
        "--churn".to_owned(),
        rounds.to_string(),
        "-v".to_owned(),
    ];
    println!("  {bin} {}", args.join(" "));
    let mut child = Command::new(bin)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {bin}"))?;
    let mut stdin = child.stdin.take().context("churn tool stdin")?;
    let stdout = child.stdout.take().context("churn tool stdout")?;
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let res = (|| -> anyhow::Result<_> {
        let held = churn_line(&lines, "CHURN-HELD ", Duration::from_secs(120 + rounds / 5))?;
        let l = c.agent(LENDER)?;
        let during = lender_pt_pages(l)?;
        let dev_during = lender_counters(l, &nvme)?.dev;
        stdin.write_all(b"release\n")?;
        let released = churn_line(&lines, "CHURN-RELEASED ", Duration::from_secs(180))?;
        let after = lender_pt_pages(l)?;
        let dev_after = lender_counters(l, &nvme)?.dev;
        Ok((held, during, dev_during, released, after, dev_after))
    })();
    let _ = stdin.write_all(b"quit\n");
    drop(stdin);
    let status = child.wait()?;
    let (held, during, dev_during, released, after, dev_after) = res?;
    ensure!(status.success(), "the churn tool failed ({status})");

    let num = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0) as i64;
    let cnt = |m: &HashMap<String, String>, k: &str| {
        m.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0)
    };
    let (maps_ok, refused) = (num(&held, "maps_ok"), num(&held, "maps_refused"));
    let rej = cnt(&dev_during, "rej_dma_tables") - cnt(&before.dev, "rej_dma_tables");
    let (leaf, mid) = (
        cnt(&dev_during, "dma_pt_leaf"),
        cnt(&dev_during, "dma_pt_mid"),
    );
    let frees = cnt(&dev_after, "dma_table_frees") - cnt(&before.dev, "dma_table_frees");
    println!("  churn: {held}");
    println!(
        "  while held: nr_sec_page_table_pages={} (+{}) nr_iommu_pages={} (+{}); \
         dma_pt_leaf={leaf} dma_pt_mid={mid} rej_dma_tables=+{rej}",
        during.0,
        during.0 - base.0,
        during.1,
        during.1 - base.1
    );
    println!(
        "  after the release (status {}): nr_sec_page_table_pages={} ({:+}) nr_iommu_pages={} ({:+}); \
         dma_pt_leaf={} dma_table_frees=+{frees}",
        released["release_status"],
        after.0,
        after.0 - base.0,
        after.1,
        after.1 - base.1,
        cnt(&dev_after, "dma_pt_leaf"),
    );

    let mut errors = Vec::new();
    if refused == 0 {
        errors.push(format!(
            "the lender refused none of {rounds} maps at new 2 MiB regions: \
             nothing bounds the page tables a holder makes it keep"
        ));
    }
    if rej != refused {
        errors.push(format!(
            "rej_dma_tables grew by {rej}, but {refused} maps were refused"
        ));
    }
    if num(&held, "unmaps_ok") != rounds as i64 {
        errors.push(format!(
            "{} of {rounds} unmaps were refused",
            rounds as i64 - num(&held, "unmaps_ok")
        ));
    }
    if leaf != maps_ok + 1 {
        errors.push(format!(
            "dma_pt_leaf is {leaf} while held, expected {} (the accepted maps and the anchor)",
            maps_ok + 1
        ));
    }
    let grew = during.0 - base.0;
    if grew < maps_ok / 2 {
        errors.push(format!(
            "the lender's page-table pages grew by only {grew} for {maps_ok} maps at new 2 MiB regions"
        ));
    }
    if grew > leaf + 2 * mid + PT_SLACK {
        errors.push(format!(
            "the lender's page-table pages grew by {grew}, more than the {leaf} leaf and {mid} \
             middle regions counted allow"
        ));
    }
    if after.0 - base.0 > PT_SLACK {
        errors.push(format!(
            "after the release the lender still has {} more page-table pages than before \
             (nr_sec_page_table_pages {} -> {}): its IOMMU tables were not freed",
            after.0 - base.0,
            base.0,
            after.0
        ));
    }
    if cnt(&dev_after, "dma_pt_leaf") != 0 || frees < 1 {
        errors.push(format!(
            "after the release dma_pt_leaf={} and dma_table_frees grew by {frees}",
            cnt(&dev_after, "dma_pt_leaf")
        ));
    }
    let l = c.agent(LENDER)?;
    let trouble = ownership::kernel_trouble(l, mark, false)?;
    if !trouble.is_empty() {
        errors.push(format!("lender's kernel log:\n{}", trouble.join("\n")));
    }

    c.restart_host(BORROWER)?;
    let nvme = lent_nvme(c)?;
    let l = c.agent(LENDER)?;
    lending::wait_until(
        "device back in the pool",
        WAIT,
        || lending::lent_state(l, &nvme.addr),
        "available",
    )?;
    verified_io(c, &nvme)?;
    ensure!(errors.is_empty(), "{}", errors.join("\n"));
    Ok(())
}

fn main() {
    let checks = vec![
        Check {
            name: "fuzz_peer_messages_into_lender",
            run: fuzz_peer_messages_into_lender,
        },
        Check {
            name: "fuzz_peer_map_unmap_churn_bounded",
            run: fuzz_peer_map_unmap_churn_bounded,
        },
    ];
    Suite::new("fuzz_peer", checks).run(boot)
}
