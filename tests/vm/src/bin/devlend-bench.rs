//! `devlend-bench`: a borrowed NVMe against an identical NVMe on local
//! vfio-pci, in pairs, in one run of the bench cluster
//! (qemu-scripts/topologies/bench.toml). Run by `./bench.sh`;
//! docs/performance.md explains the figures.
//!
//! ```text
//! devlend-bench [--pairs N] [--rounds N] [--quick] [--backing-only]
//!               [--relay-irq | --direct-irq] [--trapped-pairs]
//!               [--load NAME]... [--out FILE]
//! ```
//!
//! The lender carries two identical drives: one lent (the borrower's mdev),
//! one bound to vfio-pci on the lender for the whole run. Each load runs on
//! devlend and at once on the local drive, `--pairs` times, for each MSI-X
//! path of the devlend side (direct and relayed; one with `--direct-irq` or
//! `--relay-irq`): the userspace driver, then two KVM guests, one per side,
//! booted together and stepped through the loads in turn (the guest whose
//! turn it is not stopped through QMP). Per load and
//! path: the median of the pairs' devlend/local ratios and their range, and
//! each host's CPU time per I/O. Then, `--rounds` times, what is not paired:
//! opening the device, guest starts, the trapped-BAR guest, memory backings
//! (none with `--rounds 0`). `--load` pairs only the loads it names
//! (`guest-4k-randread-qd1`, say), for more pairs of one load in an hour.
//! The last line printed is the path of the JSON result.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::bench::{
    self, Backing, Compared, CpuTicks, Figures, FillStats, IrqPath, Load, Pair, Paired, Run, Side,
};
use devlend_vmtests::fabric::{self, sh_timeout};
use devlend_vmtests::guest::{self, BackgroundGuest, GuestOpts};
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::twohost::{self, BORROWER, LENDER, MDEV_TYPE};

/// Guest RAM, on both sides.
const GUEST_MIB: u32 = 512;
/// Guest RAM of the memory-backing loads: smaller, so that a 1 GiB host
/// can also hold the fragmenter's pages or the huge pages beside it.
const BACKING_GUEST_MIB: u32 = 256;
/// The bench's cluster: two-host with a second NVMe on the lender.
const TOPOLOGY: &str = "bench";

const USAGE: &str = "usage: devlend-bench [--pairs N] [--rounds N] [--quick] [--backing-only] \
                     [--relay-irq | --direct-irq] [--trapped-pairs] [--load NAME]... [--out FILE]";

struct Opts {
    /// Pairs per load and MSI-X path (0 until parsed: the default).
    pairs: u32,
    /// Times the unpaired measurements run.
    rounds: u32,
    quick: bool,
    /// Only the memory-backing guest starts (and shadow doorbells).
    backing_only: bool,
    /// The devlend side's MSI-X paths measured, the first also used by the
    /// unpaired measurements.
    paths: Vec<IrqPath>,
    /// The guest pairs' local side has its BARs trapped (`x-no-mmap`), as
    /// the devlend side's are on the emulated fabric: what the fabric
    /// adds, paired (issue 28's goal for QD1). The unpaired trapped guest
    /// is then not run.
    trapped_pairs: bool,
    /// The loads paired, by name; empty: all of them.
    loads: Vec<String>,
    out: PathBuf,
}

impl Opts {
    /// The standard loads at `level` that this run pairs.
    fn loads(&self, level: &str) -> Vec<Load> {
        Load::standard(level)
            .into_iter()
            .filter(|l| self.loads.is_empty() || self.loads.contains(&l.name))
            .collect()
    }
}

fn parse() -> anyhow::Result<Opts> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut o = Opts {
        pairs: 0,
        rounds: 1,
        quick: false,
        backing_only: false,
        paths: vec![IrqPath::Direct, IrqPath::Relayed],
        trapped_pairs: false,
        loads: Vec::new(),
        out: tools::repo_root().join(format!("target/bench/bench-{stamp}.json")),
    };
    let mut args = std::env::args().skip(1);
    let number = |what: &str, args: &mut std::iter::Skip<std::env::Args>| -> anyhow::Result<u32> {
        args.next()
            .with_context(|| format!("{what} needs a value"))?
            .parse()
            .with_context(|| what.to_owned())
    };
    let count = |what: &str, args: &mut std::iter::Skip<std::env::Args>| -> anyhow::Result<u32> {
        let n = number(what, args)?;
        ensure!(n >= 1, "{what} must be at least 1");
        Ok(n)
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pairs" => o.pairs = count("--pairs", &mut args)?,
            "--rounds" => o.rounds = number("--rounds", &mut args)?,
            "--quick" => o.quick = true,
            "--backing-only" => o.backing_only = true,
            "--relay-irq" => o.paths = vec![IrqPath::Relayed],
            "--direct-irq" => o.paths = vec![IrqPath::Direct],
            "--trapped-pairs" => o.trapped_pairs = true,
            "--load" => {
                let name = args.next().context("--load needs a load's name")?;
                let known: Vec<String> = ["userspace", "guest"]
                    .iter()
                    .flat_map(|level| Load::standard(level))
                    .map(|l| l.name)
                    .collect();
                ensure!(
                    known.contains(&name),
                    "no load is called {name:?}; the loads: {}",
                    known.join(", ")
                );
                o.loads.push(name);
            }
            "--out" => o.out = PathBuf::from(args.next().context("--out needs a path")?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => bail!("unknown argument {a:?}; {USAGE}"),
        }
    }
    if o.pairs == 0 {
        o.pairs = default_pairs(o.quick);
    }
    Ok(o)
}

/// Pairs per load and MSI-X path unless `--pairs` says: 3, the fewest
/// whose median is not the mean of two; 2 with `--quick`, to keep it
/// short.
fn default_pairs(quick: bool) -> u32 {
    if quick {
        2
    } else {
        3
    }
}

fn step(what: &str) {
    println!("==> {what}");
}

/// Timed I/Os of the userspace driver per run of `load`: about 5-10 s of
/// TCG time each.
fn driver_ios(load: &Load, quick: bool) -> u64 {
    let n = match (load.io_size, load.queue_depth) {
        (s, _) if s >= 64 << 10 => 400,
        (_, 1) => 3000,
        _ => 8000,
    };
    if quick {
        n / 10
    } else {
        n
    }
}

/// Seconds of a guest's fio run of one load.
fn fio_secs(quick: bool) -> u32 {
    if quick {
        3
    } else {
        8
    }
}

/// Seconds over which a pair set's idle load is measured (the paired
/// guests stopped, so what the hosts spend besides a running load).
fn idle_secs(quick: bool) -> u64 {
    if quick {
        6
    } else {
        10
    }
}

/// The lender's two drives: one lent, one on vfio-pci for the local side.
struct Drives {
    lent: PciDev,
    local: PciDev,
}

