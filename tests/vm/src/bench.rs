//! The pieces of `devlend-bench` (run by `./bench.sh`): an NVMe measured
//! borrowed (devlend: an mdev on the borrower) against an identical NVMe
//! local (bound to vfio-pci on the lender), in pairs of runs one right
//! after the other, with each host's CPU time per I/O. See
//! docs/performance.md for how to read the result.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use serde::Serialize;

use crate::fabric::{sh, sh_timeout};
use crate::lending::{self, PciDev};

/// Where a figure was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The borrower, through devlend.
    Devlend,
    /// The lender, on vfio-pci.
    Local,
    /// The lender, on vfio-pci, its BARs not mapped into the guest
    /// (`x-no-mmap`): every BAR access exits to QEMU, as a borrowed
    /// device's do. Guest loads only.
    Trapped,
}

/// One load, at one level.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    /// `<level>-<size>-<pattern><rw>-qd<depth>`, e.g. `guest-4k-randread-qd32`.
    pub name: String,
    /// Bytes per I/O.
    pub io_size: u32,
    /// Outstanding I/Os.
    pub queue_depth: u16,
    /// Sequential rather than random.
    pub sequential: bool,
    /// Writes rather than reads.
    pub write: bool,
}

impl Load {
    fn new(level: &str, io_size: u32, queue_depth: u16, sequential: bool, write: bool) -> Load {
        let size = if io_size >= 1024 {
            format!("{}k", io_size / 1024)
        } else {
            format!("{io_size}b")
        };
        let pattern = match (sequential, write) {
            (false, false) => "randread",
            (false, true) => "randwrite",
            (true, false) => "seqread",
            (true, true) => "seqwrite",
        };
        Load {
            name: format!("{level}-{size}-{pattern}-qd{queue_depth}"),
            io_size,
            queue_depth,
            sequential,
            write,
        }
    }

    /// The loads of the issue's table, at `level` (`userspace` or `guest`).
    pub fn standard(level: &str) -> Vec<Load> {
        vec![
            Load::new(level, 4096, 1, false, false),
            Load::new(level, 4096, 32, false, false),
            Load::new(level, 128 << 10, 1, true, false),
            Load::new(level, 128 << 10, 1, true, true),
        ]
    }

    /// Whether bandwidth, not IOPS, is its headline figure.
    pub fn by_bandwidth(&self) -> bool {
        self.io_size >= 64 << 10
    }
}

/// What one run of a load measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// I/Os per second.
    pub iops: f64,
    /// 10^6 bytes per second.
    pub mb_per_sec: f64,
    /// Completion latency, microseconds.
    pub p50_us: f64,
    /// Completion latency, microseconds.
    pub p99_us: f64,
    /// I/Os completed.
    pub ios: u64,
}

impl Figures {
    /// The mean of several runs (the headline of a side).
    pub fn mean(runs: &[Figures]) -> Figures {
        let n = runs.len().max(1) as f64;
        let avg = |f: fn(&Figures) -> f64| runs.iter().map(f).sum::<f64>() / n;
        Figures {
            iops: avg(|r| r.iops),
            mb_per_sec: avg(|r| r.mb_per_sec),
            p50_us: avg(|r| r.p50_us),
            p99_us: avg(|r| r.p99_us),
            ios: runs.iter().map(|r| r.ios).sum(),
        }
    }
}

/// A load measured on both sides, and their ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    /// The load's name.
    pub name: String,
    /// `iops` or `mb_per_sec`: what `ratio` divides.
    pub figure: &'static str,
    /// The mean over rounds, borrowed.
    pub devlend: Figures,
    /// The mean over rounds, local.
    pub local: Figures,
    /// devlend / local of `figure`: 1.0 is local speed.
    pub ratio: f64,
    /// Each round, borrowed.
    pub devlend_rounds: Vec<Figures>,
    /// Each round, local.
    pub local_rounds: Vec<Figures>,
    /// Fabric messages per I/O on the borrowed side, by type (from the
    /// lender's counters of the device), when known.
    pub messages_per_io: BTreeMap<String, f64>,
}

impl Compared {
    /// Compares the rounds of one load.
    pub fn new(
        load: &Load,
        devlend: Vec<Figures>,
        local: Vec<Figures>,
        messages_per_io: BTreeMap<String, f64>,
    ) -> Compared {
        let (d, l) = (Figures::mean(&devlend), Figures::mean(&local));
        let (figure, num, den) = if load.by_bandwidth() {
            ("mb_per_sec", d.mb_per_sec, l.mb_per_sec)
        } else {
            ("iops", d.iops, l.iops)
        };
        Compared {
            name: load.name.clone(),
            figure,
            devlend: d,
            local: l,
            ratio: if den > 0.0 { num / den } else { 0.0 },
            devlend_rounds: devlend,
            local_rounds: local,
            messages_per_io,
        }
    }
}

/// How the devlend side's MSI-X reaches the guest: the borrower module's
/// `direct_irq`, read when the device's user enables MSI-X (each driver
/// run, each guest start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IrqPath {
    /// Straight through the fabric: the device's message write rings the
    /// borrower's doorbell, no lender CPU per interrupt.
    Direct,
    /// Each interrupt handled by the lender's CPU and sent as
    /// DL_MSG_IRQ_FIRE.
    Relayed,
}

impl IrqPath {
    /// Its name in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            IrqPath::Direct => "direct",
            IrqPath::Relayed => "relayed",
        }
    }

    /// The value of the borrower's `direct_irq` parameter for it.
    pub fn param(self) -> &'static str {
        match self {
            IrqPath::Direct => "Y",
            IrqPath::Relayed => "N",
        }
    }
}

/// Ticks per second of `/proc/stat`'s times (`USER_HZ`, 100 on every
/// architecture Linux exports it to userspace on).
pub const USER_HZ: u64 = 100;

/// A host's CPU time so far, from the `cpu` line of its `/proc/stat`, in
/// [`USER_HZ`] ticks summed over its CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq (a nested guest's time is in
    /// user and nice already, so guest and guest_nice are not added).
    pub busy: u64,
    /// busy + idle + iowait + steal: the time that passed, times CPUs.
    pub total: u64,
}

impl CpuTicks {
    /// What passed since `before` (a counter that went back counts 0).
    pub fn since(&self, before: &CpuTicks) -> CpuTicks {
        CpuTicks {
            busy: self.busy.saturating_sub(before.busy),
            total: self.total.saturating_sub(before.total),
        }
    }

    /// The share of the time that passed the host was busy (for an
    /// interval measured while nothing ran: its idle load).
    pub fn busy_fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.busy as f64 / self.total as f64
        }
    }
}

/// The aggregate `cpu` line of a host's `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> anyhow::Result<CpuTicks> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .with_context(|| format!("no cpu line in /proc/stat:\n{text}"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("/proc/stat line {line:?}"))?;
    ensure!(v.len() >= 8, "/proc/stat line {line:?}: fewer than 8 times");
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    let busy = v[0] + v[1] + v[2] + v[5] + v[6];
    Ok(CpuTicks {
        busy,
        total: busy + v[3] + v[4] + v[7],
    })
}

