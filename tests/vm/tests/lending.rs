//! Device lending end to end on the two-host cluster: the lender's NVMe is
//! passed to a KVM guest on the borrower through an mdev, the guest's own
//! nvme driver does I/O whose bytes land in the lender's backing file, and
//! the device goes back to the pool when the guest is done.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_cluster::{tools, Cluster};
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::group;
use devlend_vmtests::guest::{self, GuestOpts};
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::libvirt;
use devlend_vmtests::ownership;
use devlend_vmtests::p2p::{
    self, bar_of_size, dmar_faults_at, ivshmem_window_of_size, pmr_write, BAR_WINDOWS_PARAM,
    P2P_BAR_ADDR, PMR_BYTES,
};
use devlend_vmtests::pool;
use devlend_vmtests::rwroot;
use devlend_vmtests::twohost::{self, host_bin};
use devlend_vmtests::{Check, Suite};

const LENDER: &str = "lender";
const BORROWER: &str = "borrower";
const MDEV_TYPE: &str = "devlend-nvme";
const GUEST_MIB: u32 = 160;
const WAIT: Duration = Duration::from_secs(60);

/// The sha256 of the range the guests write, as the last guest that wrote
/// it left it (each check that writes records what it wrote): only to say,
/// when a later check reads the same range, that these are still its bytes. No check needs it: each compares what a guest read
/// with the lender's backing file, so the checks run in any order.
static WRITTEN_SHA: Mutex<Option<String>> = Mutex::new(None);

fn written_sha() -> std::sync::MutexGuard<'static, Option<String>> {
    WRITTEN_SHA.lock().unwrap_or_else(|e| e.into_inner())
}

fn boot() -> anyhow::Result<Cluster> {
    devlend_vmtests::boot_topology("two-host")
}

/// The lender's NVMe, lent and available ([`twohost::lent_nvme`]), and KVM
/// on the borrower, whatever an earlier check did (a lender rebooted,
/// modules reloaded, the device taken back).
fn lent_nvme(c: &Cluster) -> anyhow::Result<PciDev> {
    let nvme = twohost::lent_nvme(c)?;
    fabric::sh(c.agent(BORROWER)?, "modprobe kvm_amd").context("KVM for the borrower's guests")?;
    wait_available(c.agent(LENDER)?, &nvme)?;
    Ok(nvme)
}

/// The bytes a guest must read from the range the guests write: the
/// lender's backing file's (checked against the last writing guest's, if one ran).
fn expected_sha(c: &Cluster) -> anyhow::Result<String> {
    let sha = lending::file_sha256(&c.paths().nvme_file(LENDER, "nvme0"))?;
    if let Some(w) = written_sha().as_ref() {
        ensure!(
            *w == sha,
            "the lender's backing file no longer holds the last writing guest's bytes"
        );
    }
    Ok(sha)
}

/// Waits until the lender offers the device again.
fn wait_available(lender: &devlend_agent::AgentClient, nvme: &PciDev) -> anyhow::Result<()> {
    lending::wait_until(
        "lender state",
        WAIT,
        || lending::lent_state(lender, &nvme.addr),
        "available",
    )?;
    Ok(())
}

/// Runs `script` in a guest given a new mdev (pinned to `remote` if set),
/// and removes the mdev afterwards.
fn guest_with_mdev(
    c: &Cluster,
    remote: Option<&str>,
    script: &str,
) -> anyhow::Result<guest::GuestRun> {
    let b = c.agent(BORROWER)?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, remote)?;
    lending::nvme_guest_on_mdev(b, &uuid, script, GUEST_MIB)
}

/// `<lender name>/<pci address>`: how an mdev names the remote NVMe.
fn remote_name(nvme: &PciDev) -> String {
    format!("{LENDER}/{}", nvme.addr)
}

/// Lend: the NVMe leaves its driver for devlend-lender and is available.
fn lend_nvme(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let l = c.agent(LENDER)?;
    ensure!(
        lending::driver_of(l, &nvme.addr)?.as_deref() == Some("devlend-lender"),
        "lent device bound to {:?}",
        lending::driver_of(l, &nvme.addr)?
    );
    ensure!(lending::lent_state(l, &nvme.addr)? == "available");
    Ok(())
}

/// The borrower discovers the remote NVMe and offers an mdev type for it.
fn borrower_lists_remote_nvme(c: &mut Cluster) -> anyhow::Result<()> {
    remote_nvme_listed(c)
}

/// Waits until the borrower no longer lists the lender's NVMe.
fn remote_nvme_dropped(c: &Cluster, nvme: &PciDev, what: &str) -> anyhow::Result<()> {
    let b = c.agent(BORROWER)?;
    lending::wait_until(
        what,
        WAIT,
        || {
            let devs = lending::remote_devices(b)?;
            Ok(devs
                .values()
                .any(|d| d.get("name") == Some(&nvme.addr))
                .to_string())
        },
        "false",
    )?;
    Ok(())
}

/// The borrower lists the remote NVMe (waiting for it) with one mdev
/// instance available.
fn remote_nvme_listed(c: &Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let b = c.agent(BORROWER)?;
    lending::wait_until(
        "remote NVMe on the borrower",
        WAIT,
        || {
            let devs = lending::remote_devices(b)?;
            Ok(devs
                .values()
                .find(|d| d.get("name") == Some(&nvme.addr))
                .map(|d| format!("{}:{}", d["vendor"], d["device"]))
                .unwrap_or_default())
        },
        &format!("{}:{}", nvme.vendor, nvme.device),
    )?;
    let t = lending::type_dir(b, MDEV_TYPE)?;
    ensure!(sh(b, &format!("cat {t}/device_api"))?.trim() == "vfio-pci");
    ensure!(!sh(b, &format!("cat {t}/name"))?.trim().is_empty());
    ensure!(lending::available_instances(b, MDEV_TYPE)? == 1);
    Ok(())
}

/// A guest on the borrower uses the remote NVMe with Linux's own nvme
/// driver: 16 MiB written with O_DIRECT read back identical, and the same
/// bytes are in the lender's backing file.
fn guest_io_lands_in_lender_file(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let lid = fabric::host_id(c.agent(LENDER)?)?;
    let in_irq = |c: &Cluster| -> anyhow::Result<u64> {
        fabric::counter(
            &fabric::peer_counters(c.agent(BORROWER)?, lid)?,
            "rx_in_irq",
        )
    };
    let bar_in_irq = |c: &Cluster| -> anyhow::Result<u64> {
        twohost::lender_counter(c.agent(LENDER)?, &nvme, "bar_writes_in_irq")
    };
    let in_irq_before = in_irq(c)?;
    let bar_in_irq_before = bar_in_irq(c)?;
    let kept_before = ownership::borrower_pages(c.agent(BORROWER)?)?;
    let run = guest_with_mdev(
        c,
        Some(&remote_name(&nvme)),
        &lending::nvme_write_and_read(),
    )?;
    println!("  guest ran in {:.1} s", run.elapsed.as_secs_f64());
    let written = lending::guest_wrote_to_backing(
        &run,
        &nvme,
        &c.paths().nvme_file(LENDER, "nvme0"),
        lending::IO_SIZE_MIB,
    )?;
    // The guest's interrupts came through the doorbell interrupt's fast
    // path, not (only) the receive work.
    let taken = in_irq(c)? - in_irq_before;
    println!("  messages from the lender taken in the doorbell interrupt: {taken}");
    ensure!(
        taken > 0,
        "no interrupt relay was taken in the doorbell interrupt"
    );
    // And the lender wrote the guest's doorbells from its own.
    let bar_taken = bar_in_irq(c)? - bar_in_irq_before;
    println!("  BAR writes the lender did in the doorbell interrupt: {bar_taken}");
    ensure!(
        bar_taken > 0,
        "no BAR write was done in the lender's doorbell interrupt"
    );
    // SeaBIOS changed the memory layout while the NVMe did DMA, and QEMU
    // unmapped and mapped the RAM again: the lender kept its mapping of the
    // same pages across that (nothing unmapped, nothing sent again), and
    // nothing is held once the guest is gone.
    let kept = ownership::borrower_pages(c.agent(BORROWER)?)?;
    let same = kept.kept_same - kept_before.kept_same;
    println!(
        "  guest pages QEMU unmapped and mapped again that the device kept: {same} (moved or not back: {})",
        kept.kept_unmapped - kept_before.kept_unmapped
    );
    ensure!(
        same > 0,
        "no page was kept mapped across QEMU's re-map:\n{}",
        kept.text
    );
    ensure!(
        kept.kept == 0,
        "pages still kept after the guest:\n{}",
        kept.text
    );
    *written_sha() = Some(written);
    Ok(())
}

/// The borrower's module parameter that asks for direct MSI-X vectors.
const DIRECT_IRQ_PARAM: &str = "/sys/module/devlend_borrower/parameters/direct_irq";

/// The borrower's debugfs counters of direct interrupts, summed over its
/// fabrics: (`irq_direct_fires`, `irq_direct_fallbacks`).
fn borrower_direct(b: &devlend_agent::AgentClient) -> anyhow::Result<(u64, u64)> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    let (mut fires, mut fallbacks) = (0, 0);
    for line in text.lines().filter(|l| l.starts_with("borrower ")) {
        let kv = fabric::parse_kv(line);
        fires += fabric::counter(&kv, "irq_direct_fires")?;
        fallbacks += fabric::counter(&kv, "irq_direct_fallbacks")?;
    }
    Ok((fires, fallbacks))
}

/// Guest script body: the nvme interrupts the guest has taken so far, all
/// CPUs and queues, printed as `irqs_<tag> <n>`.
fn guest_nvme_irqs(tag: &str) -> String {
    format!(
        "echo \"irqs_{tag} $(awk '/nvme/ {{ for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i }} END {{ print s + 0 }}' /proc/interrupts)\""
    )
}

/// What the counters of direct interrupts say at one moment: the lender's
/// relayed interrupts of the device, the borrower's direct doorbells and
/// vectors left relayed.
#[derive(Debug, Clone, Copy)]
struct IrqCounters {
    relayed: u64,
    direct: u64,
    fallbacks: u64,
}

fn irq_counters(c: &Cluster, nvme: &PciDev) -> anyhow::Result<IrqCounters> {
    let (direct, fallbacks) = borrower_direct(c.agent(BORROWER)?)?;
    Ok(IrqCounters {
        relayed: twohost::lender_counter(c.agent(LENDER)?, nvme, "irq_fires")?,
        direct,
        fallbacks,
    })
}

/// MSI-X straight through the fabric: with the borrower's `direct_irq` on,
/// a guest's nvme driver does verified I/O while each interrupt is the
/// device's own write onto the borrower's doorbell. The counters are read
/// when the guest's driver is set up (it prints `DIRECT-IO-READY` and
/// waits) and after its I/O: during the I/O the guest's interrupts grew,
/// the lender relayed none (no lender CPU per interrupt), the borrower's
/// doorbells for the direct vectors took at least as many, and the
/// lender's IOMMU blocked none of the device's writes. What the lender
/// relayed while QEMU enabled MSI-X (an interrupt the device held pending
/// while its vectors were masked, sent when the relay unmasked them) is
/// printed, not counted against it.
fn guest_irqs_direct_through_fabric(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let b = c.agent(BORROWER)?;
    sh(b, &format!("echo 1 > {DIRECT_IRQ_PARAM}"))?;
    let result = direct_io_run(c, &nvme);
    let off = sh(c.agent(BORROWER)?, &format!("echo 0 > {DIRECT_IRQ_PARAM}"));
    let ((start, faults_before), ready, end, run) = result?;
    off?;
    let written = lending::guest_wrote_to_backing(
        &run,
        &nvme,
        &c.paths().nvme_file(LENDER, "nvme0"),
        lending::IO_SIZE_MIB,
    )?;
    let num = |key: &str| -> anyhow::Result<u64> {
        Ok(lending::output_field(&run.output, key)?.parse()?)
    };
    let guest_io_irqs = num("irqs_after")? - num("irqs_before")?;
    let faults = dmar_faults(c.agent(LENDER)?)? - faults_before;
    let io_relayed = end.relayed - ready.relayed;
    let io_direct = end.direct - ready.direct;
    println!(
        "  guest nvme interrupts: {} at setup, {guest_io_irqs} during the I/O; \
         during the I/O: lender relayed {io_relayed}, borrower took {io_direct} direct doorbells; \
         at setup: lender relayed {}, borrower took {} direct doorbells; \
         vectors left relayed: {}; DMAR faults: {faults}",
        num("irqs_before")?,
        ready.relayed - start.relayed,
        ready.direct - start.direct,
        end.fallbacks - start.fallbacks
    );
    ensure!(
        guest_io_irqs > 0,
        "the guest took no nvme interrupt during its I/O"
    );
    ensure!(
        end.fallbacks == start.fallbacks,
        "{} vectors stayed relayed",
        end.fallbacks - start.fallbacks
    );
    ensure!(
        io_relayed == 0,
        "the lender's CPU relayed {io_relayed} interrupts during the guest's I/O with direct MSI-X"
    );
    ensure!(
        io_direct >= guest_io_irqs,
        "{io_direct} doorbells on the direct vectors, fewer than the guest's {guest_io_irqs} interrupts"
    );
    ensure!(
        faults == 0,
        "the lender's IOMMU blocked {faults} device writes"
    );
    *written_sha() = Some(written);
    Ok(())
}