/// Everything measured.
#[derive(Default)]
struct Runs {
    /// Per load and MSI-X path, in the order measured.
    paired: Vec<Paired>,
    /// The hosts' busy share while idle, per pair set: (level, path,
    /// [lender, borrower]).
    idle: Vec<(&'static str, IrqPath, [f64; 2])>,
    start_secs: [Vec<f64>; 2],
    start_messages: Vec<u64>,
    guest_trapped: BTreeMap<String, Vec<Figures>>,
    open_secs: [Vec<f64>; 2],
    open_messages: Vec<u64>,
    /// The lender's message counters of the device over each opening run.
    open_by_type: Vec<BTreeMap<String, f64>>,
    backing: BTreeMap<&'static str, BackingRuns>,
    shadow_doorbells: BTreeMap<&'static str, (u64, u64)>,
}

/// One memory backing's guest starts.
#[derive(Default)]
struct BackingRuns {
    /// Seconds from QEMU's start to its exit, by side.
    secs: [Vec<f64>; 2],
    /// The borrower's pinning and mapping, per devlend start.
    fill: Vec<FillStats>,
    /// Fabric messages the borrower sent, per devlend start.
    messages: Vec<u64>,
    /// Why a side could not be measured.
    skipped: Vec<String>,
    /// Devlend starts with bulk pinning off (`bulk_pin=0`): seconds.
    pbp_secs: Vec<f64>,
    /// ... and their pinning and mapping.
    pbp_fill: Vec<FillStats>,
}

/// The borrower module's switch between bulk pinning and VFIO's page by
/// page pinning.
const BULK_PIN_PARAM: &str = "/sys/module/devlend_borrower/parameters/bulk_pin";

/// The borrower module's switch between direct and relayed MSI-X.
const DIRECT_IRQ_PARAM: &str = "/sys/module/devlend_borrower/parameters/direct_irq";

/// Sets the devlend side's MSI-X path for the device's next users.
fn set_irq_path(c: &Cluster, path: IrqPath) -> anyhow::Result<()> {
    fabric::sh(
        c.agent(BORROWER)?,
        &format!("echo {} > {DIRECT_IRQ_PARAM}", path.param()),
    )?;
    Ok(())
}

fn idx(side: Side) -> usize {
    match side {
        Side::Devlend => 0,
        Side::Local | Side::Trapped => 1,
    }
}

/// One side's figures of a load, as they come.
fn show(side: Side, load: &str, f: &Figures) {
    println!(
        "  {:<8} {load:<28} {:>8.0} IOPS {:>7.2} MB/s  p50 {:>7.0} us  p99 {:>7.0} us",
        format!("{side:?}").to_lowercase(),
        f.iops,
        f.mb_per_sec,
        f.p50_us,
        f.p99_us
    );
}

/// A run's CPU line as it comes.
fn show_cpu(side: Side, run: &Run) {
    println!(
        "  {:<8} {:<28} CPU us per I/O: lender {:.0}, borrower {:.0}",
        format!("{side:?}").to_lowercase(),
        "",
        run.cpu_us_per_io.lender,
        run.cpu_us_per_io.borrower
    );
}

/// The devlend side's device: a new mdev of the lent drive (removed by the
/// caller); the local side has none.
fn side_mdev(c: &Cluster, d: &Drives, side: Side) -> anyhow::Result<Option<String>> {
    Ok(match side {
        Side::Devlend => Some(lending::create_mdev(
            c.agent(BORROWER)?,
            MDEV_TYPE,
            Some(&twohost::remote_name(&d.lent)),
        )?),
        Side::Local | Side::Trapped => None,
    })
}

/// Runs `f`, then removes the side's mdev (if any), whether `f` passed or
/// not; the removal's error goes first.
fn with_side_mdev<T>(
    c: &Cluster,
    mdev: Option<&str>,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let res = f();
    if let Some(uuid) = mdev {
        lending::remove_mdev(c.agent(BORROWER)?, uuid)?;
    }
    res
}

/// Both hosts' CPU time now: [lender, borrower], each from its own
/// kernel's `/proc/stat` (one `head` each, no shell).
fn cpu_now(c: &Cluster) -> anyhow::Result<[CpuTicks; 2]> {
    let read = |host: &str| -> anyhow::Result<CpuTicks> {
        let text = c
            .agent(host)?
            .exec_ok(&["head", "-n1", "/proc/stat"], Duration::from_secs(30))
            .with_context(|| format!("/proc/stat of the {host}"))?;
        bench::parse_proc_stat(&text)
    };
    Ok([read(LENDER)?, read(BORROWER)?])
}

/// The share of their time both hosts are busy with nothing of ours
/// running (the agent, timers, a waiting guest): [lender, borrower].
fn idle_load(c: &Cluster, secs: u64) -> anyhow::Result<[f64; 2]> {
    let t0 = cpu_now(c)?;
    std::thread::sleep(Duration::from_secs(secs));
    let t1 = cpu_now(c)?;
    Ok([
        t1[0].since(&t0[0]).busy_fraction(),
        t1[1].since(&t0[1]).busy_fraction(),
    ])
}

/// Runs `f` with both hosts' CPU time read just before and after it: what
/// passed on [lender, borrower].
fn cpu_around<T>(
    c: &Cluster,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, [CpuTicks; 2])> {
    let t0 = cpu_now(c)?;
    let out = f()?;
    let t1 = cpu_now(c)?;
    Ok((out, [t1[0].since(&t0[0]), t1[1].since(&t0[1])]))
}

/// What was read around one run of a load, before its I/O count is known.
struct Raw {
    /// CPU time that passed on [lender, borrower].
    cpu: [CpuTicks; 2],
    /// The lender's counters of the lent drive before and after (devlend).
    counters: Option<(BTreeMap<String, u64>, BTreeMap<String, u64>)>,
    /// Doorbells the borrower took on direct vectors (devlend).
    direct: Option<u64>,
    /// CPU time of the run's fixed part measured on its own, on [lender,
    /// borrower] (the userspace driver's open and verification).
    fixed: Option<[CpuTicks; 2]>,
}

/// Runs `f`, one run of a load on `side`, with both hosts' CPU time read
/// just before and after it, and on the devlend side the lender's
/// counters and the borrower's direct doorbells outside that.
fn around<T>(
    c: &Cluster,
    d: &Drives,
    side: Side,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, Raw)> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let borrowed = side == Side::Devlend;
    let before = if borrowed {
        Some((
            bench::lender_counters(l, &d.lent)?,
            bench::borrower_direct_fires(b).ok(),
        ))
    } else {
        None
    };
    let (out, cpu) = cpu_around(c, f)?;
    let mut raw = Raw {
        cpu,
        counters: None,
        direct: None,
        fixed: None,
    };
    if let Some((cnt0, direct0)) = before {
        raw.counters = Some((cnt0, bench::lender_counters(l, &d.lent)?));
        raw.direct = match direct0 {
            Some(n) => Some(bench::borrower_direct_fires(b)?.saturating_sub(n)),
            None => None,
        };
    }
    Ok((out, raw))
}

