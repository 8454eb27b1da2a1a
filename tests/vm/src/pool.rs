//! "Any NVMe" from a pool of two on `devices.toml`: the lender and the
//! second borrower each lend an NVMe; each borrower asks for any NVMe
//! (`devlend mdev create --type nvme`, no device named) and gets one (the
//! second borrower, which cannot borrow its own, the lender's; the first
//! the other, so the second borrower lends one device while it borrows
//! another); a third request finds none and says so; a request that waits
//! (`--wait`) takes the device the second borrower gives back. Every holder
//! does verified I/O with the userspace driver.

use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;

use crate::fabric::{self, sh};
use crate::lending::{self, PciDev};
use crate::ownership::{spawn_bg, wait_bg};
use crate::sriov::BORROWER2;
use crate::twohost::{host_bin, BORROWER, LENDER, MDEV_TYPE, WAIT};

/// The file whose creation ends a holder's hold (on its host).
const RELEASE: &str = "/tmp/pool-release";
/// How long the waiting request may wait.
const WAIT_REQUEST: Duration = Duration::from_secs(240);
/// How long a verified run of the driver may take.
const DRIVER: Duration = Duration::from_secs(300);

/// A request that holds a device: its host, mdev and driver's log.
struct Holder {
    host: &'static str,
    uuid: String,
    log: String,
}

impl Holder {
    /// Asks for any NVMe on `host` and opens it with the userspace driver,
    /// which writes and reads back 64 blocks and holds it until released.
    fn take(c: &Cluster, host: &'static str, cli: &str, drv: &str) -> anyhow::Result<Holder> {
        let a = c.agent(host)?;
        let uuid = uuid_in(&sh(a, &format!("{cli} mdev create --type nvme"))?)?;
        let log = format!("/tmp/pool-{uuid}.log");
        sh(a, &format!("rm -f {RELEASE}"))?;
        spawn_bg(
            a,
            &format!("{drv} --mdev {uuid} --blocks 64 --ios 100 --hold-until {RELEASE}"),
            &log,
        )?;
        let h = Holder { host, uuid, log };
        lending::wait_until(
            &format!("{host}'s driver holding its NVMe"),
            DRIVER,
            || {
                if let Ok(rc) = sh(a, &format!("cat {}.rc", h.log)) {
                    anyhow::bail!(
                        "the driver ended (exit {}): {}",
                        rc.trim(),
                        sh(a, &format!("cat {}", h.log))?
                    );
                }
                Ok(sh(a, &format!("grep -c holding {} || true", h.log))?
                    .trim()
                    .to_owned())
            },
            "1",
        )?;
        Ok(h)
    }

    /// `<host-id>:<dev_id>` the mdev chose.
    fn target(&self, c: &Cluster) -> anyhow::Result<String> {
        Ok(sh(
            c.agent(self.host)?,
            &format!("cat /sys/bus/mdev/devices/{}/remote_device", self.uuid),
        )?
        .trim()
        .to_owned())
    }

    /// Ends the hold: the driver's verification passed; the mdev removed.
    fn release(&self, c: &Cluster) -> anyhow::Result<()> {
        let a = c.agent(self.host)?;
        sh(a, &format!("touch {RELEASE}"))?;
        let (rc, out) = wait_bg(a, &self.log, DRIVER)?;
        lending::remove_mdev(a, &self.uuid)?;
        ensure!(
            rc == 0 && out.contains(" 0 mismatches") && out.contains("PASS"),
            "the driver on {} did not pass (exit {rc}):\n{out}",
            self.host
        );
        Ok(())
    }

    /// Best-effort clean-up after a failure.
    fn drop_on(&self, c: &Cluster) {
        if let Ok(a) = c.agent(self.host) {
            let _ = sh(a, &format!("touch {RELEASE}"));
            let _ = wait_bg(a, &self.log, Duration::from_secs(60));
            let _ = lending::remove_mdev(a, &self.uuid);
        }
    }
}

