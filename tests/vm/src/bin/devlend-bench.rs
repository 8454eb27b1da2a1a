//! `devlend-bench`: a borrowed NVMe against the same NVMe on local
//! vfio-pci, side by side in one run of the two-host cluster. Run by
//! `./bench.sh`; docs/performance.md explains the figures.
//!
//! ```text
//! devlend-bench [--rounds N] [--quick] [--backing-only] [--out FILE]
//! ```
//!
//! Each round measures every load borrowed (an mdev on the borrower), then
//! local (the lender's NVMe bound to vfio-pci on the lender): the
//! userspace driver, then a KVM guest's own nvme driver with fio. The
//! figures of a side are the mean of its rounds; `ratio` is devlend/local.
//! The last line printed is the path of the JSON result.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::bench::{self, Backing, Compared, Figures, FillStats, Load, Side};
use devlend_vmtests::fabric::{self, sh_timeout};
use devlend_vmtests::guest::{self, GuestOpts};
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::twohost::{self, BORROWER, LENDER, MDEV_TYPE};

/// Guest RAM, on both sides.
const GUEST_MIB: u32 = 512;
/// Guest RAM of the memory-backing loads: smaller, so that a 1 GiB host
/// can also hold the fragmenter's pages or the huge pages beside it.
const BACKING_GUEST_MIB: u32 = 256;

struct Opts {
    rounds: u32,
    quick: bool,
    /// Only the memory-backing guest starts (and shadow doorbells).
    backing_only: bool,
    /// The devlend side's MSI-X relayed by the lender's CPU, as before
    /// direct interrupts, instead of straight through the fabric.
    relay_irq: bool,
    out: PathBuf,
}

fn parse() -> anyhow::Result<Opts> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut o = Opts {
        rounds: 2,
        quick: false,
        backing_only: false,
        relay_irq: false,
        out: tools::repo_root().join(format!("target/bench/bench-{stamp}.json")),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => {
                o.rounds = args
                    .next()
                    .context("--rounds needs a value")?
                    .parse()
                    .context("--rounds")?;
                ensure!(o.rounds >= 1, "--rounds must be at least 1");
            }
            "--quick" => o.quick = true,
            "--backing-only" => o.backing_only = true,
            "--relay-irq" => o.relay_irq = true,
            "--out" => o.out = PathBuf::from(args.next().context("--out needs a path")?),
            "-h" | "--help" => {
                println!("usage: devlend-bench [--rounds N] [--quick] [--backing-only] [--relay-irq] [--out FILE]");
                std::process::exit(0);
            }
            _ => bail!(
                "unknown argument {a:?}; usage: devlend-bench [--rounds N] [--quick] [--backing-only] [--relay-irq] [--out FILE]"
            ),
        }
    }
    Ok(o)
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

