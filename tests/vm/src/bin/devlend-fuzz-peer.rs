//! `devlend-fuzz-peer`: plays a malicious fabric peer from the outer
//! machine, writing malformed, replayed, oversized, out-of-order and stale
//! messages into a host's receive ring, in that host's inbox in its RAM
//! file (see `devlend_vmtests::peerfuzz`).
//!
//! ```text
//! devlend-fuzz-peer --ctl FILE --target ID --target-ram FILE --peer ID
//!     --peer-ram FILE [--doorbell-sock SOCK] [--messages N] [--seed S]
//!     [--dev-id ID]... [--corruptions N] [--deaf-phases N] [--json]
//! ```
//!
//! `--ctl` is the control area file (the ivshmem server's `--ctl-path`);
//! `--target-ram` and `--peer-ram` are the RAM files (QEMU memory backends)
//! of the target and of the impersonated peer: the fuzzer writes into the
//! target's inbox and reads the target's messages from the peer's.
//!
//! `--deaf-phases N` (default 3): N times, the fuzzer stops taking the
//! target's messages while it sends on, until the target holds its
//! messages back for want of room for their answers.
//!
//! `--churn N` (with one `--dev-id`): instead of fuzzing, hold that device
//! and map and unmap one page at a new 2 MiB-aligned IOVA N times
//! (`peerfuzz::churn`); prints `CHURN-HELD <json>`, then releases the
//! device when a line `release` comes on stdin, prints `CHURN-RELEASED
//! <json>`, and exits at `quit` (or the end of stdin), keeping the peer
//! alive meanwhile.
//!
//! `--flood`: instead of fuzzing, flood the target with NTB hellos that
//! ask for an answer, never taking its messages, then with pings until it
//! holds ours back (`peerfuzz::flood`); the stages start at the lines
//! `flood`, `hold` and `quit` on stdin (the end of stdin starts them all)
//! and print `FLOOD-READY`, `FLOOD-FLOODING`, `FLOOD-HELD` and
//! `FLOOD-DONE <json>`.
//!
//! `--hostile-lender` (issue 26): the other way round, the peer is a dead
//! lender and the target a borrower; the fuzzer lends made-up devices to
//! the target and lies to it (`peerfuzz::lender`). It prints
//! `HOSTILE-LISTED <json>` (what the target's remote/ directory must list),
//! answers honestly until a line `go` comes on stdin, lies for
//! `--messages` messages, prints `HOSTILE-SENT <json>`, answers honestly
//! until `quit` (or the end of stdin), and ends with `HOSTILE-REPORT
//! <json>` once the target has taken everything it wrote. `--catalog N`
//! (default 300) devices, `--victim ID` (default 7) the one that looks like
//! an NVMe controller, `--late-ms MS` (default 2500) how long late answers
//! are held back, `--irq-bursts N` (default 8) bursts of IRQ_FIREs into an
//! empty ring, `--rate N` unsolicited messages a second at most while lying
//! (default 0: no limit).
//!
//! The peer must be a host whose slot says UP but whose QEMU is gone (killed):
//! the fuzzer keeps its heartbeat moving. With `--doorbell-sock` (the ivshmem
//! server's socket of that host) it rings the target's doorbell. `--json`
//! ends the output with one `FUZZ-REPORT {...}` line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use devlend_vmtests::peerfuzz::lender::HostileOptions;
use devlend_vmtests::peerfuzz::{self, Options};

fn usage() -> &'static str {
    "usage: devlend-fuzz-peer --ctl FILE --target ID --target-ram FILE --peer ID \
     --peer-ram FILE [--doorbell-sock SOCK] [--messages N] [--seed S] [--dev-id ID]... \
     [--corruptions N] [--deaf-phases N] [--json] [--churn N] [--flood] [-v] \
     [--hostile-lender [--catalog N] [--victim ID] [--late-ms MS] [--irq-bursts N] [--rate N]]"
}

