//! A malicious guest (issue 7): `devlend-fuzz-vfio` drives an mdev of the
//! lender's NVMe through VFIO from the borrower host, with random and
//! boundary ioctls, region accesses and config writes (see the binary's
//! documentation). Whatever it does, no syscall may hang, neither kernel
//! may WARN, BUG or oops, and once the mdev is closed the device is back in
//! the pool, works for the next user, and nothing stays pinned, mapped or
//! quarantined.
//!
//! `./test.sh fuzz` selects it. `DEVLEND_FUZZ_ITERS` sets the number of
//! operations (the long run: 50000), `DEVLEND_FUZZ_SEED` replays a run.

use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::sh;
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::ownership;
use devlend_vmtests::twohost::{
    self, boot, host_bin, lender_counter, lent_nvme, log_marks, verified_io, BORROWER, LENDER,
    MDEV_TYPE, WAIT,
};
use devlend_vmtests::{Check, Suite};

/// Operations of the default run: about two to three minutes under TCG.
const DEFAULT_ITERS: u64 = 12000;
/// Bound on one operation's time under TCG, for the run's own timeout.
const MS_PER_OP_BOUND: u64 = 200;

/// Nothing held for the device on either host: no pins, no quarantine, no
/// lender mapping, no vector; the device available and offered again.
fn nothing_held(c: &Cluster, nvme: &PciDev) -> anyhow::Result<()> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    lending::wait_until(
        "device back in the pool",
        WAIT,
        || lending::lent_state(l, &nvme.addr),
        "available",
    )?;
    lending::wait_until(
        "nothing pinned or quarantined on the borrower",
        WAIT,
        || {
            let p = ownership::borrower_pages(b)?;
            Ok(format!("pinned={} quarantined={}", p.pinned, p.quarantined))
        },
        "pinned=0 quarantined=0",
    )?;
    ensure!(
        ownership::lender_mapped_pages(l)?.is_empty(),
        "the lender still maps pages for the device"
    );
    ensure!(
        lender_counter(l, nvme, "irq_vectors")? == 0,
        "the lender still holds vectors for the device"
    );
    lending::wait_instances(b, MDEV_TYPE, 1).context("the borrower offers the device again")?;
    Ok(())
}

fn env_u64(name: &str) -> anyhow::Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v.parse().with_context(|| format!("{name}={v:?}"))?)),
        Err(_) => Ok(None),
    }
}

/// The fuzzer's JSON summary: the last line of its stdout that is one.
fn summary(stdout: &str) -> anyhow::Result<serde_json::Value> {
    stdout
        .lines()
        .rev()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .filter(|v| v.get("ops").is_some())
        })
        .with_context(|| format!("the fuzzer printed no summary:\n{stdout}"))
}

/// `{"a": 1, "b": 2}` as `a 1, b 2`.
fn counts(v: &serde_json::Value) -> String {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// One run of the fuzzer on the mdev `uuid`, with `threads` threads; its
/// summary printed.
fn run_fuzzer(
    b: &AgentClient,
    fuzz: &str,
    uuid: &str,
    seed: u64,
    iters: u64,
    threads: u32,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(120) + Duration::from_millis(MS_PER_OP_BOUND * iters);
    let out = b
        .sh(
            &format!("{fuzz} --mdev {uuid} --seed {seed} --iters {iters} --threads {threads}"),
            timeout,
        )
        .context("running the fuzzer")?;
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    ensure!(
        out.exit_code == Some(0) && !out.timed_out,
        "the fuzzer (seed {seed}, {threads} threads) failed: exit {:?}, signal {:?}, timed out {}:\nstdout: {}\nstderr: {}",
        out.exit_code,
        out.signal,
        out.timed_out,
        tail(&out.stdout),
        tail(&out.stderr)
    );
    if threads == 1 {
        for l in out.stdout.lines() {
            if l.starts_with("device:") || l.starts_with("capabilities:") {
                println!("  {l}");
            }
        }
    }
    let s = summary(&out.stdout)?;
    println!(
        "  seed {seed}, {threads} thread(s): {} operations in {} s; per kind: {}",
        s["done"],
        s["secs"],
        counts(&s["ops"])
    );
    println!("    succeeded: {}", counts(&s["ok"]));
    println!("    errors: {}", counts(&s["errors"]));
    if !s["racer"].is_null() {
        println!(
            "    racing thread: {} operations, {} succeeded; errors: {}",
            s["racer"]["ops"],
            s["racer"]["ok"],
            counts(&s["racer"]["errors"])
        );
    }
    ensure!(
        s["done"].as_u64() == Some(iters),
        "the fuzzer did {} of {iters} operations",
        s["done"]
    );
    Ok(())
}

/// What the borrower's module logged since `marks`, counted by kind
/// (informational: how far the fuzzing got).
fn print_kernel_log(c: &Cluster, marks: [usize; 2]) -> anyhow::Result<()> {
    let log = sh(
        c.agent(BORROWER)?,
        &format!("dmesg | tail -n +{}", marks[1] + 1),
    )?;
    let kinds = [
        ("borrowed", "borrowed remote device"),
        ("returned", "returned remote device"),
        ("pinned", "guest memory pinned"),
        ("pin failed", "cannot map guest memory"),
        ("lost", "lost remote device"),
        ("reset failed", "reset of remote device"),
        ("config write failed", "config write of"),
        ("BAR access failed", "BAR"),
        ("vectors refused", "the lender refused"),
    ];
    println!(
        "  borrower kernel log: {} lines; {}",
        log.lines().count(),
        kinds
            .iter()
            .map(|(name, pat)| format!("{name} {}", log.matches(pat).count()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// The fuzzer against an mdev of the lender's NVMe, then the checks that
/// it broke nothing.
fn fuzz_guest_vfio_ops_on_mdev(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    nothing_held(c, &nvme).context("before the fuzzing")?;
    let seed = twohost::fuzz_seed()?;
    let iters = env_u64("DEVLEND_FUZZ_ITERS")?.unwrap_or(DEFAULT_ITERS);
    println!(
        "  seed {seed}, {iters} operations, then {} racing (replay: DEVLEND_FUZZ_SEED={seed})",
        iters / 4
    );

    let b = c.agent(BORROWER)?;
    let fuzz = host_bin("devlend-fuzz-vfio", "DEVLEND_FUZZ_VFIO")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&format!("{LENDER}/{}", nvme.addr)))?;
    let res = (|| -> anyhow::Result<()> {
        run_fuzzer(b, &fuzz, &uuid, seed, iters, 1)?;
        // The same with a second thread racing the first: fewer operations,
        // the interleaving is not the seed's.
        run_fuzzer(b, &fuzz, &uuid, seed.wrapping_add(1), iters / 4, 2)
    })();
    let removed = lending::remove_mdev(b, &uuid);
    res?;
    removed?;
    print_kernel_log(c, marks)?;

    twohost::no_kernel_trouble(c, marks, None)?;
    nothing_held(c, &nvme).context("after the fuzzing")?;
    verified_io(c, &nvme)?;
    nothing_held(c, &nvme).context("after the verified I/O")?;
    twohost::no_kernel_trouble(c, marks, None)
}

fn main() {
    let checks = vec![Check {
        name: "fuzz_guest_vfio_ops_on_mdev",
        run: fuzz_guest_vfio_ops_on_mdev,
    }];
    Suite::new("fuzz_guest", checks).run(boot)
}
