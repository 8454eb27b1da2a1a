//! Fixtures: what a check changes on the shared cluster is undone on every
//! path out of it, by a guard, not by clean-up code written after the
//! check's body (after cloud-hypervisor's `test_infra`, whose guests clean
//! up in `Drop`).
//!
//! A [`Scope`] borrows the cluster for one check (or one part of it) and
//! derefs to it. Whatever the check froze through it is thawed, and every
//! clean-up it registered runs (newest first), when the scope is dropped:
//! after the body returned, failed with `?`, or panicked. Frozen hosts are
//! thawed before the other clean-ups run, because those talk to the hosts'
//! agents.
//!
//! The suite ([`crate::Suite::reset`]) gives each check a cluster in a known
//! state on top of this, so that the checks do not depend on their order.

use std::ops::{Deref, DerefMut};

use devlend_cluster::Cluster;

use crate::{guest, lending};

/// A clean-up registered with [`Scope::defer`].
type Cleanup<'c> = Box<dyn FnOnce(&mut Cluster) -> anyhow::Result<()> + 'c>;

/// The cluster, borrowed by a check, with what to undo when it ends.
pub struct Scope<'c> {
    cluster: &'c mut Cluster,
    frozen: Vec<String>,
    cleanups: Vec<(String, Cleanup<'c>)>,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("frozen", &self.frozen)
            .field(
                "cleanups",
                &self.cleanups.iter().map(|(w, _)| w).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<'c> Scope<'c> {
    /// A scope over `cluster` with nothing to undo yet.
    pub fn new(cluster: &'c mut Cluster) -> Scope<'c> {
        Scope {
            cluster,
            frozen: Vec::new(),
            cleanups: Vec::new(),
        }
    }

    /// Freezes `host` ([`Cluster::pause_host`]); it is thawed when the
    /// scope ends unless [`Scope::thaw`] thawed it before.
    pub fn freeze(&mut self, host: &str) -> anyhow::Result<()> {
        self.cluster.pause_host(host)?;
        self.frozen.push(host.to_owned());
        Ok(())
    }

    /// Lets a host frozen by [`Scope::freeze`] run on.
    pub fn thaw(&mut self, host: &str) -> anyhow::Result<()> {
        self.frozen.retain(|h| h != host);
        self.cluster.resume_host(host)?;
        Ok(())
    }

    /// Runs `undo` on the cluster when the scope ends; `what` names it in
    /// the message printed if it fails.
    pub fn defer(
        &mut self,
        what: impl Into<String>,
        undo: impl FnOnce(&mut Cluster) -> anyhow::Result<()> + 'c,
    ) {
        self.cleanups.push((what.into(), Box::new(undo)));
    }

    /// Kills the background guest `g` on `host` when the scope ends, if it
    /// still runs: a guest that powered off (or a host booted since) may
    /// have its PID reused, so only a QEMU of that PID is killed.
    pub fn guest(&mut self, host: &str, g: &guest::BackgroundGuest) {
        let (h, pid) = (host.to_owned(), g.pid);
        self.defer(format!("kill the guest {pid} on {host}"), move |c| {
            let a = c.agent(&h)?;
            if crate::fabric::sh(a, &format!("grep -q qemu /proc/{pid}/cmdline")).is_ok() {
                guest::kill_pid(a, pid)?;
            }
            Ok(())
        });
    }

    /// Creates an mdev on `host` ([`lending::create_mdev`]), removed when
    /// the scope ends (unless it is gone by then); its UUID.
    pub fn mdev(
        &mut self,
        host: &str,
        type_id: &str,
        remote: Option<&str>,
    ) -> anyhow::Result<String> {
        let uuid = lending::create_mdev(self.cluster.agent(host)?, type_id, remote)?;
        let (h, u) = (host.to_owned(), uuid.clone());
        self.defer(format!("remove mdev {uuid} on {host}"), move |c| {
            let a = c.agent(&h)?;
            // Gone already if the check removed it or the host rebooted.
            if crate::fabric::sh(a, &format!("test -e /sys/bus/mdev/devices/{u}")).is_ok() {
                lending::remove_mdev(a, &u)?;
            }
            Ok(())
        });
        Ok(uuid)
    }
}

impl Deref for Scope<'_> {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        self.cluster
    }
}

impl DerefMut for Scope<'_> {
    fn deref_mut(&mut self) -> &mut Cluster {
        self.cluster
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        for host in std::mem::take(&mut self.frozen).into_iter().rev() {
            if let Err(e) = self.cluster.resume_host(&host) {
                eprintln!("  clean-up: thawing {host}: {e:#}");
            }
        }
        while let Some((what, undo)) = self.cleanups.pop() {
            if let Err(e) = undo(self.cluster) {
                eprintln!("  clean-up: {what}: {e:#}");
            }
        }
    }
}

/// The state each check starts from, whatever the check before it did or
/// failed to undo: every host of the topology running (thawed if a check
/// left it frozen, booted again if it left it dead), no guest of a check
/// left running and no mdev left on any host. What a check needs beyond
/// that (the modules loaded, a device lent) it sets up itself, e.g. with
/// [`crate::twohost::lent_nvme`].
pub fn reset_hosts(c: &mut Cluster) -> anyhow::Result<()> {
    let hosts: Vec<String> = c.topology().hosts.iter().map(|h| h.name.clone()).collect();
    for h in &hosts {
        // SIGCONT: nothing to a running host; fails only for a dead one.
        if c.resume_host(h).is_err() || c.agent(h).is_err() {
            eprintln!("  reset: {h} was left down by an earlier check; booting it again");
            c.restart_host(h)?;
        }
    }
    for h in &hosts {
        let left = guest::kill_leftovers(c.agent(h)?)?;
        if left > 0 {
            eprintln!("  reset: killed {left} guest(s) an earlier check left on {h}");
        }
        crate::fabric::sh(
            c.agent(h)?,
            "for d in /sys/bus/mdev/devices/*/remove; do [ -e \"$d\" ] && echo 1 > \"$d\"; done; true",
        )?;
    }
    Ok(())
}
