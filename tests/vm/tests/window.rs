//! NTB windows as real hardware has them (docs/ntb.md), on
//! `window.toml`: two hosts whose RAM lies half above 4 GiB, each behind
//! an emulated IOMMU, with NTB windows of 256 MiB (smaller than either
//! host's RAM). devlend's NTB backend owns an IOMMU domain of each
//! adapter and places in each peer's window only what it hands out (the
//! inbox, the ident page, the pages a borrower maps for a lent device);
//! the emulated ports translate the peers' stores through those domains.
//! Every check reads back bytes and counters. `./test.sh window` selects
//! them (names contain "window").

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::lending::{self, wait_until};
use devlend_vmtests::ntb;
use devlend_vmtests::twohost;
use devlend_vmtests::{Check, Suite};

const A: &str = "lender";
const B: &str = "borrower";
const WAIT: Duration = Duration::from_secs(60);
/// The topology's window size.
const WINDOW: u64 = 256 << 20;
/// The KVM guest's RAM: all of it is mapped through the window for its
/// device, so it must fit 256 MiB with room for the inbox and ident page.
const GUEST_MIB: u32 = 160;
/// What the guest writes and reads back, in MiB (in its tmpfs first).
const GUEST_IO_MIB: u64 = 16;

fn boot() -> anyhow::Result<Cluster> {
    devlend_vmtests::boot_topology("window")
}

/// Bytes of System RAM from 4 GiB up, from the host's /proc/iomem.
fn ram_above_4g(x: &AgentClient) -> anyhow::Result<u64> {
    let text = sh(x, "cat /proc/iomem")?;
    let mut high = 0;
    for line in text.lines().filter(|l| !l.starts_with(' ')) {
        let Some((range, what)) = line.split_once(" : ") else {
            continue;
        };
        if what.trim() != "System RAM" {
            continue;
        }
        let (s, e) = range
            .split_once('-')
            .with_context(|| format!("iomem line {line:?}"))?;
        let (s, e) = (u64::from_str_radix(s, 16)?, u64::from_str_radix(e, 16)?);
        if e >= 1 << 32 {
            high += e + 1 - s.max(1 << 32);
        }
    }
    Ok(high)
}

/// The NTB fabric's debugfs `status` (the second fabric's directory).
fn ntb_status(x: &AgentClient) -> anyhow::Result<HashMap<String, String>> {
    let text = sh(x, "cat /sys/kernel/debug/devlend/fabric-*/status")?;
    let mut kv = HashMap::new();
    for line in text.lines() {
        kv.extend(fabric::parse_kv(line));
    }
    Ok(kv)
}

/// From the NTB fabric's status: pages of peer `peer`'s window handed out
/// (beyond the inbox and ident page), and the window's pages.
fn window_use(x: &AgentClient, peer: u32) -> anyhow::Result<(u64, u64)> {
    let text = sh(x, "cat /sys/kernel/debug/devlend/fabric-*/status")?;
    let key = format!("inbound_host{peer}_pages");
    let line = text
        .lines()
        .find(|l| l.starts_with(&key))
        .with_context(|| format!("no {key} in:\n{text}"))?;
    let kv = fabric::parse_kv(line);
    let used = fabric::counter(&kv, "used")? - fabric::counter(&kv, "reserved")?;
    Ok((used, fabric::counter(&kv, &key)?))
}

/// The emulated ports (their adapters in translating domains) and
/// devlend's NTB backend on both hosts, its fabric up; the NTB devices.
fn ntb_fabric_up(c: &Cluster) -> anyhow::Result<(String, String)> {
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    let params = c.topology().ntb.module_params();
    ntb::load_emulated_port_translating(a, &params).context(A)?;
    ntb::load_emulated_port_translating(b, &params).context(B)?;
    let (ia, ib) = (fabric::host_id(a)?, fabric::host_id(b)?);
    fabric::wait_peer_state(a, ib, "up", WAIT)?;
    fabric::wait_peer_state(b, ia, "up", WAIT)?;
    let (da, db) = (ntb::ntb_device(a)?, ntb::ntb_device(b)?);
    for x in [a, b] {
        let ko = devlend_cluster::host_view(&fabric::module_dir().join("devlend_ntb.ko"));
        sh(
            x,
            &format!(
                "grep -q '^devlend_ntb ' /proc/modules || insmod {}",
                ko.display()
            ),
        )
        .context("loading devlend_ntb")?;
    }
    for (x, dev, peer) in [(a, &da, ib), (b, &db, ia)] {
        ntb::wait_ntb_fabric_peer_up(x, dev, peer, WAIT)?;
    }
    sh(
        b,
        "echo 0 > /sys/module/devlend_borrower/parameters/window_max_pages",
    )
    .or_else(|_| {
        lending::ensure_module(b)?;
        sh(
            b,
            "echo 0 > /sys/module/devlend_borrower/parameters/window_max_pages",
        )
    })?;
    Ok((da, db))
}

