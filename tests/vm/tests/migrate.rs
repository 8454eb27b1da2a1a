//! Live migration between two borrowers (`migrate.toml`, issue 30): a
//! lender with an NVMe, and two borrowers whose own NICs share the
//! network `mig`, the path of QEMU's migration stream. The hosts boot the
//! "mig" host kernel when `./test.sh` runs the suite (IOMMUFD, for VFIO's
//! device dirty logging); see docs/testing.md. The reusable parts are in
//! `devlend_vmtests::migrate`. `./test.sh migrate` selects these checks.

use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh};
use devlend_vmtests::lending::PciDev;
use devlend_vmtests::libvirt::{self, Libvirt};
use devlend_vmtests::migrate::{
    self, GuestSpec, MigrateOpts, MigratingGuest, MigrationStats, BORROWER, BORROWER2, LENDER,
    NVME_BASE_BLOCK, NVME_BLOCKS,
};
use devlend_vmtests::migrate::{
    modules_and_peers_up, nvme_and_mdevs, qemu_args, wait_rounds, wait_ticks,
};
use devlend_vmtests::{ownership, twohost, Check, Scope, Suite};

/// The hosts of `migrate.toml`.
const HOSTS: [&str; 3] = migrate::MIG_HOSTS;

/// The cluster as the migration checks need it: every host runs the
/// kernel the suite was set up for (`HOST_KVER`, the mig kernel under
/// `./test.sh`), devlend's modules load on all three and each host sees
/// the two others up; KVM on both borrowers; the borrowers' NICs on `mig`
/// at 10.77.0.1 and 10.77.0.2 ping each other.
fn migrate_hosts_fabric_and_network_up(c: &mut Cluster) -> anyhow::Result<()> {
    let want = std::env::var("HOST_KVER").ok().filter(|v| !v.is_empty());
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
    }
    modules_and_peers_up(c)?;
    println!("  each of the 3 hosts sees the 2 others up");
    for b in migrate::BORROWERS {
        migrate::kvm_up(c.agent(b)?)?;
    }
    for line in migrate::mig_network_ready(c)? {
        println!("  {line}");
    }
    Ok(())
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

/// The migration counters of the borrower's mdev `uuid` (debugfs):
/// quiesces, takeovers, devices that did not settle.
fn mdev_mig(a: &devlend_agent::AgentClient, uuid: &str) -> anyhow::Result<(u64, u64, u64)> {
    let text = sh(a, "cat /sys/kernel/debug/devlend/borrower")?;
    let kv = text
        .lines()
        .find(|l| l.starts_with(&format!("mdev {uuid} ")))
        .map(fabric::parse_kv)
        .with_context(|| format!("mdev {uuid} not in the borrower's debugfs:\n{text}"))?;
    Ok((
        fabric::counter(&kv, "mig_quiesces")?,
        fabric::counter(&kv, "mig_takeovers")?,
        fabric::counter(&kv, "mig_unsettled")?,
    ))
}

/// The lender's migration counters of the NVMe: quiesces, takeovers,
/// resumes, devices that did not settle.
fn lender_mig(c: &Cluster, nvme: &PciDev) -> anyhow::Result<[u64; 4]> {
    let l = c.agent(LENDER)?;
    Ok([
        twohost::lender_counter(l, nvme, "mig_quiesces")?,
        twohost::lender_counter(l, nvme, "mig_takeovers")?,
        twohost::lender_counter(l, nvme, "mig_resumes")?,
        twohost::lender_counter(l, nvme, "mig_unsettled")?,
    ])
}

