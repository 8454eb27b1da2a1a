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

use anyhow::{bail, ensure, Context};
use devlend::qmp::Qmp;
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::lending::{self, PciDev};
use devlend_vmtests::ownership::{self, spawn_bg, wait_bg};
use devlend_vmtests::twohost::{
    self, boot, host_bin, lender_counter, lent_nvme, log_marks, verified_io, BORROWER, LENDER,
    MDEV_TYPE, WAIT,
};
use devlend_vmtests::{Check, Suite};

/// Operations of the default run: about a minute under TCG. The seed is
/// new on every run, so CI's runs add up; the long run is 50000.
const DEFAULT_ITERS: u64 = 4000;
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
/// The lent device as the hardware (QEMU) has it, not as any kernel or
/// the borrower shows it: its whole config space (read on the lender) and
/// its MSI-X table (read through the lender's QEMU monitor).
struct DeviceState {
    config: Vec<u8>,
    msix: Vec<[u32; 4]>,
}

fn device_state(c: &Cluster, dev: &PciDev) -> anyhow::Result<DeviceState> {
    let l = c.agent(LENDER)?;
    let hex = sh(
        l,
        &format!("od -An -v -tx1 /sys/bus/pci/devices/{}/config", dev.addr),
    )?;
    let config: Vec<u8> = hex
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("config space of {}", dev.addr))?;
    ensure!(
        config.len() >= 256,
        "{} bytes of config space",
        config.len()
    );
    let (table, entries, _) = msix_table(l, dev)?;
    Ok(DeviceState {
        config,
        msix: msix_entries(c, table, entries)?,
    })
}

/// Config-space bytes that change by themselves (error and status bits
/// the device sets): the status register, PCIe device status, AER's
/// uncorrectable and correctable status. Everything else must come back.
fn volatile_config(cfg: &[u8]) -> Vec<std::ops::Range<usize>> {
    // The status register.
    let mut v = Vec::new();
    v.push(0x06..0x08);
    let (mut pos, mut ttl) = (usize::from(cfg[0x34] & !3), 48);
    while pos >= 0x40 && pos + 2 <= cfg.len() && ttl > 0 {
        if cfg[pos] == 0x10 {
            v.push(pos + 0x0a..pos + 0x0c);
        }
        pos = usize::from(cfg[pos + 1] & !3);
        ttl -= 1;
    }
    let (mut pos, mut ttl) = (0x100, 480);
    while pos >= 0x100 && pos + 4 <= cfg.len() && ttl > 0 {
        let hdr = u32::from_le_bytes([cfg[pos], cfg[pos + 1], cfg[pos + 2], cfg[pos + 3]]);
        if hdr & 0xffff == 1 {
            v.push(pos + 0x04..pos + 0x08);
            v.push(pos + 0x10..pos + 0x14);
        }
        pos = (hdr >> 20) as usize & !3;
        ttl -= 1;
    }
    v
}

/// The device's config space and MSI-X table after a guest's fuzzing and
/// the take-back are what they were before it, but for bits that change
/// by themselves: a guest must leave nothing behind in the hardware.
fn same_device_state(before: &DeviceState, after: &DeviceState) -> anyhow::Result<()> {
    ensure!(
        before.config.len() == after.config.len(),
        "config space of {} bytes, then {}",
        before.config.len(),
        after.config.len()
    );
    let volatile = volatile_config(&before.config);
    let changed: Vec<String> = (0..before.config.len())
        .filter(|&i| before.config[i] != after.config[i])
        .filter(|&i| !volatile.iter().any(|r| r.contains(&i)))
        .map(|i| {
            format!(
                "{i:#05x}: {:#04x} -> {:#04x}",
                before.config[i], after.config[i]
            )
        })
        .collect();
    ensure!(
        changed.is_empty(),
        "the device's config space changed under the guest's fuzzing: {}",
        changed.join(", ")
    );
    let moved: Vec<String> = before
        .msix
        .iter()
        .zip(&after.msix)
        .enumerate()
        .filter(|(_, (b, a))| b != a)
        .map(|(i, (b, a))| format!("entry {i}: {b:08x?} -> {a:08x?}"))
        .collect();
    ensure!(
        moved.is_empty(),
        "the device's MSI-X table changed under the guest's fuzzing: {}",
        moved.join("; ")
    );
    ensure!(
        after.msix.iter().all(|e| e[3] & 1 == 1),
        "a vector is left unmasked in the device's MSI-X table: {:08x?}",
        after.msix
    );
    Ok(())
}

