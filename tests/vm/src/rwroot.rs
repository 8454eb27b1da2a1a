//! A writable root inside a host: an overlay whose lower layer is the
//! outer machine's root (read-only over 9p) and whose upper layer is a
//! tmpfs. Programs that expect to own `/etc`, `/var` and `/usr` (libvirt's
//! daemons, dpkg) run in it as on an installed machine, and everything they
//! write is gone when it is taken down. Its lower layer is the outer root
//! itself, without the host's tmpfs mounts on top: outer paths (a target
//! directory below `/tmp`, say) are used there as they are, not through
//! `/run/devlend/outer`.

use std::time::Duration;

use anyhow::Context;
use devlend_agent::AgentClient;

use crate::fabric;
use crate::guest;

/// Where the overlay lives inside the host (below the host's `/run` tmpfs).
const BASE: &str = "/run/devlend/rwroot";

/// A mounted writable root; [`RwRoot::take_down`] unmounts it.
#[derive(Debug)]
pub struct RwRoot {
    /// The overlay's mount point, as the agent sees it.
    pub root: String,
}

impl RwRoot {
    /// Mounts the overlay with `/dev`, `/proc` and `/sys` of the host and
    /// fresh tmpfs on `/run` and `/tmp`. A root left by an earlier run is
    /// taken down first.
    pub fn mount(agent: &AgentClient) -> anyhow::Result<Self> {
        let r = RwRoot {
            root: format!("{BASE}/root"),
        };
        r.take_down(agent)?;
        fabric::sh(
            agent,
            &format!(
                "set -e; modprobe overlay; mkdir -p {BASE}/upper {BASE}/work {BASE}/root; \
                 mount -t tmpfs rwroot-upper {BASE}/upper; mkdir {BASE}/upper/u {BASE}/upper/w; \
                 mount -t overlay rwroot -o lowerdir=/,upperdir={BASE}/upper/u,workdir={BASE}/upper/w {R}; \
                 mount --rbind /dev {R}/dev; mount -t proc proc {R}/proc; mount --rbind /sys {R}/sys; \
                 mount -t tmpfs -o mode=755 tmpfs {R}/run; mount -t tmpfs -o mode=1777 tmpfs {R}/tmp; \
                 mkdir -p {R}/run/lock",
                R = r.root
            ),
        )
        .context("mounting a writable root (overlay on the host's root)")?;
        Ok(r)
    }

    /// Runs `script` with `sh` chrooted into the writable root.
    pub fn sh(&self, agent: &AgentClient, script: &str) -> anyhow::Result<String> {
        self.sh_timeout(agent, script, Duration::from_secs(120))
    }

    /// [`RwRoot::sh`] with a timeout of its own.
    pub fn sh_timeout(
        &self,
        agent: &AgentClient,
        script: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        // base64 keeps the script clear of one more level of quoting.
        fabric::sh_timeout(
            agent,
            &format!(
                "echo {} | base64 -d | chroot {} /bin/sh -s",
                guest::base64(script.as_bytes()),
                self.root
            ),
            timeout,
        )
        .with_context(|| format!("in the writable root: {script}"))
    }

    /// The host path of `path` inside the writable root.
    pub fn path(&self, path: &str) -> String {
        format!("{}{path}", self.root)
    }

    /// Stops the processes still running in the root (daemons started in
    /// it: TERM, then KILL after 5 s), then unmounts everything below it.
    /// Nothing mounted is not an error.
    pub fn take_down(&self, agent: &AgentClient) -> anyhow::Result<()> {
        fabric::sh(
            agent,
            &format!(
                "grep -q ' {BASE}/' /proc/mounts || exit 0
                 inside() {{ for d in /proc/[0-9]*; do
                     [ \"$(readlink $d/root 2>/dev/null)\" = {R} ] && echo ${{d#/proc/}}; done; }}
                 for sig in TERM TERM TERM TERM TERM KILL; do
                     p=$(inside); [ -z \"$p\" ] && break; kill -$sig $p 2>/dev/null; sleep 1
                 done
                 umount -R {R} 2>/dev/null; umount {BASE}/upper 2>/dev/null
                 ! grep ' {BASE}/' /proc/mounts",
                R = self.root
            ),
        )
        .context("unmounting the writable root (is a process still using it?)")?;
        Ok(())
    }
}