/// One leg with the NVMe: the guest moves to `dst`, whose mdev `dst_uuid`
/// is a migration's destination; its verified I/O goes on there from the
/// round after the last one the source verified (no round lost, none
/// failed), the lender quiesced the device for the source and handed it
/// to the destination (its counters), and the destination's mdev took it
/// over.
fn nvme_leg(
    s: &mut Scope<'_>,
    g: &mut MigratingGuest,
    nvme: &PciDev,
    dst: &str,
    dst_uuid: &str,
    cli: &str,
) -> anyhow::Result<MigrationStats> {
    let src = g.host().to_owned();
    let dst_args = qemu_args(s, cli, dst, dst_uuid)?;
    // QEMU's defaults: the mdev reports the device's dirty pages as they
    // read them, so nothing experimental is needed (docs/migration.md).
    ensure!(
        !dst_args.contains(",x-"),
        "`devlend qemu-args` on {dst} asks for an experimental property: {dst_args}"
    );
    let mig_before = lender_mig(s, nvme)?;
    let (_, took_before, _) = mdev_mig(s.agent(dst)?, dst_uuid)?;
    let st = g.migrate_to(s, dst, &dst_args, &MigrateOpts::default())?;
    println!("  {}", st.summary());
    let before = migrate::nvme_rounds(&g.leg_console(s, g.legs() - 1)?);
    let last_src = before.last().copied().unwrap_or(0);
    let rounds = wait_rounds(s, g, last_src, 3, Duration::from_secs(300))?;
    let first_dst = rounds.iter().copied().find(|&r| r > last_src).unwrap_or(0);
    ensure!(
        first_dst <= last_src + 2,
        "the guest verified round {last_src} on {src} and round {first_dst} first on {dst}: \
         rounds between were lost"
    );
    let mig_after = lender_mig(s, nvme)?;
    let (_, took_after, _) = mdev_mig(s.agent(dst)?, dst_uuid)?;
    ensure!(
        mig_after[0] > mig_before[0] && mig_after[1] == mig_before[1] + 1,
        "the lender's counters (quiesces, takeovers, resumes, unsettled) went from \
         {mig_before:?} to {mig_after:?}: not one quiesce and one takeover"
    );
    ensure!(
        mig_after[2] > mig_before[2],
        "the lender never resumed the device for {dst}: {mig_after:?}"
    );
    ensure!(
        took_after == took_before + 1,
        "mdev {dst_uuid} on {dst} took the device over {took_after} times, was {took_before}"
    );
    println!(
        "  verified NVMe rounds: ..{last_src} on {src}, {first_dst}..{} on {dst}, none failed; \
         the lender quiesced the device for {src} and handed it to {dst} (quiesces, takeovers, \
         resumes, unsettled: {mig_before:?} -> {mig_after:?})",
        rounds.last().copied().unwrap_or(0)
    );
    Ok(st)
}

/// Sets a module parameter of devlend's on `host` to `value` now, and back
/// to 0 when the scope ends.
fn fault(s: &mut Scope<'_>, host: &str, param: &str, value: &str) -> anyhow::Result<()> {
    sh(s.agent(host)?, &format!("echo {value} > {param}"))?;
    let (h, p) = (host.to_owned(), param.to_owned());
    s.defer(format!("{param} back to 0 on {host}"), move |c| {
        sh(c.agent(&h)?, &format!("echo 0 > {p}")).map(|_| ())
    });
    Ok(())
}

/// The lender's view of the NVMe now: its state and its holder's host id
/// (`-` for none).
fn nvme_holder(c: &Cluster, nvme: &PciDev) -> anyhow::Result<(String, String)> {
    let d = twohost::lender_device(c.agent(LENDER)?, nvme)?;
    Ok((
        d.get("state").cloned().unwrap_or_default(),
        d.get("borrower").cloned().unwrap_or_default(),
    ))
}

