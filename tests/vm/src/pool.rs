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
#[derive(Debug)]
pub struct Holder {
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
        Holder::hold(c, host, uuid, drv)
    }

    /// Opens the mdev `uuid` of `host` with the userspace driver `drv`,
    /// which writes and reads back 64 blocks and holds the device until
    /// released; returns once it holds it. On a failure the driver is
    /// told to end, and the mdev is left to the caller.
    pub fn hold(
        c: &Cluster,
        host: &'static str,
        uuid: String,
        drv: &str,
    ) -> anyhow::Result<Holder> {
        let a = c.agent(host)?;
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
        )
        .inspect_err(|_| {
            let _ = sh(a, &format!("touch {RELEASE}"));
            let _ = wait_bg(a, &h.log, Duration::from_secs(60));
        })?;
        Ok(h)
    }

    /// Whether the driver still runs (and so holds the device).
    pub fn holding(&self, c: &Cluster) -> anyhow::Result<bool> {
        let a = c.agent(self.host)?;
        Ok(sh(
            a,
            &format!("test -e {}.rc && echo ended || echo running", self.log),
        )?
        .trim()
            == "running")
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
    pub fn release(&self, c: &Cluster) -> anyhow::Result<()> {
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
    pub fn drop_on(&self, c: &Cluster) {
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

/// Who takes part: the two hosts that lend an NVMe each, and the two that
/// ask for any NVMe, in the order they ask (the second also makes the
/// third request). A host may be in both.
#[derive(Debug, Clone, Copy)]
pub struct PoolHosts {
    /// The hosts whose NVMe make the pool.
    pub lenders: [&'static str; 2],
    /// The hosts that ask, in order.
    pub borrowers: [&'static str; 2],
}

/// `devices.toml`: the lender and the second borrower lend; the second
/// borrower asks first (it can get only the lender's), then the first.
pub const DEVICES_POOL: PoolHosts = PoolHosts {
    lenders: [LENDER, BORROWER2],
    borrowers: [BORROWER2, BORROWER],
};

/// The check (see the top of the file); `step` narrates.
pub fn any_nvme_from_a_pool_of_two(
    c: &Cluster,
    hosts: PoolHosts,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let mut all: Vec<&str> = hosts.lenders.to_vec();
    all.extend(hosts.borrowers);
    all.sort_unstable();
    all.dedup();
    for h in &all {
        lending::ensure_module(c.agent(h)?)?;
    }
    let mut pool = Vec::new();
    for h in hosts.lenders {
        let a = c.agent(h)?;
        let dev = lending::find_by_class(a, lending::NVME_CLASS)?;
        lending::ensure_lent(a, &dev.addr)?;
        pool.push((h, dev));
    }
    let mut holders: Vec<Holder> = Vec::new();
    let mut waiting: Option<String> = None;
    let res = pool_run(c, hosts, &pool, &mut holders, &mut waiting, step);
    for h in &holders {
        h.drop_on(c);
    }
    if let (Some(log), Ok(b)) = (&waiting, c.agent(hosts.borrowers[1])) {
        if let Ok((0, out)) = wait_bg(b, log, Duration::from_secs(1)) {
            if let Ok(uuid) = uuid_in(&out) {
                let _ = lending::remove_mdev(b, &uuid);
            }
        }
    }
    for (h, dev) in &pool {
        if let Ok(a) = c.agent(h) {
            let _ = lending::wait_until(
                &format!("{h}'s {} back in the pool", dev.addr),
                WAIT,
                || lending::lent_state(a, &dev.addr),
                "available",
            );
            let _ = lending::unlend(a, &dev.addr);
        }
    }
    res
}

fn pool_run(
    c: &Cluster,
    hosts: PoolHosts,
    pool: &[(&'static str, PciDev)],
    holders: &mut Vec<Holder>,
    waiting: &mut Option<String>,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let cli = host_bin("devlend", "DEVLEND_CLI")?;
    let drv = host_bin("devlend-nvme-test", "DEVLEND_NVME_TEST")?;
    let mut refs = Vec::new();
    for (h, dev) in pool {
        refs.push((*h, dev_ref(c.agent(h)?, dev)?));
    }
    // What each asking host sees: the pool but its own.
    let seen = |b: &str| -> Vec<String> {
        refs.iter()
            .filter(|(h, _)| *h != b)
            .map(|(_, r)| r.clone())
            .collect()
    };
    let [first, second] = hosts.borrowers;
    for b in hosts.borrowers {
        wait_available(c, b, seen(b).len() as u32)?;
    }
    step(&format!(
        "{} and {} lend an NVMe each ({} and {}); {first} sees {} free, {second} {}",
        refs[0].0,
        refs[1].0,
        refs[0].1,
        refs[1].1,
        seen(first).len(),
        seen(second).len()
    ));

    holders.push(Holder::take(c, first, &cli, &drv)?);
    let got1 = holders[0].target(c)?;
    ensure!(
        seen(first).contains(&got1),
        "{first} asked for any NVMe and got {got1}, not one of {:?}",
        seen(first)
    );
    let left: Vec<String> = seen(second).into_iter().filter(|r| *r != got1).collect();
    wait_available(c, second, left.len() as u32)?;
    holders.push(Holder::take(c, second, &cli, &drv)?);
    let got2 = holders[1].target(c)?;
    ensure!(
        left.contains(&got2),
        "{second} asked for any NVMe and got {got2}, not one of {left:?}"
    );
    // A host of the pool that asked lends its own NVMe meanwhile.
    for (i, asker) in [first, second].into_iter().enumerate() {
        let Some((own, dev)) = pool.iter().find(|(h, _)| *h == asker) else {
            continue;
        };
        let other = c.agent(hosts.borrowers[1 - i])?;
        let a = c.agent(own)?;
        let holder = sh(
            a,
            &format!("cat /sys/bus/pci/devices/{}/devlend/borrower", dev.addr),
        )?;
        ensure!(
            lending::lent_state(a, &dev.addr)? == "borrowed"
                && holder.trim() == fabric::host_id(other)?.to_string(),
            "{own}'s NVMe is not borrowed by {} while {own} borrows another",
            hosts.borrowers[1 - i]
        );
        step(&format!("{own} lends its NVMe and borrows another at once"));
    }
    step(&format!(
        "{first} got {got1} and {second} got {got2}, each driving it"
    ));

    // A third request: nothing left, and the CLI says so (exit 4).
    let b = c.agent(second)?;
    wait_available(c, second, 0)?;
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
        why.contains("nvme"),
        "the refusal does not name the type: {why:?}"
    );
    step(&format!("a third request is refused: {why}"));

    // It waits instead; the device the first asker gives back is its.
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
    let h1 = holders.remove(0);
    h1.release(c)?;
    step(&format!(
        "{first}'s driver verified its I/O and gave {got1} back"
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
        target == got1,
        "the waiting request got {target}, not the {got1} given back"
    );
    step(&format!(
        "the waiting request took {target}, given back, and its driver verified its I/O"
    ));
    let h2 = holders.remove(0);
    h2.release(c)?;
    step(&format!(
        "{second}'s driver verified its I/O and gave {got2} back"
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