fn fuzz_guest_vfio_ops_on_mdev(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    nothing_held(c, &nvme).context("before the fuzzing")?;
    let before = device_state(c, &nvme)?;
    println!(
        "  the device's own state: {} bytes of config space, {} MSI-X entries",
        before.config.len(),
        before.msix.len()
    );
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
    same_device_state(&before, &device_state(c, &nvme)?)?;
    println!("  config space and MSI-X table as before the fuzzing");
    verified_io(c, &nvme)?;
    nothing_held(c, &nvme).context("after the verified I/O")?;
    twohost::no_kernel_trouble(c, marks, None)
}

/// The file whose creation lets the driver of the decode check go on to
/// its I/O (on the borrower).
const DECODE_GO: &str = "/tmp/decode-go";
/// The driver's log there.
const DECODE_LOG: &str = "/tmp/decode-driver.log";

/// Where the MSI-X table of `dev` is on the lender, as its kernel set the
/// device up: the table's physical address and its entries; and whether
/// memory decode is on now. From config space and the BARs in sysfs.
fn msix_table(l: &AgentClient, dev: &PciDev) -> anyhow::Result<(u64, usize, bool)> {
    let sys = format!("/sys/bus/pci/devices/{}", dev.addr);
    let hex = sh(l, &format!("od -An -v -tx1 -N 256 {sys}/config"))?;
    let cfg: Vec<u8> = hex
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("config space of {}: {hex}", dev.addr))?;
    ensure!(cfg.len() == 256, "{} bytes of config space", cfg.len());
    let le16 = |o: usize| u16::from_le_bytes([cfg[o], cfg[o + 1]]);
    let le32 = |o: usize| u32::from_le_bytes([cfg[o], cfg[o + 1], cfg[o + 2], cfg[o + 3]]);
    let decode = le16(4) & 0x2 != 0;
    let (mut pos, mut ttl) = (usize::from(cfg[0x34] & !3), 48);
    while pos >= 0x40 && ttl > 0 && cfg[pos] != 0x11 {
        pos = usize::from(cfg[pos + 1] & !3);
        ttl -= 1;
    }
    ensure!(
        pos >= 0x40 && ttl > 0,
        "{} has no MSI-X capability",
        dev.addr
    );
    let entries = usize::from(le16(pos + 2) & 0x7ff) + 1;
    let table = le32(pos + 4);
    let bir = (table & 7) as usize;
    let res = sh(l, &format!("cat {sys}/resource"))?;
    let start = res
        .lines()
        .nth(bir)
        .and_then(|line| line.split_whitespace().next())
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .with_context(|| format!("BAR {bir} of {} in {res:?}", dev.addr))?;
    Ok((start + u64::from(table & !7), entries, decode))
}