/// A guest with the lender's NVMe, lent to it through an mdev, writes and
/// reads back with O_DIRECT, round after round, and migrates borrower ->
/// borrower2 -> borrower while it does. The destination's mdev is made a
/// migration's destination with the CLI once the guest runs (`devlend
/// mdev create --device ... --incoming`, while the source holds the
/// device and its type has no instance left; then `devlend mdev incoming`
/// for the way back) and the
/// guest gets it with `devlend qemu-args`, at the same PCI address on both
/// sides. Required on each leg: the migration completes, the guest's
/// verified rounds go on on the destination (no round failed, no I/O
/// error, no NVMe timeout or reset in its kernel log), the lender counted
/// one quiesce and one takeover and resumed the device, and the
/// destination's mdev took it over. At the end the guest is stopped and
/// every block of the lender's backing file holds the pattern of the last
/// round the guest verified (or of the one it was writing).
fn migrate_nvme_guest_round_trip_keeps_its_bytes(c: &mut Cluster) -> anyhow::Result<()> {
    modules_and_peers_up(c)?;
    migrate::mig_network_ready(c)?;
    let mut s = Scope::new(c);
    let cli = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    let nvme = migrate::lender_nvme(&s)?;
    let src_uuid = migrate::source_mdev(&mut s, &cli, &nvme, "the lender's NVMe", BORROWER, None)?;
    let src_args = qemu_args(&s, &cli, BORROWER, &src_uuid)?;
    let spec = GuestSpec::new("nvme", &migrate::nvme_workload(0));
    let mut g = MigratingGuest::start(&mut s, BORROWER, spec, &src_args)?;
    let r = wait_rounds(&s, &g, 0, 3, Duration::from_secs(600))?;
    println!("  the guest verifies its NVMe I/O on {BORROWER}: rounds {r:?}");
    let dst_uuid = destination_while_held(&mut s, &cli, &nvme, BORROWER2, None)?;

    let there = nvme_leg(&mut s, &mut g, &nvme, BORROWER2, &dst_uuid, &cli)?;
    // The way back: the source's mdev, closed since its QEMU quit.
    sh(
        s.agent(BORROWER)?,
        &format!("{cli} mdev incoming {src_uuid}"),
    )?;
    let back = nvme_leg(&mut s, &mut g, &nvme, BORROWER, &src_uuid, &cli)?;
    for st in [&there, &back] {
        println!(
            "  with the NVMe, downtime {} -> {}: {} ms (total {} ms)",
            st.from,
            st.to,
            st.downtime_ms.unwrap_or(0),
            st.total_time_ms.unwrap_or(0)
        );
    }

    // The bytes in the lender's file: the guest stopped mid-round at the
    // latest, each block is of the last round it verified or the next.
    g.qmp(&s, &[migrate::cmd("stop")])?;
    std::thread::sleep(Duration::from_secs(2));
    let console = g.console(&s)?;
    let last = migrate::nvme_rounds(&console).last().copied().unwrap_or(0);
    let file = s.paths().nvme_file(LENDER, "nvme0");
    let mut f = std::fs::File::open(&file).with_context(|| format!("{}", file.display()))?;
    let mut newer = 0;
    for b in 0..NVME_BLOCKS {
        let mut got = vec![0u8; 4096];
        f.seek(SeekFrom::Start((NVME_BASE_BLOCK + b) * 4096))?;
        f.read_exact(&mut got)?;
        if got == migrate::nvme_block(last + 1, b) {
            newer += 1;
        } else {
            ensure!(
                got == migrate::nvme_block(last, b),
                "block {b} of the lender's {} is neither of round {last} nor {}: {:?}",
                file.display(),
                last + 1,
                String::from_utf8_lossy(&got[..64])
            );
        }
    }
    println!(
        "  the lender's backing file holds round {last} in {} of {NVME_BLOCKS} blocks and round {} in {newer}",
        NVME_BLOCKS - newer,
        last + 1
    );
    g.kill(&s)?;
    Ok(())
}

/// The destination's mdev made as operators make it, once the source's
/// guest runs: `dst` sees `dev` borrowed by the source, and the type that
/// stands for it with no instance left (the create of an ordinary mdev
/// would fail); [`migrate::destination_mdev`] makes it all the same.
fn destination_while_held(
    s: &mut Scope<'_>,
    cli: &str,
    dev: &PciDev,
    dst: &str,
    uuid: Option<&str>,
) -> anyhow::Result<String> {
    let src_id = fabric::host_id(s.agent(BORROWER)?)?;
    let (state, borrower, avail) = migrate::remote_seen(s, cli, dst, dev)?;
    ensure!(
        state == "borrowed" && borrower == Some(u64::from(src_id)) && avail == 0,
        "{dst} sees the device {state} by {borrower:?} with {avail} instances of its type \
         available, not borrowed by {BORROWER} (host {src_id}) with none"
    );
    let uuid = migrate::destination_mdev(s, cli, dev, dst, uuid)?;
    println!(
        "  {dst} sees the device borrowed by host {src_id} and no instance of its type \
         available; its destination mdev {uuid} was made all the same"
    );
    Ok(uuid)
}

/// Pings the NIC check's guest may lose per leg: those in flight when it
/// stopped (its pings stop with it, one a second) and the replies the
/// igb drops while its DMA is off at the lender.
const PING_LOSS_PER_LEG: u64 = 3;