/// The first UUID in what `devlend mdev create` printed.
fn uuid_in(out: &str) -> anyhow::Result<String> {
    out.split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .find(|w| {
            let groups: Vec<usize> = w.split('-').map(str::len).collect();
            groups == [8, 4, 4, 4, 12]
        })
        .map(str::to_owned)
        .with_context(|| format!("no UUID in {out:?}"))
}

/// `<host-id>:<dev_id>` of a lent device, as its lender lists it.
fn dev_ref(a: &AgentClient, dev: &PciDev) -> anyhow::Result<String> {
    let id = sh(
        a,
        &format!("cat /sys/bus/pci/devices/{}/devlend/dev_id", dev.addr),
    )?;
    Ok(format!("{}:{}", fabric::host_id(a)?, id.trim()))
}

/// Waits for `available_instances` of the NVMe type on `host` to be `n`.
fn wait_available(c: &Cluster, host: &str, n: u32) -> anyhow::Result<()> {
    let a = c.agent(host)?;
    lending::wait_until(
        &format!("{n} free NVMe for {host}"),
        WAIT,
        || Ok(lending::available_instances(a, MDEV_TYPE)?.to_string()),
        &n.to_string(),
    )?;
    Ok(())
}

/// The check (see the top of the file); `step` narrates.
pub fn any_nvme_from_a_pool_of_two(c: &Cluster, step: &dyn Fn(&str)) -> anyhow::Result<()> {
    let (l, b2) = (c.agent(LENDER)?, c.agent(BORROWER2)?);
    for h in [LENDER, BORROWER, BORROWER2] {
        lending::ensure_module(c.agent(h)?)?;
    }
    let nl = lending::find_by_class(l, lending::NVME_CLASS)?;
    let n2 = lending::find_by_class(b2, lending::NVME_CLASS)?;
    lending::lend(l, &nl.addr)?;
    lending::lend(b2, &n2.addr)?;
    let mut holders: Vec<Holder> = Vec::new();
    let mut waiting: Option<String> = None;
    let res = pool_run(c, &nl, &n2, &mut holders, &mut waiting, step);
    for h in &holders {
        h.drop_on(c);
    }
    if let (Some(log), Ok(b)) = (&waiting, c.agent(BORROWER)) {
        if let Ok((0, out)) = wait_bg(b, log, Duration::from_secs(1)) {
            let _ = lending::remove_mdev(b, out.trim());
        }
    }
    for (a, dev) in [(l, &nl), (b2, &n2)] {
        let _ = lending::wait_until(
            &format!("{} back in the pool", dev.addr),
            WAIT,
            || lending::lent_state(a, &dev.addr),
            "available",
        );
        let _ = lending::unlend(a, &dev.addr);
    }
    res
}