/// Both hosts have RAM above 4 GiB; their ports translate through their
/// adapters' IOMMU domains, which devlend's NTB backend owns: each peer's
/// window is 256 MiB, smaller than the host's RAM, and shows only the
/// inbox and the ident page (the ports asked each other where they land).
fn window_ports_translate_high_ram(c: &mut Cluster) -> anyhow::Result<()> {
    let (_da, _db) = ntb_fabric_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    let (ia, ib) = (fabric::host_id(a)?, fabric::host_id(b)?);
    for (host, x, peer) in [(A, a, ib), (B, b, ia)] {
        let high = ram_above_4g(x)?;
        ensure!(
            high >= 256 << 20,
            "{host}: only {high} bytes of RAM above 4 GiB"
        );
        let log = sh(
            x,
            "dmesg | grep -c 'window 1 through an IOMMU domain of its own' || true",
        )?;
        ensure!(
            log.trim() != "0",
            "{host}: the NTB backend did not take a domain of its own:\n{}",
            sh(x, "dmesg | grep -i 'devlend.*ntb\\|NTB backend' | tail -5")?
        );
        let st = ntb_status(x)?;
        ensure!(
            st.get("inbound").map(String::as_str) == Some("window")
                && fabric::counter(&st, "inbound_size")? == WINDOW,
            "{host}: not a 256 MiB window: {st:?}"
        );
        let (used, pages) = window_use(x, peer)?;
        ensure!(
            pages == WINDOW >> 12 && used == 0,
            "{host}: window of {pages} pages, {used} handed out beyond the inbox"
        );
        let port = ntb::port_state(x)?;
        ensure!(
            port.get("translating").map(String::as_str) == Some("1")
                && fabric::counter(&port, "xlate_rx")? > 0
                && fabric::counter(&port, "xlate_tx")? > 0,
            "{host}: the port did not translate through its IOMMU: {port:?}"
        );
        ensure!(
            port.get("rej").map(String::as_str) == Some("0"),
            "{host}'s port refused messages: {port:?}"
        );
        let peers = ntb::port_peers(x)?;
        let kv = peers
            .get(&peer)
            .with_context(|| format!("no peer {peer}: {peers:?}"))?;
        ensure!(
            kv["in"].split(',').nth(1) == Some(&WINDOW.to_string()),
            "{host}: window 1 for the peer is not 256 MiB: {kv:?}"
        );
        println!(
            "  {host}: {} MiB of RAM above 4 GiB, a 256 MiB window per peer, {} translations answered",
            high >> 20,
            port["xlate_rx"]
        );
    }
    Ok(())
}

/// The NTB fabric's `status` and the borrower port's translations
/// answered (`xlate_rx`), before I/O through the window.
fn window_before(b: &AgentClient) -> anyhow::Result<(HashMap<String, String>, u64)> {
    Ok((
        ntb_status(b)?,
        fabric::counter(&ntb::port_state(b)?, "xlate_rx")?,
    ))
}

/// What I/O through the borrower's window left, against
/// [`window_before`]: pages above 4 GiB mapped, none refused, the lender
/// asked the borrower's port where they land; then the NVMe available
/// again and the window's space all given back. The bytes above 4 GiB
/// mapped, and the translations answered.
fn window_used_and_given_back(
    c: &Cluster,
    nvme: &lending::PciDev,
    before: &HashMap<String, String>,
    before_x: u64,
) -> anyhow::Result<(u64, u64)> {
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    let ia = fabric::host_id(a)?;
    let after = ntb_status(b)?;
    let high = fabric::counter(&after, "inbound_high_bytes")?
        - fabric::counter(before, "inbound_high_bytes")?;
    ensure!(
        high > 0,
        "no page above 4 GiB was mapped through the window: {after:?}"
    );
    ensure!(
        fabric::counter(&after, "inbound_refused")? == fabric::counter(before, "inbound_refused")?,
        "window maps refused: {after:?}"
    );
    let xlates = fabric::counter(&ntb::port_state(b)?, "xlate_rx")? - before_x;
    ensure!(
        xlates > 0,
        "the lender never asked where the borrower's window lands"
    );
    wait_until(
        "the NVMe available again",
        WAIT,
        || lending::lent_state(a, &nvme.addr),
        "available",
    )?;
    wait_until(
        "the borrower's window space given back",
        WAIT,
        || Ok(window_use(b, ia)?.0.to_string()),
        "0",
    )?;
    Ok((high, xlates))
}