/// Everything measured, by side.
#[derive(Default)]
struct Runs {
    userspace: BTreeMap<String, [Vec<Figures>; 2]>,
    guest: BTreeMap<String, [Vec<Figures>; 2]>,
    messages: BTreeMap<String, BTreeMap<String, f64>>,
    start_secs: [Vec<f64>; 2],
    start_messages: Vec<u64>,
    guest_trapped: BTreeMap<String, Vec<Figures>>,
    open_secs: [Vec<f64>; 2],
    open_messages: Vec<u64>,
    /// The lender's message counters of the device over each opening run.
    open_by_type: Vec<BTreeMap<String, f64>>,
    backing: BTreeMap<&'static str, BackingRuns>,
    shadow_doorbells: BTreeMap<&'static str, (u64, u64)>,
    /// Per devlend fio guest: interrupts the lender's CPU handled (relayed)
    /// and doorbells the borrower took on direct vectors, per guest I/O.
    guest_irqs: Vec<(f64, f64)>,
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

/// The devlend side's device: a new mdev of the lent NVMe (removed by the
/// caller); the local side has none.
fn side_mdev(c: &Cluster, nvme: &PciDev, side: Side) -> anyhow::Result<Option<String>> {
    Ok(match side {
        Side::Devlend => Some(lending::create_mdev(
            c.agent(BORROWER)?,
            MDEV_TYPE,
            Some(&twohost::remote_name(nvme)),
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

/// The userspace driver on every load, on one side.
fn userspace_side(
    c: &Cluster,
    nvme: &PciDev,
    side: Side,
    quick: bool,
    runs: &mut Runs,
) -> anyhow::Result<()> {
    let drv = twohost::host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let mdev = side_mdev(c, nvme, side)?;
    let run_drv = |args: &str| -> anyhow::Result<String> {
        match &mdev {
            Some(uuid) => sh_timeout(
                b,
                &format!("{drv} --mdev {uuid} {args}"),
                Duration::from_secs(600),
            ),
            None => sh_timeout(
                l,
                &format!("{drv} --device /sys/bus/pci/devices/{} {args}", nvme.addr),
                Duration::from_secs(600),
            ),
        }
    };
    with_side_mdev(c, mdev.as_deref(), || {
        // Opening: open, reset, identify, one write and read back, close.
        let lender_peer = fabric::host_id(l)?;
        let tx = || -> anyhow::Result<u64> {
            fabric::counter(&fabric::peer_counters(b, lender_peer)?, "tx_msgs")
        };
        let borrowed = side == Side::Devlend;
        let before = if borrowed {
            Some((tx()?, bench::lender_counters(l, nvme)?))
        } else {
            None
        };
        let t0 = Instant::now();
        run_drv("--blocks 1 --ios 0")?;
        let secs = t0.elapsed().as_secs_f64();
        runs.open_secs[idx(side)].push(secs);
        if let Some((tx0, cnt0)) = before {
            let cnt1 = bench::lender_counters(l, nvme)?;
            runs.open_messages.push(tx()? - tx0);
            runs.open_by_type.push(bench::per_io(&cnt0, &cnt1, 1));
        }
        println!(
            "  {:<8} opening the device (open, identify, a block written and read, close): {secs:.2} s",
            format!("{side:?}").to_lowercase()
        );
        for load in Load::standard("userspace") {
            let ios = driver_ios(&load, quick);
            let args = bench::driver_args(&load, ios);
            let before = bench::lender_counters(l, nvme).ok();
            let out = run_drv(&args)?;
            let f =
                bench::parse_driver(&out).with_context(|| format!("{} ({side:?})", load.name))?;
            show(side, &load.name, &f);
            if let (Some(before), Side::Devlend) = (before, side) {
                let after = bench::lender_counters(l, nvme)?;
                runs.messages
                    .insert(load.name.clone(), bench::per_io(&before, &after, f.ios));
            }
            runs.userspace.entry(load.name.clone()).or_default()[idx(side)].push(f);
        }
        Ok(())
    })
}

/// The time from QEMU's start to the guest's nvme being ready (and
/// power-off), and on the devlend side the fabric messages it took.
fn guest_start(
    c: &Cluster,
    agent: &devlend_agent::AgentClient,
    host: &str,
    dev_arg: &str,
    side: Side,
    runs: &mut Runs,
) -> anyhow::Result<()> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let images = tools::guest_images_dir()?;
    let lender_peer = fabric::host_id(l)?;
    let before = fabric::counter(&fabric::peer_counters(b, lender_peer)?, "tx_msgs")?;
    let opts = GuestOpts {
        mem_mib: GUEST_MIB,
        extra_qemu_args: dev_arg,
        qmp: None,
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
}

/// Where a side's guests run: its host and agent (KVM loaded there), the
/// mdev made for them on the devlend side (the caller removes it), and the
/// QEMU argument that gives them the device.
struct GuestHost<'c> {
    host: &'static str,
    agent: &'c devlend_agent::AgentClient,
    mdev: Option<String>,
    dev_arg: String,
}

fn guest_host<'c>(c: &'c Cluster, nvme: &PciDev, side: Side) -> anyhow::Result<GuestHost<'c>> {
    let (host, agent) = match side {
        Side::Devlend => (BORROWER, c.agent(BORROWER)?),
        Side::Local | Side::Trapped => (LENDER, c.agent(LENDER)?),
    };
    fabric::sh(agent, "modprobe kvm_amd").with_context(|| format!("KVM on the {host}"))?;
    let mdev = side_mdev(c, nvme, side)?;
    let dev_arg = match (&mdev, side) {
        (Some(uuid), _) => lending::vfio_arg(uuid),
        (None, Side::Trapped) => format!("-device vfio-pci,host={},x-no-mmap=true", nvme.addr),
        (None, _) => format!("-device vfio-pci,host={}", nvme.addr),
    };
    Ok(GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    })
}

/// A KVM guest on one side: its start (QEMU to the command), then fio.
fn guest_side(
    c: &Cluster,
    nvme: &PciDev,
    side: Side,
    quick: bool,
    runs: &mut Runs,
) -> anyhow::Result<()> {
    let l = c.agent(LENDER)?;
    let images = tools::guest_images_dir()?;
    let GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    } = guest_host(c, nvme, side)?;
    with_side_mdev(c, mdev.as_deref(), || {
        // Start: a guest whose command does nothing, so its run is boot,
        // the nvme driver ready, and power-off (not again for trapped BARs).
        if side != Side::Trapped {
            guest_start(c, agent, host, &dev_arg, side, runs)?;
        }

        // fio, every load in one boot.
        let loads = Load::standard("guest");
        let secs = if quick { 3 } else { 8 };
        let extra = format!("{dev_arg} {}", bench::outer_virtfs_arg());
        let opts = GuestOpts {
            mem_mib: GUEST_MIB,
            extra_qemu_args: &extra,
            qmp: None,
        };
        // In the background, so that the lender's counters are read when
        // fio starts (the console says `FIO `), not counting the boot.
        let g = guest::spawn(
            agent,
            &images,
            &lending::nvme_guest_script(&bench::fio_script(&loads, secs)),
            &opts,
            "/tmp/devlend-bench-guest.log",
        )?;
        let b = c.agent(BORROWER)?;
        let run = (|| {
            g.wait_for(agent, "FIO ", Duration::from_secs(300))?;
            let before = bench::lender_counters(l, nvme).ok();
            let direct_before = bench::borrower_direct_fires(b).ok();
            Ok::<_, anyhow::Error>((
                before,
                direct_before,
                g.wait(agent, Duration::from_secs(600))?,
            ))
        })();
        if run.is_err() {
            let _ = g.kill(agent);
        }
        let (before, direct_before, run) = run?;
        ensure!(
            run.rc == 0,
            "fio guest on the {host} failed:\n{}",
            run.output
        );
        let figs = bench::parse_fio_script(&run.output, &loads)?;
        let total: u64 = figs.values().map(|f| f.ios).sum();
        if let (Some(before), Side::Devlend) = (before, side) {
            let after = bench::lender_counters(l, nvme)?;
            let fires = after.get("irq_fires").copied().unwrap_or(0)
                - before.get("irq_fires").copied().unwrap_or(0);
            let direct = match direct_before {
                Some(d) => bench::borrower_direct_fires(b)?.saturating_sub(d),
                None => 0,
            };
            let n = total.max(1) as f64;
            runs.guest_irqs.push((fires as f64 / n, direct as f64 / n));
            runs.messages
                .insert("guest-all".into(), bench::per_io(&before, &after, total));
        }
        for load in &loads {
            let f = figs[&load.name].clone();
            show(side, &load.name, &f);
            if side == Side::Trapped {
                runs.guest_trapped
                    .entry(load.name.clone())
                    .or_default()
                    .push(f);
            } else {
                runs.guest.entry(load.name.clone()).or_default()[idx(side)].push(f);
            }
        }
        Ok(())
    })
}

/// Guest starts with the guest's RAM backed in each of the ways of
/// [`Backing`] (a smaller guest, see [`BACKING_GUEST_MIB`]): how long
/// pinning and mapping take, in how many runs and messages, by how
/// contiguous the memory is. With `page_by_page` (devlend only) the
/// borrower's bulk pinning is off for the run: VFIO pins every page.
fn backing_side(
    c: &Cluster,
    nvme: &PciDev,
    side: Side,
    page_by_page: bool,
    runs: &mut Runs,
) -> anyhow::Result<()> {
    if page_by_page {
        let b = c.agent(BORROWER)?;
        fabric::sh(b, &format!("echo N > {BULK_PIN_PARAM}"))?;
        let res = backing_runs(c, nvme, side, true, runs);
        fabric::sh(b, &format!("echo Y > {BULK_PIN_PARAM}"))?;
        return res;
    }
    backing_runs(c, nvme, side, false, runs)
}

/// [`backing_side`]'s guests, with the module set up.
fn backing_runs(
    c: &Cluster,
    nvme: &PciDev,
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
    } = guest_host(c, nvme, side)?;
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
fn shadow_doorbells(c: &Cluster, nvme: &PciDev, side: Side, runs: &mut Runs) -> anyhow::Result<()> {
    let images = tools::guest_images_dir()?;
    let GuestHost {
        host,
        agent,
        mdev,
        dev_arg,
    } = guest_host(c, nvme, side)?;
    with_side_mdev(c, mdev.as_deref(), || {
        let opts = GuestOpts {
            mem_mib: BACKING_GUEST_MIB,
            extra_qemu_args: &dev_arg,
            qmp: None,
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

fn compare(
    level: &str,
    runs: &BTreeMap<String, [Vec<Figures>; 2]>,
    messages: &BTreeMap<String, BTreeMap<String, f64>>,
) -> Vec<Compared> {
    Load::standard(level)
        .iter()
        .filter_map(|load| {
            let [d, l] = runs.get(&load.name)?.clone();
            let msgs = messages.get(&load.name).cloned().unwrap_or_default();
            Some(Compared::new(load, d, l, msgs))
        })
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn measure(c: &mut Cluster, o: &Opts) -> anyhow::Result<serde_json::Value> {
    let nvme = twohost::lent_nvme(c)?;
    let mut runs = Runs::default();
    // Every devlend run's MSI-X: straight through the fabric, or relayed.
    fabric::sh(
        c.agent(BORROWER)?,
        &format!(
            "echo {} > {DIRECT_IRQ_PARAM}",
            if o.relay_irq { "N" } else { "Y" }
        ),
    )?;
    for round in 1..=o.rounds {
        step(&format!(
            "round {round} of {}: devlend (the borrower's mdev of the lender's NVMe)",
            o.rounds
        ));
        if !o.backing_only {
            userspace_side(c, &nvme, Side::Devlend, o.quick, &mut runs)?;
            guest_side(c, &nvme, Side::Devlend, o.quick, &mut runs)?;
        }
        backing_side(c, &nvme, Side::Devlend, false, &mut runs)?;
        backing_side(c, &nvme, Side::Devlend, true, &mut runs)?;
        if round == 1 {
            shadow_doorbells(c, &nvme, Side::Devlend, &mut runs)?;
        }
        step(&format!(
            "round {round} of {}: local (the same NVMe on vfio-pci on the lender)",
            o.rounds
        ));
        let l = c.agent(LENDER)?;
        lending::wait_until(
            "the NVMe available",
            twohost::WAIT,
            || lending::lent_state(l, &nvme.addr),
            "available",
        )?;
        bench::bind_vfio_pci(l, &nvme.addr)?;
        let local = (|| {
            if !o.backing_only {
                userspace_side(c, &nvme, Side::Local, o.quick, &mut runs)?;
                guest_side(c, &nvme, Side::Local, o.quick, &mut runs)?;
                guest_side(c, &nvme, Side::Trapped, o.quick, &mut runs)?;
            }
            backing_side(c, &nvme, Side::Local, false, &mut runs)?;
            if round == 1 {
                shadow_doorbells(c, &nvme, Side::Local, &mut runs)?;
            }
            Ok::<_, anyhow::Error>(())
        })();
        bench::rebind_lent(c.agent(LENDER)?, &nvme.addr)?;
        local?;
        twohost::lent_nvme(c)?;
    }

    let userspace = compare("userspace", &runs.userspace, &runs.messages);
    let guest = compare("guest", &runs.guest, &runs.messages);
    let start = [mean(&runs.start_secs[0]), mean(&runs.start_secs[1])];
    let gib = f64::from(GUEST_MIB) / 1024.0;
    let start_msgs = mean(
        &runs
            .start_messages
            .iter()
            .map(|&m| m as f64)
            .collect::<Vec<_>>(),
    );

    if !o.backing_only {
        println!(
            "\n{:<30} {:>12} {:>12} {:>7}",
            "load", "devlend", "local", "ratio"
        );
    }
    for c in userspace.iter().chain(&guest) {
        let unit = if c.figure == "iops" { "IOPS" } else { "MB/s" };
        let (d, l) = if c.figure == "iops" {
            (c.devlend.iops, c.local.iops)
        } else {
            (c.devlend.mb_per_sec, c.local.mb_per_sec)
        };
        println!(
            "{:<30} {:>12.1} {:>12.1} {:>7.2}   {unit}; p50 {:.0} vs {:.0} us",
            c.name, d, l, c.ratio, c.devlend.p50_us, c.local.p50_us
        );
    }
    if !o.backing_only {
        println!(
        "{:<30} {:>12.1} {:>12.1} {:>7.2}   s (+{:.1} s borrowed; {:.1} s and {:.0} fabric messages per GiB of guest RAM)",
        "guest start to nvme ready",
        start[0],
        start[1],
        if start[1] > 0.0 { start[0] / start[1] } else { 0.0 },
        start[0] - start[1],
        (start[0] - start[1]) / gib,
        start_msgs / gib
    );
    }
    // devlend against local with trapped BARs: what the fabric adds to an
    // MMIO path that already exits to QEMU on every BAR access.
    let trapped: Vec<Compared> = Load::standard("guest")
        .iter()
        .filter_map(|load| {
            let d = runs.guest.get(&load.name)?[0].clone();
            let t = runs.guest_trapped.get(&load.name)?.clone();
            Some(Compared::new(load, d, t, BTreeMap::new()))
        })
        .collect();
    if !trapped.is_empty() {
        println!(
            "\n{:<30} {:>12} {:>12} {:>7} {:>9}",
            "load (BARs trapped locally)", "devlend", "trapped", "ratio", "trap/loc"
        );
        for (t, g) in trapped.iter().zip(&guest) {
            let pick = |f: &Figures| {
                if t.figure == "iops" {
                    f.iops
                } else {
                    f.mb_per_sec
                }
            };
            let local = pick(&g.local);
            println!(
                "{:<30} {:>12.1} {:>12.1} {:>7.2} {:>9.2}",
                t.name,
                pick(&t.devlend),
                pick(&t.local),
                t.ratio,
                if local > 0.0 {
                    pick(&t.local) / local
                } else {
                    0.0
                }
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
    if !o.backing_only {
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
    if let Some(m) = runs.messages.get("guest-all") {
        println!(
            "fabric messages per guest I/O: {}",
            m.iter()
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let irq_path = if o.relay_irq { "relayed" } else { "direct" };
    let n = runs.guest_irqs.len().max(1) as f64;
    let lender_irqs = runs.guest_irqs.iter().map(|g| g.0).sum::<f64>() / n;
    let direct_dbs = runs.guest_irqs.iter().map(|g| g.1).sum::<f64>() / n;
    if !runs.guest_irqs.is_empty() {
        println!(
            "lender interrupts handled per guest I/O: {lender_irqs:.3} (MSI-X {irq_path}); \
             direct doorbells per guest I/O on the borrower: {direct_dbs:.3}"
        );
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
    Ok(serde_json::json!({
        "rounds": o.rounds,
        "quick": o.quick,
        "backing_only": o.backing_only,
        "guest_mib": GUEST_MIB,
        "workloads": userspace.iter().chain(&guest).collect::<Vec<_>>(),
        "guest_start": {
            "devlend_secs": start[0],
            "local_secs": start[1],
            "extra_secs": start[0] - start[1],
            "extra_secs_per_gib": (start[0] - start[1]) / gib,
            "fabric_messages": start_msgs,
            "fabric_messages_per_gib": start_msgs / gib,
        },
        "guest_vs_trapped": trapped,
        "open": {
            "devlend_secs": open[0],
            "local_secs": open[1],
            "fabric_messages": open_msgs,
            "config_reads": open_cfg,
            "by_type": open_by_type,
        },
        "messages_per_io": runs.messages,
        "guest_interrupts": {
            "msix_path": irq_path,
            "lender_irqs_per_io": lender_irqs,
            "direct_doorbells_per_io": direct_dbs,
            "runs": runs.guest_irqs.len(),
        },
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
    step("booting the two-host cluster (TCG; a minute or two)");
    let mut c = twohost::boot()?;
    let result = measure(&mut c, o);
    if result.is_err() {
        devlend_vmtests::suite::collect_failure(&c, "bench", "bench");
        c.keep_logs(true);
    }
    c.shutdown();
    let mut json = result?;
    json["secs"] = serde_json::json!(t0.elapsed().as_secs_f64());
    if let Some(dir) = o.out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&o.out, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", o.out.display()))?;
    println!(
        "\nbenchmark done in {:.0} s; result:",
        t0.elapsed().as_secs_f64()
    );
    let shown = std::fs::canonicalize(&o.out).unwrap_or_else(|_| o.out.clone());
    println!("{}", shown.display());
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("devlend-bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nBENCHMARK FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