fn parse() -> anyhow::Result<(Options, bool, Option<u64>)> {
    let mut ctl = None;
    let mut target = None;
    let mut target_ram = None;
    let mut peer = None;
    let mut peer_ram = None;
    let mut opts = Options {
        ctl: PathBuf::new(),
        target_ram: PathBuf::new(),
        peer_ram: PathBuf::new(),
        doorbell_sock: None,
        target: 0,
        peer: 0,
        messages: 1_000_000,
        seed: rand::random(),
        dev_ids: Vec::new(),
        corruptions: 4,
        deaf_phases: 3,
        verbose: false,
    };
    let mut json = false;
    let mut churn = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .with_context(|| format!("{a} needs a value\n{}", usage()))
        };
        match a.as_str() {
            "--ctl" => ctl = Some(PathBuf::from(val()?)),
            "--doorbell-sock" => opts.doorbell_sock = Some(PathBuf::from(val()?)),
            "--target" => target = Some(val()?.parse().context("--target")?),
            "--target-ram" => target_ram = Some(PathBuf::from(val()?)),
            "--peer" => peer = Some(val()?.parse().context("--peer")?),
            "--peer-ram" => peer_ram = Some(PathBuf::from(val()?)),
            "--messages" => opts.messages = val()?.parse().context("--messages")?,
            "--seed" => opts.seed = parse_u64(&val()?).context("--seed")?,
            "--dev-id" => opts.dev_ids.push(val()?.parse().context("--dev-id")?),
            "--corruptions" => opts.corruptions = val()?.parse().context("--corruptions")?,
            "--deaf-phases" => opts.deaf_phases = val()?.parse().context("--deaf-phases")?,
            "--json" => json = true,
            "--churn" => churn = Some(val()?.parse().context("--churn")?),
            // Looked for by main(): see flood_asked().
            "--flood" => {}
            // Looked for by main(): see hostile_asked().
            "--hostile-lender" => {}
            "--catalog" | "--victim" | "--late-ms" | "--irq-bursts" | "--rate" => {
                val()?;
            }
            "-v" | "--verbose" => opts.verbose = true,
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a:?}\n{}", usage()),
        }
    }
    opts.ctl = ctl.with_context(|| format!("--ctl is required\n{}", usage()))?;
    opts.target = target.with_context(|| format!("--target is required\n{}", usage()))?;
    opts.target_ram =
        target_ram.with_context(|| format!("--target-ram is required\n{}", usage()))?;
    opts.peer = peer.with_context(|| format!("--peer is required\n{}", usage()))?;
    opts.peer_ram = peer_ram.with_context(|| format!("--peer-ram is required\n{}", usage()))?;
    if opts.target == opts.peer {
        bail!("--target and --peer must differ");
    }
    if opts.target_ram == opts.peer_ram {
        bail!("--target-ram and --peer-ram must differ");
    }
    if churn.is_some() && opts.dev_ids.len() != 1 {
        bail!("--churn needs exactly one --dev-id");
    }
    Ok((opts, json, churn))
}

/// The churn mode, told by lines on stdin when to release and quit.
fn run_churn(opts: &Options, rounds: u64) -> ExitCode {
    let release = Arc::new(AtomicBool::new(false));
    let quit = Arc::new(AtomicBool::new(false));
    {
        let (release, quit) = (release.clone(), quit.clone());
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                match line.as_deref().map(str::trim) {
                    Ok("release") => release.store(true, Ordering::SeqCst),
                    Ok("quit") => break,
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            release.store(true, Ordering::SeqCst);
            quit.store(true, Ordering::SeqCst);
        });
    }
    let co = peerfuzz::ChurnOptions {
        dev_id: opts.dev_ids[0],
        rounds,
    };
    let go = |stage: &str| match stage {
        "release" => release.load(Ordering::SeqCst),
        _ => quit.load(Ordering::SeqCst),
    };
    match peerfuzz::churn(opts, &co, &go) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devlend-fuzz-peer: churn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `--flood` was given.
fn flood_asked() -> bool {
    std::env::args().skip(1).any(|a| a == "--flood")
}

/// The flood mode, told by lines on stdin when to start each stage.
fn run_flood(opts: &Options) -> ExitCode {
    const STAGES: [&str; 3] = ["flood", "hold", "quit"];
    let told: Arc<[AtomicBool; 3]> = Arc::new(Default::default());
    {
        let told = told.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if let Some(i) = STAGES.iter().position(|s| *s == line.trim()) {
                    told[i].store(true, Ordering::SeqCst);
                }
            }
            for t in told.iter() {
                t.store(true, Ordering::SeqCst);
            }
        });
    }
    let go = |stage: &str| {
        STAGES
            .iter()
            .position(|s| *s == stage)
            .is_some_and(|i| told[i].load(Ordering::SeqCst))
    };
    match peerfuzz::flood(opts, &go) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devlend-fuzz-peer: flood: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The hostile lender's options, if `--hostile-lender` was given.