/// The borrower's userspace driver does verified I/O on the lender's NVMe
/// over the NTB fabric: its buffers (pages of a host with RAM above 4
/// GiB) are mapped into the lender's 256 MiB window onto the borrower,
/// the lender's IOMMU maps them through it where the borrower's port says
/// they land, and the bytes reach the lender's backing file. Afterwards
/// the window space is given back.
fn window_lending_high_ram(c: &mut Cluster) -> anyhow::Result<()> {
    let (_da, db) = ntb_fabric_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    lending::ensure_module(b)?;
    let nvme = lending::find_by_class(a, lending::NVME_CLASS)?;
    lending::ensure_lent(a, &nvme.addr)?;
    ntb::wait_listed_on_ntb_fabric(b, &db, &nvme.addr, WAIT)?;
    let img = c.paths().nvme_file(A, "nvme0");
    let before_file = ntb::backing_range_sha256(&img, 16384, 64)?;
    let (before, before_x) = window_before(b)?;
    let r = ntb::nvme_writes_over_ntb_fabric(b, &db, "--lba 16384 --range-blocks 64 --ios 300")?;
    let verified = r["verified_ios"].as_u64().unwrap_or(0);
    ensure!(
        ntb::backing_range_sha256(&img, 16384, 64)? != before_file,
        "the written range of the lender's backing file is unchanged: {r}"
    );
    let (high, xlates) = window_used_and_given_back(c, &nvme, &before, before_x)?;
    for host in [A, B] {
        let port = ntb::port_state(c.agent(host)?)?;
        ensure!(
            port.get("rej").map(String::as_str) == Some("0"),
            "{host}'s port refused messages: {port:?}"
        );
    }
    println!(
        "  {verified} verified I/Os through a 256 MiB window, {} KiB from above 4 GiB mapped, {xlates} translations by the borrower's port; the lender's drive written, the window empty again",
        high >> 10
    );
    Ok(())
}

/// An unmodified guest's nvme driver, in a KVM guest on the borrower
/// (RAM above 4 GiB), uses the lender's NVMe over the NTB fabric: its
/// whole RAM is mapped into the 256 MiB window onto the borrower, the
/// lender's IOMMU maps it where the borrower's port says it lands, and
/// the guest's bytes reach the lender's backing file. Afterwards the
/// window space is given back.
fn window_guest_high_ram(c: &mut Cluster) -> anyhow::Result<()> {
    let (_da, db) = ntb_fabric_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    lending::ensure_module(b)?;
    sh(b, "modprobe kvm_amd").context("KVM for the borrower's guest")?;
    let nvme = lending::find_by_class(a, lending::NVME_CLASS)?;
    lending::ensure_lent(a, &nvme.addr)?;
    ntb::wait_listed_on_ntb_fabric(b, &db, &nvme.addr, WAIT)?;
    let (before, before_x) = window_before(b)?;
    let types = format!("/sys/class/devlend/ntb-{db}/mdev_supported_types/devlend-nvme");
    let uuid = sh(b, "cat /proc/sys/kernel/random/uuid")?.trim().to_owned();
    sh(b, &format!("echo {uuid} > {types}/create"))?;
    let run = lending::nvme_guest_on_mdev(
        b,
        &uuid,
        &lending::write_and_read("/dev/nvme0n1", GUEST_IO_MIB),
        GUEST_MIB,
    )?;
    lending::guest_wrote_to_backing(&run, &nvme, &c.paths().nvme_file(A, "nvme0"), GUEST_IO_MIB)?;
    let (high, xlates) = window_used_and_given_back(c, &nvme, &before, before_x)?;
    println!(
        "  a {GUEST_MIB} MiB guest wrote and read {GUEST_IO_MIB} MiB in {:.1} s through a 256 MiB window ({} MiB from above 4 GiB mapped, {xlates} translations); the lender's file holds its bytes, the window empty again",
        run.elapsed.as_secs_f64(),
        high >> 20
    );
    Ok(())
}