/// A host's CPU microseconds per I/O over a run: the busy time that
/// passed (`delta`) less what the host is busy with when idle
/// (`idle_fraction` of the run's time: the agent, the other side's
/// waiting guest) and less the run's `fixed` part where it was measured
/// on its own (the userspace driver's open and verification, run with no
/// timed I/Os, idle load taken off it the same way), over the run's
/// `ios`; never below 0.
pub fn cpu_us_per_io(
    delta: CpuTicks,
    fixed: Option<CpuTicks>,
    idle_fraction: f64,
    ios: u64,
) -> f64 {
    if ios == 0 {
        return 0.0;
    }
    let net = |d: CpuTicks| d.busy as f64 - idle_fraction * d.total as f64;
    let work = (net(delta) - fixed.map_or(0.0, |f| net(f).max(0.0))).max(0.0);
    work * 1e6 / USER_HZ as f64 / ios as f64
}

/// Both hosts' CPU microseconds per I/O over one run on `side`, from the
/// CPU time that passed on [lender, borrower] (`cpu`), the run's fixed
/// part measured on its own (`fixed`, if it was) and the hosts' idle
/// load (`idle`, busy shares with both sides waiting). The host that runs
/// the load (the borrower for devlend, the lender for local) counts all
/// its busy time: its waiting guest, which makes most of its idle load,
/// is running the load instead. The other host is still waiting as it
/// was when the idle load was measured, and counts only its busy time
/// above that.
pub fn host_cpu(
    side: Side,
    cpu: [CpuTicks; 2],
    fixed: Option<[CpuTicks; 2]>,
    idle: [f64; 2],
    ios: u64,
) -> HostCpu {
    let idle = match side {
        Side::Devlend => [idle[0], 0.0],
        Side::Local | Side::Trapped => [0.0, idle[1]],
    };
    HostCpu {
        lender: cpu_us_per_io(cpu[0], fixed.map(|f| f[0]), idle[0], ios),
        borrower: cpu_us_per_io(cpu[1], fixed.map(|f| f[1]), idle[1], ios),
    }
}

/// The median of some values and their range.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// The middle value (the mean of the two middle ones for an even
    /// count).
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// How many.
    pub n: usize,
}

impl Spread {
    /// The spread of `values` (all 0 when there are none).
    pub fn of(values: &[f64]) -> Spread {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            return Spread::default();
        }
        Spread {
            median: if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            },
            min: v[0],
            max: v[n - 1],
            n,
        }
    }
}

/// A load's headline figure: MB/s for large I/Os, else IOPS.
pub fn headline(load: &Load, f: &Figures) -> f64 {
    if load.by_bandwidth() {
        f.mb_per_sec
    } else {
        f.iops
    }
}

/// CPU microseconds per I/O of each host over one run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HostCpu {
    /// The lender host's.
    pub lender: f64,
    /// The borrower host's.
    pub borrower: f64,
}

/// One run of a load on one side of a pair.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Run {
    /// What the driver or fio measured.
    pub figures: Figures,
    /// Each host's share of each I/O.
    pub cpu_us_per_io: HostCpu,
    /// Fabric messages per I/O by type, from the lender's counters of the
    /// lent device (devlend side only; empty on the local side).
    pub messages_per_io: BTreeMap<String, f64>,
    /// Doorbells the borrower took on direct MSI-X vectors, per I/O
    /// (devlend side only).
    pub direct_doorbells_per_io: f64,
}

impl Run {
    /// Interrupts the lender's CPU handled and relayed, per I/O (its
    /// `irq_fires` counter of the lent device).
    pub fn lender_irqs_per_io(&self) -> f64 {
        self.messages_per_io
            .get("irq_fires")
            .copied()
            .unwrap_or(0.0)
    }
}

/// One pair: a load on devlend, then at once the same load on the local
/// drive.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    /// The borrowed drive's run.
    pub devlend: Run,
    /// The local drive's run, right after.
    pub local: Run,
    /// devlend / local of the load's headline figure (0 when the local
    /// figure is 0).
    pub ratio: f64,
}

impl Pair {
    /// Pairs two runs of `load`.
    pub fn new(load: &Load, devlend: Run, local: Run) -> Pair {
        let (d, l) = (
            headline(load, &devlend.figures),
            headline(load, &local.figures),
        );
        Pair {
            ratio: if l > 0.0 { d / l } else { 0.0 },
            devlend,
            local,
        }
    }
}

/// CPU per I/O of both hosts over one side's runs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SideCpu {
    /// The lender host, microseconds per I/O.
    pub lender: Spread,
    /// The borrower host, microseconds per I/O.
    pub borrower: Spread,
}

impl SideCpu {
    fn of<'a>(runs: impl Iterator<Item = &'a Run> + Clone) -> SideCpu {
        let v = |f: fn(&HostCpu) -> f64| -> Vec<f64> {
            runs.clone().map(|r| f(&r.cpu_us_per_io)).collect()
        };
        SideCpu {
            lender: Spread::of(&v(|c| c.lender)),
            borrower: Spread::of(&v(|c| c.borrower)),
        }
    }
}

/// Both sides' CPU per I/O.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PairedCpu {
    /// Runs on the borrowed drive.
    pub devlend: SideCpu,
    /// Runs on the local drive.
    pub local: SideCpu,
}

/// A load's pairs on one MSI-X path, and what they say.
#[derive(Debug, Clone, Serialize)]
pub struct Paired {
    /// The load's name.
    pub name: String,
    /// The devlend side's MSI-X path.
    pub irq_path: IrqPath,
    /// `iops` or `mb_per_sec`: the headline figure the ratios divide.
    pub figure: &'static str,
    /// devlend / local over the pairs: median, min, max.
    pub ratio: Spread,
    /// The devlend side's headline figure over the pairs.
    pub devlend: Spread,
    /// The local side's headline figure over the pairs.
    pub local: Spread,
    /// Each host's CPU microseconds per I/O, by side.
    pub cpu_us_per_io: PairedCpu,
    /// Interrupts the lender's CPU handled per I/O on the devlend side
    /// (goal 0 with direct MSI-X).
    pub lender_irqs_per_io: Spread,
    /// Doorbells the borrower took on direct vectors per I/O.
    pub direct_doorbells_per_io: Spread,
    /// Fabric messages per I/O by type on the devlend side: the median
    /// over the pairs.
    pub messages_per_io: BTreeMap<String, f64>,
    /// Every pair, in the order run.
    pub pairs: Vec<Pair>,
}

impl Paired {
    /// Sums up the pairs of `load` on `irq_path`.
    pub fn new(load: &Load, irq_path: IrqPath, pairs: Vec<Pair>) -> Paired {
        let each = |f: &dyn Fn(&Pair) -> f64| -> Spread {
            Spread::of(&pairs.iter().map(f).collect::<Vec<_>>())
        };
        let mut keys: Vec<&String> = pairs
            .iter()
            .flat_map(|p| p.devlend.messages_per_io.keys())
            .collect();
        keys.sort();
        keys.dedup();
        let messages_per_io = keys
            .into_iter()
            .map(|k| {
                let m = each(&|p| p.devlend.messages_per_io.get(k).copied().unwrap_or(0.0));
                (k.clone(), m.median)
            })
            .collect();
        Paired {
            name: load.name.clone(),
            irq_path,
            figure: if load.by_bandwidth() {
                "mb_per_sec"
            } else {
                "iops"
            },
            ratio: each(&|p| p.ratio),
            devlend: each(&|p| headline(load, &p.devlend.figures)),
            local: each(&|p| headline(load, &p.local.figures)),
            cpu_us_per_io: PairedCpu {
                devlend: SideCpu::of(pairs.iter().map(|p| &p.devlend)),
                local: SideCpu::of(pairs.iter().map(|p| &p.local)),
            },
            lender_irqs_per_io: each(&|p| p.devlend.lender_irqs_per_io()),
            direct_doorbells_per_io: each(&|p| p.devlend.direct_doorbells_per_io),
            messages_per_io,
            pairs,
        }
    }
}