fn pool_run(
    c: &Cluster,
    nl: &PciDev,
    n2: &PciDev,
    holders: &mut Vec<Holder>,
    waiting: &mut Option<String>,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let (l, b, b2) = (c.agent(LENDER)?, c.agent(BORROWER)?, c.agent(BORROWER2)?);
    let (ref_l, ref_2) = (dev_ref(l, nl)?, dev_ref(b2, n2)?);
    wait_available(c, BORROWER, 2)?;
    wait_available(c, BORROWER2, 1)?;
    step(&format!(
        "{LENDER} lends NVMe {ref_l}, {BORROWER2} lends NVMe {ref_2}: {BORROWER} sees 2 free, {BORROWER2} 1 (not its own)"
    ));

    holders.push(Holder::take(c, BORROWER2, &cli, &drv)?);
    let got2 = holders[0].target(c)?;
    ensure!(
        got2 == ref_l,
        "{BORROWER2} asked for any NVMe and got {got2}, not {LENDER}'s {ref_l}"
    );
    wait_available(c, BORROWER, 1)?;
    holders.push(Holder::take(c, BORROWER, &cli, &drv)?);
    let got1 = holders[1].target(c)?;
    ensure!(
        got1 == ref_2,
        "{BORROWER} asked for any NVMe and got {got1}, not {BORROWER2}'s {ref_2}"
    );
    let b1_id = fabric::host_id(b)?.to_string();
    ensure!(
        lending::lent_state(b2, &n2.addr)? == "borrowed"
            && sh(
                b2,
                &format!("cat /sys/bus/pci/devices/{}/devlend/borrower", n2.addr)
            )?
            .trim()
                == b1_id,
        "{BORROWER2}'s NVMe is not borrowed by {BORROWER} while {BORROWER2} borrows {LENDER}'s"
    );
    step(&format!(
        "{BORROWER2} got {ref_l} and {BORROWER} got {ref_2}, each driving it; {BORROWER2} lends one NVMe and borrows another at once"
    ));

    // A third request: nothing left, and the CLI says so (exit 4).
    wait_available(c, BORROWER, 0)?;
    let third = b.sh(
        &format!("{cli} mdev create --type nvme"),
        Duration::from_secs(60),
    )?;
    ensure!(
        third.exit_code == Some(4),
        "a third request for any NVMe did not fail as busy (exit 4): {third:?}"
    );
    let why = third.stderr.trim().to_owned();
    ensure!(
        why.contains("devlend-nvme") || why.contains("nvme"),
        "the refusal does not name the type: {why:?}"
    );
    step(&format!("a third request is refused: {why}"));

    // It waits instead; the device the second borrower gives back is its.
    let log = "/tmp/pool-wait.log".to_owned();
    spawn_bg(
        b,
        &format!(
            "{cli} mdev create --type nvme --wait {} 2>{log}.err",
            WAIT_REQUEST.as_secs()
        ),
        &log,
    )?;
    *waiting = Some(log.clone());
    std::thread::sleep(Duration::from_secs(2));
    ensure!(
        sh(b, &format!("test -e {log}.rc && echo done || echo waiting"))?.trim() == "waiting",
        "the waiting request ended while no NVMe was free: {}",
        sh(b, &format!("cat {log}"))?
    );
    step("the request waits (`devlend mdev create --type nvme --wait`)");
    let h2 = holders.remove(0);
    h2.release(c)?;
    step(&format!(
        "{BORROWER2}'s driver verified its I/O and gave {ref_l} back"
    ));
    let (rc, out) = wait_bg(b, &log, WAIT_REQUEST + Duration::from_secs(30))?;
    ensure!(
        rc == 0,
        "the waiting request failed (exit {rc}): {out}{}",
        sh(b, &format!("cat {log}.err"))?
    );
    let uuid = uuid_in(&out)?;
    let run = b.sh(
        &format!("{drv} --mdev {uuid} --blocks 64 --ios 100"),
        DRIVER,
    );
    let target = sh(
        b,
        &format!("cat /sys/bus/mdev/devices/{uuid}/remote_device"),
    );
    let removed = lending::remove_mdev(b, &uuid);
    *waiting = None;
    let run = run?;
    removed?;
    ensure!(
        run.exit_code == Some(0) && run.stdout.contains(" 0 mismatches"),
        "verified I/O on the device the waiting request got failed: {run:?}"
    );
    let target = target?.trim().to_owned();
    ensure!(
        target == ref_l,
        "the waiting request got {target}, not the {ref_l} given back"
    );
    step(&format!(
        "the waiting request took {target}, given back, and its driver verified its I/O"
    ));
    let h1 = holders.remove(0);
    h1.release(c)?;
    step(&format!(
        "{BORROWER}'s driver verified its I/O and gave {ref_2} back"
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::uuid_in;

    #[test]
    fn the_uuid_is_found_in_the_cli_sentence() {
        let out = "created mdev f9082b52-d535-40ef-ae43-9e759f855887 of type devlend-nvme for any free device of the type; give it to a VM with `devlend qemu-args f9082b52-d535-40ef-ae43-9e759f855887`\n";
        assert_eq!(
            uuid_in(out).unwrap(),
            "f9082b52-d535-40ef-ae43-9e759f855887"
        );
        assert!(uuid_in("devlend: error: none available").is_err());
    }
}