/// A run on `side` from what was read around it and its figures.
fn finish(side: Side, raw: Raw, figures: Figures, idle: [f64; 2]) -> Run {
    let ios = figures.ios;
    Run {
        cpu_us_per_io: bench::host_cpu(side, raw.cpu, raw.fixed, idle, ios),
        messages_per_io: raw
            .counters
            .map(|(a, b)| bench::per_io(&a, &b, ios))
            .unwrap_or_default(),
        direct_doorbells_per_io: raw.direct.map_or(0.0, |n| n as f64 / ios.max(1) as f64),
        figures,
    }
}

/// The userspace driver on every load, in pairs: on the borrower's mdev
/// of the lent drive, then at once on the lender's local drive.
fn userspace_pairs(
    c: &Cluster,
    d: &Drives,
    path: IrqPath,
    o: &Opts,
) -> anyhow::Result<(Vec<Paired>, [f64; 2])> {
    let drv = twohost::host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    set_irq_path(c, path)?;
    let mdev = side_mdev(c, d, Side::Devlend)?;
    with_side_mdev(c, mdev.as_deref(), || {
        let uuid = mdev.as_deref().context("no mdev")?;
        let idle = idle_load(c, idle_secs(o.quick))?;
        println!(
            "  idle load (busy share): lender {:.3}, borrower {:.3}",
            idle[0], idle[1]
        );
        let loads = o.loads("userspace");
        let mut pairs: Vec<Vec<Pair>> = vec![Vec::new(); loads.len()];
        for p in 1..=o.pairs {
            for (k, load) in loads.iter().enumerate() {
                let args = bench::driver_args(load, driver_ios(load, o.quick));
                // The same run with no timed I/Os: its open, reset and
                // verification, whose CPU time is taken off the run's.
                let fixed_args = bench::driver_args(load, 0);
                let drive = |side: Side, args: &str| -> anyhow::Result<String> {
                    match side {
                        Side::Devlend => sh_timeout(
                            b,
                            &format!("{drv} --mdev {uuid} {args}"),
                            Duration::from_secs(600),
                        ),
                        _ => sh_timeout(
                            l,
                            &format!(
                                "{drv} --device /sys/bus/pci/devices/{} {args}",
                                d.local.addr
                            ),
                            Duration::from_secs(600),
                        ),
                    }
                };
                let one = |side: Side| -> anyhow::Result<(Figures, Raw)> {
                    let (out, raw) = around(c, d, side, || drive(side, &args))?;
                    let f = bench::parse_driver(&out)
                        .with_context(|| format!("{} ({side:?}, pair {p})", load.name))?;
                    show(side, &load.name, &f);
                    Ok((f, raw))
                };
                let (fd, mut rd) = one(Side::Devlend)?;
                let (fl, mut rl) = one(Side::Local)?;
                // The fixed parts after the pair, so that its two runs
                // stay next to each other.
                rd.fixed = Some(cpu_around(c, || drive(Side::Devlend, &fixed_args))?.1);
                rl.fixed = Some(cpu_around(c, || drive(Side::Local, &fixed_args))?.1);
                let dev = finish(Side::Devlend, rd, fd, idle);
                let loc = finish(Side::Local, rl, fl, idle);
                show_cpu(Side::Devlend, &dev);
                show_cpu(Side::Local, &loc);
                let pair = Pair::new(load, dev, loc);
                println!("  pair {p}: ratio {:.2}", pair.ratio);
                pairs[k].push(pair);
            }
        }
        let rows = loads
            .iter()
            .zip(pairs)
            .map(|(load, p)| Paired::new(load, path, p))
            .collect();
        Ok((rows, idle))
    })
}

/// Where a side's guests run: its host and agent (KVM loaded there), the
/// mdev made for them on the devlend side (the caller removes it), and the
/// QEMU argument that gives them the device.
struct GuestHost<'c> {
    host: &'static str,
    agent: &'c AgentClient,
    mdev: Option<String>,
    dev_arg: String,
}

fn guest_host<'c>(c: &'c Cluster, d: &Drives, side: Side) -> anyhow::Result<GuestHost<'c>> {
    let (host, agent) = match side {
        Side::Devlend => (BORROWER, c.agent(BORROWER)?),
        Side::Local | Side::Trapped => (LENDER, c.agent(LENDER)?),
    };
    fabric::sh(agent, "modprobe kvm_amd").with_context(|| format!("KVM on the {host}"))?;
    let mdev = side_mdev(c, d, side)?;
    let dev_arg = match (&mdev, side) {
        (Some(uuid), _) => lending::vfio_arg(uuid),
        (None, Side::Trapped) => format!("-device vfio-pci,host={},x-no-mmap=true", d.local.addr),
        (None, _) => format!("-device vfio-pci,host={}", d.local.addr),
    };
    Ok(GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    })
}

/// Where a paired guest's host keeps the files that start its steps.
fn go_dir(side: Side) -> String {
    format!(
        "/tmp/devlend-bench-go-{}",
        format!("{side:?}").to_lowercase()
    )
}

/// A paired guest: booted, waiting for its first step.
struct PairedGuest<'c> {
    side: Side,
    agent: &'c AgentClient,
    guest: BackgroundGuest,
    dir: String,
    qmp: String,
}

impl PairedGuest<'_> {
    /// Stops (`run == false`) or continues the guest's vCPUs, and checks
    /// that QEMU says they are so.
    fn set_running(&self, run: bool) -> anyhow::Result<()> {
        bench::set_vm_running(self.agent, &self.qmp, run)
            .with_context(|| format!("the {:?} guest", self.side))
    }

    /// Runs step `step` (fio for `secs` seconds) and waits for its end:
    /// one agent call ([`bench::step_command`]).
    fn step(&self, step: u32, secs: u32) -> anyhow::Result<()> {
        let timeout = secs + 240;
        let cmd = bench::step_command(
            &self.dir,
            step,
            secs,
            &self.guest.console,
            self.guest.pid,
            timeout,
        );
        let out = self
            .agent
            .sh(&cmd, Duration::from_secs(u64::from(timeout) + 30))?;
        if out.exit_code != Some(0) {
            let tail = fabric::sh(self.agent, &format!("tail -c 3000 {}", self.guest.console))?;
            bail!(
                "the {:?} guest did not finish step {step} (exit {:?}: 3 is the guest gone, 124 {timeout} s passed); its console ends:\n{tail}",
                self.side,
                out.exit_code
            );
        }
        Ok(())
    }

    /// The figures of its step `step`, a run of `load`.
    fn figures(&self, step: u32, load: &Load) -> anyhow::Result<Figures> {
        bench::parse_fio_step(&self.guest.console(self.agent)?, step, load)
            .with_context(|| format!("the {:?} guest", self.side))
    }
}