/// A guest with the lender's igb NIC (MSI-X), lent to it through an mdev,
/// pings the lender's own NIC on the igb's wire, once a second, while it
/// migrates borrower -> borrower2 -> borrower. The NIC never moves: the
/// lender quiesces it for the source and hands it to the destination, so
/// neither the far end nor any switch learns anything new. Required on
/// each leg: the migration completes, the lender counted one quiesce and
/// one takeover of the igb and resumed it, the guest's rounds of pings go
/// on on the destination with replies (the NIC works there: interrupts
/// and DMA into the destination's copy of the guest's RAM). Over both
/// legs the pings lost are counted, and must be at most
/// [`PING_LOSS_PER_LEG`] per leg.
fn migrate_nic_guest_pinging_round_trip_counts_its_losses(c: &mut Cluster) -> anyhow::Result<()> {
    modules_and_peers_up(c)?;
    migrate::mig_network_ready(c)?;
    let (peer_mac, peer_ip) = migrate::IGB_PEER;
    migrate::own_nic_up(c.agent(LENDER)?, peer_mac, peer_ip)
        .context("the lender's own NIC on the igb's wire")?;
    let mut s = Scope::new(c);
    let cli = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    let igb = migrate::igb(&s)?;
    let (src_uuid, dst_uuid) = migrate::mdev_pair(
        &mut s,
        &cli,
        &igb,
        "the lender's igb",
        (BORROWER, BORROWER2),
        None,
    )?;
    let src_args = qemu_args(&s, &cli, BORROWER, &src_uuid)?;
    let spec = GuestSpec::new(
        "nic",
        &migrate::nic_workload(peer_ip, migrate::IGB_GUEST_IP),
    );
    let mut g = MigratingGuest::start(&mut s, BORROWER, spec, &src_args)?;
    wait_ping_rounds(&s, &g, 0, 2)?;
    println!("  the guest pings {peer_ip} through the lent igb on {BORROWER}");

    let mut downtimes = Vec::new();
    for (dst, uuid) in [(BORROWER2, &dst_uuid), (BORROWER, &src_uuid)] {
        let src = g.host().to_owned();
        sh(s.agent(dst)?, &format!("{cli} mdev incoming {uuid}"))?;
        let dst_args = qemu_args(&s, &cli, dst, uuid)?;
        let before = lender_mig(&s, &igb)?;
        let st = g.migrate_to(&mut s, dst, &dst_args, &MigrateOpts::default())?;
        println!("  {}", st.summary());
        let last = migrate::ping_rounds(&g.leg_console(&s, g.legs() - 1)?)
            .last()
            .map_or(0, |r| r.n);
        let rounds = wait_ping_rounds(&s, &g, last, 2)?;
        let after = lender_mig(&s, &igb)?;
        ensure!(
            after[0] > before[0] && after[1] == before[1] + 1 && after[2] > before[2],
            "the lender's counters of the igb (quiesces, takeovers, resumes, unsettled) went \
             from {before:?} to {after:?}: not quiesced for {src}, handed to {dst} and resumed"
        );
        let replies: u64 = rounds.iter().map(|r| r.received).sum();
        println!(
            "  rounds {}..{} on {dst}: {replies} replies (quiesces, takeovers, resumes, \
             unsettled: {before:?} -> {after:?})",
            rounds.first().map_or(0, |r| r.n),
            rounds.last().map_or(0, |r| r.n)
        );
        downtimes.push(st.downtime_ms.unwrap_or(0));
    }

    // Every round of every leg: what was sent, what came back.
    let mut all = Vec::new();
    for leg in 0..=g.legs() {
        all.extend(migrate::ping_rounds(&g.leg_console(&s, leg)?));
    }
    let sent: u64 = all.iter().map(|r| r.sent).sum();
    let received: u64 = all.iter().map(|r| r.received).sum();
    let lost = sent - received.min(sent);
    let bound = PING_LOSS_PER_LEG * u64::from(g.legs());
    println!(
        "  over {} rounds and 2 legs (downtime {downtimes:?} ms) the guest sent {sent} pings \
         and got {received} replies: {lost} lost (at most {bound} allowed)",
        all.len()
    );
    ensure!(
        lost <= bound,
        "the guest lost {lost} of {sent} pings over 2 legs, more than {bound}: {all:?}"
    );
    g.kill(&s)?;
    Ok(())
}

/// Waits until the NIC guest's console on its current host shows `n`
/// rounds of pings after round `after`, each with a reply; those rounds.
fn wait_ping_rounds(
    c: &Cluster,
    g: &MigratingGuest,
    after: u64,
    n: usize,
) -> anyhow::Result<Vec<migrate::PingRound>> {
    let what = format!("{n} rounds of pings after round {after}");
    migrate::watch_console(c, g, Duration::from_secs(600), &what, |console| {
        ensure!(
            !console.contains("NICERR"),
            "the NIC guest on {} failed:\n{console}",
            g.host()
        );
        let rounds: Vec<_> = migrate::ping_rounds(console)
            .into_iter()
            .filter(|r| r.n > after)
            .collect();
        if rounds.len() < n {
            return Ok(None);
        }
        ensure!(
            rounds.iter().all(|r| r.received > 0),
            "rounds of pings without a reply on {}: {rounds:?}",
            g.host()
        );
        Ok(Some(rounds))
    })
}