/// The counters (and the lender's DMAR faults) before the guest, when its
/// driver is ready, and after it, and the guest's run.
type DirectRun = (
    (IrqCounters, usize),
    IrqCounters,
    IrqCounters,
    guest::GuestRun,
);

/// [`guest_irqs_direct_through_fabric`]'s guest, with `direct_irq` on.
fn direct_io_run(c: &Cluster, nvme: &PciDev) -> anyhow::Result<DirectRun> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let start = (irq_counters(c, nvme)?, dmar_faults(l)?);
    let script = lending::nvme_guest_script(&format!(
        "{}\necho DIRECT-IO-READY\nsleep 10\n{}\n{}",
        guest_nvme_irqs("before"),
        lending::nvme_write_and_read(),
        guest_nvme_irqs("after")
    ));
    let (ready, run) =
        with_background_guest(b, nvme, &script, "/tmp/devlend-direct-guest.log", |g, _| {
            g.wait_for(b, "DIRECT-IO-READY", Duration::from_secs(300))?;
            let ready = irq_counters(c, nvme)?;
            let run = g.wait(b, Duration::from_secs(600))?;
            Ok((ready, run))
        })?;
    Ok((start, ready, irq_counters(c, nvme)?, run))
}

/// Runs `script` in a guest on the borrower host in the background, given
/// a fresh mdev of `nvme`, and `f` with the guest and the mdev's UUID
/// meanwhile; the guest is killed if `f` fails, and the mdev removed
/// either way.
fn with_background_guest<T>(
    b: &devlend_agent::AgentClient,
    nvme: &PciDev,
    script: &str,
    console: &str,
    f: impl FnOnce(&guest::BackgroundGuest, &str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(nvme)))?;
    let extra = lending::vfio_arg(&uuid);
    let opts = GuestOpts {
        mem_mib: GUEST_MIB,
        extra_qemu_args: &extra,
        qmp: None,
        kernel_args: "",
    };
    let r = (|| {
        let g = guest::spawn(b, &tools::guest_images_dir()?, script, &opts, console)?;
        let r = f(&g, &uuid);
        if r.is_err() {
            let _ = g.kill(b);
        }
        r
    })();
    let removed = lending::remove_mdev(b, &uuid);
    let r = r?;
    removed?;
    Ok(r)
}

/// The tag both hosts give the PMR's window in `bar_windows`.
const PMR_TAG: u32 = 1;
/// The lender's host id in two-host.toml (its first host).
const LENDER_HOST_ID: u32 = 0;
/// Where in the PMR the outer test writes the word that lets the guest go.
const PMR_GO_OFFSET: u64 = 0x1000;
const PMR_GO: u32 = 0x600d_f00d;
/// The words the guest writes at the start of the PMR.
const PMR_WORDS: u32 = 16;
const PMR_PATTERN: u32 = 0xd1e5_0000;

/// The mdev's line of the borrower's debugfs, by key.
fn borrower_mdev(
    b: &devlend_agent::AgentClient,
    uuid: &str,
) -> anyhow::Result<std::collections::HashMap<String, String>> {
    let text = sh(b, "cat /sys/kernel/debug/devlend/borrower")?;
    text.lines()
        .find(|l| l.starts_with(&format!("mdev {uuid} ")))
        .map(fabric::parse_kv)
        .with_context(|| format!("mdev {uuid} not in the borrower's debugfs:\n{text}"))
}

/// The guest of [`direct_bar_through_window`]: takes the NVMe from its
/// driver, turns memory decode on, finds the PMR BAR, waits until the
/// outer test's word appears in it, writes and reads the pattern through
/// the mapping, then clears memory decode and reads once more.
fn direct_bar_guest_script() -> String {
    let words: String = (0..PMR_WORDS).map(|i| format!("{i} ")).collect();
    lending::nvme_guest_script(&format!(
        "[ -e $p/driver ] && echo ${{p##*/}} > $p/driver/unbind
echo 1 > $p/enable
i=0; base=
while read -r s e f; do
  if [ $((e)) -gt $((s)) ] && [ $((e - s + 1)) -eq {PMR_BYTES} ]; then base=$((s)); echo \"pmr_bar $i\"; break; fi
  i=$((i + 1))
done < $p/resource
[ -n \"$base\" ] || {{ echo no-pmr-bar; exit 4; }}
echo \"pmr_cmd_on $(od -An -tu2 -j4 -N2 $p/config | tr -d ' ')\"
echo BAR-READY
n=0
until [ $(($(devmem $((base + {PMR_GO_OFFSET})) 32))) -eq {PMR_GO} ]; do
  n=$((n + 1)); [ $n -lt 1200 ] || {{ echo no-go-word; exit 5; }}; sleep 0.1
done
for i in {words}; do devmem $((base + 4 * i)) 32 $(({PMR_PATTERN} + i)); done
out=
for i in {words}; do out=\"$out $(($(devmem $((base + 4 * i)) 32)))\"; done
echo \"pmr_readback$out\"
echo \"pmr_go $(($(devmem $((base + {PMR_GO_OFFSET})) 32)))\"
echo BAR-DONE
sleep 3
cmd=$(od -An -tu2 -j4 -N2 $p/config | tr -d ' ')
new=$((cmd & ~2 & 255))
if [ $new -eq 0 ]; then dd if=/dev/zero of=$p/config bs=1 seek=4 count=1 conv=notrunc 2>/dev/null
else printf \"\\\\$(printf %o $new)\" | dd of=$p/config bs=1 seek=4 count=1 conv=notrunc 2>/dev/null; fi
echo \"pmr_cmd_off $(od -An -tu2 -j4 -N2 $p/config | tr -d ' ')\"
echo \"pmr_after_off $(($(devmem $base 32)))\"
echo BAR-OFF
sleep 3"
    ))
}

/// What [`direct_bar_run`] saw: lender counters at BAR-READY and BAR-DONE,
/// the borrower's mdev line at BAR-DONE and at BAR-OFF, the file's words
/// at BAR-DONE, and the guest's run.
struct DirectBarRun {
    ready: (u64, u64),
    done: (u64, u64),
    windows: (u64, u64),
    mdev_done: std::collections::HashMap<String, String>,
    mdev_off: std::collections::HashMap<String, String>,
    file_words: Vec<u32>,
    run: guest::GuestRun,
}

fn direct_bar_run(c: &Cluster, nvme: &PciDev) -> anyhow::Result<DirectBarRun> {
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let file = c.paths().pmr_file(LENDER, "nvme0");
    // Whatever an earlier run left: no go word, no pattern.
    pmr_write(&file, 0, &[0; PMR_WORDS as usize])?;
    pmr_write(&file, PMR_GO_OFFSET, &[0])?;
    let bar_msgs = || -> anyhow::Result<(u64, u64)> {
        Ok((
            twohost::lender_counter(l, nvme, "bar_reads")?,
            twohost::lender_counter(l, nvme, "bar_writes")?,
        ))
    };
    let windows_before = twohost::lender_counter(l, nvme, "bar_windows")?;
    with_background_guest(
        b,
        nvme,
        &direct_bar_guest_script(),
        "/tmp/devlend-direct-bar-guest.log",
        |g, uuid| {
            g.wait_for(b, "BAR-READY", Duration::from_secs(300))?;
            let ready = bar_msgs()?;
            // The outer machine's bytes, which the guest must read.
            pmr_write(&file, PMR_GO_OFFSET, &[PMR_GO])?;
            g.wait_for(b, "BAR-DONE", Duration::from_secs(300))?;
            let done = bar_msgs()?;
            let mdev_done = borrower_mdev(b, uuid)?;
            let file_words = p2p::file_words(&file, 0, PMR_WORDS as usize)?;
            let windows_after = twohost::lender_counter(l, nvme, "bar_windows")?;
            g.wait_for(b, "BAR-OFF", Duration::from_secs(120))?;
            let mdev_off = borrower_mdev(b, uuid)?;
            let run = g.wait(b, Duration::from_secs(300))?;
            Ok(DirectBarRun {
                ready,
                done,
                windows: (windows_before, windows_after),
                mdev_done,
                mdev_off,
                file_words,
                run,
            })
        },
    )
}

/// A RAM-backed BAR used by a guest straight through a window of the
/// fabric (`./test.sh direct`): the lender's NVMe has a persistent memory
/// region from a file, the borrower host a window onto that file; the
/// lender shows the BAR to the holder (`DL_MSG_BAR_WINDOW`), the borrower
/// offers it as a sparse mmap region, and the guest's loads and stores
/// reach it with no BAR message (the lender's counters stand still), the
/// bytes landing in the file on the outer machine and the outer machine's
/// bytes read by the guest. Memory decode off zaps the mapping.
fn direct_bar_through_window(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let bar = bar_of_size(l, &nvme.addr, PMR_BYTES).context("the NVMe's PMR BAR")?;
    let win = ivshmem_window_of_size(b, PMR_BYTES)?;
    sh(
        l,
        &format!(
            "echo lend:{}/{bar}={PMR_TAG} > {BAR_WINDOWS_PARAM}",
            nvme.addr
        ),
    )?;
    sh(
        b,
        &format!("echo show:{win}={LENDER_HOST_ID}/{PMR_TAG} > {BAR_WINDOWS_PARAM}"),
    )?;
    let result =
        direct_bar_run(c, &nvme).and_then(|r| Ok((r, direct_bar_probe(c, &nvme, bar, &win)?)));
    let off_l = sh(c.agent(LENDER)?, &format!("echo > {BAR_WINDOWS_PARAM}"));
    let off_b = sh(c.agent(BORROWER)?, &format!("echo > {BAR_WINDOWS_PARAM}"));
    let (r, probe) = result?;
    off_l?;
    off_b?;
    ensure!(r.run.rc == 0, "guest failed:\n{}", r.run.console);
    let num = |key: &str| -> anyhow::Result<u64> {
        Ok(lending::output_field(&r.run.output, key)?.parse()?)
    };
    let want: Vec<u32> = (0..PMR_WORDS).map(|i| PMR_PATTERN + i).collect();
    let read: Vec<u32> = lending::output_field(&r.run.output, "pmr_readback")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let count = |kv: &std::collections::HashMap<String, String>, k: &str| fabric::counter(kv, k);
    println!(
        "  PMR BAR{bar} of {}: {} words written and read by the guest; lender BAR messages \
         during the guest's accesses: {} reads, {} writes; windows shown {}; borrower: \
         bar_windows={} bar_faults={} bar_zaps {} -> {} at decode off; guest read {:#x} after",
        nvme.addr,
        PMR_WORDS,
        r.done.0 - r.ready.0,
        r.done.1 - r.ready.1,
        r.windows.1 - r.windows.0,
        count(&r.mdev_done, "bar_windows")?,
        count(&r.mdev_done, "bar_faults")?,
        count(&r.mdev_done, "bar_zaps")?,
        count(&r.mdev_off, "bar_zaps")?,
        num("pmr_after_off")?,
    );
    ensure!(
        r.windows.1 > r.windows.0,
        "the lender showed no BAR window to the borrower"
    );
    ensure!(
        count(&r.mdev_done, "bar_windows")? >= 1 && count(&r.mdev_done, "bar_faults")? >= 1,
        "the borrower mapped nothing through the window: {:?}",
        r.mdev_done
    );
    // A fault maps the whole mapping: a guest's pass over the BAR takes
    // a fault per mapping and zap, not one per page.
    ensure!(
        count(&r.mdev_done, "bar_faults")? < PMR_BYTES / 4096,
        "the borrower took a fault per page of the {PMR_BYTES}-byte BAR: {:?}",
        r.mdev_done
    );
    ensure!(
        read == want,
        "the guest read back {read:x?}, wrote {want:x?}"
    );
    ensure!(
        r.file_words == want,
        "the PMR's backing file holds {:x?}, the guest wrote {want:x?}",
        r.file_words
    );
    ensure!(
        num("pmr_go")? == u64::from(PMR_GO),
        "the guest did not read the outer machine's word"
    );
    ensure!(
        r.done == r.ready,
        "the lender relayed BAR accesses during the guest's: reads {} -> {}, writes {} -> {}",
        r.ready.0,
        r.done.0,
        r.ready.1,
        r.done.1
    );
    ensure!(
        num("pmr_cmd_off")? & 2 == 0 && num("pmr_cmd_on")? & 2 != 0,
        "memory decode was not on and then off in the guest"
    );
    ensure!(
        count(&r.mdev_off, "bar_zaps")? > count(&r.mdev_done, "bar_zaps")?,
        "memory decode off zapped no mapping"
    );
    ensure!(
        num("pmr_after_off")? != u64::from(PMR_PATTERN),
        "with memory decode off the guest still read the BAR"
    );
    // The VMM's side: a mapping touched with decode off faults.
    let field = |k: &str| lending::output_field(&probe.out, k);
    println!(
        "  VFIO probe on the borrower host: areas {}; wrote and read {}; with decode off: {}; \
         on again: {}; window device removed: {}; lender BAR messages meanwhile: {} reads, {} writes",
        field("probe_areas")?,
        field("probe_read")?,
        field("probe_after_off")?,
        field("probe_after_on")?,
        field("probe_after_window_gone")?,
        probe.after.0 - probe.before.0,
        probe.after.1 - probe.before.1
    );
    let value = PROBE_VALUE.to_string();
    ensure!(
        field("probe_mmap")? == "1",
        "the BAR region is not mmap-able:\n{}",
        probe.out
    );
    ensure!(
        field("probe_read")? == value,
        "the probe read back other bytes:\n{}",
        probe.out
    );
    ensure!(
        probe.file_word == PROBE_VALUE,
        "the PMR file holds {:#x} at {PROBE_OFFSET:#x}, the probe wrote {PROBE_VALUE:#x}",
        probe.file_word
    );
    ensure!(
        field("probe_after_off")? == "sigbus",
        "with memory decode off the mapping did not fault:\n{}",
        probe.out
    );
    ensure!(
        field("probe_after_on")? == value,
        "with memory decode on again the mapping did not work:\n{}",
        probe.out
    );
    ensure!(
        field("probe_after_window_gone")? == "sigbus",
        "with the window device removed the mapping did not fault:\n{}",
        probe.out
    );
    ensure!(
        probe.after == probe.before,
        "the lender relayed BAR accesses during the probe's"
    );
    Ok(())
}

/// [`vfio_bar_probe.py`]'s word, and where in the PMR it writes it.
const PROBE_OFFSET: u64 = 0x2000;
const PROBE_VALUE: u32 = 0x5eed_1234;

/// What the VFIO probe printed, the word the file holds where it wrote,
/// and the lender's BAR messages (reads, writes) before and after it.
struct BarProbe {
    out: String,
    file_word: u32,
    before: (u64, u64),
    after: (u64, u64),
}

/// Runs `tests/vm/scripts/vfio_bar_probe.py` on the borrower host against
/// a fresh mdev of the lent NVMe: a VMM's view of the BAR window, with no
/// guest.
fn direct_bar_probe(c: &Cluster, nvme: &PciDev, bar: u32, win: &str) -> anyhow::Result<BarProbe> {
    const SCRIPT: &str = include_str!("../scripts/vfio_bar_probe.py");
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let file = c.paths().pmr_file(LENDER, "nvme0");
    pmr_write(&file, PROBE_OFFSET, &[0])?;
    let bar_msgs = || -> anyhow::Result<(u64, u64)> {
        Ok((
            twohost::lender_counter(l, nvme, "bar_reads")?,
            twohost::lender_counter(l, nvme, "bar_writes")?,
        ))
    };
    wait_available(l, nvme)?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(nvme)))?;
    let r = (|| {
        let before = bar_msgs()?;
        let out = sh(
            b,
            &format!(
                "python3 - {uuid} {} {PROBE_OFFSET:#x} {PROBE_VALUE:#x} {win} <<'DEVLEND_EOF'\n{SCRIPT}\nDEVLEND_EOF",
                bar + VFIO_PCI_BAR0_REGION_INDEX
            ),
        );
        // The probe removed the window device; it comes back on a
        // rescan, bound to devlend again, whatever the probe did.
        let back = window_back(b, win);
        let out = out?;
        back?;
        let after = bar_msgs()?;
        let file_word = p2p::file_words(&file, PROBE_OFFSET, 1)?[0];
        Ok::<_, anyhow::Error>(BarProbe {
            out,
            file_word,
            before,
            after,
        })
    })();
    let removed = lending::remove_mdev(b, &uuid);
    let r = r?;
    removed?;
    Ok(r)
}