/// Boots a paired guest on `gh`'s host.
fn spawn_paired<'c>(
    gh: &GuestHost<'c>,
    side: Side,
    script: &str,
) -> anyhow::Result<PairedGuest<'c>> {
    let images = tools::guest_images_dir()?;
    let dir = go_dir(side);
    fabric::sh(gh.agent, &format!("rm -rf {dir} && mkdir -p {dir}"))?;
    let extra = format!(
        "{} {} {}",
        gh.dev_arg,
        bench::outer_virtfs_arg(),
        bench::go_virtfs_arg(&dir)
    );
    let name = format!("{side:?}").to_lowercase();
    let qmp = format!("/tmp/devlend-bench-{name}.qmp");
    let opts = GuestOpts {
        mem_mib: GUEST_MIB,
        extra_qemu_args: &extra,
        qmp: Some(&qmp),
        kernel_args: "",
    };
    let console = format!("/tmp/devlend-bench-{name}.log");
    let guest = guest::spawn(gh.agent, &images, script, &opts, &console)?;
    Ok(PairedGuest {
        side,
        agent: gh.agent,
        guest,
        dir,
        qmp,
    })
}

/// The guest loads in pairs: a guest on the borrower with the lent drive's
/// mdev and a guest on the lender with the local drive, booted together,
/// each load run on the devlend guest and at once on the local one.
fn guest_pairs(
    c: &Cluster,
    d: &Drives,
    path: IrqPath,
    o: &Opts,
) -> anyhow::Result<(Vec<Paired>, [f64; 2])> {
    set_irq_path(c, path)?;
    let loads = o.loads("guest");
    let secs = fio_secs(o.quick);
    let script = lending::nvme_guest_script(&bench::paired_fio_script(&loads, secs, o.pairs));
    let local = if o.trapped_pairs {
        Side::Trapped
    } else {
        Side::Local
    };
    let dev = guest_host(c, d, Side::Devlend)?;
    let loc = guest_host(c, d, local)?;
    with_side_mdev(c, dev.mdev.as_deref(), || {
        let gd = spawn_paired(&dev, Side::Devlend, &script)?;
        let gl = match spawn_paired(&loc, local, &script) {
            Ok(g) => g,
            Err(e) => {
                let _ = gd.guest.kill(gd.agent);
                return Err(e);
            }
        };
        let res = (|| {
            for g in [&gd, &gl] {
                g.guest
                    .wait_for(g.agent, bench::PAIRED_READY, Duration::from_secs(300))
                    .with_context(|| format!("the {:?} guest", g.side))?;
            }
            // Only the guest whose turn it is runs; the other is stopped.
            // The idle load is measured with both stopped: what the hosts
            // spend besides the running guest.
            gd.set_running(false)?;
            gl.set_running(false)?;
            let idle = idle_load(c, idle_secs(o.quick))?;
            println!(
                "  both guests up, then stopped; idle load (busy share): lender {:.3}, borrower {:.3}",
                idle[0], idle[1]
            );
            let mut pairs: Vec<Vec<Pair>> = vec![Vec::new(); loads.len()];
            for p in 1..=o.pairs {
                for (k, load) in loads.iter().enumerate() {
                    let n = bench::step_number(p, k, loads.len());
                    gd.set_running(true)?;
                    let ((), rd) = around(c, d, Side::Devlend, || gd.step(n, secs))?;
                    gd.set_running(false)?;
                    gl.set_running(true)?;
                    let ((), rl) = around(c, d, local, || gl.step(n, secs))?;
                    gl.set_running(false)?;
                    // Read after both runs, so that the pair's two runs
                    // stay next to each other.
                    let fd = gd.figures(n, load)?;
                    let fl = gl.figures(n, load)?;
                    show(Side::Devlend, &load.name, &fd);
                    let rd = finish(Side::Devlend, rd, fd, idle);
                    show_cpu(Side::Devlend, &rd);
                    show(local, &load.name, &fl);
                    let rl = finish(local, rl, fl, idle);
                    show_cpu(local, &rl);
                    let pair = Pair::new(load, rd, rl);
                    println!("  pair {p}: ratio {:.2}", pair.ratio);
                    pairs[k].push(pair);
                }
            }
            for g in [&gd, &gl] {
                fabric::sh(g.agent, &format!("touch {}/{}", g.dir, bench::PAIRED_END))?;
                g.set_running(true)?;
                let run = g.guest.wait(g.agent, Duration::from_secs(300))?;
                ensure!(
                    run.rc == 0,
                    "the {:?} fio guest failed:\n{}",
                    g.side,
                    run.output
                );
            }
            let rows: Vec<Paired> = loads
                .iter()
                .zip(pairs)
                .map(|(load, p)| Paired::new(load, path, p))
                .collect();
            Ok((rows, idle))
        })();
        if res.is_err() {
            let _ = gd.guest.kill(gd.agent);
            let _ = gl.guest.kill(gl.agent);
        }
        res
    })
}

/// Opening the device: open, reset, identify, one write and read back,
/// close; on the devlend side with the fabric messages it took.
fn open_side(c: &Cluster, d: &Drives, side: Side, runs: &mut Runs) -> anyhow::Result<()> {
    let drv = twohost::host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let mdev = side_mdev(c, d, side)?;
    with_side_mdev(c, mdev.as_deref(), || {
        let lender_peer = fabric::host_id(l)?;
        let tx = || -> anyhow::Result<u64> {
            fabric::counter(&fabric::peer_counters(b, lender_peer)?, "tx_msgs")
        };
        let before = match &mdev {
            Some(_) => Some((tx()?, bench::lender_counters(l, &d.lent)?)),
            None => None,
        };
        let t0 = Instant::now();
        match &mdev {
            Some(uuid) => sh_timeout(
                b,
                &format!("{drv} --mdev {uuid} --blocks 1 --ios 0"),
                Duration::from_secs(600),
            )?,
            None => sh_timeout(
                l,
                &format!(
                    "{drv} --device /sys/bus/pci/devices/{} --blocks 1 --ios 0",
                    d.local.addr
                ),
                Duration::from_secs(600),
            )?,
        };
        let secs = t0.elapsed().as_secs_f64();
        runs.open_secs[idx(side)].push(secs);
        if let Some((tx0, cnt0)) = before {
            let cnt1 = bench::lender_counters(l, &d.lent)?;
            runs.open_messages.push(tx()? - tx0);
            runs.open_by_type.push(bench::per_io(&cnt0, &cnt1, 1));
        }
        println!(
            "  {:<8} opening the device (open, identify, a block written and read, close): {secs:.2} s",
            format!("{side:?}").to_lowercase()
        );
        Ok(())
    })
}