/// The UUID of the libvirt check's mdev, the same on both borrowers:
/// libvirt migrates a domain's `<hostdev type='mdev'>` by its UUID.
const LIBVIRT_MDEV: &str = "d1ee0030-0000-4000-8000-000000000030";

/// libvirt as operators run it: Debian's libvirtd on both borrowers (the
/// destination's listening on `mig`), a transient domain from `devlend
/// libvirt-xml --domain` with the lender's NVMe as `<hostdev
/// type='mdev'>`, its guest under verified O_DIRECT I/O, moved with
/// `virsh migrate --live` to borrower2, whose mdev of the same UUID was
/// made a destination while the domain ran (`devlend mdev create --uuid
/// ... --incoming`).
/// Required: virsh succeeds, the domain runs on borrower2 and not on
/// borrower, its verified rounds go on there with no I/O trouble, the
/// lender handed the device over once and resumed it, and borrower2's
/// mdev took it over.
fn migrate_libvirt_virsh_migrate_live_moves_the_nvme_guest(c: &mut Cluster) -> anyhow::Result<()> {
    modules_and_peers_up(c)?;
    migrate::mig_network_ready(c)?;
    // KVM before libvirtd starts: it reads what QEMU can do once, and a
    // domain of virt type kvm is refused where it found no /dev/kvm.
    for b in migrate::BORROWERS {
        migrate::kvm_up(c.agent(b)?)?;
    }
    let share = c.paths().share.clone();
    let images = devlend_cluster::tools::guest_images_dir()?;
    let mut s = Scope::new(c);
    let cli = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    let nvme = migrate::lender_nvme(&s)?;
    migrate::source_mdev(
        &mut s,
        &cli,
        &nvme,
        "the lender's NVMe",
        BORROWER,
        Some(LIBVIRT_MDEV),
    )?;
    let src = Libvirt::start(s.agent(BORROWER)?, &share)?;
    let dst =
        match Libvirt::start_listening(s.agent(BORROWER2)?, &share, migrate::mig_ip(BORROWER2)?) {
            Ok(l) => l,
            Err(e) => {
                let _ = src.stop(s.agent(BORROWER)?);
                return Err(e);
            }
        };
    let res = virsh_migrate(&mut s, &src, &dst, &cli, &images, &nvme);
    let stopped = [src.stop(s.agent(BORROWER)?), dst.stop(s.agent(BORROWER2)?)];
    res?;
    for st in stopped {
        st?;
    }
    Ok(())
}