/// The table of paired loads, one line per load and MSI-X path: the
/// median devlend and local figures, the median ratio and its range over
/// the pairs, each host's median CPU microseconds per I/O on both sides,
/// and the interrupts the lender's CPU handled per devlend I/O.
pub fn paired_table(rows: &[Paired]) -> String {
    let mut s = format!(
        "{:<32} {:<7} {:>9} {:>9} {:<4} {:>5} {:<11} {:>27} {:>17} {:>7}\n",
        "", "", "", "", "", "", "", "CPU us/I/O, devlend side", "local side", "lender"
    );
    s.push_str(&format!(
        "{:<32} {:<7} {:>9} {:>9} {:<4} {:>5} {:<11} {:>13} {:>13} {:>8} {:>8} {:>7}\n",
        "load (pairs)",
        "MSI-X",
        "devlend",
        "local",
        "",
        "ratio",
        "min..max",
        "lender",
        "borrower",
        "lender",
        "borrower",
        "irq/I/O"
    ));
    for r in rows {
        let unit = if r.figure == "iops" { "IOPS" } else { "MB/s" };
        let c = &r.cpu_us_per_io;
        s.push_str(&format!(
            "{:<32} {:<7} {:>9.1} {:>9.1} {unit:<4} {:>5.2} {:<11} {:>13.0} {:>13.0} {:>8.0} {:>8.0} {:>7.3}\n",
            format!("{} ({})", r.name, r.ratio.n),
            r.irq_path.name(),
            r.devlend.median,
            r.local.median,
            r.ratio.median,
            format!("{:.2}..{:.2}", r.ratio.min, r.ratio.max),
            c.devlend.lender.median,
            c.devlend.borrower.median,
            c.local.lender.median,
            c.local.borrower.median,
            r.lender_irqs_per_io.median,
        ));
    }
    s
}

/// Seconds between a waiting paired guest's looks for its next step's
/// file: each look forks `sleep` and walks 9p in a nested guest, which
/// costs its host much (at 0.3 s, a waiting guest kept its host more than
/// half busy).
pub const STEP_POLL_SECS: u32 = 2;

/// What a paired guest prints once it waits for its first step.
pub const PAIRED_READY: &str = "PAIRED-GUEST-READY";

/// The tag under which a paired guest sees its go directory.
const GO_TAG: &str = "go";

/// The QEMU argument that shows a paired guest the directory `dir` of its
/// host (read-only, over virtio-9p, uncached in the guest), where the
/// bench creates a file per step to start it.
pub fn go_virtfs_arg(dir: &str) -> String {
    format!("-virtfs local,path={dir},mount_tag={GO_TAG},security_model=none,readonly=on")
}

/// The step number (from 1) of load `load_index` (of `loads`) in pair
/// `pair` (from 1) of a paired guest.
pub fn step_number(pair: u32, load_index: usize, loads: usize) -> u32 {
    (pair - 1) * loads as u32 + load_index as u32 + 1
}

/// A paired guest's script: it prints [`PAIRED_READY`], then for each pair and
/// each load, in [`step_number`] order, waits for the file named by the
/// step's number in its go directory, prints `STEP <n>`, fio's JSON on
/// one line, and `DONE <n>.`. fio runs from the outer machine (tag
/// `outer`, as [`fio_script`]). After its last step it waits for
/// [`PAIRED_END`] in its go directory before it ends (and powers off), so
/// that the bench can still stop and continue it after the last step.
pub fn paired_fio_script(loads: &[Load], secs: u32, pairs: u32) -> String {
    let mut s = format!(
        "mkdir -p /outer /{GO_TAG}
mount -t 9p -o trans=virtio,version=9p2000.L,ro outer /outer
mount -t 9p -o trans=virtio,version=9p2000.L,ro {GO_TAG} /{GO_TAG}
mount -o bind /dev /outer/dev
mount -t proc proc /outer/proc
mount -t sysfs sysfs /outer/sys
echo {PAIRED_READY}
i=0
for p in $(seq {pairs}); do
"
    );
    for l in loads {
        s.push_str(&format!(
            "i=$((i+1)); while [ ! -e /{GO_TAG}/$i ]; do sleep {STEP_POLL_SECS}; done; echo \"STEP $i\"; \
             chroot /outer fio {} | tr -d '\\n'; echo; echo \"DONE $i.\"\n",
            fio_args(l, secs)
        ));
    }
    s.push_str(&format!(
        "done\nwhile [ ! -e /{GO_TAG}/{PAIRED_END} ]; do sleep {STEP_POLL_SECS}; done\n"
    ));
    s
}

/// The file in a paired guest's go directory that lets it end.
pub const PAIRED_END: &str = "end";

/// The one command, run in the host of a paired guest (QEMU `pid`,
/// console file `console`), that runs its step `step`: creates the step's
/// file in `dir`, sleeps through fio's `secs`, then looks for the step's
/// end in the console once a second (a `grep`; `kill -0` is the shell's
/// own), all within `timeout` seconds. Exit status 0 when the step is
/// done, 3 when the guest is gone, 124 on timeout. One command, not a
/// look per agent call: each agent call costs the host a process and
/// more, and the host's CPU time is being counted (and its one CPU runs
/// the guest).
pub fn step_command(
    dir: &str,
    step: u32,
    secs: u32,
    console: &str,
    pid: u32,
    timeout: u32,
) -> String {
    format!(
        "timeout {timeout} sh -c 'touch {dir}/{step}; sleep {secs}; \
         until grep -qF \"{}\" {console}; do kill -0 {pid} || exit 3; sleep 1; done'",
        step_done_marker(step)
    )
}

/// The one command, run in a paired guest's host, that stops
/// (`run == false`) or continues its vCPUs through its QMP socket `sock`
/// and then asks QEMU whether they run. While one guest of a pair runs its
/// load the other is stopped: a waiting guest's timer ticks cost its
/// host's emulated CPU, and both hosts share this machine's cores. QMP's
/// `stop`, unlike SIGSTOP, tells the guest's kvmclock it was paused, so
/// the guest does not see a lockup when it continues. The output is
/// checked by [`vm_running`].
pub fn qmp_run_command(sock: &str, run: bool) -> String {
    let cmd = if run { "cont" } else { "stop" };
    format!(
        "printf '%s\\n' '{{\"execute\":\"qmp_capabilities\"}}' '{{\"execute\":\"{cmd}\"}}' \
         '{{\"execute\":\"query-status\"}}' | socat -t 2 - UNIX-CONNECT:{sock}"
    )
}

/// Whether QEMU's answer to [`qmp_run_command`] says the vCPUs run:
/// `None` when it holds no `query-status` answer (the command failed).
pub fn vm_running(qmp_output: &str) -> Option<bool> {
    qmp_output.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l.trim()).ok()?;
        v.get("return")?.get("running")?.as_bool()
    })
}

/// Stops (`run == false`) or continues the vCPUs of the guest whose QMP
/// socket is `sock` in `agent`'s host ([`qmp_run_command`]), and checks
/// that QEMU says they are so.
pub fn set_vm_running(agent: &AgentClient, sock: &str, run: bool) -> anyhow::Result<()> {
    let out = sh(agent, &qmp_run_command(sock, run))?;
    ensure!(
        vm_running(&out) == Some(run),
        "the guest's QEMU did not {} its vCPUs; QMP answered:\n{out}",
        if run { "continue" } else { "stop" }
    );
    Ok(())
}