/// The time from QEMU's start to the guest's nvme being ready (and
/// power-off), and on the devlend side the fabric messages it took.
fn start_side(c: &Cluster, d: &Drives, side: Side, runs: &mut Runs) -> anyhow::Result<()> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let images = tools::guest_images_dir()?;
    let GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    } = guest_host(c, d, side)?;
    with_side_mdev(c, mdev.as_deref(), || {
        let lender_peer = fabric::host_id(l)?;
        let before = fabric::counter(&fabric::peer_counters(b, lender_peer)?, "tx_msgs")?;
        let opts = GuestOpts {
            mem_mib: GUEST_MIB,
            extra_qemu_args: &dev_arg,
            qmp: None,
            kernel_args: "",
        };
        let run = guest::run_with(agent, &images, &lending::nvme_guest_script("true"), &opts)?;
        ensure!(
            run.rc == 0,
            "guest on the {host} failed to start: {}",
            run.console
        );
        let secs = run.elapsed.as_secs_f64();
        if side == Side::Devlend {
            let after = fabric::counter(&fabric::peer_counters(b, lender_peer)?, "tx_msgs")?;
            runs.start_messages.push(after - before);
        }
        println!(
            "  {:<8} guest start to nvme ready and off: {secs:.1} s",
            format!("{side:?}").to_lowercase()
        );
        runs.start_secs[idx(side)].push(secs);
        Ok(())
    })
}

/// The guest loads on the local drive with its BARs trapped
/// (`x-no-mmap`), every load in one boot; not paired.
fn trapped_side(c: &Cluster, d: &Drives, quick: bool, runs: &mut Runs) -> anyhow::Result<()> {
    let images = tools::guest_images_dir()?;
    let GuestHost {
        host,
        agent,
        dev_arg,
        ..
    } = guest_host(c, d, Side::Trapped)?;
    let loads = Load::standard("guest");
    let extra = format!("{dev_arg} {}", bench::outer_virtfs_arg());
    let opts = GuestOpts {
        mem_mib: GUEST_MIB,
        extra_qemu_args: &extra,
        qmp: None,
        kernel_args: "",
    };
    let script = lending::nvme_guest_script(&bench::fio_script(&loads, fio_secs(quick)));
    let g = guest::spawn(
        agent,
        &images,
        &script,
        &opts,
        "/tmp/devlend-bench-guest.log",
    )?;
    let run = g.wait(agent, Duration::from_secs(900));
    if run.is_err() {
        let _ = g.kill(agent);
    }
    let run = run?;
    ensure!(
        run.rc == 0,
        "fio guest on the {host} failed:\n{}",
        run.output
    );
    let figs = bench::parse_fio_script(&run.output, &loads)?;
    for load in &loads {
        let f = figs[&load.name].clone();
        show(Side::Trapped, &load.name, &f);
        runs.guest_trapped
            .entry(load.name.clone())
            .or_default()
            .push(f);
    }
    Ok(())
}

/// Guest starts with the guest's RAM backed in each of the ways of
/// [`Backing`] (a smaller guest, see [`BACKING_GUEST_MIB`]): how long
/// pinning and mapping take, in how many runs and messages, by how
/// contiguous the memory is. With `page_by_page` (devlend only) the
/// borrower's bulk pinning is off for the run: VFIO pins every page.
fn backing_side(
    c: &Cluster,
    d: &Drives,
    side: Side,
    page_by_page: bool,
    runs: &mut Runs,
) -> anyhow::Result<()> {
    if page_by_page {
        let b = c.agent(BORROWER)?;
        fabric::sh(b, &format!("echo N > {BULK_PIN_PARAM}"))?;
        let res = backing_runs(c, d, side, true, runs);
        fabric::sh(b, &format!("echo Y > {BULK_PIN_PARAM}"))?;
        return res;
    }
    backing_runs(c, d, side, false, runs)
}

