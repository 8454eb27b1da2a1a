//! `devlend-mig-bench`: what a borrowed NVMe costs a live migration. The
//! same KVM guest (256 MiB) is migrated between the two borrowers of the
//! migrate cluster (qemu-scripts/topologies/migrate.toml) with a borrowed
//! NVMe under verified O_DIRECT I/O, and without a device, working its
//! RAM; in pairs, one leg of each per pair, their order alternating, in
//! one run. Run by `./bench.sh --migration` (docs/migration.md explains
//! the figures).
//!
//! ```text
//! devlend-mig-bench [--pairs N] [--out FILE]
//! ```
//!
//! Per leg: QEMU's downtime and total time (`query-migrate`). Per side:
//! their medians; per pair: the device's downtime over the plain guest's,
//! and the median and range of those ratios. The device's guest must
//! verify a round of I/O on the destination after each leg, so that a
//! leg that broke it is not counted as fast. The last line printed is the
//! path of the JSON result.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::sh;
use devlend_vmtests::migrate::{
    self, GuestSpec, MigrateOpts, MigratingGuest, MigrationStats, BORROWER, BORROWER2,
};
use devlend_vmtests::{bench, twohost, Scope};
use serde_json::{json, Value};

const USAGE: &str = "usage: devlend-mig-bench [--pairs N] [--out FILE]";

struct Opts {
    pairs: u32,
    out: PathBuf,
}

fn parse() -> anyhow::Result<Opts> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut o = Opts {
        pairs: 3,
        out: tools::repo_root().join(format!("target/bench/mig-bench-{stamp}.json")),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pairs" => {
                let v = args.next().context("--pairs needs a number")?;
                o.pairs = v
                    .parse()
                    .ok()
                    .filter(|&n| (1..=50).contains(&n))
                    .with_context(|| format!("--pairs {v:?}: a number from 1 to 50"))?;
            }
            "--out" => o.out = PathBuf::from(args.next().context("--out needs a path")?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(o)
}

fn step(what: &str) {
    println!("==> {what}");
}

/// The other borrower.
fn other(host: &str) -> &'static str {
    if host == BORROWER {
        BORROWER2
    } else {
        BORROWER
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One leg's figures, checked: completed, with a downtime.
fn figures(st: &MigrationStats) -> anyhow::Result<(f64, f64)> {
    ensure!(st.status == "completed", "{}", st.summary());
    let down = st.downtime_ms.context("no downtime in query-migrate")?;
    let total = st.total_time_ms.context("no total time in query-migrate")?;
    Ok((down as f64, total as f64))
}

fn measure(c: &mut Cluster, o: &Opts) -> anyhow::Result<Value> {
    migrate::modules_and_peers_up(c)?;
    migrate::mig_network_ready(c)?;
    let mut s = Scope::new(c);
    let cli = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    let (_, uuid_a, uuid_b) = migrate::nvme_and_mdevs(&mut s, &cli, BORROWER, BORROWER2)?;
    let uuid_on = |h: &str| if h == BORROWER { &uuid_a } else { &uuid_b };

    step("starting both guests on the borrower (nested KVM under TCG: a minute or two)");
    let src_args = migrate::qemu_args(&s, &cli, BORROWER, &uuid_a)?;
    let mut plain = MigratingGuest::start(
        &mut s,
        BORROWER,
        GuestSpec::new("plain", &migrate::ram_workload("0.2")),
        "",
    )?;
    let mut dev = MigratingGuest::start(
        &mut s,
        BORROWER,
        GuestSpec::new("nvme", &migrate::nvme_workload(0)),
        &src_args,
    )?;
    migrate::wait_ticks(&s, &plain, 3, Duration::from_secs(300))?;
    migrate::wait_rounds(&s, &dev, 0, 2, Duration::from_secs(600))?;

    let opts = MigrateOpts::default();
    let mut legs = Vec::new();
    let (mut ratios, mut downs_plain, mut downs_dev) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 1..=o.pairs {
        let mut this = [0.0f64; 2];
        // Alternate which goes first, so that neither always follows the other.
        let order = if pair % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for with_device in order {
            let g = if with_device { &mut dev } else { &mut plain };
            let dst = other(g.host());
            let st = if with_device {
                let uuid = uuid_on(dst);
                sh(s.agent(dst)?, &format!("{cli} mdev incoming {uuid}"))?;
                let args = migrate::qemu_args(&s, &cli, dst, uuid)?;
                let last = migrate::nvme_rounds(&g.console(&s)?)
                    .last()
                    .copied()
                    .unwrap_or(0);
                let st = g.migrate_to(&mut s, dst, &args, &opts)?;
                let before = migrate::nvme_rounds(&g.leg_console(&s, g.legs() - 1)?);
                let last = before.last().copied().unwrap_or(last);
                migrate::wait_rounds(&s, g, last, 1, Duration::from_secs(300))?;
                st
            } else {
                let st = g.migrate_to(&mut s, dst, "", &opts)?;
                migrate::wait_ticks(&s, g, 2, Duration::from_secs(120))?;
                st
            };
            let (down, total) = figures(&st)?;
            println!(
                "  pair {pair}: {} {} -> {}: downtime {down:.0} ms, total {total:.0} ms",
                if with_device {
                    "with the NVMe"
                } else {
                    "no device   "
                },
                st.from,
                st.to
            );
            this[usize::from(with_device)] = down;
            legs.push(json!({
                "pair": pair,
                "device": with_device,
                "from": st.from,
                "to": st.to,
                "downtime_ms": down,
                "total_time_ms": total,
                "setup_time_ms": st.setup_time_ms,
                "transferred_bytes": st.transferred_bytes,
            }));
        }
        downs_plain.push(this[0]);
        downs_dev.push(this[1]);
        ratios.push(this[1] / this[0].max(1.0));
    }
    plain.kill(&s)?;
    dev.kill(&s)?;

    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(0.0, f64::max);
    let (mp, md, mr) = (median(&downs_plain), median(&downs_dev), median(&ratios));
    println!(
        "\nmigration downtime over {} pairs: with the borrowed NVMe {md:.0} ms, without a \
         device {mp:.0} ms (medians); with/without per pair: median {mr:.2}x (range \
         {lo:.2}x..{hi:.2}x)",
        o.pairs
    );
    Ok(json!({
        "pairs": o.pairs,
        "guest_mib": 256,
        "legs": legs,
        "median_downtime_ms": { "device": md, "plain": mp },
        "downtime_ratio": { "median": mr, "min": lo, "max": hi },
    }))
}

fn run(o: &Opts) -> anyhow::Result<()> {
    let t0 = Instant::now();
    step(
        "booting the migrate cluster: a lender with an NVMe, two borrowers (TCG; a minute or two)",
    );
    let mut c = migrate::boot()?;
    let result = measure(&mut c, o);
    if result.is_err() {
        devlend_vmtests::suite::collect_failure(&c, "mig-bench", "mig-bench");
        c.keep_logs(true);
    }
    c.shutdown();
    bench::write_result(&o.out, result?, t0, "migration benchmark")
}

fn main() -> ExitCode {
    bench::bench_main("devlend-mig-bench", parse, run)
}