/// What a paired guest prints when step `step` is done.
pub fn step_done_marker(step: u32) -> String {
    format!("DONE {step}.")
}

/// The fio figures of step `step` (a run of `load`) in a paired guest's
/// output.
pub fn parse_fio_step(out: &str, step: u32, load: &Load) -> anyhow::Result<Figures> {
    let want = format!("STEP {step}");
    let mut lines = out.lines();
    lines
        .by_ref()
        .find(|l| l.trim() == want)
        .with_context(|| format!("no {want} in the guest's output"))?;
    let json = lines
        .next()
        .with_context(|| format!("no fio output after {want}"))?;
    let start = json
        .find('{')
        .with_context(|| format!("fio printed no JSON at {want}: {json}"))?;
    parse_fio(&json[start..], load.write).with_context(|| format!("{want} ({})", load.name))
}

/// The lender's per-device counters that count fabric messages.
pub const MESSAGE_COUNTERS: [&str; 5] = [
    "bar_writes",
    "bar_reads",
    "irq_fires",
    "cfg_reads",
    "dma_map_ranges",
];

/// The lender's counters of the device, by name.
pub fn lender_counters(l: &AgentClient, nvme: &PciDev) -> anyhow::Result<BTreeMap<String, u64>> {
    Ok(crate::twohost::lender_device(l, nvme)?
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect())
}

/// The doorbells the borrower took on direct MSI-X vectors, all fabrics:
/// the sum of `irq_direct_fires` on the `borrower` lines of its debugfs.
pub fn parse_direct_fires(text: &str) -> anyhow::Result<u64> {
    let mut n = 0;
    for line in text.lines().filter(|l| l.starts_with("borrower ")) {
        n += crate::fabric::counter(&crate::fabric::parse_kv(line), "irq_direct_fires")?;
    }
    Ok(n)
}

/// [`parse_direct_fires`] of the borrower host's debugfs.
pub fn borrower_direct_fires(b: &AgentClient) -> anyhow::Result<u64> {
    parse_direct_fires(&crate::fabric::sh(
        b,
        "cat /sys/kernel/debug/devlend/borrower",
    )?)
}

/// Message counts between two snapshots, per I/O.
pub fn per_io(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    ios: u64,
) -> BTreeMap<String, f64> {
    MESSAGE_COUNTERS
        .iter()
        .filter_map(|k| {
            let d = after.get(*k)?.saturating_sub(*before.get(*k)?);
            Some(((*k).to_owned(), d as f64 / ios.max(1) as f64))
        })
        .collect()
}

/// The userspace driver's arguments for `load`, timed over `ios` I/Os.
pub fn driver_args(load: &Load, ios: u64) -> String {
    // The timed range: 64 MiB from LBA 0, the verified part its start.
    let range_blocks = (64u64 << 20) / u64::from(load.io_size);
    format!(
        "--lba 0 --blocks {} --range-blocks {range_blocks} --io-size {} --queue-depth {} \
         --ios {ios} --pattern {} --rw {} --json",
        range_blocks.min(64),
        load.io_size,
        load.queue_depth,
        if load.sequential { "seq" } else { "random" },
        if load.write { "write" } else { "read" },
    )
}

/// Figures from the userspace driver's `--json` output.
pub fn parse_driver(out: &str) -> anyhow::Result<Figures> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("no JSON from the driver:\n{out}"))?;
    let v: serde_json::Value =
        serde_json::from_str(line).with_context(|| format!("driver JSON {line:?}"))?;
    ensure!(v["passed"] == true, "the driver's run failed: {line}");
    let num = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .with_context(|| format!("no {p} in {line}"))
    };
    Ok(Figures {
        iops: num("/iops")?,
        mb_per_sec: num("/mb_per_sec")?,
        p50_us: num("/lat_us/p50")?,
        p99_us: num("/lat_us/p99")?,
        ios: num("/ios")? as u64,
    })
}

/// The fio command line of `load` on the guest's first NVMe namespace.
pub fn fio_args(load: &Load, secs: u32) -> String {
    let rw = match (load.sequential, load.write) {
        (false, false) => "randread",
        (false, true) => "randwrite",
        (true, false) => "read",
        (true, true) => "write",
    };
    format!(
        "--name={} --filename=/dev/nvme0n1 --direct=1 --ioengine=libaio --rw={rw} \
         --bs={} --iodepth={} --size=64M --time_based --runtime={secs} \
         --output-format=json",
        load.name, load.io_size, load.queue_depth
    )
}

/// Figures from fio's JSON output (one job).
pub fn parse_fio(json: &str, write: bool) -> anyhow::Result<Figures> {
    let v: serde_json::Value = serde_json::from_str(json).context("fio JSON")?;
    let job = &v["jobs"][0];
    ensure!(job["error"] == 0, "fio job failed: {}", job["error"]);
    let dir = &job[if write { "write" } else { "read" }];
    let num = |p: &str| {
        dir.pointer(p)
            .and_then(serde_json::Value::as_f64)
            .with_context(|| format!("no {p} in fio's {} figures", job["jobname"]))
    };
    let pct = |p: &str| num(&format!("/clat_ns/percentile/{p}")).map(|ns| ns / 1000.0);
    Ok(Figures {
        iops: num("/iops")?,
        mb_per_sec: num("/bw_bytes")? / 1e6,
        p50_us: pct("50.000000")?,
        p99_us: pct("99.000000")?,
        ios: num("/total_ios")? as u64,
    })
}

/// A guest script running each load's fio job from the outer machine
/// (mounted over 9p, tag `outer`), printing `FIO <name>` and fio's JSON on
/// one line after it.
pub fn fio_script(loads: &[Load], secs: u32) -> String {
    let mut s = String::from(
        "mkdir -p /outer
mount -t 9p -o trans=virtio,version=9p2000.L,ro outer /outer
mount -o bind /dev /outer/dev
mount -t proc proc /outer/proc
mount -t sysfs sysfs /outer/sys
",
    );
    for l in loads {
        s.push_str(&format!(
            "echo FIO {}\nchroot /outer fio {} | tr -d '\\n'; echo\n",
            l.name,
            fio_args(l, secs)
        ));
    }
    s
}

/// The fio results of a guest's output, by load name.
pub fn parse_fio_script(out: &str, loads: &[Load]) -> anyhow::Result<BTreeMap<String, Figures>> {
    let mut res = BTreeMap::new();
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        let Some(name) = l.trim().strip_prefix("FIO ") else {
            continue;
        };
        let load = loads
            .iter()
            .find(|x| x.name == name)
            .with_context(|| format!("fio result of an unknown load {name}"))?;
        let json = lines
            .next()
            .with_context(|| format!("no fio output for {name}"))?;
        let start = json
            .find('{')
            .with_context(|| format!("fio printed no JSON for {name}: {json}"))?;
        res.insert(
            name.to_owned(),
            parse_fio(&json[start..], load.write).with_context(|| name.to_owned())?,
        );
    }
    for l in loads {
        ensure!(
            res.contains_key(&l.name),
            "no fio result for {}:\n{out}",
            l.name
        );
    }
    Ok(res)
}

/// The QEMU argument that lets a guest mount the outer machine (which its
/// host sees at [`devlend_cluster::OUTER_ROOT_IN_HOST`]) read-only.
pub fn outer_virtfs_arg() -> String {
    format!(
        "-virtfs local,path={},mount_tag=outer,security_model=none,readonly=on",
        devlend_cluster::OUTER_ROOT_IN_HOST
    )
}