/// [`backing_side`]'s guests, with the module set up.
fn backing_runs(
    c: &Cluster,
    d: &Drives,
    side: Side,
    page_by_page: bool,
    runs: &mut Runs,
) -> anyhow::Result<()> {
    let label = if page_by_page {
        format!("{side:?}/vfio").to_lowercase()
    } else {
        format!("{side:?}").to_lowercase()
    };
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let images = tools::guest_images_dir()?;
    let fragmenter = twohost::host_bin("devlend-fragment", "DEVLEND_FRAGMENT")?;
    let GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    } = guest_host(c, d, side)?;
    let lender_peer = fabric::host_id(l)?;
    let tx = || -> anyhow::Result<u64> {
        fabric::counter(&fabric::peer_counters(b, lender_peer)?, "tx_msgs")
    };
    with_side_mdev(c, mdev.as_deref(), || {
        for backing in Backing::ALL {
            let entry = runs.backing.entry(backing.name()).or_default();
            let setup = bench::apply_backing(agent, backing, BACKING_GUEST_MIB, &fragmenter);
            let setup = match setup {
                Ok(Ok(s)) => s,
                Ok(Err(why)) => {
                    println!(
                        "  {label:<8} guest memory {:<14} not measured on the {host}: {why}",
                        backing.name()
                    );
                    entry.skipped.push(format!("{label} on the {host}: {why}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let run = (|| {
                let before = match &mdev {
                    Some(uuid) => Some((bench::fill_stats(b, uuid)?, tx()?)),
                    None => None,
                };
                let extra = format!("{dev_arg} {}", setup.qemu_args);
                let opts = GuestOpts {
                    mem_mib: BACKING_GUEST_MIB,
                    extra_qemu_args: &extra,
                    qmp: None,
                    kernel_args: "",
                };
                let run =
                    guest::run_with(agent, &images, &lending::nvme_guest_script("true"), &opts)?;
                ensure!(
                    run.rc == 0,
                    "guest ({}) on the {host} failed to start: {}",
                    backing.name(),
                    run.console
                );
                let fill = match (&mdev, before) {
                    (Some(uuid), Some((f0, tx0))) => {
                        Some((bench::fill_stats(b, uuid)?.since(&f0), tx()? - tx0))
                    }
                    _ => None,
                };
                Ok((run.elapsed.as_secs_f64(), fill))
            })();
            let undone = bench::undo_backing(agent, &setup);
            let (secs, fill) = run?;
            undone?;
            let detail = match fill {
                Some((f, msgs)) => {
                    if page_by_page {
                        entry.pbp_fill.push(f);
                    } else {
                        entry.fill.push(f);
                        entry.messages.push(msgs);
                    }
                    format!(
                        "; pinned {} MiB ({} MiB in bulk) in {} runs, {} DMA_MAP messages, {:.0} ms ({:.0} ms pinning; {} fills)",
                        f.pages >> 8,
                        f.bulk_pages >> 8,
                        f.runs,
                        f.msgs,
                        f.us as f64 / 1000.0,
                        f.pin_us as f64 / 1000.0,
                        f.fills
                    )
                }
                None => String::new(),
            };
            if page_by_page {
                entry.pbp_secs.push(secs);
            } else {
                entry.secs[idx(side)].push(secs);
            }
            println!(
                "  {label:<8} guest memory {:<14} start to nvme ready and off: {secs:.1} s{detail}",
                backing.name()
            );
        }
        Ok(())
    })
}

/// Whether the guest's nvme driver turns shadow doorbells (Doorbell
/// Buffer Config) on for the device: a guest resets the controller with
/// the driver's commands traced.
fn shadow_doorbells(c: &Cluster, d: &Drives, side: Side, runs: &mut Runs) -> anyhow::Result<()> {
    let images = tools::guest_images_dir()?;
    let GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    } = guest_host(c, d, side)?;
    with_side_mdev(c, mdev.as_deref(), || {
        let opts = GuestOpts {
            mem_mib: BACKING_GUEST_MIB,
            extra_qemu_args: &dev_arg,
            qmp: None,
            kernel_args: "",
        };
        let script = lending::nvme_guest_script(&bench::shadow_doorbell_script());
        let run = guest::run_with(agent, &images, &script, &opts)?;
        ensure!(
            run.rc == 0,
            "shadow doorbell guest on the {host} failed: {}",
            run.console
        );
        let (sent, failed) = bench::parse_shadow_doorbells(&run.output)?;
        println!(
            "  {:<8} shadow doorbells: the guest's nvme driver sent {sent} Doorbell Buffer Config command(s) at reset, {failed} refused",
            format!("{side:?}").to_lowercase()
        );
        runs.shadow_doorbells.insert(
            match side {
                Side::Devlend => "devlend",
                _ => "local",
            },
            (sent, failed),
        );
        Ok(())
    })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The lender's two drives: the first lent, the second bound to vfio-pci
/// for the whole run.
fn drives(c: &Cluster) -> anyhow::Result<Drives> {
    let lent = twohost::lent_nvme(c)?;
    let l = c.agent(LENDER)?;
    let all = lending::find_all_by_class(l, lending::NVME_CLASS)?;
    ensure!(
        all.len() == 2,
        "the lender has {} NVMe drives, the bench topology two: {all:?}",
        all.len()
    );
    let local = all
        .into_iter()
        .find(|n| n.addr != lent.addr)
        .context("no second NVMe on the lender")?;
    if lending::driver_of(l, &local.addr)?.as_deref() != Some("vfio-pci") {
        bench::bind_vfio_pci(l, &local.addr)?;
    }
    println!(
        "  lent drive {}, local drive {} (vfio-pci on the lender)",
        lent.addr, local.addr
    );
    Ok(Drives { lent, local })
}

/// Messages per I/O over every devlend run of `rows` together (each run
/// weighted by its I/Os).
fn weighted_messages(rows: &[&Paired]) -> BTreeMap<String, f64> {
    let mut sum: BTreeMap<String, f64> = BTreeMap::new();
    let mut ios = 0u64;
    for r in rows.iter().flat_map(|r| &r.pairs).map(|p| &p.devlend) {
        ios += r.figures.ios;
        for (k, v) in &r.messages_per_io {
            *sum.entry(k.clone()).or_default() += v * r.figures.ios as f64;
        }
    }
    sum.into_iter()
        .map(|(k, v)| (k, v / ios.max(1) as f64))
        .collect()
}

/// Direct doorbells per I/O over every devlend run of `rows`.
fn weighted_direct(rows: &[&Paired]) -> f64 {
    let runs: Vec<&Run> = rows
        .iter()
        .flat_map(|r| &r.pairs)
        .map(|p| &p.devlend)
        .collect();
    let ios: u64 = runs.iter().map(|r| r.figures.ios).sum();
    runs.iter()
        .map(|r| r.direct_doorbells_per_io * r.figures.ios as f64)
        .sum::<f64>()
        / ios.max(1) as f64
}

/// What the CPU columns measure, for the output and the JSON.
const CPU_MEASURE: &str =
    "each emulated host's own kernel's /proc/stat (user+nice+system+irq+softirq \
     ticks, a nested guest's time included), read through its agent just before and after each \
     run, less the host's idle load measured before the pairs; microseconds per I/O of the run, \
     median over the pairs";

fn measure(c: &mut Cluster, o: &Opts) -> anyhow::Result<serde_json::Value> {
    let d = drives(c)?;
    let mut runs = Runs::default();
    if !o.backing_only && !o.loads("userspace").is_empty() {
        for &path in &o.paths {
            step(&format!(
                "userspace driver in pairs, MSI-X {} ({} pairs per load): devlend (the borrower's mdev of the lent drive), then at once local (the other drive, vfio-pci on the lender)",
                path.name(),
                o.pairs
            ));
            let (rows, idle) = userspace_pairs(c, &d, path, o)?;
            print!("{}", bench::paired_table(&rows));
            runs.paired.extend(rows);
            runs.idle.push(("userspace", path, idle));
        }
    }
    if !o.backing_only && !o.loads("guest").is_empty() {
        for &path in &o.paths {
            step(&format!(
                "guests in pairs, MSI-X {} ({} pairs per load): a guest on the borrower with the lent drive and one on the lender with the local drive{}, in turn, the other stopped",
                path.name(),
                o.pairs,
                if o.trapped_pairs {
                    " (its BARs trapped: the local column is the trapped side)"
                } else {
                    ""
                }
            ));
            let (rows, idle) = guest_pairs(c, &d, path, o)?;
            print!("{}", bench::paired_table(&rows));
            runs.paired.extend(rows);
            runs.idle.push(("guest", path, idle));
        }
    }
    // What is not paired, on the first path.
    set_irq_path(c, o.paths[0])?;
    for round in 1..=o.rounds {
        step(&format!(
            "round {round} of {}: opening, guest starts, trapped BARs, memory backings (not paired; MSI-X {})",
            o.rounds,
            o.paths[0].name()
        ));
        if !o.backing_only {
            open_side(c, &d, Side::Devlend, &mut runs)?;
            open_side(c, &d, Side::Local, &mut runs)?;
            start_side(c, &d, Side::Devlend, &mut runs)?;
            start_side(c, &d, Side::Local, &mut runs)?;
            if !o.trapped_pairs {
                trapped_side(c, &d, o.quick, &mut runs)?;
            }
        }
        backing_side(c, &d, Side::Devlend, false, &mut runs)?;
        backing_side(c, &d, Side::Devlend, true, &mut runs)?;
        backing_side(c, &d, Side::Local, false, &mut runs)?;
        if round == 1 {
            shadow_doorbells(c, &d, Side::Devlend, &mut runs)?;
            shadow_doorbells(c, &d, Side::Local, &mut runs)?;
        }
    }

    let start = [mean(&runs.start_secs[0]), mean(&runs.start_secs[1])];
    let gib = f64::from(GUEST_MIB) / 1024.0;
    let start_msgs = mean(
        &runs
            .start_messages
            .iter()
            .map(|&m| m as f64)
            .collect::<Vec<_>>(),
    );

    if !runs.paired.is_empty() {
        println!(
            "\nEach load on devlend, then at once on the local drive, {} times per MSI-X path: \
             median devlend and local figures, median ratio and its range over the pairs.\n\
             CPU: {CPU_MEASURE}.\n",
            o.pairs
        );
        print!("{}", bench::paired_table(&runs.paired));
    }
    if !o.backing_only && o.rounds > 0 {
        println!(
        "\n{:<30} {:>12.1} {:>12.1} {:>7.2}   s (+{:.1} s borrowed; {:.1} s and {:.0} fabric messages per GiB of guest RAM)",
        "guest start to nvme ready",
        start[0],
        start[1],
        if start[1] > 0.0 { start[0] / start[1] } else { 0.0 },
        start[0] - start[1],
        (start[0] - start[1]) / gib,
        start_msgs / gib
    );
    }
    // The devlend guests of the first path against the local drive with
    // trapped BARs: what the fabric adds to an MMIO path that already exits
    // to QEMU on every BAR access. Not paired: the trapped guest runs after
    // the pairs.
    let first_guest = |name: &str| {
        runs.paired
            .iter()
            .find(|r| r.name == name && r.irq_path == o.paths[0])
    };
    let trapped: Vec<(Compared, f64)> = Load::standard("guest")
        .iter()
        .filter_map(|load| {
            let row = first_guest(&load.name)?;
            let dev: Vec<Figures> = row
                .pairs
                .iter()
                .map(|p| p.devlend.figures.clone())
                .collect();
            let t = runs.guest_trapped.get(&load.name)?.clone();
            let cmp = Compared::new(load, dev, t, BTreeMap::new());
            let t_fig = bench::headline(load, &cmp.local);
            let trap_loc = if row.local.median > 0.0 {
                t_fig / row.local.median
            } else {
                0.0
            };
            Some((cmp, trap_loc))
        })
        .collect();
    if !trapped.is_empty() {
        println!(
            "\n{:<30} {:>12} {:>12} {:>7} {:>9}",
            "load (BARs trapped locally)", "devlend", "trapped", "ratio", "trap/loc"
        );
        for (t, trap_loc) in &trapped {
            let pick = |f: &Figures| {
                if t.figure == "iops" {
                    f.iops
                } else {
                    f.mb_per_sec
                }
            };
            println!(
                "{:<30} {:>12.1} {:>12.1} {:>7.2} {:>9.2}",
                t.name,
                pick(&t.devlend),
                pick(&t.local),
                t.ratio,
                trap_loc
            );
        }
    }
    let open = [mean(&runs.open_secs[0]), mean(&runs.open_secs[1])];
    let as_f64 = |v: &[u64]| v.iter().map(|&m| m as f64).collect::<Vec<_>>();
    let open_msgs = mean(&as_f64(&runs.open_messages));
    let open_by_type: BTreeMap<String, f64> = bench::MESSAGE_COUNTERS
        .iter()
        .map(|k| {
            let v: Vec<f64> = runs
                .open_by_type
                .iter()
                .map(|m| m.get(*k).copied().unwrap_or(0.0))
                .collect();
            ((*k).to_owned(), mean(&v))
        })
        .collect();
    let open_cfg = open_by_type.get("cfg_reads").copied().unwrap_or(0.0);
    if !o.backing_only && o.rounds > 0 {
        println!(
            "{:<30} {:>12.2} {:>12.2} {:>7.2}   s ({:.0} fabric messages: {})",
            "opening the device",
            open[0],
            open[1],
            if open[1] > 0.0 {
                open[0] / open[1]
            } else {
                0.0
            },
            open_msgs,
            open_by_type
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // Per path: messages and interrupts per I/O over all its devlend guest
    // runs; the userspace loads' messages per load.
    let mut messages: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut interrupts = serde_json::Map::new();
    for &path in &o.paths {
        let guests: Vec<&Paired> = runs
            .paired
            .iter()
            .filter(|r| r.irq_path == path && r.name.starts_with("guest-"))
            .collect();
        if guests.is_empty() {
            continue;
        }
        let m = weighted_messages(&guests);
        let lender_irqs = m.get("irq_fires").copied().unwrap_or(0.0);
        let direct_dbs = weighted_direct(&guests);
        println!(
            "MSI-X {}: fabric messages per guest I/O: {}; lender interrupts handled per guest I/O: {lender_irqs:.3}; direct doorbells per guest I/O on the borrower: {direct_dbs:.3}",
            path.name(),
            m.iter()
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        interrupts.insert(
            path.name().into(),
            serde_json::json!({
                "lender_irqs_per_io": lender_irqs,
                "direct_doorbells_per_io": direct_dbs,
                "messages_per_io": m,
                "runs": guests.iter().map(|r| r.pairs.len()).sum::<usize>(),
            }),
        );
        if path == o.paths[0] {
            messages.insert("guest-all".into(), m);
        }
    }
    for r in runs.paired.iter().filter(|r| r.irq_path == o.paths[0]) {
        messages.insert(r.name.clone(), r.messages_per_io.clone());
    }
    let backing = backing_table(&runs);
    let shadow: BTreeMap<_, _> = runs
        .shadow_doorbells
        .iter()
        .map(|(k, (sent, failed))| (*k, serde_json::json!({ "sent": sent, "refused": failed })))
        .collect();
    if !shadow.is_empty() {
        println!(
            "shadow doorbells (Doorbell Buffer Config commands at a reset, sent/refused): {}",
            runs.shadow_doorbells
                .iter()
                .map(|(k, (s, f))| format!("{k} {s}/{f}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let idle: Vec<_> = runs
        .idle
        .iter()
        .map(|(level, path, [l, b])| {
            serde_json::json!({ "level": level, "irq_path": path, "lender": l, "borrower": b })
        })
        .collect();
    Ok(serde_json::json!({
        "pairs": o.pairs,
        "rounds": o.rounds,
        "quick": o.quick,
        "backing_only": o.backing_only,
        "irq_paths": o.paths,
        "guest_pairs_local": if o.trapped_pairs { "trapped" } else { "mapped" },
        "guest_mib": GUEST_MIB,
        "cpu_measure": CPU_MEASURE,
        "idle_busy_share": idle,
        "paired": runs.paired,
        "guest_start": {
            "devlend_secs": start[0],
            "local_secs": start[1],
            "extra_secs": start[0] - start[1],
            "extra_secs_per_gib": (start[0] - start[1]) / gib,
            "fabric_messages": start_msgs,
            "fabric_messages_per_gib": start_msgs / gib,
        },
        "guest_vs_trapped": trapped.iter().map(|(t, trap_loc)| {
            serde_json::json!({ "compared": t, "trapped_vs_local_median": trap_loc })
        }).collect::<Vec<_>>(),
        "open": {
            "devlend_secs": open[0],
            "local_secs": open[1],
            "fabric_messages": open_msgs,
            "config_reads": open_cfg,
            "by_type": open_by_type,
        },
        "messages_per_io": messages,
        "guest_interrupts": interrupts,
        "memory_backing": backing,
        "shadow_doorbells": shadow,
    }))
}

/// Fill figures per GiB pinned (re-pins count as pinned again).
#[derive(Debug, Clone, Copy, Default)]
struct PerGib {
    fill_ms: f64,
    pin_ms: f64,
    runs: f64,
    maps: f64,
    bulk_share: f64,
    gib_per_start: f64,
    fills_per_start: f64,
    windows_per_start: f64,
}

fn per_gib(fills: &[FillStats]) -> PerGib {
    let sum = |f: fn(&FillStats) -> u64| fills.iter().map(f).sum::<u64>() as f64;
    let gib = sum(|f| f.pages) * 4096.0 / f64::from(1u32 << 30);
    let per = |x: f64| if gib > 0.0 { x / gib } else { 0.0 };
    let starts = fills.len().max(1) as f64;
    PerGib {
        fill_ms: per(sum(|f| f.us) / 1000.0),
        pin_ms: per(sum(|f| f.pin_us) / 1000.0),
        runs: per(sum(|f| f.runs)),
        maps: per(sum(|f| f.msgs)),
        bulk_share: if sum(|f| f.pages) > 0.0 {
            sum(|f| f.bulk_pages) / sum(|f| f.pages)
        } else {
            0.0
        },
        gib_per_start: gib / starts,
        fills_per_start: sum(|f| f.fills) / starts,
        windows_per_start: sum(|f| f.windows) / starts,
    }
}

/// Prints the memory-backing tables and returns them as JSON.
fn backing_table(runs: &Runs) -> serde_json::Value {
    if runs.backing.is_empty() {
        return serde_json::Value::Null;
    }
    println!(
        "\n{:<30} {:>12} {:>12} {:>7} {:>11} {:>10} {:>9} {:>9} {:>9}",
        format!("guest memory ({BACKING_GUEST_MIB} MiB guest)"),
        "devlend s",
        "local s",
        "ratio",
        "fill ms/GiB",
        "pin ms/GiB",
        "runs/GiB",
        "maps/GiB",
        "msgs/GiB"
    );
    let ram_gib = f64::from(BACKING_GUEST_MIB) / 1024.0;
    let mut rows = Vec::new();
    let mut compared = Vec::new();
    for backing in Backing::ALL {
        let Some(r) = runs.backing.get(backing.name()) else {
            continue;
        };
        let (d, l) = (mean(&r.secs[0]), mean(&r.secs[1]));
        let g = per_gib(&r.fill);
        let msgs_per_gib =
            mean(&r.messages.iter().map(|&m| m as f64).collect::<Vec<_>>()) / ram_gib;
        let ratio = if l > 0.0 && d > 0.0 { d / l } else { 0.0 };
        println!(
            "{:<30} {:>12.1} {:>12.1} {:>7.2} {:>11.0} {:>10.0} {:>9.0} {:>9.1} {:>9.0}",
            backing.name(),
            d,
            l,
            ratio,
            g.fill_ms,
            g.pin_ms,
            g.runs,
            g.maps,
            msgs_per_gib
        );
        for why in &r.skipped {
            println!("{:<30} not measured: {why}", "");
        }
        let p = per_gib(&r.pbp_fill);
        let pbp_secs = mean(&r.pbp_secs);
        if !r.pbp_fill.is_empty() {
            compared.push((backing.name(), g, p, d, pbp_secs));
        }
        rows.push(serde_json::json!({
            "name": backing.name(),
            "backing": backing,
            "devlend_start_secs": d,
            "local_start_secs": l,
            "ratio": ratio,
            "fill_ms_per_gib_pinned": g.fill_ms,
            "pin_ms_per_gib_pinned": g.pin_ms,
            "bulk_pinned_share": g.bulk_share,
            "runs_per_gib_pinned": g.runs,
            "dma_map_messages_per_gib_pinned": g.maps,
            "fabric_messages_per_gib_of_guest_ram": msgs_per_gib,
            "gib_pinned_per_start": g.gib_per_start,
            "fills_per_start": g.fills_per_start,
            "unmap_windows_per_start": g.windows_per_start,
            "devlend_rounds": r.secs[0],
            "local_rounds": r.secs[1],
            "fill_rounds": r.fill,
            "page_by_page": {
                "devlend_start_secs": pbp_secs,
                "fill_ms_per_gib_pinned": p.fill_ms,
                "pin_ms_per_gib_pinned": p.pin_ms,
                "runs_per_gib_pinned": p.runs,
                "devlend_rounds": r.pbp_secs,
                "fill_rounds": r.pbp_fill,
            },
            "bulk_vs_page_by_page_fill_ratio": if p.fill_ms > 0.0 { g.fill_ms / p.fill_ms } else { 0.0 },
            "skipped": r.skipped,
        }));
    }
    if !compared.is_empty() {
        println!(
            "\n{:<30} {:>11} {:>11} {:>7} {:>10} {:>10} {:>7}",
            "pinning (devlend)",
            "bulk ms/GiB",
            "VFIO ms/GiB",
            "ratio",
            "bulk start",
            "VFIO start",
            "ratio"
        );
        for (name, g, p, d, pbp) in compared {
            println!(
                "{:<30} {:>11.0} {:>11.0} {:>7.2} {:>10.1} {:>10.1} {:>7.2}",
                name,
                g.fill_ms,
                p.fill_ms,
                if p.fill_ms > 0.0 {
                    g.fill_ms / p.fill_ms
                } else {
                    0.0
                },
                d,
                pbp,
                if pbp > 0.0 { d / pbp } else { 0.0 }
            );
        }
    }
    serde_json::json!({ "guest_mib": BACKING_GUEST_MIB, "backings": rows })
}

fn run(o: &Opts) -> anyhow::Result<()> {
    let t0 = Instant::now();
    step("booting the bench cluster: two hosts, two NVMe drives on the lender (TCG; a minute or two)");
    let mut c = devlend_vmtests::boot_topology(TOPOLOGY)?;
    let result = measure(&mut c, o);
    if result.is_err() {
        devlend_vmtests::suite::collect_failure(&c, "bench", "bench");
        c.keep_logs(true);
    }
    c.shutdown();
    bench::write_result(&o.out, result?, t0, "benchmark")
}

fn main() -> ExitCode {
    bench::bench_main("devlend-bench", parse, run)
}