/// A device that wants more window space than its budget is refused:
/// with `window_max_pages` at 8, the userspace driver's bus master enable
/// fails with ENOSPC (nothing is mapped), the refusal is counted and
/// logged; with the budget back, the same I/O goes through.
fn window_budget_refused(c: &mut Cluster) -> anyhow::Result<()> {
    let (_da, db) = ntb_fabric_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    let ia = fabric::host_id(a)?;
    lending::ensure_module(b)?;
    let nvme = lending::find_by_class(a, lending::NVME_CLASS)?;
    lending::ensure_lent(a, &nvme.addr)?;
    ntb::wait_listed_on_ntb_fabric(b, &db, &nvme.addr, WAIT)?;
    let refused = |x: &AgentClient| -> anyhow::Result<u64> {
        let text = sh(x, "cat /sys/kernel/debug/devlend/borrower")?;
        text.lines()
            .filter(|l| l.starts_with("borrower "))
            .map(|l| fabric::counter(&fabric::parse_kv(l), "window_refused"))
            .sum()
    };
    let before = refused(b)?;
    let mark = devlend_vmtests::ownership::kernel_log_lines(b)?;
    sh(
        b,
        "echo 8 > /sys/module/devlend_borrower/parameters/window_max_pages",
    )?;
    let r = ntb::nvme_writes_over_ntb_fabric(b, &db, "--lba 16384 --range-blocks 64 --ios 50");
    sh(
        b,
        "echo 0 > /sys/module/devlend_borrower/parameters/window_max_pages",
    )?;
    let err = match r {
        Ok(r) => anyhow::bail!("I/O went through a budget of 8 pages: {r}"),
        Err(e) => format!("{e:#}"),
    };
    let got = refused(b)? - before;
    ensure!(got > 0, "no refusal counted; the driver said: {err}");
    // Its bus master enable failed with ENOSPC: the VMM's error.
    ensure!(
        err.contains("No space left on device") || err.contains("os error 28"),
        "the driver was not told ENOSPC: {err}"
    );
    let log = sh(
        b,
        &format!(
            "dmesg | tail -n +{} | grep -c 'no window space left for this device' || true",
            mark + 1
        ),
    )?;
    ensure!(log.trim() != "0", "the refusal is not in the kernel log");
    wait_until(
        "the NVMe available again",
        WAIT,
        || lending::lent_state(a, &nvme.addr),
        "available",
    )?;
    ensure!(
        window_use(b, ia)?.0 == 0,
        "window space left handed out after the refusal"
    );
    let first = err.lines().next().unwrap_or("").to_owned();
    let r = ntb::nvme_writes_over_ntb_fabric(b, &db, "--lba 16384 --range-blocks 64 --ios 50")?;
    println!(
        "  budget of 8 pages: refused ({got} counted; the driver: {first}); budget back: {} verified I/Os",
        r["verified_ios"]
    );
    Ok(())
}

/// Everything unloads and neither host logged a WARN, oops or lockup.
fn window_unload_clean(c: &mut Cluster) -> anyhow::Result<()> {
    ntb_fabric_up(c)?;
    for host in [A, B] {
        let x = c.agent(host)?;
        sh(x, "rmmod devlend_ntb; rmmod devlend_ntb_emu ntb")
            .with_context(|| format!("unloading on the {host}"))?;
        fabric::unload_modules(x).with_context(|| format!("devlend's modules on the {host}"))?;
    }
    // Since each host booted.
    twohost::no_kernel_trouble(c, [0, 0], None)
}

fn main() {
    let checks = vec![
        Check {
            name: "window_ports_translate_high_ram",
            run: window_ports_translate_high_ram,
        },
        Check {
            name: "window_lending_high_ram",
            run: window_lending_high_ram,
        },
        Check {
            name: "window_guest_high_ram",
            run: window_guest_high_ram,
        },
        Check {
            name: "window_budget_refused",
            run: window_budget_refused,
        },
        Check {
            name: "window_unload_clean",
            run: window_unload_clean,
        },
    ];
    Suite::new("window", checks)
        .reset(devlend_vmtests::fixture::reset_hosts)
        .run(boot)
}
