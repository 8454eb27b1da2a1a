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
//!
//! The other way round (issue 26), `fuzz_peer_hostile_lender_into_borrower`:
//! the lender's host dies and the fuzzer plays a lying lender toward the
//! borrower (`devlend-fuzz-peer --hostile-lender`); the borrower must count
//! what it refuses, stay within bounds and serve the real lender's next
//! incarnation. `DEVLEND_FUZZ_BORROWER_MESSAGES` sets its number of
//! messages.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::ownership;
use devlend_vmtests::peerfuzz::lender::{Listed, Listing, BORROWER_MAX_PER_LENDER};
use devlend_vmtests::peerfuzz::ParsedReport;
use devlend_vmtests::tool::{fuzz_peer_args, LineTool};
use devlend_vmtests::twohost::{
    self, boot, host_bin, lent_nvme, verified_io, BORROWER, LENDER, MDEV_TYPE, WAIT,
};
use devlend_vmtests::{Check, Suite};

/// Messages of the default run; `DEVLEND_FUZZ_MESSAGES` sets another.
fn message_count() -> anyhow::Result<u64> {
    twohost::env_count("DEVLEND_FUZZ_MESSAGES", 1_000_000)
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
    let mut args = fuzz_peer_args(c, (LENDER, lender_id), (BORROWER, borrower_id));
    args.extend([
        "--dev-id".to_owned(),
        dev_id.to_string(),
        "--messages".to_owned(),
        messages.to_string(),
        "--seed".to_owned(),
        format!("{seed:#x}"),
        "--json".to_owned(),
        "-v".to_owned(),
    ]);
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
///   by exactly what the fuzzer's model of `fabric/rx.c`, `msg.c` and
///   `ping.c` predicts for the bytes it wrote; `late_responses` by at
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

    let peer = fabric::deltas(&before_peer, &after_peer);
    let glob = fabric::deltas(&before_lend.global, &after_lend.global);
    let dev = fabric::deltas(&before_lend.dev, &after_lend.dev);
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
    twohost::env_count("DEVLEND_CHURN_ROUNDS", 1536)
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
    let mut args = fuzz_peer_args(c, (LENDER, lender_id), (BORROWER, borrower_id));
    args.extend([
        "--dev-id".to_owned(),
        dev_id.to_string(),
        "--churn".to_owned(),
        rounds.to_string(),
        "-v".to_owned(),
    ]);
    let mut churn = LineTool::spawn("churn tool", bin, &args)?;
    let held = churn.line("CHURN-HELD ", Duration::from_secs(120 + rounds / 5))?;
    let l = c.agent(LENDER)?;
    let during = lender_pt_pages(l)?;
    let dev_during = lender_counters(l, &nvme)?.dev;
    churn.say("release")?;
    let released = churn.line("CHURN-RELEASED ", Duration::from_secs(180))?;
    let after = lender_pt_pages(l)?;
    let dev_after = lender_counters(l, &nvme)?.dev;
    churn.say("quit")?;
    let status = churn.finish()?;
    ensure!(status.success(), "the churn tool failed ({status})");

    let num = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0) as i64;
    let cnt = |m: &HashMap<String, String>, k: &str| {
        m.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0)
    };
    let (maps_ok, refused) = (num(&held, "maps_ok"), num(&held, "maps_refused"));
    let rej = fabric::grew(&before.dev, &dev_during, "rej_dma_tables");
    let (leaf, mid) = (
        cnt(&dev_during, "dma_pt_leaf"),
        cnt(&dev_during, "dma_pt_mid"),
    );
    let frees = fabric::grew(&before.dev, &dev_after, "dma_table_frees");
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

/// Messages of the hostile lender's default run;
/// `DEVLEND_FUZZ_BORROWER_MESSAGES` sets another. Unsolicited ones go at
/// [`HOSTILE_RATE`] a second at most: the default lies for about 50 s,
/// long enough for the victim's loop to reach every request the check
/// requires (at 50 000 messages, 25 s, one run ended before the borrower
/// asked for DEV_ACQUIRE); a long run is
/// `DEVLEND_FUZZ_BORROWER_MESSAGES=1000000`.
fn hostile_messages() -> anyhow::Result<u64> {
    twohost::env_count("DEVLEND_FUZZ_BORROWER_MESSAGES", 100_000)
}