/// Brings the borrower host's window device `win` back after the probe
/// removed it (a rescan of the PCI bus) and waits until devlend's driver
/// has it again.
fn window_back(b: &devlend_agent::AgentClient, win: &str) -> anyhow::Result<()> {
    sh(
        b,
        &format!(
            "echo 1 > /sys/bus/pci/rescan; for i in $(seq 50); do \
             [ \"$(basename \"$(readlink /sys/bus/pci/devices/{win}/driver)\")\" = devlend ] && exit 0; \
             sleep 0.2; done; echo 'window {win} not bound to devlend after a rescan' >&2; exit 1"
        ),
    )
    .map(drop)
}

/// VFIO's region index of BAR 0.
const VFIO_PCI_BAR0_REGION_INDEX: u32 = 0;

/// After the guest powered off the device is back in the pool.
fn device_back_in_pool(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    wait_available(l, &nvme)?;
    lending::wait_instances(b, MDEV_TYPE, 1)?;
    Ok(())
}

/// One mdev per remote device on a host: while a VFIO user (the userspace
/// driver, opening the mdev as QEMU does) holds the NVMe through an mdev,
/// a second mdev for it is refused with a clear error, by `devlend mdev
/// create` and by a raw write to the type's `create` (as mdevctl and
/// libvirt do); `available_instances` says 0 meanwhile, the holder is
/// unaffected (its write and read back verify), and once the first mdev
/// is gone a new one is created.
fn held_device_refused(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let first = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let res = (|| {
        // The holder opens the mdev through VFIO as a VMM does; the
        // userspace driver is that without a guest's boot.
        let holder = pool::Holder::hold(c, BORROWER, first.clone(), &drv)?;
        let res = (|| {
            ensure!(lending::lent_state(l, &nvme.addr)? == "borrowed");
            ensure!(lending::available_instances(b, MDEV_TYPE)? == 0);
            // The CLI names the mdev that has the device.
            let out = b.sh(
                &format!("{cli} mdev create --device {}", remote_name(&nvme)),
                Duration::from_secs(30),
            )?;
            println!("  devlend mdev create: {}", out.stderr.trim());
            ensure!(out.exit_code == Some(4), "second mdev not refused: {out:?}");
            ensure!(
                out.stderr
                    .contains(&format!("is the target of mdev {first}")),
                "no clear error: {}",
                out.stderr
            );
            // The kernel refuses what mdevctl would write.
            let t = lending::type_dir(b, MDEV_TYPE)?;
            let out = b.sh(
                &format!(
                    "echo $(cat /proc/sys/kernel/random/uuid) > {t}/create; echo rc=$?; dmesg | tail -n 3"
                ),
                Duration::from_secs(30),
            )?;
            ensure!(
                out.stdout.contains("rc=1") && out.stdout.contains("no available instance of nvme"),
                "create not refused clearly: {out:?}"
            );
            ensure!(holder.holding(c)?, "the holder ended");
            Ok(())
        })();
        match res {
            // Its write and read back verified, the mdev removed.
            Ok(()) => holder.release(c),
            Err(e) => {
                holder.drop_on(c);
                Err(e)
            }
        }
    })();
    let _ = lending::remove_mdev(b, &first);
    res?;
    wait_available(l, &nvme)?;
    // Back to one instance: a new mdev may take the device.
    let again = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    lending::remove_mdev(b, &again)
}

/// `devlend mdev remove` of an mdev that a VFIO user has open is refused:
/// exit 4 ("open in a VMM"), the mdev still in sysfs with `open` 1, the
/// device still borrowed, and the user does verified I/O on it after the
/// refusal. The holder is the userspace driver, which opens the mdev
/// through VFIO as QEMU does (the CLI reads only `open`): it sets the
/// device up, waits to be told to do its I/O until the remove was tried,
/// then writes, reads back and holds the device until told to let go.
/// Without the CLI's refusal the kernel's remove would wait for the holder
/// (a QEMU guest would have its device unplugged unasked). Once the driver
/// has closed it, `open` reads 0 and the same command removes the mdev,
/// and the device goes back to the pool.
fn mdev_remove_refused_while_a_vmm_has_it_open(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    wait_available(l, &nvme)?;
    lending::wait_instances(b, MDEV_TYPE, 1)?;
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let node = format!("/sys/bus/mdev/devices/{uuid}");
    let (go, release, log) = (
        "/tmp/open-remove-go",
        "/tmp/open-remove-release",
        "/tmp/open-remove.log",
    );
    let res = (|| {
        sh(b, &format!("rm -f {go} {release}"))?;
        ownership::spawn_bg(
            b,
            &format!(
                "{drv} --mdev {uuid} --blocks 64 --ios 100 --wait-before-io {go} --hold-until {release}"
            ),
            log,
        )?;
        let driver_says = |what: &str| -> anyhow::Result<()> {
            lending::wait_until(
                &format!("the driver printing {what:?}"),
                WAIT,
                || {
                    if let Ok(rc) = sh(b, &format!("cat {log}.rc")) {
                        anyhow::bail!(
                            "the driver ended (exit {}): {}",
                            rc.trim(),
                            sh(b, &format!("cat {log}"))?
                        );
                    }
                    Ok(sh(b, &format!("grep -c '{what}' {log} || true"))?
                        .trim()
                        .to_owned())
                },
                "1",
            )
            .map(drop)
        };
        driver_says("waiting before I/O")?;
        ensure!(
            sh(b, &format!("cat {node}/open"))?.trim() == "1",
            "the driver has the mdev open but {node}/open is not 1"
        );
        ensure!(
            lending::lent_state(l, &nvme.addr)? == "borrowed",
            "the driver set the device up but it is not borrowed"
        );
        let out = b.sh(
            &format!("{cli} mdev remove {uuid}"),
            Duration::from_secs(60),
        )?;
        println!(
            "  devlend mdev remove while a VFIO user has it open: exit {:?}: {}",
            out.exit_code,
            out.stderr.trim()
        );
        ensure!(
            out.exit_code == Some(4),
            "remove of an open mdev not refused with exit 4: {out:?}"
        );
        ensure!(
            out.stderr.contains("is open in a VMM"),
            "no clear error: {}",
            out.stderr
        );
        ensure!(
            sh(b, &format!("test -d {node} && cat {node}/open"))?.trim() == "1",
            "{node} gone or closed after the refused remove"
        );
        ensure!(
            lending::lent_state(l, &nvme.addr)? == "borrowed",
            "the device is no longer borrowed after the refused remove"
        );
        // The holder uses its device after the refusal: verified I/O.
        sh(b, &format!("touch {go}"))?;
        driver_says("holding")?;
        sh(b, &format!("touch {release}"))?;
        let (rc, out) = ownership::wait_bg(b, log, WAIT)?;
        ensure!(
            rc == 0 && out.contains(" 0 mismatches") && out.contains("PASS"),
            "the driver's I/O after the refused remove did not pass (exit {rc}):\n{out}"
        );
        println!("  the driver wrote and read back its blocks after the refusal");
        // Closed: the same command removes it.
        lending::wait_until(
            "the mdev's open after the driver closed it",
            WAIT,
            || Ok(sh(b, &format!("cat {node}/open"))?.trim().to_owned()),
            "0",
        )?;
        let out = b.sh(
            &format!("{cli} mdev remove {uuid}"),
            Duration::from_secs(60),
        )?;
        ensure!(
            out.exit_code == Some(0),
            "remove of the closed mdev failed: {out:?}"
        );
        ensure!(
            sh(b, &format!("test -e {node} && echo present || echo gone"))?.trim() == "gone",
            "{node} still there after the remove"
        );
        println!("  after the driver closed it: removed (exit 0)");
        Ok(())
    })();
    if res.is_err() {
        let _ = sh(b, &format!("touch {go} {release}"));
        let _ = ownership::wait_bg(b, log, Duration::from_secs(60));
        let _ = b.sh(
            &format!("[ -e {node} ] && echo 1 > {node}/remove"),
            Duration::from_secs(60),
        );
    }
    res?;
    wait_available(l, &nvme)?;
    lending::wait_instances(b, MDEV_TYPE, 1)?;
    Ok(())
}

