//! The pieces of `devlend-bench` (run by `./bench.sh`): the same NVMe
//! measured borrowed (devlend: an mdev on the borrower) and local (bound to
//! vfio-pci on the lender), side by side in one run of one cluster. See
//! docs/performance.md for how to read the result.

use std::collections::BTreeMap;
use std::time::Duration;

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

/// Binds a lent device to vfio-pci on its host, for the local figures.
pub fn bind_vfio_pci(l: &AgentClient, addr: &str) -> anyhow::Result<()> {
    sh(
        l,
        &format!("echo {addr} > {}/unlend", lending::LENDER_DRIVER),
    )?;
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

/// Gives a device bound to vfio-pci back to devlend (lent again).
pub fn rebind_lent(l: &AgentClient, addr: &str) -> anyhow::Result<()> {
    sh(
        l,
        &format!(
            "echo > /sys/bus/pci/devices/{addr}/driver_override; \
             if [ -e /sys/bus/pci/devices/{addr}/driver ]; then \
               echo {addr} > /sys/bus/pci/devices/{addr}/driver/unbind; fi"
        ),
    )?;
    lending::lend(l, addr)
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
}
