//! Live migration between two borrowers (`migrate.toml`, issue 30): a
//! lender with an NVMe, and two borrowers whose own NICs share the
//! network `mig`, the path of QEMU's migration stream. The hosts boot the
//! "mig" host kernel when `./test.sh` runs the suite (IOMMUFD, for VFIO's
//! device dirty logging); see docs/testing.md. The reusable parts are in
//! `devlend_vmtests::migrate`. `./test.sh migrate` selects these checks.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::migrate::{
    self, GuestSpec, MigrateOpts, MigratingGuest, MigrationStats, BORROWER, BORROWER2, LENDER,
};
use devlend_vmtests::{lending, ownership, Check, Scope, Suite};

/// The hosts of `migrate.toml`.
const HOSTS: [&str; 3] = [LENDER, BORROWER, BORROWER2];

/// The cluster as the migration checks need it: every host runs the
/// kernel the suite was set up for (`HOST_KVER`, the mig kernel under
/// `./test.sh`), devlend's modules load on all three and each host sees
/// the two others up; KVM on both borrowers; the borrowers' NICs on `mig`
/// at 10.77.0.1 and 10.77.0.2 ping each other.
fn migrate_hosts_fabric_and_network_up(c: &mut Cluster) -> anyhow::Result<()> {
    let want = std::env::var("HOST_KVER").ok().filter(|v| !v.is_empty());
    let mut ids = Vec::new();
    for h in HOSTS {
        let a = c.agent(h)?;
        let rel = sh(a, "uname -r")?.trim().to_owned();
        let iommufd = sh(a, "test -c /dev/iommu && echo yes || echo no")?;
        println!(
            "  {h}: kernel {rel}, IOMMUFD (/dev/iommu): {}",
            iommufd.trim()
        );
        if let Some(want) = &want {
            ensure!(rel == *want, "{h} runs {rel}, not {want} (HOST_KVER)");
        }
        lending::ensure_module(a).with_context(|| format!("devlend's modules on {h}"))?;
        ids.push((h, fabric::host_id(a)?));
    }
    for (h, me) in &ids {
        let a = c.agent(h)?;
        for (other, id) in ids.iter().filter(|(_, id)| id != me) {
            fabric::wait_peer_state(a, *id, "up", devlend_vmtests::twohost::WAIT)
                .with_context(|| format!("{h} waiting for {other} up"))?;
        }
    }
    println!("  each of the 3 hosts sees the 2 others up");
    for b in migrate::BORROWERS {
        migrate::kvm_up(c.agent(b)?)?;
    }
    for line in migrate::mig_network_ready(c)? {
        println!("  {line}");
    }
    Ok(())
}

/// Waits until the guest's console on its current host has at least
/// `n` complete ticks; those ticks.
fn wait_ticks(
    c: &Cluster,
    g: &MigratingGuest,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<migrate::Tick>> {
    let t0 = Instant::now();
    loop {
        let console = g.console(c)?;
        let t = migrate::ticks(&console);
        if t.len() >= n {
            return Ok(t);
        }
        ensure!(
            g.guest().running(c.agent(g.host())?)?,
            "the guest's QEMU on {} exited after {} ticks; console:\n{console}",
            g.host(),
            t.len()
        );
        ensure!(
            t0.elapsed() < timeout,
            "the guest on {} printed {} ticks in {timeout:?}, not {n}; console:\n{console}",
            g.host(),
            t.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One leg of the round trip: the guest moves to `dst` and its counter
/// goes on there from where it stopped, every RAM buffer intact.
fn leg(
    s: &mut Scope<'_>,
    g: &mut MigratingGuest,
    dst: &str,
    opts: &MigrateOpts,
) -> anyhow::Result<MigrationStats> {
    let src = g.host().to_owned();
    let src_pid = g.guest().pid;
    let st = g.migrate_to(s, dst, "", opts)?;
    println!("  {}", st.summary());
    ensure!(st.status == "completed", "{}", st.summary());
    ensure!(
        st.source_state == "postmigrate",
        "the source was {} after the migration",
        st.source_state
    );
    ensure!(
        !fabric::sh(
            s.agent(&src)?,
            &format!("kill -0 {src_pid} 2>/dev/null && echo up || true")
        )?
        .contains("up"),
        "the source QEMU (pid {src_pid}) on {src} still runs after quit"
    );
    let before = migrate::ticks(&g.leg_console(s, g.legs() - 1)?);
    // A few ticks on the destination: it runs the guest on.
    let after = wait_ticks(s, g, 3, Duration::from_secs(120))?;
    let console = g.console(s)?;
    let (first, last) = migrate::check_continued(&before, &after, &console)?;
    println!(
        "  the counter went from {} on {src} to {first}..{last} on {dst}, every buffer intact; \
         the source QEMU ended in postmigrate and quit",
        before.last().map_or(0, |t| t.n)
    );
    Ok(st)
}

/// A guest without a device, working its CPU and RAM (8 buffers of
/// 256 KiB rewritten in turn and checked every round) and printing a
/// counter, migrates borrower -> borrower2 -> borrower over `mig`: each
/// leg completes (QEMU's `query-migrate`), the source ends in
/// `postmigrate` and its QEMU is quit and gone, and on the destination
/// the counter goes on from where the source stopped (no reboot, no tick
/// skipped but the one the switch-over may cut) with every buffer
/// intact; neither borrower's kernel logged a WARN, BUG or oops. Prints
/// QEMU's downtime and total time per leg: the baseline
/// the same guest with a borrowed device is compared to.
fn migrate_guest_without_device_round_trip(c: &mut Cluster) -> anyhow::Result<()> {
    migrate::mig_network_ready(c)?;
    let marks = [
        ownership::kernel_log_lines(c.agent(BORROWER)?)?,
        ownership::kernel_log_lines(c.agent(BORROWER2)?)?,
    ];
    let mut s = Scope::new(c);
    let spec = GuestSpec::new("plain", &migrate::ram_workload("0.2"));
    let mut g = MigratingGuest::start(&mut s, BORROWER, spec, "")?;
    let t = wait_ticks(&s, &g, 5, Duration::from_secs(300))?;
    println!(
        "  the guest runs on {BORROWER}: {} ticks so far",
        t.last().map_or(0, |t| t.n)
    );
    let opts = MigrateOpts::default();
    let there = leg(&mut s, &mut g, BORROWER2, &opts)?;
    let back = leg(&mut s, &mut g, BORROWER, &opts)?;
    for st in [&there, &back] {
        println!(
            "  downtime {} -> {}: {} ms (total {} ms)",
            st.from,
            st.to,
            st.downtime_ms.unwrap_or(0),
            st.total_time_ms.unwrap_or(0)
        );
    }
    g.kill(&s)?;
    for (h, since) in migrate::BORROWERS.into_iter().zip(marks) {
        let t = ownership::kernel_trouble(s.agent(h)?, since, false)?;
        ensure!(t.is_empty(), "{h}'s kernel log:\n{}", t.join("\n"));
    }
    Ok(())
}

fn main() {
    let checks = vec![
        Check {
            name: "migrate_hosts_fabric_and_network_up",
            run: migrate_hosts_fabric_and_network_up,
        },
        Check {
            name: "migrate_guest_without_device_round_trip",
            run: migrate_guest_without_device_round_trip,
        },
    ];
    Suite::new("migrate", checks)
        .reset(devlend_vmtests::fixture::reset_hosts)
        .run(migrate::boot)
}