/// mdevctl drives devlend as it drives any mdev parent: `types` shows the
/// type with one instance; `start` creates an mdev (sysfs agrees with
/// `list`) and a second is refused while the first holds the device;
/// `stop` removes it; a definition with `--auto` and a `remote_device`
/// attribute is started by `start-parent-mdevs` (what udev runs when the
/// adapter appears) and targets the lent NVMe.
fn mdevctl_types_start_define_list(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let b = c.agent(BORROWER)?;
    lending::wait_instances(b, MDEV_TYPE, 1)?;
    let parent = lending::adapter_dir(b)?
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let remote = remote_name(&nvme);
    let want_target = lending::remote_devices(b)?
        .into_iter()
        .find(|(_, d)| d.get("name") == Some(&nvme.addr))
        .map(|(k, _)| k)
        .context("the NVMe is not among the borrower's remote devices")?;
    let uuid = |a: &devlend_agent::AgentClient| -> anyhow::Result<String> {
        Ok(sh(a, "cat /proc/sys/kernel/random/uuid")?.trim().to_owned())
    };
    let (u1, u2, u3) = (uuid(b)?, uuid(b)?, uuid(b)?);
    // Definitions live in /etc/mdevctl.d, read-only in a host: a tmpfs,
    // with the callout directories mdevctl requires.
    sh(
        b,
        "mount -t tmpfs mdevctl /etc/mdevctl.d && \
         mkdir -p /etc/mdevctl.d/scripts.d/callouts /etc/mdevctl.d/scripts.d/notifiers",
    )?;
    let run = |cmd: &str| b.sh(cmd, Duration::from_secs(60));
    let res = (|| {
        let types = sh(b, "mdevctl types")?;
        ensure!(
            types.contains(&parent)
                && types.contains(MDEV_TYPE)
                && types.contains("Available instances: 1")
                && types.contains("Device API: vfio-pci"),
            "mdevctl types:\n{types}"
        );

        sh(
            b,
            &format!("mdevctl start -u {u1} -p {parent} -t {MDEV_TYPE}"),
        )?;
        let list = sh(b, "mdevctl list")?;
        ensure!(
            list.contains(&format!("{u1} {parent} {MDEV_TYPE}")),
            "mdevctl list after start:\n{list}"
        );
        let sysfs = format!("/sys/bus/mdev/devices/{u1}");
        ensure!(
            sh(b, &format!("readlink {sysfs}/mdev_type"))?
                .trim()
                .ends_with(MDEV_TYPE),
            "sysfs type of {u1}"
        );
        ensure!(
            sh(b, &format!("cat {sysfs}/remote_device"))?.trim() == want_target,
            "mdev {u1} does not target the NVMe"
        );
        let out = run(&format!("mdevctl start -u {u2} -p {parent} -t {MDEV_TYPE}"))?;
        println!("  second mdevctl start: {}", out.stderr.trim());
        ensure!(
            out.exit_code != Some(0) && !sh(b, "ls /sys/bus/mdev/devices")?.contains(&u2),
            "a second mdev for the one device was started: {out:?}"
        );
        sh(b, &format!("mdevctl stop -u {u1}"))?;
        ensure!(
            !sh(b, "ls /sys/bus/mdev/devices")?.contains(&u1),
            "{u1} still in sysfs after stop"
        );
        ensure!(!sh(b, "mdevctl list")?.contains(&u1), "{u1} still listed");

        sh(
            b,
            &format!(
                "mdevctl define -u {u3} -p {parent} -t {MDEV_TYPE} --auto && \
                 mdevctl modify -u {u3} --addattr=remote_device --value={remote}"
            ),
        )?;
        let defined = sh(b, "mdevctl list --defined")?;
        ensure!(
            defined.contains(&format!("{u3} {parent} {MDEV_TYPE} auto")),
            "mdevctl list --defined:\n{defined}"
        );
        ensure!(
            !sh(b, "ls /sys/bus/mdev/devices")?.contains(&u3),
            "defined is not started"
        );
        sh(b, &format!("mdevctl start-parent-mdevs {parent}"))?;
        let list = sh(b, "mdevctl list")?;
        ensure!(
            list.contains(&format!("{u3} {parent} {MDEV_TYPE} auto (defined)")),
            "mdevctl list after start-parent-mdevs:\n{list}"
        );
        ensure!(
            sh(b, &format!("cat /sys/bus/mdev/devices/{u3}/remote_device"))?.trim() == want_target,
            "the started definition does not target the NVMe"
        );
        sh(
            b,
            &format!("mdevctl stop -u {u3} && mdevctl undefine -u {u3}"),
        )?;
        ensure!(
            sh(b, "mdevctl list --defined")?.trim().is_empty(),
            "definitions left"
        );
        Ok(())
    })();
    for u in [&u1, &u2, &u3] {
        let _ = run(&format!("mdevctl stop -u {u}; mdevctl undefine -u {u}"));
    }
    let _ = run("umount /etc/mdevctl.d");
    res?;
    ensure!(lending::available_instances(b, MDEV_TYPE)? == 1);
    Ok(())
}