/// The first `n` entries of the device's MSI-X table as the lender's QEMU
/// models it (its monitor's `xp`, a read of the table itself, not through
/// the lender's kernel): address low, address high, data and vector
/// control of each.
fn msix_entries(c: &Cluster, addr: u64, n: usize) -> anyhow::Result<Vec<[u32; 4]>> {
    let mut q = Qmp::connect(&c.paths().qmp_sock(LENDER), Duration::from_secs(10))?;
    let out = q.execute(
        "human-monitor-command",
        Some(serde_json::json!({ "command-line": format!("xp /{}wx {addr:#x}", 4 * n) })),
        Duration::from_secs(10),
    )?;
    let text = out.as_str().unwrap_or_default();
    let words: Vec<u32> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .flat_map(|(_, w)| w.split_whitespace())
        .map(|w| u32::from_str_radix(w.trim_start_matches("0x"), 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("xp said {text:?}"))?;
    ensure!(words.len() == 4 * n, "xp said {text:?}");
    Ok(words.chunks(4).map(|e| [e[0], e[1], e[2], e[3]]).collect())
}

/// A guest that enables MSI-X with memory decode off (issue 26): the
/// MSI-X table lies in a BAR, and the lender programs it (vectors
/// allocated, requested and unmasked) when the holder asks for vectors.
/// The userspace driver clears Memory Space Enable, enables two MSI-X
/// vectors, sets decode again and waits. Asserted, while it waits: the
/// lender holds two MSI-X vectors, and in the device's own table (read
/// through the lender's QEMU monitor) each has an MSI address
/// (0xfeexxxxx) and is unmasked: the lender turned decode on for its
/// writes. Then the driver does verified I/O, every completion taken after
/// its interrupt came. Afterwards nothing is held, the device works for the
/// next user, neither kernel complained.
///
/// Before the fix the lender programmed the table with decode off: QEMU
/// drops those writes, the entries stayed zero and masked, and the driver
/// saw its completions without interrupts.
fn fuzz_guest_msix_enabled_with_decode_off(c: &mut Cluster) -> anyhow::Result<()> {
    let nvme = lent_nvme(c)?;
    let marks = log_marks(c)?;
    nothing_held(c, &nvme).context("before the check")?;
    let l = c.agent(LENDER)?;
    let fires = lender_counter(l, &nvme, "irq_fires")?;

    let b = c.agent(BORROWER)?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let uuid = lending::create_mdev(b, MDEV_TYPE, Some(&format!("{LENDER}/{}", nvme.addr)))?;
    sh(b, &format!("rm -f {DECODE_GO}"))?;
    let res = (|| -> anyhow::Result<()> {
        spawn_bg(
            b,
            &format!(
                "{drv} --mdev {uuid} --msix-decode-off --wait-before-io {DECODE_GO} \
                 --blocks 16 --ios 50 --timeout 20"
            ),
            DECODE_LOG,
        )?;
        lending::wait_until(
            "the driver set up with MSI-X enabled while decode was off",
            Duration::from_secs(300),
            || {
                if let Ok(rc) = sh(b, &format!("cat {DECODE_LOG}.rc")) {
                    bail!(
                        "the driver ended (exit {}): {}",
                        rc.trim(),
                        sh(b, &format!("cat {DECODE_LOG}"))?
                    );
                }
                Ok(sh(
                    b,
                    &format!("grep -c 'waiting before I/O' {DECODE_LOG} || true"),
                )?
                .trim()
                .to_owned())
            },
            "1",
        )?;
        let l = c.agent(LENDER)?;
        let dev = twohost::lender_device(l, &nvme)?;
        let vectors: usize = fabric::counter(&dev, "irq_vectors")? as usize;
        let (table, entries, decode) = msix_table(l, &nvme)?;
        println!(
            "  lender: {vectors} vectors ({}), MSI-X table at {table:#x} ({entries} entries), \
             memory decode {}",
            dev.get("irq_type").map_or("?", String::as_str),
            if decode { "on" } else { "off" }
        );
        ensure!(
            vectors == 2 && dev.get("irq_type").map(String::as_str) == Some("msix"),
            "the lender holds {vectors} vectors of type {:?}, not 2 MSI-X",
            dev.get("irq_type")
        );
        ensure!(
            decode,
            "memory decode is off: the holder's driver did not set it again"
        );
        let mut errors = Vec::new();
        for (i, [lo, hi, data, ctrl]) in msix_entries(c, table, vectors)?.into_iter().enumerate() {
            println!("  entry {i}: address {hi:#x}:{lo:#010x} data {data:#x} control {ctrl:#x}");
            if lo & 0xfff0_0000 != 0xfee0_0000 || hi != 0 {
                errors.push(format!(
                    "MSI-X entry {i} has address {hi:#x}:{lo:#010x}, not the lender's MSI address: \
                     its programming was lost (written with memory decode off)"
                ));
            }
            if ctrl & 1 != 0 {
                errors.push(format!(
                    "MSI-X entry {i} is still masked (control {ctrl:#x})"
                ));
            }
        }
        sh(b, &format!("touch {DECODE_GO}"))?;
        let (rc, out) = wait_bg(b, DECODE_LOG, Duration::from_secs(300))?;
        if !(rc == 0 && out.contains(" 0 mismatches") && out.contains("PASS")) {
            errors.push(format!("the driver did not pass (exit {rc}):\n{out}"));
        }
        ensure!(errors.is_empty(), "{}", errors.join("\n"));
        Ok(())
    })();
    let _ = sh(b, &format!("touch {DECODE_GO}"));
    if res.is_err() {
        let _ = wait_bg(b, DECODE_LOG, Duration::from_secs(120));
    }
    let removed = lending::remove_mdev(b, &uuid);
    res?;
    removed?;
    let l = c.agent(LENDER)?;
    let relayed = lender_counter(l, &nvme, "irq_fires")? - fires;
    println!("  interrupts relayed: {relayed}");
    ensure!(relayed > 0, "the lender relayed no interrupt");
    twohost::no_kernel_trouble(c, marks, None)?;
    nothing_held(c, &nvme).context("after the check")?;
    verified_io(c, &nvme)?;
    twohost::no_kernel_trouble(c, marks, None)
}

fn main() {
    suite().run(boot)
}

/// The checks of this suite, with its reset; `twohost` runs them on the
/// cluster it shares with the other two-host suites.
pub fn suite() -> Suite {
    let checks = vec![
        Check {
            name: "fuzz_guest_vfio_ops_on_mdev",
            run: fuzz_guest_vfio_ops_on_mdev,
        },
        Check {
            name: "fuzz_guest_msix_enabled_with_decode_off",
            run: fuzz_guest_msix_enabled_with_decode_off,
        },
    ];
    Suite::new("fuzz_guest", checks).reset(devlend_vmtests::fixture::reset_hosts)
}