/// Unsolicited messages a second at most while the lender lies: the
/// borrower would take 50 000 a second, and lies told that fast are over
/// before a user of the victim has opened it.
const HOSTILE_RATE: u64 = 2000;

/// The borrower's debugfs (`devlend/borrower`): its `borrower` line and
/// its leases.
struct BorrowerDebug {
    line: HashMap<String, String>,
    leases: Vec<HashMap<String, String>>,
}

impl BorrowerDebug {
    fn num(&self, key: &str) -> i64 {
        self.line.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// Leases of the lender `host`, as debugfs lines.
    fn leases_of(&self, host: u32) -> Vec<String> {
        self.leases
            .iter()
            .filter(|l| l.get("host").map(String::as_str) == Some(&host.to_string()))
            .map(|l| {
                let mut kv: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
                kv.sort();
                kv.join(" ")
            })
            .collect()
    }
}

fn borrower_debug(b: &AgentClient) -> anyhow::Result<BorrowerDebug> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("borrower "))
        .map(fabric::parse_kv)
        .with_context(|| format!("no borrower line in debugfs:\n{text}"))?;
    let leases = text
        .lines()
        .filter_map(|l| l.strip_prefix("lease "))
        .map(fabric::parse_kv)
        .collect();
    Ok(BorrowerDebug { line, leases })
}

/// The borrower's memory in kB after dropping its caches: MemAvailable,
/// Slab and SUnreclaim of /proc/meminfo.
fn borrower_memory(b: &AgentClient) -> anyhow::Result<BTreeMap<String, i64>> {
    let text = sh(
        b,
        "sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1; \
         grep -E '^(MemAvailable|Slab|SUnreclaim):' /proc/meminfo",
    )?;
    let m: BTreeMap<String, i64> = text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_owned(), v.split_whitespace().next()?.parse().ok()?))
        })
        .collect();
    ensure!(m.len() == 3, "/proc/meminfo of the borrower: {text}");
    Ok(m)
}

/// Entries of the borrower's `remote/` directory.
fn remote_count(b: &AgentClient, adapter: &str) -> anyhow::Result<usize> {
    let n = sh(b, &format!("ls {adapter}/fabric/remote | wc -l"))?;
    n.trim()
        .parse()
        .with_context(|| format!("remote/ entries: {n:?}"))
}

/// Attributes of the borrower's `remote/` entries that [`remote_listing`]
/// reads.
const REMOTE_ATTRS: [&str; 6] = ["name", "pf", "vendor", "device", "class", "state"];