/// Hot-plug, and a second borrow of the device: an unpinned mdev (any
/// NVMe of the pool) added to a running guest over QMP (`devlend attach`,
/// device_add) shows the lender's NVMe, and the guest reads the bytes in
/// the lender's backing file (the earlier guests' when they ran before);
/// `devlend detach` (device_del, waiting for DEVICE_DELETED) returns it to
/// the pool.
fn hotplug_over_qmp(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let want = expected_sha(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let devlend =
        |args: &str| fabric::sh_timeout(b, &format!("{cli} {args}"), Duration::from_secs(240));
    let uuid = lending::create_mdev(b, MDEV_TYPE, None)?;
    let script = format!(
        "for i in $(seq 1200); do \
          for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/class)\" = {class} ] && p=$d; done; \
          [ -n \"$p\" ] && break; sleep 0.2; done
        [ -n \"$p\" ] || {{ echo never-plugged; exit 3; }}
        for i in $(seq 150); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
        echo \"plugged $(cat $p/vendor) $(cat $p/device)\"
        {read}
        echo hp-read-done
        for i in $(seq 1200); do [ -e $p ] || break; sleep 0.2; done
        [ -e $p ] && {{ echo never-unplugged; exit 4; }}
        echo hp-removed",
        class = lending::NVME_CLASS,
        read = lending::read_back("read"),
    );
    let g = guest::spawn(
        b,
        &tools::guest_images_dir()?,
        &script,
        &GuestOpts {
            mem_mib: GUEST_MIB,
            extra_qemu_args: "",
            qmp: Some("/tmp/hp.qmp"),
            kernel_args: "",
        },
        "/tmp/hp.console",
    )?;
    let res = (|| {
        g.wait_for(b, "DEVLEND-CMD-BEGIN", Duration::from_secs(240))?;
        devlend(&format!("attach --qmp /tmp/hp.qmp --id hp0 {uuid}"))?;
        let console = g.wait_for(b, "hp-read-done", Duration::from_secs(240))?;
        ensure!(
            lending::output_field(&console, "plugged")?
                == format!("{} {}", nvme.vendor, nvme.device),
            "hot-plugged device: {console}"
        );
        ensure!(
            lending::output_field(&console, "read")? == want,
            "hot-plugged device read other bytes"
        );
        ensure!(lending::lent_state(l, &nvme.addr)? == "borrowed");
        devlend("detach --qmp /tmp/hp.qmp --timeout 180 hp0")
            .context("device_del did not complete")?;
        let run = g.wait(b, Duration::from_secs(120))?;
        ensure!(
            run.rc == 0 && run.output.contains("hp-removed"),
            "guest: {}",
            run.console
        );
        wait_available(l, &nvme)?;
        Ok(())
    })();
    if res.is_err() {
        let _ = g.kill(b);
    }
    let _ = lending::remove_mdev(b, &uuid);
    res
}

/// The number of DMA remapping faults the lender's kernel has logged.
/// Where the peer-to-peer check maps the BAR for the device: a 2 MiB block
/// of its own below the driver's buffer (0x10000000).
const P2P_IOVA: u64 = 0x0800_0000;

/// The borrower's display adapter (`vga0` in two-host.toml, QEMU's
/// secondary-vga: vendor 0x1234, device 0x1111), enabled so its VRAM
/// decodes: its BAR 0 file.
fn p2p_target(b: &devlend_agent::AgentClient) -> anyhow::Result<String> {
    let out = sh(
        b,
        "for d in /sys/bus/pci/devices/*; do
  [ \"$(cat $d/vendor):$(cat $d/device)\" = 0x1234:0x1111 ] || continue
  [ -e $d/driver ] && { echo \"$d is claimed by $(basename $(readlink $d/driver))\" >&2; exit 1; }
  echo 1 > $d/enable; echo $d/resource0; exit 0
done
echo 'no display adapter (vga0 of two-host.toml)' >&2; exit 1",
    )
    .context("the peer-to-peer target")?;
    Ok(out.trim().to_owned())
}

fn dmar_faults(lender: &devlend_agent::AgentClient) -> anyhow::Result<usize> {
    Ok(sh(lender, "dmesg | grep -c 'DMAR:.*fault addr' || true")?
        .trim()
        .parse()
        .unwrap_or(0))
}

/// The lender's other NVMe (`nvme1` in two-host.toml, no PMR): the device
/// that DMAs into nvme0's PMR.
fn second_nvme(l: &devlend_agent::AgentClient, first: &PciDev) -> anyhow::Result<PciDev> {
    lending::find_all_by_class(l, lending::NVME_CLASS)?
        .into_iter()
        .find(|d| d.addr != first.addr)
        .context("the lender has one NVMe (two-host.toml gives it nvme1 too)")
}

/// Peer-to-peer between two devices of one lender (`./test.sh p2p`,
/// docs/p2p.md case 2): the userspace driver holds both NVMe of the
/// lender through two mdevs of one process, puts nvme0's PMR BAR (RAM
/// from a file) at an address of its DMA space, and has nvme1 read a block
/// it wrote into that address. The borrower pairs the two mdevs and asks
/// nvme1's lender to map nvme0's BAR there (`DL_MSG_P2P_DMA`): the block's
/// bytes must be in the PMR's backing file on the outer machine. Then
/// nvme0's mdev is closed and the lender takes it back, revoking the
/// mapping before its reset (`p2p_revokes`): the same read into the same
/// address must leave the file as it was (a sentinel written meanwhile),
/// with a DMAR fault at that address.
fn p2p_nvme_reads_into_another_nvmes_pmr(c: &mut Cluster) -> anyhow::Result<()> {
    let y = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let x = second_nvme(l, &y)?;
    let ybar = bar_of_size(l, &y.addr, PMR_BYTES).context("nvme0's PMR BAR")?;
    lending::ensure_lent(l, &x.addr)?;
    lending::wait_remote_listed(b, &x.addr, "the second NVMe on the borrower")?;
    let pmr = c.paths().pmr_file(LENDER, "nvme0");
    let faults_before = dmar_faults_at(l, P2P_BAR_ADDR)?;
    let maps_before = twohost::lender_counter(l, &x, "p2p_maps")?;
    let revokes_before = twohost::lender_counter(l, &y, "p2p_revokes")?;
    let run = p2p::read_with_two_mdevs(b, &remote_name(&x), &remote_name(&y), ybar, &pmr, &|| {
        Ok(format!("{:?}", twohost::lender_device(l, &x)?))
    });
    // Before the unlend, which forgets the device's counters.
    let maps = twohost::lender_counter(l, &x, "p2p_maps").map(|m| m - maps_before);
    let unlent = lending::unlend(l, &x.addr);
    let r = run?;
    let maps = maps?;
    unlent?;
    let lba = p2p::check_block_landed(&r, &c.paths().nvme_file(LENDER, "nvme1"))?;
    let revokes = twohost::lender_counter(c.agent(LENDER)?, &y, "p2p_revokes")? - revokes_before;
    ensure!(maps >= 1, "the lender made no P2P mapping for nvme1");
    ensure!(
        revokes >= 1,
        "taking nvme0 back revoked no mapping onto its BAR"
    );
    let faults = dmar_faults_at(c.agent(LENDER)?, P2P_BAR_ADDR)? - faults_before;
    ensure!(
        faults > 0,
        "the lender's IOMMU logged no fault for the read after the release"
    );
    println!(
        "  4 KiB of nvme1's block {lba} found in nvme0's PMR file; {maps} P2P mappings, \
         {revokes} revoked when nvme0 went back, then the read faulted ({faults} DMAR faults at \
         {P2P_BAR_ADDR:#x}) and the file kept its sentinel"
    );
    Ok(())
}

/// MiB the CMB check writes and reads: every command of it goes through
/// the CMB's queue; more bytes prove nothing more.
const CMB_IO_MIB: u64 = 4;

/// An NVMe with a controller memory buffer lent to a guest whose nvme
/// driver keeps its I/O submission queues there (`./test.sh cmb` or `p2p`,
/// docs/p2p.md case 1). The guest boots a kernel with PCI peer-to-peer DMA
/// (Debian's have none): its driver registers the CMB (BAR 2 of nvme1 in
/// two-host.toml) as peer-to-peer memory, tells the controller the
/// guest's bus address of it (CMBMSC), and allocates each I/O submission
/// queue from it, so the controller fetches every command of the guest's
/// I/O from its own BAR at addresses only the guest knows. Proof: the
/// guest's log says the CMB was added as peer-to-peer memory, some of it
/// is in use once the queues exist, and the guest's O_DIRECT writes and
/// reads through those queues land, byte for byte, in nvme1's backing
/// file on the outer machine.
fn p2p_nvme_cmb_holds_a_guests_submission_queues(c: &mut Cluster) -> anyhow::Result<()> {
    let first = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let x = second_nvme(l, &first)?;
    lending::ensure_lent(l, &x.addr)?;
    lending::wait_remote_listed(b, &x.addr, "the NVMe with a CMB on the borrower")?;
    let images = tools::p2p_guest_images_dir()?;
    let script = format!(
        "echo \"kernel $(uname -r)\"
echo \"p2pmem $(cat $p/p2pmem/size 2>/dev/null || echo none) $(cat $p/p2pmem/available 2>/dev/null || echo none)\"
echo \"cmb-added $(dmesg | grep -c 'added peer-to-peer DMA memory')\"
echo \"cmb-refused $(dmesg | grep -c 'failed to register the CMB')\"
{}",
        lending::write_and_read("/dev/nvme0n1", CMB_IO_MIB)
    );
    let run = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&x))).and_then(|uuid| {
        lending::nvme_guest_on_mdev_booting(b, &images, &uuid, &script, GUEST_MIB)
    });
    let unlent = lending::unlend(c.agent(LENDER)?, &x.addr);
    let run = run?;
    unlent?;
    let kernel = lending::output_field(&run.output, "kernel")?;
    ensure!(
        kernel.ends_with("-dlp2p"),
        "the guest booted {kernel}, not the peer-to-peer guest kernel"
    );
    ensure!(
        lending::output_field(&run.output, "cmb-added")? != "0"
            && lending::output_field(&run.output, "cmb-refused")? == "0",
        "the guest's nvme driver did not register the CMB as peer-to-peer memory:\n{}",
        run.console
    );
    let p2pmem: Vec<u64> = lending::output_field(&run.output, "p2pmem")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("the guest has no p2pmem of its NVMe:\n{}", run.output))?;
    let [size, available] = p2pmem[..] else {
        anyhow::bail!("p2pmem line: {p2pmem:?}");
    };
    ensure!(
        available < size,
        "none of the CMB's {size} bytes of peer-to-peer memory holds a queue: \
         the guest's nvme driver kept its submission queues in its RAM"
    );
    lending::guest_wrote_to_backing(&run, &x, &c.paths().nvme_file(LENDER, "nvme1"), CMB_IO_MIB)?;
    println!(
        "  guest kernel {kernel}: its nvme driver added the {} KiB CMB as peer-to-peer memory \
         and keeps {} KiB of submission queue(s) there; {} MiB written and read back through \
         them, found in nvme1's backing file ({:.1} s)",
        size >> 10,
        (size - available) >> 10,
        CMB_IO_MIB,
        run.elapsed.as_secs_f64()
    );
    Ok(())
}

/// The mdev type for a device of any class.
const ANY_TYPE: &str = "devlend-any";

/// A display adapter and an HDA controller, functions 0 and 1 of one slot
/// of the lender (two-host.toml's `gpu0`: one IOMMU group), lent together
/// and given to one KVM guest as one multi-function device at functions 0
/// and 1 of its slot 5 (`./test.sh group`, docs/groups.md). Lending the
/// display lends the audio function too; the lender gives the group one
/// IOMMU domain. The guest's `virtio-gpu` draws bands of colours into its
/// framebuffer, which the device fetches from guest RAM by DMA and which
/// must be what the lender's QEMU shows (QMP `screendump` of `gpu0`, from
/// outside every VM), and its `snd_hda_intel` must bind and find its codec
/// (through the HDA's DMA rings). Both functions' DMA is mapped in the
/// group's one domain, none faults, and once both are back one bus reset
/// resets them. Unlending the display gives both back.
fn group_display_and_audio_lent_as_one_device(c: &mut Cluster) -> anyhow::Result<()> {
    lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let first = |class: &str| -> anyhow::Result<PciDev> {
        lending::find_all_by_class(l, class)?
            .into_iter()
            .next()
            .with_context(|| format!("the lender has no device of class {class} (gpu0)"))
    };
    let (display, audio) = (first("0x038000")?, first("0x040300")?);
    let drivers = |l: &devlend_agent::AgentClient| -> anyhow::Result<[Option<String>; 2]> {
        Ok([
            lending::driver_of(l, &display.addr)?,
            lending::driver_of(l, &audio.addr)?,
        ])
    };
    let drivers0 = drivers(l)?;
    lending::ensure_lent(l, &display.addr)?;
    let r = (|| {
        ensure!(
            lending::driver_of(l, &audio.addr)?.as_deref() == Some("devlend-lender"),
            "lending the display did not lend the audio function of its slot"
        );
        let owners = sh(
            l,
            "dmesg | grep -c \"owning its IOMMU group's domain\" || true",
        )?;
        ensure!(
            owners.trim() != "0",
            "no function of the group owns its domain"
        );
        for d in [&display, &audio] {
            lending::wait_remote_listed(b, &d.addr, "a function of the group on the borrower")?;
        }
        let counts = |key: &str| -> anyhow::Result<[u64; 2]> {
            Ok([
                twohost::lender_counter(l, &display, key)?,
                twohost::lender_counter(l, &audio, key)?,
            ])
        };
        let mapped = || -> anyhow::Result<[u64; 2]> {
            let (own, shared) = (counts("dma_map_ranges")?, counts("dma_shared")?);
            Ok([own[0] + shared[0], own[1] + shared[1]])
        };
        let (maps0, faults0, resets0) = (mapped()?, counts("faults")?, counts("group_resets")?);
        let u0 = lending::create_mdev(b, ANY_TYPE, Some(&remote_name(&display)))?;
        let r = lending::create_mdev(b, ANY_TYPE, Some(&remote_name(&audio))).and_then(|u1| {
            let r = group_guest(c, &u0, &u1);
            let removed = lending::remove_mdev(b, &u1);
            let r = r?;
            removed?;
            Ok(r)
        });
        let removed = lending::remove_mdev(b, &u0);
        let (pattern, audio_seen) = r?;
        removed?;
        // Each function's DMA was mapped in the group's one domain (by it,
        // or found mapped by the other), and none faulted there.
        let (maps, faults) = (mapped()?, counts("faults")?);
        ensure!(
            maps[0] > maps0[0] && maps[1] > maps0[1],
            "a function's DMA was never mapped on the lender (dma_map_ranges + dma_shared of \
             display, audio: {maps0:?} -> {maps:?})"
        );
        ensure!(
            faults == faults0,
            "the group's DMA faulted on the lender (faults {faults0:?} -> {faults:?})"
        );
        // Neither function resets alone: once both are back, their bus.
        lending::wait_until(
            "the group's bus reset",
            Duration::from_secs(30),
            || {
                let now = counts("group_resets")?;
                Ok(if now[0] + now[1] > resets0[0] + resets0[1] {
                    "reset"
                } else {
                    "not yet"
                }
                .to_owned())
            },
            "reset",
        )?;
        for d in [&display, &audio] {
            let state = twohost::lender_device(l, d)?
                .get("state")
                .cloned()
                .unwrap_or_default();
            ensure!(
                state == "available",
                "{} is {state} after the group's bus reset, not available",
                d.addr
            );
        }
        Ok((
            pattern,
            format!(
                "{audio_seen}; on the lender, the display's and the HDA function's DMA \
                 mapped in the group's domain ({} and {} range(s), own or shared), no fault, \
                 and one bus reset for both once back",
                maps[0] - maps0[0],
                maps[1] - maps0[1]
            ),
        ))
    })();
    let unlent = lending::unlend(c.agent(LENDER)?, &display.addr);
    let (pattern, audio_seen) = r?;
    unlent?;
    // Both back with the drivers they had (a driver on the DMA API binds
    // only once no function of the group is owned for DMA).
    let drivers1 = drivers(c.agent(LENDER)?)?;
    ensure!(
        drivers1 == drivers0
            || drivers0
                .iter()
                .any(|d| d.as_deref() == Some("devlend-lender")),
        "unlending the display left the functions with drivers {drivers1:?}, not {drivers0:?}"
    );
    ensure!(
        drivers1[1].as_deref() != Some("devlend-lender"),
        "unlending the display left the audio function lent"
    );
    println!("  the lender's screen, from outside: {pattern}");
    println!("  the guest's audio: {audio_seen}");
    Ok(())
}