/// Binds a device that is not lent to vfio-pci on its host: the local
/// side's drive, bound once for the whole run.
pub fn bind_vfio_pci(l: &AgentClient, addr: &str) -> anyhow::Result<()> {
    sh_timeout(
        l,
        &format!(
            "modprobe vfio-pci && \
             echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override && \
             if [ -e /sys/bus/pci/devices/{addr}/driver ]; then \
               echo {addr} > /sys/bus/pci/devices/{addr}/driver/unbind; fi && \
             echo {addr} > /sys/bus/pci/drivers_probe"
        ),
        Duration::from_secs(60),
    )?;
    let drv = lending::driver_of(l, addr)?;
    ensure!(
        drv.as_deref() == Some("vfio-pci"),
        "{addr} is bound to {drv:?}, not vfio-pci"
    );
    Ok(())
}

/// How a guest's RAM is backed in the host that runs it: what pinning and
/// mapping it cost depends on how physically contiguous it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    /// QEMU's default: anonymous memory with transparent huge pages.
    Thp,
    /// Transparent huge pages off: 4 KiB pages, from a host with plenty
    /// of free memory.
    Small,
    /// 4 KiB pages scattered over the host: a tmpfs file written page
    /// by page in shuffled order (`devlend-fragment`), shared with the
    /// guest as its RAM: every page its own run.
    Fragmented,
    /// hugetlbfs, 2 MiB pages (`-mem-path /dev/hugepages`).
    Hugetlb,
}

impl Backing {
    /// Every backing, in the order measured.
    pub const ALL: [Backing; 4] = [
        Backing::Thp,
        Backing::Small,
        Backing::Fragmented,
        Backing::Hugetlb,
    ];

    /// Its name in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Backing::Thp => "thp",
            Backing::Small => "4k",
            Backing::Fragmented => "4k-fragmented",
            Backing::Hugetlb => "hugetlbfs-2m",
        }
    }
}

/// What a host was changed for a backing, to undo it.
#[derive(Debug)]
pub struct BackingSetup {
    /// More QEMU arguments the guest needs.
    pub qemu_args: String,
    thp_before: Option<String>,
    scattered_file: bool,
    hugepages: bool,
}

const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
/// Where the scattered guest RAM file lives: a tmpfs of its own.
const SCATTERED_DIR: &str = "/run/devlend-fragment";

/// The host's free memory, MiB (`MemAvailable`).
fn available_mib(a: &AgentClient) -> anyhow::Result<u64> {
    let kib: u64 = sh(a, "awk '/^MemAvailable:/ {print $2}' /proc/meminfo")?
        .trim()
        .parse()
        .context("MemAvailable")?;
    Ok(kib >> 10)
}

/// Prepares host `a` for a guest of `guest_mib` MiB backed as `backing`
/// (`fragmenter`: the path of `devlend-fragment` in the host). `Ok(Err)`
/// says why this host cannot (too little memory), which is reported, not
/// fatal. Undo with [`undo_backing`], also after an error.
pub fn apply_backing(
    a: &AgentClient,
    backing: Backing,
    guest_mib: u32,
    fragmenter: &str,
) -> anyhow::Result<Result<BackingSetup, String>> {
    let mut setup = BackingSetup {
        qemu_args: String::new(),
        thp_before: None,
        scattered_file: false,
        hugepages: false,
    };
    let guest = u64::from(guest_mib);
    if backing == Backing::Small {
        let now = sh(a, &format!("cat {THP_ENABLED}"))?;
        let mode = now
            .split(['[', ']'])
            .nth(1)
            .with_context(|| format!("{THP_ENABLED}: {now:?}"))?
            .to_owned();
        sh(a, &format!("echo never > {THP_ENABLED}"))?;
        setup.thp_before = Some(mode);
    }
    match backing {
        Backing::Thp | Backing::Small => {}
        Backing::Fragmented => {
            // The file, and tmpfs's own copy of nothing else: the guest's
            // RAM is the file's pages (shared), 4 KiB each.
            let need = guest + 128;
            let have = available_mib(a)?;
            if have < need {
                return Ok(Err(format!("{have} MiB available, {need} MiB needed")));
            }
            setup.scattered_file = true;
            sh_timeout(
                a,
                &format!(
                    "mkdir -p {SCATTERED_DIR} && \
                     (mountpoint -q {SCATTERED_DIR} || mount -t tmpfs -o size={}m,huge=never none {SCATTERED_DIR}) && \
                     {fragmenter} {SCATTERED_DIR}/ram {guest}",
                    guest + 16
                ),
                Duration::from_secs(300),
            )
            .context("writing the scattered guest RAM file")?;
            setup.qemu_args = format!(
                "-object memory-backend-file,id=scattered,mem-path={SCATTERED_DIR}/ram,size={guest}M,share=on \
                 -machine memory-backend=scattered"
            );
        }
        Backing::Hugetlb => {
            let pages = guest.div_ceil(2);
            setup.hugepages = true;
            let got: u64 = sh(
                a,
                &format!(
                    "sync; echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory; \
                     echo {pages} > /proc/sys/vm/nr_hugepages; cat /proc/sys/vm/nr_hugepages"
                ),
            )?
            .trim()
            .parse()
            .context("nr_hugepages")?;
            if got < pages {
                return Ok(Err(format!(
                    "{got} of {pages} huge pages of 2 MiB could be reserved"
                )));
            }
            sh(
                a,
                "mkdir -p /dev/hugepages; mountpoint -q /dev/hugepages || mount -t hugetlbfs none /dev/hugepages",
            )?;
            setup.qemu_args = "-mem-path /dev/hugepages".into();
        }
    }
    Ok(Ok(setup))
}

/// Undoes [`apply_backing`]: removes the scattered RAM file, restores
/// transparent huge pages and gives the huge pages back.
pub fn undo_backing(a: &AgentClient, setup: &BackingSetup) -> anyhow::Result<()> {
    if setup.scattered_file {
        sh(
            a,
            &format!("rm -f {SCATTERED_DIR}/ram; ! mountpoint -q {SCATTERED_DIR} || umount {SCATTERED_DIR}"),
        )?;
    }
    if let Some(mode) = &setup.thp_before {
        sh(a, &format!("echo {mode} > {THP_ENABLED}"))?;
    }
    if setup.hugepages {
        sh(a, "echo 0 > /proc/sys/vm/nr_hugepages")?;
    }
    Ok(())
}

/// What pinning and mapping an mdev's guest memory cost, from the
/// borrower's debugfs `devlend/borrower` (summed over its fills).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct FillStats {
    /// Fills that pinned something: bus mastering on, and re-pins.
    pub fills: u64,
    /// Microseconds spent pinning, sending DL_MSG_DMA_MAPs and waiting.
    pub us: u64,
    /// The part of `us` spent pinning (VFIO's `vfio_pin_pages()`, and
    /// `pin_user_pages_remote()` for bulk pins).
    pub pin_us: u64,
    /// Of `pages`, those pinned in bulk rather than one by one by VFIO.
    pub bulk_pages: u64,
    /// Pages pinned.
    pub pages: u64,
    /// Physically contiguous runs the lender was asked to map.
    pub runs: u64,
    /// DL_MSG_DMA_MAPs sent.
    pub msgs: u64,
    /// Times QEMU unmapped guest memory while bus mastering was on.
    pub windows: u64,
}