/// The body of [`migrate_libvirt_virsh_migrate_live_moves_the_nvme_guest`],
/// between the daemons' start and stop.
fn virsh_migrate(
    s: &mut Scope<'_>,
    src: &Libvirt,
    dst: &Libvirt,
    cli: &str,
    images: &std::path::Path,
    nvme: &devlend_vmtests::lending::PciDev,
) -> anyhow::Result<()> {
    let a1 = s.agent(BORROWER)?;
    let console = "/tmp/dl-mig.console";
    // The writable root sees the outer root unmasked: the CLI at its outer
    // path there (`cli` is the host's view of it).
    let rw_cli = devlend_cluster::tools::our_binary("devlend", "DEVLEND_CLI")?;
    let dom = src.rw.sh(
        a1,
        &format!(
            "{} libvirt-xml --domain dl-mig --memory 256 {LIBVIRT_MDEV}",
            rw_cli.display()
        ),
    )?;
    let dom = libvirt::boot_guest_domain(&dom, images, &migrate::nvme_workload(0), console)?;
    src.rw.sh(
        a1,
        &format!(
            "echo {} | base64 -d >/tmp/dom.xml",
            devlend_vmtests::guest::base64(dom.as_bytes())
        ),
    )?;
    src.virsh(a1, "create /tmp/dom.xml")?;
    let read = |lv: &Libvirt, a: &devlend_agent::AgentClient| {
        sh(
            a,
            &format!("cat {} 2>/dev/null || true", lv.rw.path(console)),
        )
    };
    let rounds_on = |lv: &Libvirt, a: &devlend_agent::AgentClient, after: u64, n: usize| {
        let t0 = Instant::now();
        loop {
            let out = read(lv, a)?;
            let trouble = migrate::io_trouble(&out);
            ensure!(
                trouble.is_empty(),
                "I/O trouble in the guest: {trouble:?}\n{out}"
            );
            let r = migrate::nvme_rounds(&out);
            if r.iter().filter(|&&x| x > after).count() >= n {
                return Ok(r);
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(600),
                "the libvirt guest verified {r:?} in 600 s, not {n} rounds after {after}:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    let r = rounds_on(src, a1, 0, 3)?;
    println!("  libvirt's domain dl-mig verifies its NVMe I/O on {BORROWER}: rounds {r:?}");
    // The destination's mdev, of the same UUID, made while the domain
    // holds the device.
    destination_while_held(s, cli, nvme, BORROWER2, Some(LIBVIRT_MDEV))?;
    let (a1, a2) = (s.agent(BORROWER)?, s.agent(BORROWER2)?);

    let before = lender_mig(s, nvme)?;
    let (_, took0, _) = mdev_mig(a2, LIBVIRT_MDEV)?;
    let ip = migrate::mig_ip(BORROWER2)?;
    let t0 = Instant::now();
    src.virsh(
        a1,
        &format!("migrate --live dl-mig qemu+tcp://{ip}/system tcp://{ip}"),
    )?;
    let took = t0.elapsed().as_secs_f64();
    let state = dst.virsh(a2, "domstate dl-mig")?;
    ensure!(
        state.trim() == "running",
        "dl-mig on {BORROWER2} is {state:?}"
    );
    let left = src.virsh(a1, "list --name")?;
    ensure!(
        !left.contains("dl-mig"),
        "dl-mig still runs on {BORROWER}: {left}"
    );
    let last = migrate::nvme_rounds(&read(src, a1)?)
        .last()
        .copied()
        .unwrap_or(0);
    let r = rounds_on(dst, a2, last, 2)?;
    let after = lender_mig(s, nvme)?;
    let (_, took1, _) = mdev_mig(a2, LIBVIRT_MDEV)?;
    ensure!(
        after[1] == before[1] + 1 && after[2] > before[2] && took1 == took0 + 1,
        "the lender's counters (quiesces, takeovers, resumes, unsettled) went from {before:?} \
         to {after:?}, {BORROWER2}'s mdev took the device over {} times: not one handover",
        took1 - took0
    );
    println!(
        "  virsh migrate --live moved dl-mig to {BORROWER2} in {took:.1} s; its rounds went on \
         from {} to {} there (quiesces, takeovers, resumes, unsettled: {before:?} -> {after:?})",
        last + 1,
        r.last().copied().unwrap_or(0)
    );
    Ok(())
}

/// The lender's test-only `fault_mig_unsettled`: the NVMe never settles.
const UNSETTLED: &str = "/sys/module/devlend_lender/parameters/fault_mig_unsettled";
/// The borrower's test-only `fault_mig_resume_delay_ms`.
const RESUME_DELAY: &str = "/sys/module/devlend_borrower/parameters/fault_mig_resume_delay_ms";

/// The failure checks' start: the lender's NVMe with its mdev pair (the
/// source's on borrower, a destination on borrower2), and a guest `name`
/// under verified NVMe I/O on borrower, three rounds done. The NVMe, the
/// source's mdev, the destination's QEMU arguments, and the guest.
fn nvme_guest_to_move(
    s: &mut Scope<'_>,
    name: &str,
) -> anyhow::Result<(PciDev, String, String, MigratingGuest)> {
    let cli = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    let (nvme, src_uuid, dst_uuid) = nvme_and_mdevs(s, &cli, BORROWER, BORROWER2)?;
    let src_args = qemu_args(s, &cli, BORROWER, &src_uuid)?;
    let dst_args = qemu_args(s, &cli, BORROWER2, &dst_uuid)?;
    let spec = GuestSpec::new(name, &migrate::nvme_workload(0));
    let g = MigratingGuest::start(s, BORROWER, spec, &src_args)?;
    let r = wait_rounds(s, &g, 0, 3, Duration::from_secs(600))?;
    println!("  the guest verifies its NVMe I/O on {BORROWER}: rounds {r:?}");
    Ok((nvme, src_uuid, dst_args, g))
}

/// A device that does not settle fails the migration back to the source
/// (docs/migration.md). The guest of the round trip, under verified
/// O_DIRECT I/O on the borrowed NVMe, is migrated borrower -> borrower2
/// while the lender's settle rule sees an interrupt at every look (its
/// test-only `fault_mig_unsettled`, as for a device that keeps
/// interrupting). Required: the migration fails (QEMU's status `failed`)
/// and the source runs the guest again; the lender counted the device
/// unsettled once and neither quiesced nor handed it over; the source's
/// mdev counted it unsettled too (the lender's answer, `-ETIMEDOUT`, got
/// there as such); the source still holds the device; and the guest
/// verifies three more rounds of I/O on the source, with no I/O error,
/// timeout or reset in its log.
fn migrate_unsettled_device_fails_back_to_the_source(c: &mut Cluster) -> anyhow::Result<()> {
    modules_and_peers_up(c)?;
    migrate::mig_network_ready(c)?;
    let mut s = Scope::new(c);
    let (nvme, src_uuid, dst_args, mut g) = nvme_guest_to_move(&mut s, "unsettled")?;

    fault(&mut s, LENDER, UNSETTLED, "1")?;
    let lender0 = lender_mig(&s, &nvme)?;
    let mdev0 = mdev_mig(s.agent(BORROWER)?, &src_uuid)?;
    let st = g.try_migrate_to(&mut s, BORROWER2, &dst_args, &MigrateOpts::default())?;
    sh(s.agent(LENDER)?, &format!("echo 0 > {UNSETTLED}"))?;
    println!("  {}", st.summary());
    ensure!(
        st.status == "failed",
        "the migration of a device that does not settle ended {}, not failed: {}",
        st.status,
        st.summary()
    );
    ensure!(
        st.source_state == "running",
        "after the failed migration the source is {}, not running",
        st.source_state
    );
    let lender1 = lender_mig(&s, &nvme)?;
    let mdev1 = mdev_mig(s.agent(BORROWER)?, &src_uuid)?;
    ensure!(
        lender1[3] == lender0[3] + 1 && lender1[0] == lender0[0] && lender1[1] == lender0[1],
        "the lender's counters (quiesces, takeovers, resumes, unsettled) went from {lender0:?} \
         to {lender1:?}: not one unsettled device, nothing quiesced or handed over"
    );
    ensure!(
        mdev1.2 == mdev0.2 + 1 && mdev1.1 == mdev0.1,
        "the source's mdev counted (quiesces, takeovers, unsettled) {mdev0:?} -> {mdev1:?}: \
         not one unsettled device"
    );
    let src_id = fabric::host_id(s.agent(BORROWER)?)?.to_string();
    let (state, holder) = nvme_holder(&s, &nvme)?;
    ensure!(
        holder == src_id,
        "after the failed migration the lender has the NVMe {state}, held by {holder}, \
         not by {BORROWER} (host {src_id})"
    );
    let last = migrate::nvme_rounds(&g.console(&s)?)
        .last()
        .copied()
        .unwrap_or(0);
    let rounds = wait_rounds(&s, &g, last, 3, Duration::from_secs(300))?;
    println!(
        "  the lender counted the NVMe unsettled and kept it with {BORROWER} (quiesces, \
         takeovers, resumes, unsettled: {lender0:?} -> {lender1:?}; the source's mdev: \
         {mdev0:?} -> {mdev1:?}); the guest verified rounds {}..{} there after the failure",
        last + 1,
        rounds.last().copied().unwrap_or(0)
    );
    g.kill(&s)?;
    Ok(())
}

/// A destination killed mid-handover leaves the device with the source or
/// returned to the pool, never stuck (docs/migration.md). The round
/// trip's guest, under verified NVMe I/O, is migrated borrower ->
/// borrower2, whose mdev takes the device over and then, when its guest
/// is to run, resumes it 30 s late (its test-only
/// `fault_mig_resume_delay_ms`); in that window borrower2's QEMU is
/// killed. Required: the lender counted the takeover (the handover
/// reached it), the migration ended (completed or failed, either may
/// be), and within a minute the lender has the NVMe held by the source
/// or by nobody and available, never by the killed destination;
/// no host's kernel logged a WARN, BUG or oops.
fn migrate_destination_killed_mid_handover_leaves_the_device_with_source_or_pool(
    c: &mut Cluster,
) -> anyhow::Result<()> {
    modules_and_peers_up(c)?;
    migrate::mig_network_ready(c)?;
    let mut marks = Vec::new();
    for h in HOSTS {
        marks.push(ownership::kernel_log_lines(c.agent(h)?)?);
    }
    let mut s = Scope::new(c);
    let (nvme, _, dst_args, mut g) = nvme_guest_to_move(&mut s, "killed")?;

    fault(&mut s, BORROWER2, RESUME_DELAY, "30000")?;
    let lender0 = lender_mig(&s, &nvme)?;
    let since = marks[2];
    let m = g.start_migration(&mut s, BORROWER2, &dst_args, &MigrateOpts::default())?;
    // The destination took the device over and holds it, not resumed.
    let t0 = Instant::now();
    loop {
        let log = sh(
            s.agent(BORROWER2)?,
            &format!("dmesg | tail -n +{}", since + 1),
        )?;
        if log.contains("fault_mig_resume_delay_ms: resuming") {
            break;
        }
        ensure!(
            m.destination().running(s.agent(BORROWER2)?)?,
            "the destination QEMU on {BORROWER2} exited before it took the device over"
        );
        ensure!(
            t0.elapsed() < Duration::from_secs(300),
            "the destination never reached its guest's start in 300 s: {}",
            g.query_migrate(&s)?
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let (state, holder) = nvme_holder(&s, &nvme)?;
    let dst_id = fabric::host_id(s.agent(BORROWER2)?)?.to_string();
    let src_id = fabric::host_id(s.agent(BORROWER)?)?.to_string();
    println!("  {BORROWER2} took the NVMe over and waits to resume it: the lender has it {state}, held by {holder}");
    m.destination().kill(s.agent(BORROWER2)?)?;
    println!("  killed the destination QEMU on {BORROWER2} mid-handover");

    let t0 = Instant::now();
    let status = loop {
        let v = g.query_migrate(&s)?;
        let st = v
            .get("status")
            .and_then(|v| v.as_str())
            .unwrap_or("none")
            .to_owned();
        if ["completed", "failed", "cancelled"].contains(&st.as_str()) {
            break st;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(120),
            "the migration is still {st} 120 s after its destination was killed"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let lender1 = lender_mig(&s, &nvme)?;
    ensure!(
        lender1[1] == lender0[1] + 1,
        "the lender's counters (quiesces, takeovers, resumes, unsettled) went from {lender0:?} \
         to {lender1:?}: the destination never took the device over"
    );
    let t0 = Instant::now();
    let (state, holder) = loop {
        let (state, holder) = nvme_holder(&s, &nvme)?;
        if holder != dst_id && (holder == src_id || (holder == "-" && state == "available")) {
            break (state, holder);
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "60 s after its destination was killed the lender has the NVMe {state}, held by \
             {holder} ({BORROWER2} is host {dst_id}, {BORROWER} host {src_id}): stuck"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!(
        "  the migration ended {status} on {BORROWER}; the lender has the NVMe {state}, held by \
         {holder} ({} {:.1} s after the kill; quiesces, takeovers, resumes, unsettled: \
         {lender0:?} -> {lender1:?})",
        if holder == src_id {
            "the source's"
        } else {
            "back in the pool"
        },
        t0.elapsed().as_secs_f64()
    );
    g.kill(&s)?;
    for (h, since) in HOSTS.into_iter().zip(marks) {
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
        Check {
            name: "migrate_nvme_guest_round_trip_keeps_its_bytes",
            run: migrate_nvme_guest_round_trip_keeps_its_bytes,
        },
        Check {
            name: "migrate_nic_guest_pinging_round_trip_counts_its_losses",
            run: migrate_nic_guest_pinging_round_trip_counts_its_losses,
        },
        Check {
            name: "migrate_libvirt_virsh_migrate_live_moves_the_nvme_guest",
            run: migrate_libvirt_virsh_migrate_live_moves_the_nvme_guest,
        },
        Check {
            name: "migrate_unsettled_device_fails_back_to_the_source",
            run: migrate_unsettled_device_fails_back_to_the_source,
        },
        Check {
            name: "migrate_destination_killed_mid_handover_leaves_the_device_with_source_or_pool",
            run: migrate_destination_killed_mid_handover_leaves_the_device_with_source_or_pool,
        },
    ];
    Suite::new("migrate", checks)
        .reset(devlend_vmtests::fixture::reset_hosts)
        .run(migrate::boot)
}