/// The guest of [`group_display_and_audio_lent_as_one_device`] with mdevs
/// `u0` (the display) and `u1` (the audio function): what the lender's
/// screen showed while it held its drawing, and what it found of audio.
fn group_guest(c: &Cluster, u0: &str, u1: &str) -> anyhow::Result<(String, String)> {
    let b = c.agent(BORROWER)?;
    // As a user gets them: from the CLI.
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let extra = sh(
        b,
        &format!(
            "echo $({cli} qemu-args {u0} --addr 5.0 --multifunction) \
             $({cli} qemu-args {u1} --addr 5.1)"
        ),
    )?
    .trim()
    .to_owned();
    ensure!(
        extra.contains(",addr=5.0,multifunction=on") && extra.contains(",addr=5.1"),
        "devlend qemu-args: {extra}"
    );
    let opts = GuestOpts {
        mem_mib: GUEST_MIB,
        extra_qemu_args: &extra,
        qmp: None,
        kernel_args: group::GUEST_KERNEL_ARGS,
    };
    let script = format!("{}{}", group::audio_script(30), group::draw_script(20));
    let g = guest::spawn(
        b,
        &tools::guest_images_dir()?,
        &script,
        &opts,
        "/tmp/devlend-group.console",
    )?;
    let r = (|| {
        let console = g.wait_for(b, group::DRAWN, Duration::from_secs(300))?;
        let fb = group::parse_draw_output(&console)?;
        let shot = std::env::temp_dir().join(format!("devlend-group-{}.ppm", std::process::id()));
        let img = group::screendump_device(&c.paths().qmp_sock(LENDER), Some("gpu0"), &shot);
        let _ = std::fs::remove_file(&shot);
        let pattern = group::check_pattern(&img?, &fb)?;
        let run = g.wait(b, Duration::from_secs(120))?;
        Ok((pattern, group::check_audio(&run.output)?))
    })();
    if r.is_err() {
        let _ = g.kill(b);
    }
    r
}

/// The `devlend` CLI end to end: lender and borrower listings, an mdev made
/// and removed by it, and the VMM arguments it prints, libvirt's validated.
fn cli_end_to_end(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let json = |a: &devlend_agent::AgentClient, args: &str| -> anyhow::Result<serde_json::Value> {
        let out = sh(a, &format!("{cli} --json {args}"))?;
        serde_json::from_str(&out).with_context(|| format!("devlend {args}: {out}"))
    };
    let devices = json(l, "devices")?.to_string();
    ensure!(devices.contains(&nvme.addr), "lender's devices: {devices}");
    let hosts = json(b, "hosts")?.to_string();
    ensure!(hosts.contains(LENDER), "borrower's hosts: {hosts}");
    let remote = json(b, "remote")?.to_string();
    ensure!(
        remote.contains(&nvme.addr),
        "borrower's remote devices: {remote}"
    );
    let uuid = sh(
        b,
        &format!("{cli} mdev create --device {}", remote_name(&nvme)),
    )?
    .trim()
    .to_owned();
    let res = (|| {
        ensure!(
            json(b, "mdev list")?.to_string().contains(&uuid),
            "mdev list lacks {uuid}"
        );
        let q = sh(b, &format!("{cli} qemu-args {uuid}"))?;
        ensure!(
            q.contains(&format!("sysfsdev=/sys/bus/mdev/devices/{uuid}")),
            "qemu-args: {q}"
        );
        let ch = sh(b, &format!("{cli} ch-args {uuid}"))?;
        ensure!(
            ch.contains(&format!("path=/sys/bus/mdev/devices/{uuid}/")),
            "ch-args: {ch}"
        );
        sh(
            b,
            &format!(
                "{cli} libvirt-xml --domain devlend-test {uuid} > /tmp/dom.xml && \
                 virt-xml-validate /tmp/dom.xml domain && \
                 {cli} libvirt-xml --nodedev {uuid} > /tmp/nd.xml && virt-xml-validate /tmp/nd.xml nodedev"
            ),
        )?;
        println!("  libvirt domain and node device XML validate (virt-xml-validate)");
        Ok(())
    })();
    let removed = sh(b, &format!("{cli} mdev remove {uuid}"));
    res?;
    removed?;
    Ok(())
}

/// The mdev that libvirt defines and starts in [`libvirt_domain_borrows_and_hotplugs`].
const LIBVIRT_MDEV: &str = "5e1b0a4d-6c2f-4e8a-9d3b-0c1e2f3a4b5c";