impl FillStats {
    /// What was added since `before`.
    pub fn since(&self, before: &FillStats) -> FillStats {
        FillStats {
            fills: self.fills - before.fills,
            us: self.us - before.us,
            pin_us: self.pin_us - before.pin_us,
            bulk_pages: self.bulk_pages - before.bulk_pages,
            pages: self.pages - before.pages,
            runs: self.runs - before.runs,
            msgs: self.msgs - before.msgs,
            windows: self.windows - before.windows,
        }
    }
}

/// The fill figures of mdev `uuid` in a borrower's debugfs text.
pub fn parse_fill_stats(text: &str, uuid: &str) -> anyhow::Result<FillStats> {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("mdev {uuid} ")))
        .with_context(|| format!("no line of mdev {uuid} in:\n{text}"))?;
    let kv = crate::fabric::parse_kv(line);
    let num = |k: &str| -> anyhow::Result<u64> {
        kv.get(k)
            .with_context(|| format!("no {k} in {line:?}"))?
            .parse()
            .with_context(|| format!("{k} in {line:?}"))
    };
    Ok(FillStats {
        fills: num("fills")?,
        us: num("fill_us")?,
        pin_us: num("fill_pin_us")?,
        bulk_pages: num("fill_bulk_pages")?,
        pages: num("fill_pages")?,
        runs: num("fill_runs")?,
        msgs: num("fill_msgs")?,
        windows: num("unmap_windows")?,
    })
}

/// The fill figures of mdev `uuid` on borrower `b`.
pub fn fill_stats(b: &AgentClient, uuid: &str) -> anyhow::Result<FillStats> {
    parse_fill_stats(&sh(b, "cat /sys/kernel/debug/devlend/borrower")?, uuid)
}

/// Guest script body: resets the controller with the nvme driver's
/// commands traced, and prints `dbbuf <n>`: how many Doorbell Buffer
/// Config commands (shadow doorbells) the driver sent while setting the
/// controller up again, and `dbbuf_failed <n>`, how often it said the
/// device refused them.
pub fn shadow_doorbell_script() -> String {
    "t=/sys/kernel/tracing
mountpoint -q $t || mount -t tracefs none $t
echo 1 > $t/events/nvme/nvme_setup_cmd/enable
echo 1 > /sys/class/nvme/nvme0/reset_controller
for i in $(seq 150); do [ \"$(cat /sys/class/nvme/nvme0/state)\" = live ] && [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
echo \"dbbuf $(grep -c nvme_admin_dbbuf $t/trace) dbbuf_failed $(dmesg | grep -c 'unable to set dbbuf')\""
        .into()
}

/// `(sent, failed)` from [`shadow_doorbell_script`]'s output.
pub fn parse_shadow_doorbells(out: &str) -> anyhow::Result<(u64, u64)> {
    let line = out
        .lines()
        .find(|l| l.starts_with("dbbuf "))
        .with_context(|| format!("no dbbuf line in:\n{out}"))?;
    let kv: Vec<&str> = line.split_whitespace().collect();
    ensure!(
        kv.len() == 4 && kv[2] == "dbbuf_failed",
        "dbbuf line {line:?}"
    );
    Ok((kv[1].parse()?, kv[3].parse()?))
}

/// A benchmark's end: its JSON result, with `secs` (since `t0`) added,
/// written to `out` (its folder made), then `<what> done in N s; result:`
/// and the file's path, the last line printed.
pub fn write_result(
    out: &Path,
    mut json: serde_json::Value,
    t0: Instant,
    what: &str,
) -> anyhow::Result<()> {
    json["secs"] = serde_json::json!(t0.elapsed().as_secs_f64());
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "\n{what} done in {:.0} s; result:",
        t0.elapsed().as_secs_f64()
    );
    let shown = std::fs::canonicalize(out).unwrap_or_else(|_| out.to_owned());
    println!("{}", shown.display());
    Ok(())
}