fn hostile_asked() -> anyhow::Result<Option<HostileOptions>> {
    let mut ho = HostileOptions::default();
    let mut asked = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--hostile-lender" => asked = true,
            "--catalog" => ho.catalog = val()?.parse().context("--catalog")?,
            "--victim" => ho.victim = val()?.parse().context("--victim")?,
            "--late-ms" => ho.late = Duration::from_millis(val()?.parse().context("--late-ms")?),
            "--irq-bursts" => ho.irq_bursts = val()?.parse().context("--irq-bursts")?,
            "--rate" => ho.rate = val()?.parse().context("--rate")?,
            _ => {}
        }
    }
    if asked && ho.catalog == 0 {
        bail!("--catalog must be at least 1 (the victim)");
    }
    Ok(asked.then_some(ho))
}

/// The hostile lender, told by lines on stdin when to lie and when to
/// stop (the end of stdin says both).
fn run_hostile(opts: &Options, ho: &HostileOptions) -> ExitCode {
    const WORDS: [&str; 2] = ["go", "quit"];
    let told: Arc<[AtomicBool; 2]> = Arc::new(Default::default());
    {
        let told = told.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if let Some(i) = WORDS.iter().position(|w| *w == line.trim()) {
                    told[i].store(true, Ordering::SeqCst);
                }
            }
            for t in told.iter() {
                t.store(true, Ordering::SeqCst);
            }
        });
    }
    let go = |stage: &str| {
        WORDS
            .iter()
            .position(|w| *w == stage)
            .is_some_and(|i| told[i].load(Ordering::SeqCst))
    };
    match peerfuzz::lender::run(opts, ho, &go) {
        Ok(report) => {
            let v = report.to_json();
            eprintln!(
                "hostile lender: {} messages written, {} of them lying, in {:.1} s; twists {}",
                report.written, report.hostile, report.secs, v["twists"]
            );
            println!("HOSTILE-REPORT {v}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("devlend-fuzz-peer: hostile lender: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse_u64(s: &str) -> anyhow::Result<u64> {
    Ok(match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16)?,
        None => s.parse()?,
    })
}

fn main() -> ExitCode {
    let (opts, json, churn) = match parse() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("devlend-fuzz-peer: {e:#}");
            return ExitCode::from(2);
        }
    };
    match hostile_asked() {
        Ok(Some(ho)) => {
            println!(
                "lying to host {} as lender host {}: {} devices, {} messages, seed {:#x}",
                opts.target, opts.peer, ho.catalog, opts.messages, opts.seed
            );
            return run_hostile(&opts, &ho);
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("devlend-fuzz-peer: {e:#}");
            return ExitCode::from(2);
        }
    }
    if flood_asked() {
        println!(
            "flooding host {} as host {}: NTB hellos asking for answers, never taken",
            opts.target, opts.peer
        );
        return run_flood(&opts);
    }
    if let Some(rounds) = churn {
        println!(
            "churning device {} of host {} as host {}: {rounds} rounds",
            opts.dev_ids[0], opts.target, opts.peer
        );
        return run_churn(&opts, rounds);
    }
    println!(
        "fuzzing host {} as host {}: {} messages, seed {:#x}",
        opts.target, opts.peer, opts.messages, opts.seed
    );
    match peerfuzz::run(&opts) {
        Ok(report) => {
            let v = report.to_json();
            println!(
                "sent {} messages in {:.1} s ({:.0}/s), doorbell {}",
                report.sent,
                report.secs,
                report.sent as f64 / report.secs.max(1e-9),
                report.doorbell
            );
            println!("kinds: {}", v["kinds"]);
            println!("expected: {}", v["expected"]);
            println!(
                "responses by status: {}; wrong status {}, missing {}, unexpected {}",
                v["responses"],
                report.wrong_status,
                report.missing_responses,
                report.unexpected_responses
            );
            for w in &report.wrong_examples {
                println!("  {w}");
            }
            if json {
                println!("FUZZ-REPORT {v}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("devlend-fuzz-peer: {e:#}");
            ExitCode::FAILURE
        }
    }
}