/// What the borrower's `remote/` directory lists, by key, names as hex.
/// One `head` reads every attribute (a shell loop would fork thousands of
/// times: minutes under TCG), and `od` carries its bytes, which need not
/// be UTF-8.
fn remote_listing(b: &AgentClient, adapter: &str) -> anyhow::Result<BTreeMap<String, Listed>> {
    let files: Vec<String> = REMOTE_ATTRS.iter().map(|a| format!("*/{a}")).collect();
    let out = sh(
        b,
        &format!(
            "cd {adapter}/fabric/remote && head -v -c 128 -- {} 2>/dev/null | od -An -v -tx1",
            files.join(" ")
        ),
    )?;
    let bytes: Vec<u8> = out
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("od said {out:?}"))?;
    let mut attrs: BTreeMap<String, BTreeMap<&str, Vec<u8>>> = BTreeMap::new();
    // `==> <key>/<attr> <==\n<value>\n`, files after the first preceded by
    // an empty line.
    let mut rest = &bytes[..];
    while let Some(at) = find(rest, b"==> ") {
        rest = &rest[at + 4..];
        let end = find(rest, b" <==\n").context("a head header without its end")?;
        let path = String::from_utf8_lossy(&rest[..end]).into_owned();
        rest = &rest[end + 5..];
        let len = find(rest, b"\n==> ").unwrap_or(rest.len());
        let mut value = &rest[..len];
        value = value.strip_suffix(b"\n").unwrap_or(value);
        let (key, attr) = path
            .split_once('/')
            .with_context(|| format!("head header {path:?}"))?;
        if let Some(a) = REMOTE_ATTRS.iter().find(|a| **a == attr) {
            attrs
                .entry(key.to_owned())
                .or_default()
                .insert(a, value.to_vec());
        }
        rest = &rest[len..];
    }
    Ok(attrs
        .into_iter()
        .map(|(key, a)| {
            let text = |k: &str| {
                String::from_utf8_lossy(a.get(k).map_or(&[][..], Vec::as_slice)).into_owned()
            };
            let hex = |k: &str| {
                a.get(k)
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            };
            let l = Listed {
                key: key.clone(),
                name: hex("name"),
                pf: hex("pf"),
                vendor: text("vendor"),
                device: text("device"),
                class: text("class"),
                state: text("state"),
            };
            (key, l)
        })
        .collect())
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Waits until the borrower's `remote/` lists exactly what the hostile
/// lender describes; the time it took.
fn wait_listing(b: &AgentClient, adapter: &str, want: &Listing) -> anyhow::Result<Duration> {
    let want: BTreeMap<String, Listed> = want
        .listed
        .iter()
        .map(|l| (l.key.clone(), l.clone()))
        .collect();
    let t0 = Instant::now();
    let mut last = BTreeMap::new();
    while t0.elapsed() < Duration::from_secs(120) {
        last = remote_listing(b, adapter)?;
        if last == want {
            return Ok(t0.elapsed());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let missing: Vec<&String> = want.keys().filter(|k| !last.contains_key(*k)).collect();
    let extra: Vec<&String> = last.keys().filter(|k| !want.contains_key(*k)).collect();
    let differ: Vec<String> = want
        .iter()
        .filter_map(|(k, w)| {
            let l = last.get(k)?;
            (l != w).then(|| format!("{k}: listed {l:?}, described {w:?}"))
        })
        .take(5)
        .collect();
    bail!(
        "after 120 s the borrower lists {} entries, not the {} described: missing {:?}, extra {:?}, \
         differing {differ:#?}",
        last.len(),
        want.len(),
        &missing[..missing.len().min(10)],
        &extra[..extra.len().min(10)]
    )
}

/// The loop of VFIO users on the borrower: `devlend-fuzz-vfio` runs
/// against the mdev of the hostile lender's victim again and again
/// (pointing the mdev at it first: a lie may have taken it out of the
/// table) until the stop file appears. Short runs (100 operations), so that
/// the device is opened, borrowed and given back often while the lender
/// lies.
const HOSTILE_VFIO_SCRIPT: &str = "/tmp/hostile-vfio.sh";
const HOSTILE_VFIO_LOG: &str = "/tmp/hostile-vfio.log";
const HOSTILE_VFIO_STOP: &str = "/tmp/hostile-vfio.stop";

fn hostile_vfio_script(uuid: &str, target: &str, fuzz: &str, seed: u64) -> String {
    format!(
        "u={uuid}; spec={target}; out=/tmp/hostile-vfio.run; i=0
while [ ! -e {HOSTILE_VFIO_STOP} ]; do
  echo $spec > /sys/bus/mdev/devices/$u/remote_device 2>/dev/null
  timeout -s KILL 300 {fuzz} --mdev $u --seed $(({seed} + i)) --iters 100 --op-timeout 60 > $out 2>&1
  rc=$?
  echo \"run $i rc=$rc $(grep -m1 -E 'HANG|panicked' $out)\"
  tail -n 1 $out | cut -c1-300 | sed 's/^/    /'
  i=$((i + 1))
  [ $rc -eq 0 ] || sleep 1
done
echo \"runs $i\"
"
    )
}

/// Keys of `m` whose count is nonzero, sorted, as `key=count`.
fn nonzero(v: &serde_json::Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// What the borrower logged since line `mark`, by what it says: counts of
/// the lines that show it refusing the lender's answers and letting go.
fn borrower_log_summary(b: &AgentClient, mark: usize) -> anyhow::Result<String> {
    let log = sh(b, &format!("dmesg | tail -n +{}", mark + 1))?;
    let kinds = [
        ("listed", " class "),
        ("cannot_list", "cannot list the devices"),
        ("cannot_read", "cannot read device"),
        ("cannot_reach", "cannot reach remote device"),
        ("cannot_read_config", "cannot read the config space"),
        ("cannot_borrow", "cannot borrow remote device"),
        ("borrowed", "borrowed remote device"),
        ("lost", "lost remote device"),
        ("not_unmapped", "did not unmap"),
        ("quarantine_released", "quarantined pages released"),
        ("returned", "returned to its lender"),
        ("wrong_type", "response of type"),
        ("dma_blocked", "blocked by the lender"),
    ];
    let mut out = vec![format!("{} lines", log.lines().count())];
    out.extend(kinds.iter().filter_map(|(name, pat)| {
        let n = log.lines().filter(|l| l.contains(pat)).count();
        (n > 0).then(|| format!("{name} {n}"))
    }));
    Ok(out.join(", "))
}

/// Per-message slack of the borrower's unreclaimable slab and available
/// memory between before and after the check (kB): a leak of a few bytes a
/// message, or of a scan's buffers each scan, is well above it.
const SLAB_SLACK_KB: i64 = 4096;
const AVAILABLE_SLACK_KB: i64 = 32 << 10;

/// A hostile lender (issue 26): the lender's host dies and
/// `devlend-fuzz-peer --hostile-lender` takes its place on the fabric. It
/// lends the borrower a catalog of 300 made-up devices (odd names, BARs,
/// classes, states) of which one, the victim, looks like an NVMe
/// controller; the borrower must list the first 256 of them as described
/// (names sanitized). The check makes an mdev of the victim and runs
/// `devlend-fuzz-vfio` on it in a loop (open, borrow, config, BARs,
/// DMA, interrupts, resets, close), while the fuzzer lies for
/// `DEVLEND_FUZZ_BORROWER_MESSAGES` (default 100 000, at most 2000 a second) messages: answers
/// of the wrong type, length, status, request id (unknown, another
/// request's, twice, late) or epoch, garbage that parses, no answer; for
/// stretches EIO to everything, silence, garbage; and unasked DEV_CHANGED
/// floods, IRQ_FIREs for devices, types and vectors that do not exist,
/// DEV_FAULTs, bad headers, replays, pings, a corrupt ring. Then it is
/// honest again. Asserted:
///
/// - the borrower's per-peer counters (debugfs `peers`) grew exactly as
///   the fuzzer's model of its receive path says for `rx_msgs`,
///   `rx_stale`, `rx_seq_errors`, `rx_corrupt_ring` and `rx_unknown`, and
///   within the model's bounds for `rx_bad_msgs` and `late_responses`
///   (an answer to a request the borrower gave up on is late), with
///   `answers + late_responses` exactly the first answers plus the
///   certainly late ones; IRQ_FIRE bursts were taken in the doorbell
///   interrupt (`rx_in_irq`), no more than were sent; no link went down,
///   no answer was stale; every ping and unknown request got exactly one
///   answer of the right status;
/// - the borrower asked for device lists, descriptions, acquires, config
///   blocks and releases (its paths met the lies), and its `remote/`
///   directory never held more than 256 entries of the lender;
/// - no VFIO operation hung; once the lender is honest again the borrower
///   lists exactly its description again, holds no lease of it and has
///   nothing in quarantine;
/// - the borrower's kernel logged no WARN, BUG, oops, lockup or stall;
/// - once the lender's host boots again (a new incarnation), the made-up
///   devices are gone, the real NVMe is listed and does verified I/O, and
///   the borrower's unreclaimable slab and available memory are back
///   within `SLAB_SLACK_KB` and `AVAILABLE_SLACK_KB` of before.
fn fuzz_peer_hostile_lender_into_borrower(c: &mut Cluster) -> anyhow::Result<()> {
    lent_nvme(c)?;
    let (lender_id, borrower_id) = (
        fabric::host_id(c.agent(LENDER)?)?,
        fabric::host_id(c.agent(BORROWER)?)?,
    );
    let b = c.agent(BORROWER)?;
    fabric::wait_peer_state(b, lender_id, "up", WAIT)?;
    let adapter = lending::adapter_dir(b)?;
    let mark = ownership::kernel_log_lines(b)?;
    let debug_before = borrower_debug(b)?;
    ensure!(
        debug_before.leases_of(lender_id).is_empty(),
        "the borrower holds leases of the lender before the check: {:?}",
        debug_before.leases_of(lender_id)
    );
    let mem_before = borrower_memory(b)?;
    let messages = hostile_messages()?;
    let seed = twohost::fuzz_seed()?;
    let fuzz_vfio = host_bin("devlend-fuzz-vfio", "DEVLEND_FUZZ_VFIO")?;
    println!(
        "  seed {seed:#x} (DEVLEND_FUZZ_SEED), {messages} messages \
         (DEVLEND_FUZZ_BORROWER_MESSAGES); borrower memory before {mem_before:?}"
    );

    c.kill_host(LENDER)?;
    let b = c.agent(BORROWER)?;
    let before_peer = fabric::peer_counters(b, lender_id)?;
    let bin = env!("CARGO_BIN_EXE_devlend-fuzz-peer");
    let mut args = vec!["--hostile-lender".to_owned()];
    args.extend(fuzz_peer_args(
        c,
        (BORROWER, borrower_id),
        (LENDER, lender_id),
    ));
    args.extend([
        "--messages".to_owned(),
        messages.to_string(),
        "--seed".to_owned(),
        format!("{seed:#x}"),
        "--corruptions".to_owned(),
        "2".to_owned(),
        "--rate".to_owned(),
        HOSTILE_RATE.to_string(),
        "-v".to_owned(),
    ]);
    let mut hostile = LineTool::spawn("hostile lender", bin, &args)?;
    let mut nothing = || Ok(());

    // The catalog, honestly described: the borrower lists what it must.
    let listing: Listing = serde_json::from_value(hostile.line_ticking(
        "HOSTILE-LISTED ",
        Duration::from_secs(120),
        &mut nothing,
    )?)
    .context("the hostile lender's listing")?;
    let took = wait_listing(b, &adapter, &listing)?;
    println!(
        "  the borrower lists {} of the {} devices described, as described, after {:.1} s",
        listing.listed.len(),
        listing.catalog,
        took.as_secs_f64()
    );

    // A user of the victim, in a loop, while the lender lies.
    let victim = format!("{lender_id}:{}", listing.victim);
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&victim))?;
    sh(
        b,
        &format!(
            "rm -f {HOSTILE_VFIO_STOP}; cat > {HOSTILE_VFIO_SCRIPT} <<'EOF'\n{}EOF",
            hostile_vfio_script(&uuid, &victim, &fuzz_vfio, seed & 0xffff_ffff)
        ),
    )?;
    ownership::spawn_bg(b, &format!("sh {HOSTILE_VFIO_SCRIPT}"), HOSTILE_VFIO_LOG)?;
    hostile.say("go")?;
    let mut remote_max = 0;
    let mut remote_samples = 0;
    let sent = hostile.line_ticking(
        "HOSTILE-SENT ",
        Duration::from_secs(300 + messages / (HOSTILE_RATE / 2)),
        &mut || {
            remote_max = remote_max.max(remote_count(b, &adapter)?);
            remote_samples += 1;
            Ok(())
        },
    );
    let _ = sh(b, &format!("touch {HOSTILE_VFIO_STOP}"));
    let sent = sent?;
    println!("  lying done: {sent}");
    let (rc, vfio_log) = ownership::wait_bg(b, HOSTILE_VFIO_LOG, Duration::from_secs(420))?;
    let removed = lending::remove_mdev(b, &uuid);
    for line in vfio_log.lines() {
        println!("  vfio | {line}");
    }
    ensure!(rc == 0, "the VFIO loop ended with status {rc}");
    removed?;

    let mut errors = Vec::new();
    let mut runs: BTreeMap<String, u64> = BTreeMap::new();
    for line in vfio_log.lines().filter(|l| l.starts_with("run ")) {
        let rc = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("rc="))
            .unwrap_or("?");
        *runs.entry(rc.to_owned()).or_default() += 1;
        // 0 ran through, 1 could not open the device, 5 could not open it
        // again: the lender's lies at work. Anything else is a hang (3,
        // or 137 from timeout's SIGKILL) or a crash.
        if !matches!(rc, "0" | "1" | "5") || line.contains("HANG") || line.contains("panicked") {
            errors.push(format!("a VFIO user did not end cleanly: {line}"));
        }
    }
    println!("  VFIO users by exit status: {runs:?}");
    if runs.is_empty() {
        errors.push("no VFIO user ran".into());
    }

    // Honest again: the borrower lets go of everything and lists the
    // catalog as described.
    let settled = lending::wait_until(
        "the borrower holds no lease of the lender and quarantines nothing",
        Duration::from_secs(120),
        || {
            let d = borrower_debug(b)?;
            Ok(format!(
                "leases={:?} quarantined={}",
                d.leases_of(lender_id),
                d.num("quarantined")
            ))
        },
        "leases=[] quarantined=0",
    );
    if let Err(e) = settled {
        errors.push(format!("{e:#}"));
    }
    if let Err(e) = wait_listing(b, &adapter, &listing) {
        errors.push(format!("once the lender was honest again: {e:#}"));
    }
    let debug_after = borrower_debug(b)?;

    hostile.say("quit")?;
    let report = ParsedReport {
        json: hostile.line_ticking("HOSTILE-REPORT ", Duration::from_secs(180), &mut nothing)?,
    };
    let status = hostile.finish()?;
    // At once: the borrower takes the lender down 8 s after its last beat.
    let after_peer = fabric::peer_counters(b, lender_id)?;
    ensure!(status.success(), "the hostile lender failed ({status})");

    let peer = fabric::deltas(&before_peer, &after_peer);
    let d = |k: &str| peer.get(k).copied().unwrap_or(0);
    let e = |k: &str| -> anyhow::Result<i64> { Ok(report.num(&format!("/expected/{k}"))? as i64) };
    println!(
        "  {} messages written, {} of them lying in {:.1} s; doorbell {}",
        report.num("/written")?,
        report.num("/hostile")?,
        report.json["secs"].as_f64().unwrap_or(0.0),
        report.json["doorbell"]
    );
    println!("  moods: {}", report.json["moods"]);
    println!("  unasked: {}", nonzero(&report.json["kinds"]));
    println!("  answers: {}", nonzero(&report.json["twists"]));
    println!(
        "  the borrower asked (by type): {}; posted: {}",
        nonzero(&report.json["asks"]),
        nonzero(&report.json["posts"])
    );
    println!("  peer counters: {}", sorted(&peer, ""));
    println!("  expected:      {}", report.json["expected"]);
    let bd = |k: &str| debug_after.num(k) - debug_before.num(k);
    println!(
        "  borrower: lost +{} returned +{} returned_late +{} quarantined_total +{}; \
         remote/ at most {remote_max} entries in {remote_samples} looks",
        bd("lost"),
        bd("returned"),
        bd("returned_late"),
        bd("quarantined_total")
    );

    for key in [
        "rx_msgs",
        "rx_stale",
        "rx_seq_errors",
        "rx_corrupt_ring",
        "rx_unknown",
    ] {
        if d(key) != e(key)? {
            errors.push(format!(
                "peer {key} grew by {}, expected {}",
                d(key),
                e(key)?
            ));
        }
    }
    let (bad_min, wrong_type) = (e("bad_min")?, e("wrong_type_answers")?);
    if !(bad_min..=bad_min + wrong_type).contains(&d("rx_bad_msgs")) {
        errors.push(format!(
            "rx_bad_msgs grew by {}, expected {bad_min}..={}",
            d("rx_bad_msgs"),
            bad_min + wrong_type
        ));
    }
    let (late_min, first) = (e("late_min")?, e("first_answers")?);
    if !(late_min..=late_min + first).contains(&d("late_responses")) {
        errors.push(format!(
            "late_responses grew by {}, expected {late_min}..={}",
            d("late_responses"),
            late_min + first
        ));
    }
    if d("answers") + d("late_responses") != first + late_min {
        errors.push(format!(
            "answers (+{}) and late_responses (+{}) add up to {}, expected {first} first answers \
             and {late_min} certainly late",
            d("answers"),
            d("late_responses"),
            d("answers") + d("late_responses")
        ));
    }
    let irq_max = e("irq_fire_max")?;
    if report.num("/irq_bursts")? > 0 && !(1..=irq_max).contains(&d("rx_in_irq")) {
        errors.push(format!(
            "rx_in_irq grew by {}, expected 1..={irq_max} (IRQ_FIRE bursts into an empty ring)",
            d("rx_in_irq")
        ));
    }
    for key in ["link_downs", "stale_answers"] {
        if d(key) != 0 {
            errors.push(format!("{key} grew by {}", d(key)));
        }
    }
    for key in ["wrong_status", "missing_responses", "unexpected_responses"] {
        let n = report.num(&format!("/{key}"))?;
        if n != 0 {
            errors.push(format!("{key}: {n} {}", report.json["wrong_examples"]));
        }
    }
    for (t, what) in [
        (16, "DEV_LIST"),
        (17, "DEV_INFO"),
        (19, "DEV_ACQUIRE"),
        (20, "DEV_RELEASE"),
        (31, "CFG_READ_BLOCK"),
    ] {
        if report.num(&format!("/asks/{t}")).unwrap_or(0) == 0 {
            errors.push(format!(
                "the borrower never asked the hostile lender for {what}"
            ));
        }
    }
    if remote_max > BORROWER_MAX_PER_LENDER {
        errors.push(format!(
            "the borrower listed {remote_max} remote devices of one lender, more than {BORROWER_MAX_PER_LENDER}"
        ));
    }
    println!(
        "  borrower's kernel log: {}",
        borrower_log_summary(b, mark)?
    );
    let trouble = ownership::kernel_trouble(b, mark, false)?;
    if !trouble.is_empty() {
        errors.push(format!("borrower's kernel log:\n{}", trouble.join("\n")));
    }

    // The real lender's next incarnation: the made-up devices go, its NVMe
    // comes back and works; nothing stayed behind.
    c.restart_host(LENDER)?;
    let nvme = lent_nvme(c)?;
    let b = c.agent(BORROWER)?;
    let left = lending::wait_until(
        "only the real NVMe listed",
        WAIT,
        || Ok(remote_count(b, &adapter)?.to_string()),
        "1",
    );
    if let Err(e) = left {
        errors.push(format!("after the lender's restart: {e:#}"));
    }
    let d = borrower_debug(b)?;
    if !d.leases_of(lender_id).is_empty() || d.num("quarantined") != 0 {
        errors.push(format!(
            "after the lender's restart the borrower holds leases {:?}, {} pages in quarantine",
            d.leases_of(lender_id),
            d.num("quarantined")
        ));
    }
    let mem_after = borrower_memory(b)?;
    let grew = |k: &str| mem_after[k] - mem_before[k];
    println!(
        "  borrower memory after: {mem_after:?} (SUnreclaim {:+} kB, Slab {:+} kB, MemAvailable {:+} kB)",
        grew("SUnreclaim"),
        grew("Slab"),
        grew("MemAvailable")
    );
    if grew("SUnreclaim") > SLAB_SLACK_KB {
        errors.push(format!(
            "the borrower's unreclaimable slab grew by {} kB (more than {SLAB_SLACK_KB})",
            grew("SUnreclaim")
        ));
    }
    if -grew("MemAvailable") > AVAILABLE_SLACK_KB {
        errors.push(format!(
            "the borrower's available memory fell by {} kB (more than {AVAILABLE_SLACK_KB})",
            -grew("MemAvailable")
        ));
    }
    verified_io(c, &nvme)?;
    let trouble = ownership::kernel_trouble(c.agent(BORROWER)?, mark, false)?;
    if !trouble.is_empty() {
        errors.push(format!(
            "borrower's kernel log after the lender came back:\n{}",
            trouble.join("\n")
        ));
    }
    ensure!(errors.is_empty(), "{}", errors.join("\n"));
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
            name: "fuzz_peer_messages_into_lender",
            run: fuzz_peer_messages_into_lender,
        },
        Check {
            name: "fuzz_peer_map_unmap_churn_bounded",
            run: fuzz_peer_map_unmap_churn_bounded,
        },
        Check {
            name: "fuzz_peer_hostile_lender_into_borrower",
            run: fuzz_peer_hostile_lender_into_borrower,
        },
    ];
    Suite::new("fuzz_peer", checks).reset(devlend_vmtests::fixture::reset_hosts)
}