/// A benchmark binary's `main`: logging, its options (`parse`; bad ones
/// exit 2), then `run` (a failure exits 1, `BENCHMARK FAILED: ...`).
pub fn bench_main<O>(
    name: &str,
    parse: impl FnOnce() -> anyhow::Result<O>,
    run: impl FnOnce(&O) -> anyhow::Result<()>,
) -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{name}: {e:#}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_are_named_by_level_size_pattern_and_depth() {
        let names: Vec<String> = Load::standard("guest")
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(
            names,
            [
                "guest-4k-randread-qd1",
                "guest-4k-randread-qd32",
                "guest-128k-seqread-qd1",
                "guest-128k-seqwrite-qd1"
            ]
        );
    }

    #[test]
    fn ratio_divides_the_headline_figure() {
        let fig = |iops: f64, mb: f64| Figures {
            iops,
            mb_per_sec: mb,
            ..Figures::default()
        };
        let l = &Load::standard("userspace")[0];
        let c = Compared::new(
            l,
            vec![fig(100.0, 0.4), fig(300.0, 1.2)],
            vec![fig(400.0, 1.6)],
            BTreeMap::new(),
        );
        assert!((c.ratio - 0.5).abs() < 1e-9, "{c:?}");
        assert_eq!(c.figure, "iops");
        let s = &Load::standard("userspace")[2];
        let c = Compared::new(
            s,
            vec![fig(1.0, 30.0)],
            vec![fig(9.0, 60.0)],
            BTreeMap::new(),
        );
        assert!((c.ratio - 0.5).abs() < 1e-9);
        assert_eq!(c.figure, "mb_per_sec");
        let c = Compared::new(
            s,
            vec![fig(1.0, 30.0)],
            vec![Figures::default()],
            BTreeMap::new(),
        );
        assert_eq!(c.ratio, 0.0);
    }

    #[test]
    fn driver_json_is_read_and_a_failed_run_refused() {
        let ok = r#"{"device":"x","iops":1234.5,"mb_per_sec":5.06,"lat_us":{"p50":700.0,"p90":1.0,"p99":900.0,"max":2.0},"ios":5000,"passed":true}"#;
        let f = parse_driver(&format!("noise\n{ok}\n")).unwrap();
        assert_eq!((f.iops, f.p99_us, f.ios), (1234.5, 900.0, 5000));
        assert!(parse_driver(&ok.replace("true", "false")).is_err());
        assert!(parse_driver("no json").is_err());
    }

    #[test]
    fn fio_json_is_read_per_direction() {
        let job = |dir: &str| {
            format!(
                r#"{{"jobs":[{{"jobname":"j","error":0,"{dir}":{{"iops":250.0,"bw_bytes":1024000,"total_ios":2500,"clat_ns":{{"percentile":{{"50.000000":400000,"99.000000":1200000}}}}}}}}]}}"#
            )
        };
        let f = parse_fio(&job("read"), false).unwrap();
        assert_eq!(
            (f.iops, f.mb_per_sec, f.p50_us, f.p99_us, f.ios),
            (250.0, 1.024, 400.0, 1200.0, 2500)
        );
        assert!(parse_fio(&job("read"), true).is_err());
        let loads = Load::standard("guest");
        let out: String = loads
            .iter()
            .map(|l| {
                format!(
                    "FIO {}\nfio: noise {}\n",
                    l.name,
                    job(if l.write { "write" } else { "read" })
                )
            })
            .collect();
        assert_eq!(parse_fio_script(&out, &loads).unwrap().len(), 4);
        let short: String = out.lines().take(6).map(|l| format!("{l}\n")).collect();
        assert!(parse_fio_script(&short, &loads).is_err());
    }

    #[test]
    fn per_io_divides_counter_deltas() {
        let m = |w: u64, f: u64| {
            BTreeMap::from([("bar_writes".to_owned(), w), ("irq_fires".to_owned(), f)])
        };
        let p = per_io(&m(10, 5), &m(110, 55), 50);
        assert_eq!(p["bar_writes"], 2.0);
        assert_eq!(p["irq_fires"], 1.0);
        assert!(!p.contains_key("bar_reads"));
    }

    #[test]
    fn direct_fires_are_summed_over_fabrics() {
        let text = "borrower adapter=a lost=0 irq_direct=2 irq_direct_fires=7 irq_direct_fallbacks=0\n\
                    mdev x state=2 irq_direct=2 irq_direct_fires=3\n\
                    borrower adapter=b lost=0 irq_direct=0 irq_direct_fires=5 irq_direct_fallbacks=1\n";
        assert_eq!(parse_direct_fires(text).unwrap(), 12);
        assert!(parse_direct_fires("borrower adapter=a lost=0\n").is_err());
    }

    #[test]
    fn fill_stats_are_read_for_one_mdev() {
        let text = "borrower adapter=0000:00:03.0 quarantined=0 kept_same=0\n\
             mdev aaaa state=2 pinned=1 unmap_windows=0 unmap_window_ms=0 kept=0 fills=1 fill_us=10 fill_pin_us=8 fill_pages=1 fill_runs=1 fill_msgs=1 fill_bulk_pages=0 bulk_refused=0\n\
             mdev bbbb state=2 pinned=65536 unmap_windows=2 unmap_window_ms=5 kept=0 fills=3 fill_us=2500 fill_pin_us=2000 fill_pages=196608 fill_runs=130 fill_msgs=2 fill_bulk_pages=196000 bulk_refused=0\n";
        let f = parse_fill_stats(text, "bbbb").unwrap();
        assert_eq!(
            (f.fills, f.us, f.pin_us, f.pages, f.runs, f.msgs, f.windows),
            (3, 2500, 2000, 196608, 130, 2, 2)
        );
        assert_eq!(f.bulk_pages, 196000);
        let d = f.since(&parse_fill_stats(text, "aaaa").unwrap());
        assert_eq!((d.fills, d.pages, d.runs), (2, 196607, 129));
        assert!(parse_fill_stats(text, "cccc").is_err());
        assert!(parse_fill_stats("mdev bbbb state=2 pinned=1\n", "bbbb").is_err());
    }

    #[test]
    fn shadow_doorbell_line_is_read() {
        assert_eq!(
            parse_shadow_doorbells("pci 0x1b36 0x0010 driver=nvme\ndbbuf 1 dbbuf_failed 0\n")
                .unwrap(),
            (1, 0)
        );
        assert!(parse_shadow_doorbells("dbbuf 1\n").is_err());
        assert!(parse_shadow_doorbells("nothing\n").is_err());
    }
    #[test]
    fn spread_is_median_and_range() {
        let s = Spread::of(&[0.9, 0.5, 1.1]);
        assert_eq!((s.median, s.min, s.max, s.n), (0.9, 0.5, 1.1, 3));
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 4.0, 4));
        assert_eq!(Spread::of(&[0.7]).median, 0.7);
        assert_eq!(Spread::of(&[]), Spread::default());
    }

    #[test]
    fn proc_stat_busy_and_total() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let text = "cpu  100 5 50 1000 20 3 7 0 40 0\ncpu0 100 5 50 1000 20 3 7 0 40 0\nintr 1\n";
        let t = parse_proc_stat(text).unwrap();
        // A nested guest's 40 ticks are in user already.
        assert_eq!(
            t,
            CpuTicks {
                busy: 165,
                total: 1185
            }
        );
        assert!(parse_proc_stat("cpu0 1 2 3\n").is_err());
        assert!(parse_proc_stat("cpu  1 2 3 4\n").is_err());
        assert!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n").is_err());
        let later = CpuTicks {
            busy: 265,
            total: 1585,
        };
        let d = later.since(&t);
        assert_eq!(
            d,
            CpuTicks {
                busy: 100,
                total: 400
            }
        );
        assert_eq!(d.busy_fraction(), 0.25);
        assert_eq!(t.since(&later), CpuTicks::default());
        assert_eq!(CpuTicks::default().busy_fraction(), 0.0);
    }

    #[test]
    fn cpu_per_io_subtracts_the_idle_load() {
        // 2 s passed (200 ticks), 120 of them busy; idle, the host is busy
        // 10% of the time: 100 ticks, 1 s, of work for 1000 I/Os.
        let d = CpuTicks {
            busy: 120,
            total: 200,
        };
        assert!((cpu_us_per_io(d, None, 0.1, 1000) - 1000.0).abs() < 1e-6);
        assert!((cpu_us_per_io(d, None, 0.0, 1000) - 1200.0).abs() < 1e-6);
        // Less busy than idle: nothing, not a negative share.
        assert_eq!(cpu_us_per_io(d, None, 0.9, 1000), 0.0);
        assert_eq!(cpu_us_per_io(d, None, 0.1, 0), 0.0);
        // The fixed part, measured on its own over 1 s (100 ticks, 50
        // busy, 10 of them idle load), leaves 60 ticks for the I/Os.
        let fixed = CpuTicks {
            busy: 50,
            total: 100,
        };
        assert!((cpu_us_per_io(d, Some(fixed), 0.1, 1000) - 600.0).abs() < 1e-6);
        // A fixed part costlier than the run: nothing, not negative; one
        // below the idle load takes nothing off.
        let big = CpuTicks {
            busy: 190,
            total: 200,
        };
        assert_eq!(cpu_us_per_io(d, Some(big), 0.1, 1000), 0.0);
        let quiet = CpuTicks {
            busy: 1,
            total: 100,
        };
        assert!((cpu_us_per_io(d, Some(quiet), 0.1, 1000) - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn only_the_host_not_running_the_load_has_its_idle_load_taken_off() {
        // 1 s passed on both (100 ticks), each busy 60; idle loads 0.5.
        let cpu = [CpuTicks {
            busy: 60,
            total: 100,
        }; 2];
        let d = host_cpu(Side::Devlend, cpu, None, [0.5, 0.5], 100);
        assert_eq!((d.lender, d.borrower), (1000.0, 6000.0));
        let l = host_cpu(Side::Local, cpu, None, [0.5, 0.5], 100);
        assert_eq!((l.lender, l.borrower), (6000.0, 1000.0));
        // A fixed part (40 busy ticks, each) comes off both.
        let f = Some(
            [CpuTicks {
                busy: 40,
                total: 100,
            }; 2],
        );
        let d = host_cpu(Side::Devlend, cpu, f, [0.1, 0.1], 100);
        assert!((d.lender - 2000.0).abs() < 1e-6, "{d:?}");
        assert!((d.borrower - 2000.0).abs() < 1e-6, "{d:?}");
    }

    fn run(iops: f64, mb: f64, lender: f64, borrower: f64, irqs: f64) -> Run {
        Run {
            figures: Figures {
                iops,
                mb_per_sec: mb,
                ..Figures::default()
            },
            cpu_us_per_io: HostCpu { lender, borrower },
            messages_per_io: if irqs > 0.0 {
                BTreeMap::from([("irq_fires".to_owned(), irqs)])
            } else {
                BTreeMap::new()
            },
            direct_doorbells_per_io: 0.0,
        }
    }

    #[test]
    fn pairs_give_median_ratio_spread_and_cpu() {
        let qd1 = &Load::standard("guest")[0];
        let pairs = vec![
            Pair::new(
                qd1,
                run(90.0, 0.0, 30.0, 700.0, 1.0),
                run(100.0, 0.0, 900.0, 2.0, 0.0),
            ),
            Pair::new(
                qd1,
                run(80.0, 0.0, 50.0, 800.0, 1.0),
                run(200.0, 0.0, 800.0, 1.0, 0.0),
            ),
            Pair::new(
                qd1,
                run(60.0, 0.0, 40.0, 600.0, 0.5),
                run(100.0, 0.0, 700.0, 3.0, 0.0),
            ),
        ];
        assert_eq!(pairs[1].ratio, 0.4);
        let p = Paired::new(qd1, IrqPath::Relayed, pairs);
        assert_eq!(p.figure, "iops");
        assert_eq!((p.ratio.median, p.ratio.min, p.ratio.max), (0.6, 0.4, 0.9));
        assert_eq!((p.devlend.median, p.local.median), (80.0, 100.0));
        assert_eq!(p.cpu_us_per_io.devlend.lender.median, 40.0);
        assert_eq!(p.cpu_us_per_io.devlend.borrower.median, 700.0);
        assert_eq!(p.cpu_us_per_io.local.lender.median, 800.0);
        assert_eq!(p.cpu_us_per_io.local.borrower.max, 3.0);
        assert_eq!(p.lender_irqs_per_io.median, 1.0);
        assert_eq!(p.messages_per_io["irq_fires"], 1.0);
        // Bandwidth loads divide MB/s; a local figure of 0 gives ratio 0.
        let seq = &Load::standard("guest")[2];
        let q = Pair::new(
            seq,
            run(1.0, 30.0, 0.0, 0.0, 0.0),
            run(9.0, 60.0, 0.0, 0.0, 0.0),
        );
        assert_eq!(q.ratio, 0.5);
        let z = Pair::new(
            seq,
            run(1.0, 30.0, 0.0, 0.0, 0.0),
            run(9.0, 0.0, 0.0, 0.0, 0.0),
        );
        assert_eq!(z.ratio, 0.0);
        assert_eq!(
            Paired::new(seq, IrqPath::Direct, vec![q]).figure,
            "mb_per_sec"
        );
    }

    #[test]
    fn paired_table_has_a_line_per_load_and_path() {
        let qd1 = &Load::standard("guest")[0];
        let seq = &Load::standard("guest")[2];
        let rows = [
            Paired::new(
                qd1,
                IrqPath::Direct,
                vec![
                    Pair::new(
                        qd1,
                        run(90.0, 0.0, 30.0, 700.0, 0.0),
                        run(100.0, 0.0, 900.0, 2.0, 0.0),
                    ),
                    Pair::new(
                        qd1,
                        run(40.0, 0.0, 30.0, 700.0, 0.0),
                        run(100.0, 0.0, 900.0, 2.0, 0.0),
                    ),
                ],
            ),
            Paired::new(
                seq,
                IrqPath::Relayed,
                vec![Pair::new(
                    seq,
                    run(0.0, 12.5, 1.0, 2.0, 0.25),
                    run(0.0, 25.0, 3.0, 4.0, 0.0),
                )],
            ),
        ];
        let t = paired_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].contains("CPU us/I/O, devlend side"), "{t}");
        assert!(lines[1].starts_with("load (pairs)"), "{t}");
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "guest-4k-randread-qd1",
                "(2)",
                "direct",
                "65.0",
                "100.0",
                "IOPS",
                "0.65",
                "0.40..0.90",
                "30",
                "700",
                "900",
                "2",
                "0.000"
            ],
            "{t}"
        );
        let row: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            row,
            [
                "guest-128k-seqread-qd1",
                "(1)",
                "relayed",
                "12.5",
                "25.0",
                "MB/s",
                "0.50",
                "0.50..0.50",
                "1",
                "2",
                "3",
                "4",
                "0.250"
            ],
            "{t}"
        );
        // The columns line up: every line as wide as the header's.
        let w = lines[1].len();
        assert!(lines[2..].iter().all(|l| l.len() == w), "{t}");
    }

    #[test]
    fn a_step_is_one_command_in_the_host() {
        let c = step_command("/tmp/go", 7, 3, "/tmp/con.log", 42, 250);
        assert_eq!(
            c,
            "timeout 250 sh -c 'touch /tmp/go/7; sleep 3; \
             until grep -qF \"DONE 7.\" /tmp/con.log; do kill -0 42 || exit 3; sleep 1; done'"
        );
    }

    #[test]
    fn a_paired_guest_is_stopped_and_continued_through_qmp() {
        let c = qmp_run_command("/tmp/q.sock", false);
        assert!(c.contains(r#"{"execute":"stop"}"#), "{c}");
        assert!(c.contains(r#"{"execute":"query-status"}"#), "{c}");
        assert!(c.ends_with("UNIX-CONNECT:/tmp/q.sock"), "{c}");
        assert!(qmp_run_command("/tmp/q.sock", true).contains(r#"{"execute":"cont"}"#));
        let answer = r#"{"QMP": {"version": {}, "capabilities": []}}
{"return": {}}
{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "STOP"}
{"return": {}}
{"return": {"status": "paused", "singlestep": false, "running": false}}"#;
        assert_eq!(vm_running(answer), Some(false));
        assert_eq!(vm_running(&answer.replace("false}", "true}")), Some(true));
        assert_eq!(vm_running(r#"{"error": {"class": "GenericError"}}"#), None);
    }

    #[test]
    fn paired_guest_steps_are_numbered_and_read() {
        let loads = Load::standard("guest");
        assert_eq!(step_number(1, 0, 4), 1);
        assert_eq!(step_number(2, 3, 4), 8);
        let script = paired_fio_script(&loads, 3, 2);
        assert!(script.contains("seq 2"), "{script}");
        assert!(script.contains("ro go /go"), "{script}");
        assert!(script.contains("do sleep 2; done"), "{script}");
        assert!(
            script.contains(&format!("echo {PAIRED_READY}\n")),
            "{script}"
        );
        assert_eq!(script.matches("chroot /outer fio").count(), 4);
        assert!(
            script.ends_with(&format!(
                "done\nwhile [ ! -e /go/{PAIRED_END} ]; do sleep 2; done\n"
            )),
            "{script}"
        );
        assert!(go_virtfs_arg("/tmp/g").contains("path=/tmp/g,mount_tag=go,"));
        assert!(crate::guest::kernel_cmdline(&crate::lending::nvme_guest_script(&script)).is_ok());
        let job = |dir: &str, iops: f64| {
            format!(
                r#"{{"jobs":[{{"jobname":"j","error":0,"{dir}":{{"iops":{iops},"bw_bytes":1024000,"total_ios":2500,"clat_ns":{{"percentile":{{"50.000000":400000,"99.000000":1200000}}}}}}}}]}}"#
            )
        };
        let out = format!(
            "PAIRED-GUEST-READY\r\nSTEP 1\r\n{}\r\n{}\r\nSTEP 11\r\nfio: x {}\r\n{}\r\n",
            job("read", 250.0),
            step_done_marker(1),
            job("read", 300.0),
            step_done_marker(11)
        );
        assert_eq!(parse_fio_step(&out, 1, &loads[0]).unwrap().iops, 250.0);
        assert_eq!(parse_fio_step(&out, 11, &loads[0]).unwrap().iops, 300.0);
        assert!(parse_fio_step(&out, 2, &loads[0]).is_err());
        assert!(
            parse_fio_step(&out, 1, &loads[3]).is_err(),
            "a write load's figures"
        );
    }
}