/// libvirt as operators drive it, on the borrower: Debian's `libvirtd`
/// lists the adapter's mdev types as node devices; a node device from
/// `devlend libvirt-xml --nodedev --device` is defined and started (libvirt
/// runs mdevctl); a domain from `devlend libvirt-xml --domain` is defined
/// and started, and its guest writes and reads the NVMe (bytes checked in
/// the lender's file); `virsh detach-device --live` and `attach-device
/// --live` unplug and plug the device again (the guest reads the same
/// bytes); when the guest powers off, the device goes back to the pool.
fn libvirt_domain_borrows_and_hotplugs(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    // The writable root sees the outer root unmasked: outer paths as they are.
    let cli = tools::our_binary("devlend", "DEVLEND_CLI")?
        .display()
        .to_string();
    let images = tools::guest_images_dir()?;
    let lv = libvirt::Libvirt::start(b, &c.paths().share)?;
    let res = (|| {
        let parent = format!(
            "pci_{}",
            sh(
                b,
                "basename $(dirname $(dirname $(ls -d /sys/bus/pci/devices/*/fabric/host_id)))"
            )?
            .trim()
            .replace([':', '.'], "_")
        );
        let types = lv.virsh(b, "nodedev-list --cap mdev_types")?;
        ensure!(
            types.contains(&parent),
            "nodedev-list --cap mdev_types: {types}"
        );
        let xml = lv.virsh(b, &format!("nodedev-dumpxml {parent}"))?;
        ensure!(
            xml.contains(&format!("<type id='{MDEV_TYPE}'>")),
            "the adapter's node device lacks {MDEV_TYPE}:\n{xml}"
        );
        println!("  libvirt lists {parent} with the devlend mdev types");

        let nd = lv.rw.sh(
            b,
            &format!(
                "{cli} libvirt-xml --nodedev --device {} {LIBVIRT_MDEV} >/tmp/nd.xml && \
                 virsh -c qemu:///system nodedev-define /tmp/nd.xml >/dev/null && \
                 sed -n 's|.*<name>\\(.*\\)</name>.*|\\1|p' /tmp/nd.xml",
                remote_name(&nvme)
            ),
        )?;
        let nd = nd.trim();
        lv.virsh(b, &format!("nodedev-start {nd}"))?;
        let target = sh(
            b,
            &format!(
                "r=$(cat /sys/bus/mdev/devices/{LIBVIRT_MDEV}/remote_device) && \
                 cat /sys/bus/pci/devices/*/fabric/remote/$r/name"
            ),
        )?;
        ensure!(
            target.trim() == nvme.addr,
            "the mdev libvirt started targets {target:?}, not {}",
            nvme.addr
        );
        let listed = lv.rw.sh(b, "mdevctl list")?;
        ensure!(listed.contains(LIBVIRT_MDEV), "mdevctl list: {listed}");
        println!("  node device {nd} defined and started (mdevctl lists it)");

        let script = lending::nvme_guest_script(&format!(
            "{}
echo cold-done
for i in $(seq 1500); do [ -e $p ] || break; sleep 0.2; done
[ -e $p ] && {{ echo never-unplugged; exit 4; }}
echo unplugged
q=
for i in $(seq 1500); do
    for d in /sys/bus/pci/devices/*; do [ \"$(cat $d/class 2>/dev/null)\" = {} ] && q=$d; done
    [ -n \"$q\" ] && break; sleep 0.2
done
[ -n \"$q\" ] || {{ echo never-replugged; exit 3; }}
for i in $(seq 150); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
{}",
            lending::nvme_write_and_read(),
            lending::NVME_CLASS,
            lending::read_back("reread"),
        ));
        let console = "/tmp/dl-libvirt.console";
        let dom = lv.rw.sh(
            b,
            &format!("{cli} libvirt-xml --domain dl-libvirt --memory {GUEST_MIB} --alias ua-dl0 {LIBVIRT_MDEV}"),
        )?;
        let dom = libvirt::boot_guest_domain(&dom, &images, &script, console)?;
        lv.rw.sh(
            b,
            &format!(
                "echo {} | base64 -d >/tmp/dom.xml && \
                 {cli} libvirt-xml --alias ua-dl0 {LIBVIRT_MDEV} >/tmp/hostdev.xml",
                guest::base64(dom.as_bytes())
            ),
        )?;
        lv.virsh(b, "define /tmp/dom.xml")?;
        lv.virsh(b, "start dl-libvirt")?;
        let console_has = |what: &str| -> anyhow::Result<String> {
            lending::wait_until(
                &format!("the guest printing {what}"),
                Duration::from_secs(300),
                || {
                    let out = sh(
                        b,
                        &format!("cat {} 2>/dev/null || true", lv.rw.path(console)),
                    )?;
                    Ok(if out.contains(what) || out.contains("DEVLEND-CMD-END") {
                        "seen".to_owned()
                    } else {
                        "not yet".to_owned()
                    })
                },
                "seen",
            )?;
            let out = sh(b, &format!("cat {}", lv.rw.path(console)))?;
            ensure!(out.contains(what), "the guest ended early:\n{out}");
            Ok(out)
        };
        let out = console_has("cold-done")?;
        ensure!(
            lending::output_field(&out, "pci")?
                == format!("{} {} driver=nvme", nvme.vendor, nvme.device),
            "guest: {out}"
        );
        let written = lending::output_field(&out, "written")?.to_owned();
        ensure!(
            lending::output_field(&out, "read")? == written,
            "read back differs:\n{out}"
        );
        ensure!(lending::lent_state(l, &nvme.addr)? == "borrowed");
        println!(
            "  domain started; its guest wrote and read {} MiB through the borrowed NVMe",
            lending::IO_SIZE_MIB
        );

        lv.virsh(b, "detach-device dl-libvirt /tmp/hostdev.xml --live")?;
        console_has("unplugged")?;
        lv.virsh(b, "attach-device dl-libvirt /tmp/hostdev.xml --live")?;
        let out = console_has("DEVLEND-CMD-END")?;
        ensure!(
            lending::output_field(&out, "reread")? == written,
            "after detach and attach the guest read other bytes:\n{out}"
        );
        println!("  virsh detach-device --live and attach-device --live: same bytes read again");
        lending::wait_until(
            "the domain shutting off",
            Duration::from_secs(120),
            || Ok(lv.virsh(b, "domstate dl-libvirt")?.trim().to_owned()),
            "shut off",
        )?;
        ensure!(
            lending::file_sha256(&c.paths().nvme_file(LENDER, "nvme0"))? == written,
            "lender's backing file does not hold the guest's bytes"
        );
        wait_available(l, &nvme)?;
        println!("  guest powered off: the device is back in the pool");
        lv.virsh(b, "undefine dl-libvirt")?;
        lv.virsh(b, &format!("nodedev-destroy {nd}"))?;
        lv.virsh(b, &format!("nodedev-undefine {nd}"))?;
        ensure!(
            !sh(b, "ls /sys/bus/mdev/devices")?.contains(LIBVIRT_MDEV),
            "nodedev-destroy left the mdev"
        );
        Ok(())
    })();
    let stopped = lv.stop(b);
    let _ = lending::remove_mdev(b, LIBVIRT_MDEV);
    res?;
    stopped
}

/// `devlend stats` while the userspace driver reads from the borrower:
/// the lender shows its device borrowed with DMA mapped and interrupts
/// flowing, the borrower a round trip to the lender, and the Prometheus
/// text counts the relayed interrupts.
fn stats_during_driver_io(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let stats = |a: &devlend_agent::AgentClient, secs: u32| -> anyhow::Result<serde_json::Value> {
        let out = sh(a, &format!("{cli} stats --json --interval {secs}"))?;
        serde_json::from_str(&out).with_context(|| format!("devlend stats: {out}"))
    };
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let log = "/tmp/stats-driver.log";
    let res = (|| {
        let pid = ownership::spawn_bg(
            b,
            &format!("{drv} --mdev {uuid} --blocks 64 --ios 100000000 --queue-depth 8"),
            log,
        )?;
        let res = (|| {
            lending::wait_until(
                "the driver borrowing the device",
                WAIT,
                || lending::lent_state(l, &nvme.addr),
                "borrowed",
            )?;
            let s = stats(l, 3)?;
            let d = &s["lent"][0];
            println!("  lender: {d}");
            ensure!(d["state"] == "borrowed", "lender's stats: {s}");
            ensure!(
                d["dma_mapped_bytes"].as_u64() > Some(0),
                "lender's stats: {s}"
            );
            ensure!(d["irqs_per_s"].as_f64() > Some(0.0), "lender's stats: {s}");
            let s = stats(b, 1)?;
            let p = &s["peers"][0];
            println!("  borrower's peer: {p}");
            ensure!(
                p["name"] == LENDER && p["link"] == "up",
                "borrower's stats: {s}"
            );
            ensure!(
                p["round_trip_us_since_load"].as_f64() > Some(0.0),
                "borrower's stats: {s}"
            );
            let prom = sh(l, &format!("{cli} stats --prometheus"))?;
            let irqs = prom
                .lines()
                .find(|line| line.starts_with("devlend_lent_irqs_total{"))
                .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
            ensure!(irqs > Some(0.0), "Prometheus text:\n{prom}");
            Ok(())
        })();
        // The driver is the only child of the shell that records its exit.
        sh(b, &format!("pkill -TERM -P {pid}; true"))?;
        ownership::wait_bg(b, log, WAIT)?;
        res
    })();
    let removed = lending::remove_mdev(b, &uuid);
    res?;
    removed
}

/// The userspace NVMe driver from the borrower, no guest: Identify,
/// verified I/O with completions signalled by MSI-X eventfds; then bad
/// input: out-of-range reads, BAR overruns, DMA to an IOVA nobody
/// mapped, and peer-to-peer DMA into a PCI BAR mapped at an IOVA (the
/// borrower's display adapter's VRAM, which devlend does not lend DMA to:
/// docs/p2p.md). The lender's IOMMU blocks both DMAs (faults it reports,
/// one at the BAR's IOVA) while nothing is written: the driver's sentinel
/// buffers and the BAR stay intact, and the lender's backing file is
/// unchanged outside the driver's range. (Both reads complete as
/// successful: their data goes out as posted writes, which an IOMMU drops
/// without telling the device.)
fn userspace_driver_io_and_bad_input(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let before_faults = dmar_faults(l)?;
    let before_p2p_faults = dmar_faults_at(l, P2P_IOVA)?;
    let before_sha = lending::file_sha256(&c.paths().nvme_file(LENDER, "nvme0"))?;
    let before_cfg = twohost::lender_counter(l, &nvme, "cfg_reads")?;
    let vram = p2p_target(b)?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let out = b.sh(
        &format!(
            "{drv} --mdev {uuid} --bad-input --p2p-target {vram} --p2p-iova {P2P_IOVA:#x} \
             --ios 2000 --json"
        ),
        Duration::from_secs(600),
    );
    let removed = lending::remove_mdev(b, &uuid);
    let out = out?;
    removed?;
    let r = lending::driver_report(&out)?;
    ensure!(
        r["bad_input"]["passed"] == true,
        "bad input: {}",
        r["bad_input"]
    );
    ensure!(
        r["verified_ios"].as_u64().unwrap_or(0) > 0,
        "no verified I/O: {r}"
    );
    ensure!(
        r["irq_signals"].as_u64().unwrap_or(0) > 0,
        "no MSI-X signals: {r}"
    );
    println!(
        "  {} IOPS, latency us {} (TCG-emulated; informational)",
        r["iops"], r["lat_us"]
    );
    // The open copied the 4 KiB config space in 64-byte blocks (64
    // messages), not dword by dword (1024); the driver's own config
    // accesses are few.
    let cfg_reads = twohost::lender_counter(l, &nvme, "cfg_reads")? - before_cfg;
    println!("  config read messages the open and the run took: {cfg_reads}");
    ensure!(
        (64..256).contains(&cfg_reads),
        "{cfg_reads} config read messages: not the block snapshot"
    );
    let faults = dmar_faults(l)?;
    ensure!(
        faults > before_faults,
        "the lender's IOMMU reported no fault for the unmapped DMA"
    );
    let p2p = r["bad_input"]["p2p_dma"].as_str().unwrap_or_default();
    println!("  read into a PCI BAR: {p2p}");
    ensure!(
        p2p.ends_with("BAR intact"),
        "peer-to-peer DMA was not refused: {p2p:?}"
    );
    ensure!(
        dmar_faults_at(l, P2P_IOVA)? > before_p2p_faults,
        "the lender's IOMMU reported no fault at the BAR's IOVA {P2P_IOVA:#x}"
    );
    ensure!(
        lending::file_sha256(&c.paths().nvme_file(LENDER, "nvme0"))? == before_sha,
        "the lender's backing file changed outside the driver's range"
    );
    wait_available(l, &nvme)?;
    Ok(())
}

/// Closing the device with DMA in flight (the driver killed mid-run): the
/// device goes back to the pool and works for the next user.
fn closed_with_dma_in_flight(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(&nvme)))?;
    let res = (|| {
        let pid = sh(
            b,
            &format!("setsid {drv} --mdev {uuid} --ios 10000000 --queue-depth 16 </dev/null >/tmp/drv.log 2>&1 & echo $!"),
        )?;
        let pid = pid.trim();
        lending::wait_until(
            "borrowed",
            WAIT,
            || lending::lent_state(l, &nvme.addr),
            "borrowed",
        )?;
        std::thread::sleep(Duration::from_secs(3));
        sh(
            b,
            &format!("kill -9 {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.1; done"),
        )?;
        wait_available(l, &nvme)?;
        let out = b.sh(
            &format!("{drv} --mdev {uuid} --ios 200"),
            Duration::from_secs(300),
        )?;
        ensure!(out.exit_code == Some(0), "the next user failed: {out:?}");
        Ok(())
    })();
    let removed = lending::remove_mdev(b, &uuid);
    res?;
    removed?;
    wait_available(l, &nvme)?;
    Ok(())
}

/// The modules are layered (fabric core, backend, lender, borrower): a
/// client unloads and loads again while the fabric and its peer stay up.
/// A borrower loaded after the lender came up is told of it and lists its
/// device again; a lender that unloads gives its device back in working
/// order (the lender host's nvme driver reads it), and the borrower drops
/// the device (the peer now answers that it lends nothing); lent again,
/// it is listed again.
fn clients_reload_under_a_live_peer(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = twohost::log_marks(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let (lender_id, borrower_id) = (fabric::host_id(l)?, fabric::host_id(b)?);
    let mdev_type_exists = |b| -> anyhow::Result<bool> {
        let t = lending::type_dir(b, MDEV_TYPE)?;
        Ok(sh(b, &format!("test -d {t} && echo yes || echo no"))?.trim() == "yes")
    };

    sh(b, "rmmod devlend_borrower").context("unloading the borrower")?;
    ensure!(
        !mdev_type_exists(b)?,
        "the mdev type is still there with the borrower unloaded"
    );
    ensure!(
        fabric::peer_state(l, borrower_id)?.as_deref() == Some("up"),
        "the lender lost the borrower host when only its borrower unloaded"
    );
    lending::ensure_module(b)?;
    remote_nvme_listed(c).context("after the borrower loaded again")?;
    println!("  borrower unloaded and loaded again: the remote NVMe is listed again");

    sh(l, "rmmod devlend_lender").context("unloading the lender")?;
    let driver = lending::driver_of(l, &nvme.addr)?;
    ensure!(
        driver.is_none() || driver.as_deref() == Some("nvme"),
        "the NVMe is bound to {driver:?} after the lender unloaded"
    );
    // Given back in working order: the lender host's own nvme driver
    // takes it and reads it.
    sh(
        l,
        &format!(
            "modprobe nvme; [ -e /sys/bus/pci/devices/{a}/driver ] || \
             echo {a} > /sys/bus/pci/drivers/nvme/bind",
            a = nvme.addr
        ),
    )?;
    // Its namespace, found under its own controller: the lender host has
    // another NVMe (the P2P check's), which its nvme driver may hold too.
    // With native multipath (Debian's kernel) the controller shows the
    // path, nvme<S>c<C>n1, whose disk is nvme<S>n1.
    let path = format!("/sys/bus/pci/devices/{}/nvme/nvme*/nvme*n1", nvme.addr);
    lending::wait_until(
        "the lender's nvme driver finding the namespace",
        WAIT,
        || {
            Ok(sh(l, &format!("ls -d {path} 2>/dev/null | wc -l"))?
                .trim()
                .to_owned())
        },
        "1",
    )?;
    sh(
        l,
        &format!(
            "b=$(basename $(ls -d {path}) | sed 's/c[0-9]*n/n/'); \
             dd if=/dev/$b of=/dev/null bs=4096 count=16 iflag=direct"
        ),
    )
    .context("reading the NVMe on the lender after the lender unloaded")?;
    remote_nvme_dropped(c, &nvme, "the remote NVMe dropped by the borrower")?;
    ensure!(
        fabric::peer_state(b, lender_id)?.as_deref() == Some("up"),
        "the borrower lost the lender host when only its lender unloaded"
    );
    lending::ensure_module(l)?;
    lending::lend(l, &nvme.addr)?;
    remote_nvme_listed(c).context("after the lender loaded again and lent")?;
    println!(
        "  lender unloaded (the NVMe read by the lender's nvme driver, dropped by the borrower), \
         loaded, lent again: listed again"
    );
    twohost::no_kernel_trouble(c, marks, None)
}

/// A short verified run of the userspace driver from the borrower, on an
/// mdev made for it and removed afterwards: the I/Os it verified (> 0).
fn verified_driver_run(c: &Cluster, nvme: &PciDev) -> anyhow::Result<u64> {
    let b = c.agent(BORROWER)?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&remote_name(nvme)))?;
    let n = verified_driver_run_on(c, &uuid);
    let removed = lending::remove_mdev(b, &uuid);
    let n = n?;
    removed?;
    Ok(n)
}

/// A short verified run of the userspace driver on the borrower's mdev
/// `uuid`: the I/Os it verified (> 0).
fn verified_driver_run_on(c: &Cluster, uuid: &str) -> anyhow::Result<u64> {
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let out = c.agent(BORROWER)?.sh(
        &format!("{drv} --mdev {uuid} --blocks 16 --ios 0 --json"),
        Duration::from_secs(300),
    );
    let r = lending::driver_report(&out?)?;
    let n = r["verified_ios"].as_u64().unwrap_or(0);
    ensure!(n > 0, "no verified I/O: {r}");
    Ok(n)
}

/// The Debian package of the tools (`vmm-glue/devlend/package/build-deb.sh`;
/// test.sh builds it and sets `DEVLEND_DEB`), installed with dpkg on both
/// hosts (each in a writable root) and used instead of the checkout: the
/// lender's boot unit, run as systemd would run its `ExecStart`, lends the
/// NVMe of `/etc/devlend/lend.conf` with the packaged `devlend`; the
/// borrower's packaged `devlend` makes the mdev the userspace driver
/// verifies I/O on. Manual pages and the enabled unit are where Debian
/// puts them, and `dpkg -r` takes it all out again.
fn debian_package_lends_and_serves(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let deb = std::env::var("DEVLEND_DEB").context(
        "DEVLEND_DEB is not set: test.sh builds the package (vmm-glue/devlend/package/build-deb.sh) and sets it",
    )?;
    ensure!(
        std::path::Path::new(&deb).is_file(),
        "DEVLEND_DEB={deb} is not a file"
    );
    let install = |a: &devlend_agent::AgentClient, host: &str| -> anyhow::Result<rwroot::RwRoot> {
        let rw = rwroot::RwRoot::mount(a)?;
        // dpkg reads its whole database over 9p under TCG: minutes, not
        // seconds. man-db's trigger would reindex every manual page too;
        // its switch off is the file Debian documents for that.
        let checked = rw.sh_timeout(
            a,
            &format!(
                "set -e
                 rm -f /var/lib/man-db/auto-update
                 dpkg -i {deb} >/dev/null
                 dpkg-query -W -f '${{Status}} ${{Version}}\n' devlend
                 test \"$(dpkg -S /usr/sbin/devlend)\" = 'devlend: /usr/sbin/devlend'
                 zcat /usr/share/man/man1/devlend-mdev-create.1.gz | grep -q '^.TH devlend-mdev-create 1'
                 test -L /etc/systemd/system/multi-user.target.wants/devlend-lend.service
                 /usr/sbin/devlend --version"
            ),
            Duration::from_secs(600),
        );
        match checked {
            Ok(out) => {
                println!("  {host}: {}", out.trim().replace('\n', "; "));
                Ok(rw)
            }
            Err(e) => {
                let _ = rw.take_down(a);
                Err(e)
            }
        }
    };
    // Both hosts at once: each install is minutes of dpkg over 9p, and
    // the two hosts are separate VMs.
    let (lrw, brw) = std::thread::scope(|scope| {
        let lender = scope.spawn(|| install(l, LENDER));
        let borrower = install(b, BORROWER);
        let lender = lender
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the lender's install panicked")));
        (lender, borrower)
    });
    let (lrw, brw) = match (lrw, brw) {
        (Ok(lrw), Ok(brw)) => (lrw, brw),
        (Ok(rw), Err(e)) => {
            let _ = rw.take_down(l);
            return Err(e.context("installing on the borrower"));
        }
        (Err(e), Ok(rw)) => {
            let _ = rw.take_down(b);
            return Err(e.context("installing on the lender"));
        }
        (Err(e), Err(e2)) => {
            return Err(e.context(format!(
                "installing on the lender (and on the borrower: {e2:#})"
            )))
        }
    };
    let res = (|| {
        // The boot unit's own command, resolved as systemd does
        // (/usr/local/sbin, then /usr/sbin: the package's).
        let unit = "/usr/lib/systemd/system/devlend-lend.service";
        lrw.sh(
            l,
            &format!(
                "set -e
                 devlend unlend {addr}
                 mkdir -p /etc/devlend
                 printf '%s\\n' '{addr}' >/etc/devlend/lend.conf
                 cmd=$(sed -n 's/^ExecStart=//p' {unit})
                 test \"$(command -v ${{cmd%% *}})\" = /usr/sbin/devlend
                 $cmd",
                addr = nvme.addr
            ),
        )?;
        ensure!(lending::lent_state(l, &nvme.addr)? == "available");
        println!(
            "  the package's devlend-lend.service command lent {} again",
            nvme.addr
        );
        remote_nvme_listed(c)?;
        let uuid = brw
            .sh(
                b,
                &format!(
                    "/usr/sbin/devlend mdev create --device {}",
                    remote_name(&nvme)
                ),
            )?
            .trim()
            .to_owned();
        let n = verified_driver_run_on(c, &uuid);
        let removed = brw.sh(b, &format!("/usr/sbin/devlend mdev remove {uuid}"));
        let n = n?;
        removed?;
        println!("  {n} verified I/Os on the mdev the package's devlend made");
        brw.sh_timeout(
            b,
            "set -e; dpkg -r devlend >/dev/null 2>&1
             ! test -e /usr/sbin/devlend
             ! test -e /etc/systemd/system/multi-user.target.wants/devlend-lend.service",
            Duration::from_secs(600),
        )?;
        println!("  dpkg -r devlend removed the command and the unit's link");
        Ok(())
    })();
    let down_b = brw.take_down(b);
    let down_l = lrw.take_down(l);
    res?;
    down_b?;
    down_l
}

/// The modules as DKMS built and installed them: test.sh runs `make -C
/// mdev-kmod dkms-install` for the hosts' kernel before the VM suites, and
/// the hosts boot with the outer machine's root as theirs, so that is their
/// module tree. Loaded by `modprobe` alone (dependencies from depmod), they
/// lend, list and serve the NVMe with verified I/O; afterwards the
/// checkout's modules are loaded again.
fn dkms_modules_lend_and_serve(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    let marks = twohost::log_marks(c)?;
    let res = (|| {
        for a in [b, l] {
            fabric::unload_modules(a)?;
        }
        for a in [l, b] {
            let path = sh(a, "modinfo -n devlend_fabric")?;
            ensure!(
                path.contains("/updates/dkms/"),
                "modprobe would load {}, not DKMS's build (did test.sh run `make -C mdev-kmod dkms-install`?)",
                path.trim()
            );
        }
        println!(
            "  modprobe finds DKMS's build: {}",
            sh(l, "modinfo -n devlend_fabric")?.trim()
        );
        sh(l, "modprobe devlend_ivshmem && modprobe devlend_lender")?;
        sh(b, "modprobe devlend_ivshmem && modprobe devlend_borrower")?;
        // What runs is DKMS's file: the same GNU build id.
        for a in [l, b] {
            let running = sh(
                a,
                "tail -c 20 /sys/module/devlend_fabric/notes/.note.gnu.build-id | \
                 od -An -tx1 | tr -d ' \\n'",
            )?;
            let installed = sh(
                a,
                "f=$(modinfo -n devlend_fabric); case $f in *.xz) xz -dc $f;; *) cat $f;; esac \
                 >/tmp/dkms-fabric.ko && readelf -n /tmp/dkms-fabric.ko | \
                 sed -n 's/.*Build ID: *//p'",
            )?;
            ensure!(
                !running.trim().is_empty() && running.trim() == installed.trim(),
                "loaded devlend_fabric (build id {running:?}) is not DKMS's ({installed:?})"
            );
        }
        lending::lend(l, &nvme.addr)?;
        remote_nvme_listed(c).context("with DKMS's modules")?;
        let n = verified_driver_run(c, &nvme).context("with DKMS's modules")?;
        println!("  {n} verified I/Os through DKMS's modules");
        wait_available(l, &nvme)
    })();
    // The checkout's modules again, whatever happened.
    for a in [b, l] {
        let _ = fabric::unload_modules(a);
    }
    lending::ensure_module(l)?;
    lending::ensure_module(b)?;
    let relend = lending::lend(l, &nvme.addr);
    res?;
    relend?;
    remote_nvme_listed(c).context("with the checkout's modules again")?;
    twohost::no_kernel_trouble(c, marks, None)
}

/// Lending that survives a reboot, and lending to some hosts only. The
/// lender's configuration (`devlend apply`'s file, kept where the reboot
/// does not lose it) names the NVMe `to=` the borrower; the lender host
/// reboots; what its boot does (the modules, then `devlend apply`, as
/// devlend-lend.service runs it) lends it again and the borrower finds it
/// and reads it. Lent to another host only, it is gone from the borrower
/// (listing and `available_instances`); lent to all again, it is back.
fn lending_survives_lender_reboot(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let bid = fabric::host_id(c.agent(BORROWER)?)?;
    // On the share (the outer machine's disk, kept over the reboot),
    // written by the lender itself: its 9p mount caches what it read.
    // The host mounts the share at the outer machine's path of it.
    let conf = c.paths().share.join("lend.conf").display().to_string();
    let write_conf = |c: &Cluster, text: &str| -> anyhow::Result<()> {
        sh(c.agent(LENDER)?, &format!("printf '{text}' > {conf}")).map(drop)
    };
    let apply = |c: &Cluster| -> anyhow::Result<String> {
        sh(c.agent(LENDER)?, &format!("{cli} apply --config {conf}"))
    };
    write_conf(c, &format!("# lent at boot\\n{} to={bid}\\n", nvme.addr))?;

    c.restart_host(LENDER)?;
    let (l, b) = (c.agent(LENDER)?, c.agent(BORROWER)?);
    lending::ensure_module(l)?;
    let lid = fabric::host_id(l)?;
    fabric::wait_peer_state(b, lid, "up", WAIT).context("the borrower's view of the lender")?;
    let out = apply(c)?;
    println!("  after the reboot: {}", out.trim());
    ensure!(
        lending::lent_state(l, &nvme.addr)? == "available",
        "the NVMe is not lent after `devlend apply`"
    );
    let to = sh(
        l,
        &format!(
            "cat /sys/bus/pci/devices/{}/devlend/allowed_hosts",
            nvme.addr
        ),
    )?;
    ensure!(
        to.trim() == bid.to_string(),
        "lent to {to:?}, not to host {bid}"
    );
    remote_nvme_listed(c).context("after the lender rebooted")?;
    let n = verified_driver_run(c, &nvme).context("after the lender rebooted")?;
    println!("  {n} verified I/Os from the borrower after the lender's reboot");
    wait_available(l, &nvme)?;

    // Lent to another host only: the borrower no longer sees it.
    let other = (0..8)
        .find(|h| *h != bid && *h != lid)
        .expect("a free host id");
    write_conf(c, &format!("{} to={other}\\n", nvme.addr))?;
    apply(c)?;
    remote_nvme_dropped(c, &nvme, "the NVMe gone from the borrower")?;
    let avail = lending::available_instances(b, MDEV_TYPE)?;
    ensure!(
        avail == 0,
        "{avail} {MDEV_TYPE} instances for a device not lent to us"
    );
    println!("  lent to host {other} only: the borrower lists nothing, 0 instances");
    sh(l, &format!("{cli} lend {} --to all", nvme.addr))?;
    remote_nvme_listed(c).context("lent to all hosts again")?;
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
            name: "lend_nvme",
            run: lend_nvme,
        },
        Check {
            name: "borrower_lists_remote_nvme",
            run: borrower_lists_remote_nvme,
        },
        Check {
            name: "guest_io_lands_in_lender_file",
            run: guest_io_lands_in_lender_file,
        },
        Check {
            name: "device_back_in_pool",
            run: device_back_in_pool,
        },
        Check {
            name: "guest_irqs_direct_through_fabric",
            run: guest_irqs_direct_through_fabric,
        },
        Check {
            name: "direct_bar_through_window",
            run: direct_bar_through_window,
        },
        Check {
            name: "p2p_nvme_reads_into_another_nvmes_pmr",
            run: p2p_nvme_reads_into_another_nvmes_pmr,
        },
        Check {
            name: "group_display_and_audio_lent_as_one_device",
            run: group_display_and_audio_lent_as_one_device,
        },
        Check {
            name: "p2p_nvme_cmb_holds_a_guests_submission_queues",
            run: p2p_nvme_cmb_holds_a_guests_submission_queues,
        },
        Check {
            name: "held_device_refused",
            run: held_device_refused,
        },
        Check {
            name: "mdev_remove_refused_while_a_vmm_has_it_open",
            run: mdev_remove_refused_while_a_vmm_has_it_open,
        },
        Check {
            name: "hotplug_over_qmp",
            run: hotplug_over_qmp,
        },
        Check {
            name: "mdevctl_types_start_define_list",
            run: mdevctl_types_start_define_list,
        },
        Check {
            name: "cli_end_to_end",
            run: cli_end_to_end,
        },
        Check {
            name: "libvirt_domain_borrows_and_hotplugs",
            run: libvirt_domain_borrows_and_hotplugs,
        },
        Check {
            name: "clients_reload_under_a_live_peer",
            run: clients_reload_under_a_live_peer,
        },
        Check {
            name: "stats_during_driver_io",
            run: stats_during_driver_io,
        },
        Check {
            name: "dkms_modules_lend_and_serve",
            run: dkms_modules_lend_and_serve,
        },
        Check {
            name: "debian_package_lends_and_serves",
            run: debian_package_lends_and_serves,
        },
        Check {
            name: "userspace_driver_io_and_bad_input",
            run: userspace_driver_io_and_bad_input,
        },
        Check {
            name: "closed_with_dma_in_flight",
            run: closed_with_dma_in_flight,
        },
        Check {
            name: "lending_survives_lender_reboot",
            run: lending_survives_lender_reboot,
        },
    ];
    Suite::new("lending", checks).reset(devlend_vmtests::fixture::reset_hosts)
}
