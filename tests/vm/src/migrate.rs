//! Live migration of a nested KVM guest between the two borrowers of
//! `migrate.toml`, the way users migrate with QEMU: the source QEMU has a
//! QMP socket; the destination QEMU is started on the other host with the
//! same command line plus `-incoming defer`, and QMP `migrate-incoming`
//! opens its port on the network `mig`; QMP `migrate` on the source sends
//! the guest there, and `query-migrate` is polled until it completed (or
//! failed). The destination then runs the guest, and the source, in
//! `postmigrate`, is quit. [`MigratingGuest::migrate_to`] does one leg
//! and returns QEMU's figures ([`MigrationStats`]); the guest can go on to
//! the next host, or back.
//!
//! QEMU refuses to migrate a guest whose 9p share is mounted, so the
//! migrating guests have no 9p device: what they run (busybox's `dd` with
//! `iflag=direct`/`oflag=direct`, `sha256sum`, `ping`, ...) is in the
//! guest initramfs (`guest-images/build.sh`). [`GuestSpec`] refuses
//! QEMU arguments that would add a share.
//!
//! Each side may have arguments of its own, e.g. a borrowed device that
//! is a different mdev on each host at the same guest PCI address:
//!
//! ```no_run
//! # fn f(s: &mut devlend_vmtests::Scope, remote: &str) -> anyhow::Result<()> {
//! use devlend_vmtests::migrate::{self, GuestSpec, MigrateOpts, MigratingGuest};
//! let dev = |uuid: &str| {
//!     format!("-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/{uuid},addr=05.0")
//! };
//! let u1 = s.mdev(migrate::BORROWER, "devlend-nvme", Some(remote))?;
//! let spec = GuestSpec::new("nvme", "while :; do echo hi; sleep 1; done");
//! let mut g = MigratingGuest::start(s, migrate::BORROWER, spec, &dev(&u1))?;
//! let u2 = s.mdev(migrate::BORROWER2, "devlend-nvme", Some(remote))?;
//! let there = g.migrate_to(s, migrate::BORROWER2, &dev(&u2), &MigrateOpts::default())?;
//! println!("  {}", there.summary());
//! let back = g.migrate_to(s, migrate::BORROWER, &dev(&u1), &MigrateOpts::default())?;
//! # Ok(()) }
//! ```

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use serde_json::{json, Value};

use crate::fabric::{self, sh, sh_timeout};
use crate::guest::{self, BackgroundGuest, GuestOpts};
use crate::lending::{self, PciDev};
use crate::Scope;

/// The lender's host name in `migrate.toml`.
pub const LENDER: &str = "lender";
/// The first borrower: where a guest starts.
pub const BORROWER: &str = "borrower";
/// The second borrower: where a guest migrates to, and back from.
pub const BORROWER2: &str = "borrower2";
/// The two borrowers, between which guests migrate.
pub const BORROWERS: [&str; 2] = [BORROWER, BORROWER2];

/// Boots `migrate.toml`.
pub fn boot() -> anyhow::Result<Cluster> {
    crate::boot_topology("migrate")
}

/// A borrower's end of the network `mig`: its NIC's MAC (the topology's
/// scheme, 52:54:00:d1:<host>:<2 × NIC>) and its IPv4 address.
pub fn mig_end(host: &str) -> anyhow::Result<(&'static str, &'static str)> {
    match host {
        BORROWER => Ok(("52:54:00:d1:01:00", "10.77.0.1")),
        BORROWER2 => Ok(("52:54:00:d1:02:00", "10.77.0.2")),
        _ => bail!("{host} has no NIC on the network mig"),
    }
}

/// The address of `host` on the network `mig`.
pub fn mig_ip(host: &str) -> anyhow::Result<&'static str> {
    Ok(mig_end(host)?.1)
}

/// Brings `host`'s NIC on `mig` up at its address (again, after a host
/// reboot; nothing changes when it is up); its interface's name.
pub fn mig_nic_up(agent: &AgentClient, host: &str) -> anyhow::Result<String> {
    let (mac, ip) = mig_end(host)?;
    own_nic_up(agent, mac, ip).with_context(|| format!("{host}'s NIC on mig"))
}

/// The lender's own NIC (virtio-net) on the hub of its lent igb, the far
/// end of the NIC check's pings: its MAC (the topology's scheme: the igb
/// is the lender's NIC 0, 52:54:00:d1:00:00, its peer ...:01) and address.
pub const IGB_PEER: (&str, &str) = ("52:54:00:d1:00:01", "10.79.0.1");
/// The address of the guest that borrows the igb, on that hub.
pub const IGB_GUEST_IP: &str = "10.79.0.2";

/// Brings a host's own virtio-net NIC with MAC `mac` up at `ip`/24, IPv6
/// off (quiet until asked); again after a reboot, nothing changed when it
/// is up. Its interface's name.
pub fn own_nic_up(agent: &AgentClient, mac: &str, ip: &str) -> anyhow::Result<String> {
    let out = sh(
        agent,
        &format!(
            "set -e; modprobe virtio_net; n=
for i in $(seq 50); do
  for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac} ] && n=${{d##*/}}; done
  [ -n \"$n\" ] && break; sleep 0.1
done
[ -n \"$n\" ] || {{ echo no NIC with MAC {mac} >&2; exit 1; }}
if ! ip -4 -o addr show dev $n | grep -q ' {ip}/24 '; then
  sysctl -q -w net.ipv6.conf.$n.disable_ipv6=1
  ip addr flush dev $n; ip addr add {ip}/24 dev $n
fi
ip link set $n up
echo $n"
        ),
    )?;
    Ok(out.trim().to_owned())
}

/// Both borrowers' NICs on `mig` up, and each pings the other: the
/// migration stream's path works. Returns each side's ping summary.
pub fn mig_network_ready(c: &Cluster) -> anyhow::Result<Vec<String>> {
    for h in BORROWERS {
        mig_nic_up(c.agent(h)?, h)?;
    }
    let mut summaries = Vec::new();
    for (h, other) in [(BORROWER, BORROWER2), (BORROWER2, BORROWER)] {
        let ip = mig_ip(other)?;
        let out = sh_timeout(
            c.agent(h)?,
            &format!(
                "for i in $(seq 30); do busybox ping -c 1 -W 1 {ip} >/dev/null 2>&1 && break; done
busybox ping -c 3 -W 2 {ip} | grep 'packets'"
            ),
            Duration::from_secs(120),
        )
        .with_context(|| format!("{h} pinging {other} ({ip}) on mig"))?;
        let line = out.trim().to_owned();
        ensure!(
            line.contains(" 0% packet loss"),
            "{h} pinging {other} ({ip}) on mig: {line}"
        );
        summaries.push(format!("{h} -> {other} ({ip}): {line}"));
    }
    Ok(summaries)
}

/// KVM loaded on a borrower, for its nested guests.
pub fn kvm_up(agent: &AgentClient) -> anyhow::Result<()> {
    sh(agent, "modprobe kvm_amd && test -c /dev/kvm")
        .context("KVM on the borrower")
        .map(drop)
}

/// Single-quotes `s` for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs [`devlend-qmp`](../../src/bin/devlend-qmp.rs) in `agent`'s host
/// against the QMP socket `sock` with `args`; its stdout and exit code.
fn devlend_qmp(
    agent: &AgentClient,
    sock: &str,
    args: &[String],
    timeout: Duration,
) -> anyhow::Result<(String, Option<i32>)> {
    let bin = crate::twohost::host_bin("devlend-qmp", "DEVLEND_QMP")?;
    let cmd = format!(
        "{bin} {sock} {}",
        args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
    );
    let out = agent
        .sh(&cmd, timeout + Duration::from_secs(30))
        .with_context(|| format!("agent could not run `{cmd}`"))?;
    ensure!(
        !out.timed_out && matches!(out.exit_code, Some(0 | 1)),
        "`{cmd}` failed (exit {:?}):\nstdout: {}\nstderr: {}",
        out.exit_code,
        out.stdout.trim_end(),
        out.stderr.trim_end()
    );
    Ok((out.stdout, out.exit_code))
}

/// Runs QMP commands (`{"execute": ..., "arguments": ...}`) on the QEMU
/// whose socket is `sock` in `agent`'s host, waiting up to `wait` for the
/// socket to appear and for each answer; their `return` values. QEMU's
/// refusal of one is an error with its text.
pub fn qmp(
    agent: &AgentClient,
    sock: &str,
    cmds: &[Value],
    wait: Duration,
) -> anyhow::Result<Vec<Value>> {
    let mut args = vec!["--wait".to_owned(), wait.as_secs().max(1).to_string()];
    args.extend(cmds.iter().map(Value::to_string));
    let (out, _) = devlend_qmp(agent, sock, &args, wait * (cmds.len() as u32 + 1))?;
    parse_qmp_answers(&out, cmds)
}

/// The `return` values in devlend-qmp's output for `cmds`, or the first
/// error (named by its command).
pub fn parse_qmp_answers(out: &str, cmds: &[Value]) -> anyhow::Result<Vec<Value>> {
    let mut rets = Vec::new();
    for (line, cmd) in out.lines().filter(|l| !l.trim().is_empty()).zip(cmds) {
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("devlend-qmp printed {line:?}"))?;
        if let Some(e) = v.get("error") {
            bail!("QMP {cmd}: {}", e.as_str().unwrap_or(&e.to_string()));
        }
        rets.push(
            v.get("return")
                .cloned()
                .with_context(|| format!("no return in {line:?}"))?,
        );
    }
    ensure!(
        rets.len() == cmds.len(),
        "{} answers to {} QMP commands:\n{out}",
        rets.len(),
        cmds.len()
    );
    Ok(rets)
}

/// A QMP command without arguments.
pub fn cmd(execute: &str) -> Value {
    json!({ "execute": execute })
}

/// A QMP command with arguments.
pub fn cmd_with(execute: &str, arguments: Value) -> Value {
    json!({ "execute": execute, "arguments": arguments })
}

/// What a migrating guest is: the same on every host it runs on.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    /// Names its files in the hosts (`/tmp/mig-<name>.*`): `[a-z0-9-]`.
    pub name: String,
    /// The command the guest runs (guest-init.sh's `devlend.cmd`).
    pub cmd: String,
    /// Guest RAM in MiB.
    pub mem_mib: u32,
    /// More guest kernel parameters.
    pub kernel_args: String,
    /// More QEMU arguments, the same on both sides (what differs per side
    /// goes to [`MigratingGuest::start`] and [`MigratingGuest::migrate_to`]).
    pub qemu_args: String,
}

impl GuestSpec {
    /// A guest of 256 MiB named `name` running `cmd`.
    pub fn new(name: &str, cmd: &str) -> GuestSpec {
        GuestSpec {
            name: name.to_owned(),
            cmd: cmd.to_owned(),
            mem_mib: 256,
            kernel_args: String::new(),
            qemu_args: String::new(),
        }
    }

    fn check(&self, side_args: &str) -> anyhow::Result<()> {
        ensure!(
            !self.name.is_empty()
                && self
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "guest name {:?}: use [a-z0-9-]",
            self.name
        );
        let args = format!("{} {side_args}", self.qemu_args);
        for share in ["-virtfs", "virtio-9p", "-fsdev"] {
            ensure!(
                !args.contains(share),
                "a migrating guest cannot have a 9p share ({share}): QEMU refuses to \
                 migrate while it is mounted; put what the guest needs in its initramfs"
            );
        }
        ensure!(
            !args.contains("-incoming"),
            "the destination's -incoming is the migration's to add"
        );
        Ok(())
    }

    /// Its QMP socket in a host (the same path on every host).
    pub fn qmp_sock(&self) -> String {
        format!("/tmp/mig-{}.qmp", self.name)
    }

    /// Its console in a host on leg `leg` (0: where it started).
    fn console(&self, leg: u32) -> String {
        format!("/tmp/mig-{}.{leg}.console", self.name)
    }
}

/// How a migration runs: QEMU's migration parameters, and how long to wait.
#[derive(Debug, Clone)]
pub struct MigrateOpts {
    /// `downtime-limit` (ms): the longest pause QEMU plans for the last
    /// copy. QEMU's default, 300 ms, may never be met under TCG, where a
    /// guest dirties its RAM faster than the emulated NICs carry it.
    pub downtime_limit_ms: Option<u64>,
    /// `max-bandwidth` (bytes/s); QEMU's default is 128 MiB/s.
    pub max_bandwidth: Option<u64>,
    /// How long the migration may take, from `migrate` to its end; one
    /// still running then is cancelled.
    pub timeout: Duration,
    /// Migration capabilities set on both sides before it starts
    /// (`migrate-set-capabilities`), e.g. `("switchover-ack", true)` with
    /// `("return-path", true)` for a VFIO device that wants it.
    pub capabilities: Vec<(String, bool)>,
}

impl Default for MigrateOpts {
    fn default() -> Self {
        MigrateOpts {
            downtime_limit_ms: Some(2000),
            max_bandwidth: Some(1 << 30),
            timeout: Duration::from_secs(600),
            capabilities: Vec::new(),
        }
    }
}

/// What QEMU says of one migration (its `query-migrate` at the end), and
/// what the check saw.
#[derive(Debug, Clone)]
pub struct MigrationStats {
    /// Source host.
    pub from: String,
    /// Destination host.
    pub to: String,
    /// `completed`, `failed`, `cancelled` (or whatever it was at the timeout).
    pub status: String,
    /// QEMU's `error-desc` of a failed migration.
    pub error: Option<String>,
    /// `total-time` (ms): from `migrate` to the end.
    pub total_time_ms: Option<u64>,
    /// `downtime` (ms): how long the guest was paused.
    pub downtime_ms: Option<u64>,
    /// `setup-time` (ms).
    pub setup_time_ms: Option<u64>,
    /// `ram.transferred` (bytes on the wire).
    pub transferred_bytes: Option<u64>,
    /// `ram.total` (the guest's RAM).
    pub ram_total_bytes: Option<u64>,
    /// `ram.dirty-sync-count`: how many passes over the dirty pages.
    pub dirty_sync_count: Option<u64>,
    /// Where the source was left (`postmigrate` after a completed one,
    /// `running` after a failed one), before it was quit.
    pub source_state: String,
    /// The whole answer.
    pub raw: Value,
}

impl MigrationStats {
    /// From the last `query-migrate` answer.
    pub fn from_query_migrate(from: &str, to: &str, v: &Value) -> anyhow::Result<MigrationStats> {
        let num = |path: &[&str]| -> Option<u64> {
            let mut x = v;
            for p in path {
                x = x.get(p)?;
            }
            x.as_u64()
        };
        Ok(MigrationStats {
            from: from.to_owned(),
            to: to.to_owned(),
            status: v
                .get("status")
                .and_then(Value::as_str)
                .with_context(|| format!("no status in query-migrate's {v}"))?
                .to_owned(),
            error: v
                .get("error-desc")
                .and_then(Value::as_str)
                .map(str::to_owned),
            total_time_ms: num(&["total-time"]),
            downtime_ms: num(&["downtime"]),
            setup_time_ms: num(&["setup-time"]),
            transferred_bytes: num(&["ram", "transferred"]),
            ram_total_bytes: num(&["ram", "total"]),
            dirty_sync_count: num(&["ram", "dirty-sync-count"]),
            source_state: String::new(),
            raw: v.clone(),
        })
    }

    /// One line: the leg, its status and figures.
    pub fn summary(&self) -> String {
        let ms = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
        let mib =
            |v: Option<u64>| v.map_or("?".to_owned(), |v| format!("{:.1}", v as f64 / 1048576.0));
        format!(
            "{} -> {}: {}{}, total {} ms, downtime {} ms, setup {} ms, {} MiB sent of {} MiB RAM, {} dirty syncs",
            self.from,
            self.to,
            self.status,
            self.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            ms(self.total_time_ms),
            ms(self.downtime_ms),
            ms(self.setup_time_ms),
            mib(self.transferred_bytes),
            mib(self.ram_total_bytes),
            ms(self.dirty_sync_count),
        )
    }
}

/// A nested KVM guest that runs on one borrower and can move to another.
#[derive(Debug)]
pub struct MigratingGuest {
    spec: GuestSpec,
    host: String,
    guest: BackgroundGuest,
    leg: u32,
    /// The host of every leg so far (0: where it started).
    hosts: Vec<String>,
}

/// A migration [`MigratingGuest::start_migration`] started and
/// [`MigratingGuest::finish_migration`] has not waited for yet.
#[derive(Debug)]
pub struct PendingMigration {
    dst: String,
    incoming: BackgroundGuest,
    leg: u32,
}

impl PendingMigration {
    /// The destination host.
    pub fn destination_host(&self) -> &str {
        &self.dst
    }

    /// The destination's QEMU (e.g. to kill it mid-migration).
    pub fn destination(&self) -> &BackgroundGuest {
        &self.incoming
    }
}

/// The port the destination listens on for leg `leg`.
fn port(leg: u32) -> u16 {
    4444 + (leg % 1000) as u16
}

/// Starts a guest in the background in `host` with the guest images
/// (`DEVLEND_GUEST_IMAGES`) and `args` after `spec.qemu_args`.
fn spawn(
    s: &mut Scope<'_>,
    host: &str,
    spec: &GuestSpec,
    args: &str,
    console: &str,
) -> anyhow::Result<BackgroundGuest> {
    let images = devlend_cluster::tools::guest_images_dir()?;
    let extra = format!("{} {args}", spec.qemu_args);
    let sock = spec.qmp_sock();
    let a = s.agent(host)?;
    // A QEMU gone before left its socket file: the wait for the new one
    // must not find that.
    sh(a, &format!("rm -f {sock} {console}"))?;
    let g = guest::spawn(
        a,
        &images,
        &spec.cmd,
        &GuestOpts {
            mem_mib: spec.mem_mib,
            extra_qemu_args: &extra,
            qmp: Some(&sock),
            kernel_args: &spec.kernel_args,
        },
        console,
    )?;
    s.guest(host, &g);
    Ok(g)
}

/// Waits for a QEMU that was quit or killed to be gone.
fn wait_gone(agent: &AgentClient, pid: u32, timeout: Duration) -> anyhow::Result<bool> {
    let t0 = Instant::now();
    loop {
        if agent
            .sh(&format!("kill -0 {pid}"), Duration::from_secs(30))?
            .exit_code
            != Some(0)
        {
            return Ok(true);
        }
        if t0.elapsed() > timeout {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl MigratingGuest {
    /// Starts the guest on `host` with `host_args` (this side's own QEMU
    /// arguments, e.g. its mdev) and a QMP socket; returns at once. It is
    /// killed when the scope ends, wherever it runs by then.
    pub fn start(
        s: &mut Scope<'_>,
        host: &str,
        spec: GuestSpec,
        host_args: &str,
    ) -> anyhow::Result<MigratingGuest> {
        spec.check(host_args)?;
        kvm_up(s.agent(host)?)?;
        let g = spawn(s, host, &spec, host_args, &spec.console(0))?;
        Ok(MigratingGuest {
            spec,
            host: host.to_owned(),
            guest: g,
            leg: 0,
            hosts: vec![host.to_owned()],
        })
    }

    /// The host it runs on.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Its QEMU on the host it runs on.
    pub fn guest(&self) -> &BackgroundGuest {
        &self.guest
    }

    /// How many migrations it completed.
    pub fn legs(&self) -> u32 {
        self.leg
    }

    /// What it printed on its current host (since it arrived there).
    pub fn console(&self, c: &Cluster) -> anyhow::Result<String> {
        self.guest.console(c.agent(&self.host)?)
    }

    /// What it printed on leg `leg` (0: where it started, until it left;
    /// [`MigratingGuest::legs`]: where it runs now), read on the host of
    /// that leg.
    pub fn leg_console(&self, c: &Cluster, leg: u32) -> anyhow::Result<String> {
        let host = self
            .hosts
            .get(leg as usize)
            .with_context(|| format!("the guest has made {} legs, not {leg}", self.leg))?;
        sh(c.agent(host)?, &format!("cat {}", self.spec.console(leg)))
    }

    /// Waits until its console on its current host has `needle`.
    pub fn wait_for(&self, c: &Cluster, needle: &str, timeout: Duration) -> anyhow::Result<String> {
        self.guest.wait_for(c.agent(&self.host)?, needle, timeout)
    }

    /// QMP commands on its QEMU; their `return` values.
    pub fn qmp(&self, c: &Cluster, cmds: &[Value]) -> anyhow::Result<Vec<Value>> {
        qmp(
            c.agent(&self.host)?,
            &self.spec.qmp_sock(),
            cmds,
            Duration::from_secs(30),
        )
    }

    /// Its QEMU's run state (`query-status`): `running`, `paused`, ...
    pub fn run_state(&self, c: &Cluster) -> anyhow::Result<String> {
        let r = self.qmp(c, &[cmd("query-status")])?;
        r[0].get("status")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .with_context(|| format!("query-status answered {}", r[0]))
    }

    /// Migrates the guest to `dst` (whose own QEMU arguments are
    /// `dst_args`, e.g. its mdev at the same guest PCI address as the
    /// source's); QEMU's figures. A migration that does not complete is an
    /// error with QEMU's text, the guest still on the source
    /// ([`MigratingGuest::try_migrate_to`] returns it instead).
    pub fn migrate_to(
        &mut self,
        s: &mut Scope<'_>,
        dst: &str,
        dst_args: &str,
        opts: &MigrateOpts,
    ) -> anyhow::Result<MigrationStats> {
        let st = self.try_migrate_to(s, dst, dst_args, opts)?;
        ensure!(
            st.status == "completed",
            "migration {} -> {} {}: {}; the guest stays on {} ({})",
            st.from,
            st.to,
            st.status,
            st.error.as_deref().unwrap_or("QEMU gave no reason"),
            st.from,
            st.source_state
        );
        Ok(st)
    }

    /// [`MigratingGuest::migrate_to`], with a migration that did not
    /// complete returned (its status and QEMU's error), not an error: the
    /// destination QEMU is then killed (if it did not exit) and the guest
    /// stays where it was. An error means the steps around it failed.
    ///
    /// After a completed one: the destination runs the guest (its
    /// run state reached `running`), the source's state was `postmigrate`
    /// ([`MigrationStats::source_state`]) and the source QEMU was quit and
    /// is gone.
    pub fn try_migrate_to(
        &mut self,
        s: &mut Scope<'_>,
        dst: &str,
        dst_args: &str,
        opts: &MigrateOpts,
    ) -> anyhow::Result<MigrationStats> {
        let m = self.start_migration(s, dst, dst_args, opts)?;
        self.finish_migration(s, m, opts.timeout)
    }

    /// The first half of [`MigratingGuest::try_migrate_to`]: the
    /// destination QEMU started with `-incoming defer` and listening
    /// (`migrate-incoming`), the source's `migrate` issued; returns at
    /// once. Between this and [`MigratingGuest::finish_migration`] a check
    /// can watch the migration ([`MigratingGuest::query_migrate`]) or do
    /// something to it, e.g. kill the destination
    /// ([`PendingMigration::destination`]).
    pub fn start_migration(
        &mut self,
        s: &mut Scope<'_>,
        dst: &str,
        dst_args: &str,
        opts: &MigrateOpts,
    ) -> anyhow::Result<PendingMigration> {
        self.spec.check(dst_args)?;
        ensure!(dst != self.host, "the guest already runs on {dst}");
        let (src, leg) = (self.host.clone(), self.leg + 1);
        let uri = format!("tcp:{}:{}", mig_ip(dst)?, port(leg));
        let sock = self.spec.qmp_sock();
        kvm_up(s.agent(dst)?)?;
        let caps = if opts.capabilities.is_empty() {
            Vec::new()
        } else {
            let list: Vec<Value> = opts
                .capabilities
                .iter()
                .map(|(c, on)| json!({ "capability": c, "state": on }))
                .collect();
            vec![cmd_with(
                "migrate-set-capabilities",
                json!({ "capabilities": list }),
            )]
        };

        // The destination: the same command line, its own arguments, and
        // -incoming defer; migrate-incoming opens the port.
        let args = format!("{dst_args} -incoming defer");
        let incoming = spawn(s, dst, &self.spec, &args, &self.spec.console(leg))?;
        let mut cmds = caps.clone();
        cmds.push(cmd_with("migrate-incoming", json!({ "uri": uri })));
        if let Err(e) = qmp(s.agent(dst)?, &sock, &cmds, Duration::from_secs(60)) {
            let console = incoming.console(s.agent(dst)?).unwrap_or_default();
            guest::kill_pid(s.agent(dst)?, incoming.pid)?;
            return Err(e.context(format!(
                "the destination QEMU on {dst} did not take the migration; its console:\n{console}"
            )));
        }

        // The source: capabilities, parameters, then migrate.
        let mut params = serde_json::Map::new();
        if let Some(ms) = opts.downtime_limit_ms {
            params.insert("downtime-limit".into(), json!(ms));
        }
        if let Some(b) = opts.max_bandwidth {
            params.insert("max-bandwidth".into(), json!(b));
        }
        let mut cmds = caps;
        cmds.push(cmd_with("migrate-set-parameters", Value::Object(params)));
        cmds.push(cmd_with("migrate", json!({ "uri": uri })));
        if let Err(e) = qmp(s.agent(&src)?, &sock, &cmds, Duration::from_secs(30)) {
            guest::kill_pid(s.agent(dst)?, incoming.pid)?;
            return Err(e.context(format!("starting the migration {src} -> {dst}")));
        }
        Ok(PendingMigration {
            dst: dst.to_owned(),
            incoming,
            leg,
        })
    }

    /// The source's `query-migrate` now.
    pub fn query_migrate(&self, c: &Cluster) -> anyhow::Result<Value> {
        Ok(self.qmp(c, &[cmd("query-migrate")])?.remove(0))
    }

    /// The second half of [`MigratingGuest::try_migrate_to`]: waits up
    /// to `timeout` for the migration `m` to end (one still running then
    /// is cancelled, `migrate_cancel`), and after a completed one moves the
    /// guest to the destination and quits the source.
    pub fn finish_migration(
        &mut self,
        s: &mut Scope<'_>,
        m: PendingMigration,
        timeout: Duration,
    ) -> anyhow::Result<MigrationStats> {
        let (src, dst, sock) = (self.host.clone(), m.dst.clone(), self.spec.qmp_sock());
        let wait = |s: &Scope<'_>, timeout: Duration| -> anyhow::Result<Value> {
            let (out, _) = devlend_qmp(
                s.agent(&src)?,
                &sock,
                &["--wait-migration".to_owned(), timeout.as_secs().to_string()],
                timeout,
            )?;
            let last = out
                .lines()
                .rev()
                .find(|l| l.trim_start().starts_with('{'))
                .with_context(|| format!("no query-migrate answer from the source:\n{out}"))?;
            serde_json::from_str(last).with_context(|| format!("query-migrate answered {last:?}"))
        };
        let mut v = wait(s, timeout)?;
        let status = v.get("status").and_then(Value::as_str).unwrap_or("none");
        if !["completed", "failed", "cancelled"].contains(&status) {
            // Not over in time: cancelled, so the source keeps the guest.
            eprintln!(
                "  the migration {src} -> {dst} is still {status} after {timeout:?}; cancelling it"
            );
            self.qmp(s, &[cmd("migrate_cancel")])?;
            v = wait(s, Duration::from_secs(120))?;
        }
        let mut st = MigrationStats::from_query_migrate(&src, &dst, &v)?;
        st.source_state = self
            .run_state(s)
            .unwrap_or_else(|e| format!("unknown: {e:#}"));
        let incoming = m.incoming;

        if st.status != "completed" {
            // The guest stays on the source; the destination goes.
            let a = s.agent(&dst)?;
            if incoming.running(a)? {
                guest::kill_pid(a, incoming.pid)?;
            }
            return Ok(st);
        }

        // The destination runs the guest; the source is quit.
        let t0 = Instant::now();
        loop {
            let state = qmp(
                s.agent(&dst)?,
                &sock,
                &[cmd("query-status")],
                Duration::from_secs(30),
            )?[0]
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            if state == "running" {
                break;
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(60),
                "the migration {src} -> {dst} completed but the destination is {state} after 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        ensure!(
            st.source_state == "postmigrate",
            "the migration {src} -> {dst} completed but the source is {}",
            st.source_state
        );
        let old = std::mem::replace(&mut self.guest, incoming);
        self.host.clone_from(&dst);
        self.leg = m.leg;
        self.hosts.push(dst);
        let a = s.agent(&src)?;
        // The source may close the socket before it answers quit.
        let _ = qmp(a, &sock, &[cmd("quit")], Duration::from_secs(30));
        if !wait_gone(a, old.pid, Duration::from_secs(30))? {
            guest::kill_pid(a, old.pid)?;
            bail!("the source QEMU on {src} did not exit within 30 s of quit");
        }
        Ok(st)
    }

    /// Kills its QEMU.
    pub fn kill(&self, c: &Cluster) -> anyhow::Result<()> {
        self.guest.kill(c.agent(&self.host)?)
    }
}

/// The hosts of `migrate.toml`.
pub const MIG_HOSTS: [&str; 3] = [LENDER, BORROWER, BORROWER2];
/// devlend's modules loaded on the three hosts, each seeing the two
/// others up (a check may run alone, or after a reset).
pub fn modules_and_peers_up(c: &Cluster) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for h in MIG_HOSTS {
        let a = c.agent(h)?;
        lending::ensure_module(a).with_context(|| format!("devlend's modules on {h}"))?;
        ids.push((h, fabric::host_id(a)?));
    }
    for (h, me) in &ids {
        let a = c.agent(h)?;
        for (other, id) in ids.iter().filter(|(_, id)| id != me) {
            fabric::wait_peer_state(a, *id, "up", crate::twohost::WAIT)
                .with_context(|| format!("{h} waiting for {other} up"))?;
        }
    }
    Ok(())
}

/// Watches the guest's console on its current host, every half second,
/// until `look` finds there what it waits for (`Ok(Some(..))`), which it
/// returns; an error if `look` fails, or if the guest's QEMU exits or
/// `timeout` passes first (`what`: what it waits for, for the message).
pub fn watch_console<T>(
    c: &Cluster,
    g: &MigratingGuest,
    timeout: Duration,
    what: &str,
    mut look: impl FnMut(&str) -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let t0 = Instant::now();
    loop {
        let console = g.console(c)?;
        if let Some(found) = look(&console)? {
            return Ok(found);
        }
        ensure!(
            g.guest().running(c.agent(g.host())?)?,
            "the guest's QEMU on {} exited before {what}; console:\n{console}",
            g.host()
        );
        ensure!(
            t0.elapsed() < timeout,
            "the guest on {} did not show {what} in {timeout:?}; console:\n{console}",
            g.host()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until the guest's console on its current host has at least
/// `n` complete ticks; those ticks.
pub fn wait_ticks(
    c: &Cluster,
    g: &MigratingGuest,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Tick>> {
    watch_console(c, g, timeout, &format!("{n} ticks"), |console| {
        let t = ticks(console);
        Ok((t.len() >= n).then_some(t))
    })
}

/// The first UUID in what `devlend mdev create` printed.
pub fn uuid_in(out: &str) -> anyhow::Result<String> {
    out.split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .find(|w| w.split('-').map(str::len).eq([8, 4, 4, 4, 12]))
        .map(str::to_owned)
        .with_context(|| format!("no UUID in {out:?}"))
}

/// Waits until the guest's console on its current host shows `n` more
/// verified NVMe rounds than `after`; the rounds there.
pub fn wait_rounds(
    c: &Cluster,
    g: &MigratingGuest,
    after: u64,
    n: u64,
    timeout: Duration,
) -> anyhow::Result<Vec<u64>> {
    let what = format!("{n} verified NVMe rounds after round {after}");
    watch_console(c, g, timeout, &what, |console| {
        let trouble = io_trouble(console);
        ensure!(
            trouble.is_empty(),
            "I/O trouble in the guest on {}: {trouble:?}\nconsole:\n{console}",
            g.host()
        );
        let rounds = nvme_rounds(console);
        let new = rounds.iter().filter(|&&r| r > after).count() as u64;
        Ok((new >= n).then_some(rounds))
    })
}

/// The lender's NVMe and its mdev pair ([`mdev_pair`]): the NVMe and the
/// two UUIDs.
pub fn nvme_and_mdevs(
    s: &mut Scope<'_>,
    cli: &str,
    src: &str,
    dst: &str,
) -> anyhow::Result<(PciDev, String, String)> {
    let nvme = lender_nvme(s)?;
    let (src_uuid, dst_uuid) = mdev_pair(s, cli, &nvme, "the lender's NVMe", (src, dst), None)?;
    Ok((nvme, src_uuid, dst_uuid))
}

/// The lender's NVMe, the device the NVMe checks lend.
pub fn lender_nvme(c: &Cluster) -> anyhow::Result<PciDev> {
    lending::find_by_class(c.agent(LENDER)?, lending::NVME_CLASS)
}

/// The lender's igb (82576), the NIC the NIC check lends.
pub fn igb(c: &Cluster) -> anyhow::Result<PciDev> {
    lending::find_all_by_class(c.agent(LENDER)?, "0x020000")?
        .into_iter()
        .find(|d| d.vendor == "0x8086" && d.device == "0x10c9")
        .context("the lender has no igb (8086:10c9)")
}

/// The lender's device `dev` lent, listed on both borrowers, and an mdev
/// for it on each: `src` an ordinary one ([`source_mdev`]), `dst` a
/// migration's destination ([`destination_mdev`]), both made while the
/// device is free, removed when the scope ends; both with UUID `uuid` if
/// given (libvirt migrates a domain's mdev by its UUID). The two UUIDs.
pub fn mdev_pair(
    s: &mut Scope<'_>,
    cli: &str,
    dev: &PciDev,
    what: &str,
    (src, dst): (&str, &str),
    uuid: Option<&str>,
) -> anyhow::Result<(String, String)> {
    let src_uuid = source_mdev(s, cli, dev, what, src, uuid)?;
    let dst_uuid = destination_mdev(s, cli, dev, dst, uuid)?;
    println!(
        "  mdev {src_uuid} on {src}, and {dst_uuid} on {dst} made a destination, both for {LENDER}/{}",
        dev.addr
    );
    Ok((src_uuid, dst_uuid))
}

/// The lender's device `dev` lent and listed on both borrowers, and an
/// ordinary mdev for it on `src` (with UUID `uuid` if given), removed when
/// the scope ends. Its UUID.
pub fn source_mdev(
    s: &mut Scope<'_>,
    cli: &str,
    dev: &PciDev,
    what: &str,
    src: &str,
    uuid: Option<&str>,
) -> anyhow::Result<String> {
    lending::ensure_lent(s.agent(LENDER)?, &dev.addr)?;
    for b in BORROWERS {
        lending::wait_remote_listed(s.agent(b)?, &dev.addr, what)?;
    }
    made_mdev(s, cli, dev, src, uuid, "")
}

/// A migration's destination for `dev` on `dst` (`devlend mdev create
/// --device ... --incoming`, with UUID `uuid` if given), removed when the
/// scope ends; its `migration` must read `incoming`. The source may hold
/// the device meanwhile: the mdev takes it all the same (the borrower's
/// `incoming_mdev`). Its UUID.
pub fn destination_mdev(
    s: &mut Scope<'_>,
    cli: &str,
    dev: &PciDev,
    dst: &str,
    uuid: Option<&str>,
) -> anyhow::Result<String> {
    let dst_uuid = made_mdev(s, cli, dev, dst, uuid, " --incoming")?;
    let dst_state = sh(
        s.agent(dst)?,
        &format!("cat /sys/bus/mdev/devices/{dst_uuid}/migration"),
    )?;
    ensure!(
        dst_state.trim() == "incoming",
        "the destination's mdev reads {dst_state:?}, not incoming"
    );
    Ok(dst_uuid)
}

/// How `host` sees the lender's `dev` (`devlend remote --json`): its
/// state and borrower, and the available instances of the mdev type that
/// stands for it (`devlend mdev types --json`).
pub fn remote_seen(
    s: &Scope<'_>,
    cli: &str,
    host: &str,
    dev: &PciDev,
) -> anyhow::Result<(String, Option<u64>, u64)> {
    let a = s.agent(host)?;
    let remotes: serde_json::Value = serde_json::from_str(&sh(a, &format!("{cli} remote --json"))?)
        .context("devlend remote --json")?;
    let r = remotes
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["lender"] == LENDER && r["name"] == dev.addr.as_str())
        .with_context(|| format!("{host} does not list {LENDER}/{}: {remotes}", dev.addr))?;
    let types: serde_json::Value =
        serde_json::from_str(&sh(a, &format!("{cli} mdev types --json"))?)
            .context("devlend mdev types --json")?;
    let want = type_for(r)?;
    let avail = types
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["id"] == want)
        .and_then(|t| t["available_instances"].as_u64())
        .with_context(|| format!("{host} has no mdev type {want}: {types}"))?;
    Ok((
        r["state"].as_str().unwrap_or("?").to_owned(),
        r["borrower"].as_u64(),
        avail,
    ))
}

/// The mdev type a remote device of `devlend remote --json` gets by
/// default (`devlend-nvme` for an NVMe, `devlend-net` for a NIC).
fn type_for(r: &serde_json::Value) -> anyhow::Result<&'static str> {
    let class = crate::ownership::hex(r["class"].as_str().unwrap_or_default())
        .with_context(|| format!("the class of {r}"))?;
    Ok(devlend::abi::type_for_class(class as u32))
}

/// `devlend mdev create --device <lender>/<dev> [--uuid] <flags>` on
/// `host`, removed when the scope ends. Its UUID.
fn made_mdev(
    s: &mut Scope<'_>,
    cli: &str,
    dev: &PciDev,
    host: &str,
    uuid: Option<&str>,
    flags: &str,
) -> anyhow::Result<String> {
    let given = uuid.map_or_else(String::new, |u| format!(" --uuid {u}"));
    let out = sh(
        s.agent(host)?,
        &format!(
            "{cli} mdev create --device {LENDER}/{}{given}{flags} 2>&1",
            dev.addr
        ),
    )?;
    let uuid = uuid_in(&out)?;
    let (h, u) = (host.to_owned(), uuid.clone());
    s.defer(format!("remove mdev {uuid} on {host}"), move |c| {
        let a = c.agent(&h)?;
        if sh(a, &format!("test -e /sys/bus/mdev/devices/{u}")).is_ok() {
            lending::remove_mdev(a, &u)?;
        }
        Ok(())
    });
    Ok(uuid)
}

/// `devlend qemu-args` for mdev `uuid` on `host`, at guest slot 5 (the
/// same on both sides of a migration).
pub fn qemu_args(s: &Scope<'_>, cli: &str, host: &str, uuid: &str) -> anyhow::Result<String> {
    Ok(
        sh(s.agent(host)?, &format!("{cli} qemu-args {uuid} --addr 5"))?
            .trim()
            .to_owned(),
    )
}

/// A guest command that works its CPU and RAM and prints a counter: every
/// round it writes fresh random data into one of 8 buffers of 256 KiB in
/// its RAM (tmpfs), in turn, records the buffer's sha256, then checks
/// every buffer against what was recorded, and prints `tick <n> ok` (or
/// `tick <n> BAD <buffers>` for those whose bytes changed behind its
/// back: memory a migration lost or corrupted). `pause` is the sleep
/// between rounds, as sleep(1) takes it.
pub fn ram_workload(pause: &str) -> String {
    format!(
        "i=0
while :; do
  i=$((i + 1)); k=$((i % 8))
  head -c 262144 /dev/urandom > /tmp/buf$k
  sha256sum /tmp/buf$k > /tmp/sum$k
  bad=
  for j in 0 1 2 3 4 5 6 7; do
    [ -e /tmp/sum$j ] || continue
    sha256sum -c -s /tmp/sum$j || bad=\"$bad $j\"
  done
  if [ -n \"$bad\" ]; then echo \"tick $i BAD$bad\"; else echo \"tick $i ok\"; fi
  sleep {pause}
done"
    )
}

/// Blocks of 4 KiB the NVMe workload rewrites and reads back each round,
/// from [`NVME_BASE_BLOCK`] on.
pub const NVME_BLOCKS: u64 = 16;
/// Where they start: 32 MiB into the namespace, clear of anything else.
pub const NVME_BASE_BLOCK: u64 = 8192;

/// The guest's NVMe workload: rounds of O_DIRECT writes of
/// [`NVME_BLOCKS`] blocks, each a pattern naming its round and block, then
/// O_DIRECT reads of all of them, each compared with what was written.
/// Prints `nvme-round <n> ok` after each verified round, `IOERR` or
/// `MISMATCH` lines for anything else; the kernel's own I/O errors show on
/// the console too. `rounds`: how many (0: until the guest is stopped).
/// The lender's backing file then holds [`nvme_block`] of the last round
/// in each block.
pub fn nvme_workload(rounds: u64) -> String {
    format!(
        r#"dev=/dev/nvme0n1
i=0
while [ ! -b $dev ] && [ $i -lt 300 ]; do sleep 1; i=$((i+1)); done
[ -b $dev ] || {{ echo "IOERR no $dev"; exit 1; }}
echo "nvme-ready $dev"
round=0
while [ {rounds} -eq 0 ] || [ $round -lt {rounds} ]; do
  round=$((round+1))
  b=0
  while [ $b -lt {blocks} ]; do
    yes "devlend-mig r$round b$b " | head -c 4096 > /tmp/w$b
    dd if=/tmp/w$b of=$dev bs=4096 seek=$(({base}+b)) count=1 oflag=direct conv=notrunc 2>/tmp/err >/dev/null \
      || echo "IOERR write round $round block $b: $(cat /tmp/err)"
    b=$((b+1))
  done
  b=0
  bad=0
  while [ $b -lt {blocks} ]; do
    dd if=$dev of=/tmp/r bs=4096 skip=$(({base}+b)) count=1 iflag=direct 2>/tmp/err >/dev/null \
      || {{ echo "IOERR read round $round block $b: $(cat /tmp/err)"; bad=1; }}
    cmp -s /tmp/w$b /tmp/r || {{ echo "MISMATCH round $round block $b"; bad=1; }}
    b=$((b+1))
  done
  [ $bad = 0 ] && echo "nvme-round $round ok"
done
"#,
        blocks = NVME_BLOCKS,
        base = NVME_BASE_BLOCK
    )
}

/// The guest's NIC workload, for a guest that borrows the lender's igb:
/// its interface (the one whose driver is igb; the guest's init loads it)
/// up at `guest_ip`/24; once `peer_ip` answers, `nic-ready <if>`; then
/// rounds of 10 pings, one a second, each round's busybox summary printed
/// as `nic-round <n> <t> packets transmitted, <r> packets received, ...`.
/// `NICERR` lines for what went wrong.
pub fn nic_workload(peer_ip: &str, guest_ip: &str) -> String {
    format!(
        r#"n=
i=0
while [ -z "$n" ] && [ $i -lt 300 ]; do
  for d in /sys/class/net/*; do
    [ "$(basename "$(readlink $d/device/driver 2>/dev/null)")" = igb ] && n=${{d##*/}}
  done
  [ -n "$n" ] || {{ sleep 1; i=$((i+1)); }}
done
[ -n "$n" ] || {{ echo "NICERR no igb interface"; exit 1; }}
ip addr add {guest_ip}/24 dev $n
ip link set $n up
i=0
until ping -c 1 -W 1 {peer_ip} >/dev/null 2>&1; do
  i=$((i+1))
  [ $i -lt 120 ] || {{ echo "NICERR {peer_ip} never answered"; exit 1; }}
done
echo "nic-ready $n"
r=0
while :; do
  r=$((r+1))
  echo "nic-round $r $(ping -c 10 {peer_ip} | grep 'packets')"
done
"#
    )
}

/// One round of [`nic_workload`]: its number, pings sent, replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingRound {
    /// The round.
    pub n: u64,
    /// Pings sent.
    pub sent: u64,
    /// Replies received.
    pub received: u64,
}

/// The complete rounds of [`nic_workload`] on a console, in order.
pub fn ping_rounds(console: &str) -> Vec<PingRound> {
    console
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("nic-round ")?;
            let w: Vec<&str> = rest.split_whitespace().collect();
            // <n> <t> packets transmitted, <r> packets received, ...
            if w.len() < 6 || w[2] != "packets" || !w[3].starts_with("transmitted") {
                return None;
            }
            Some(PingRound {
                n: w[0].parse().ok()?,
                sent: w[1].parse().ok()?,
                received: w[4].parse().ok()?,
            })
        })
        .collect()
}

/// The rounds the workload verified, in the order printed.
pub fn nvme_rounds(console: &str) -> Vec<u64> {
    console
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("nvme-round ")?;
            rest.strip_suffix(" ok")?.parse().ok()
        })
        .collect()
}

/// What on a console says an I/O went wrong.
pub fn io_trouble(console: &str) -> Vec<&str> {
    console
        .lines()
        .filter(|l| {
            l.contains("IOERR")
                || l.contains("MISMATCH")
                || l.contains("I/O error")
                || l.contains("I/O Error")
                || (l.contains("nvme") && (l.contains("timeout") || l.contains("reset")))
        })
        .collect()
}

/// One block of round `round`, block `block`, as the workload writes it
/// (`yes "devlend-mig r<round> b<block> " | head -c 4096`).
pub fn nvme_block(round: u64, block: u64) -> Vec<u8> {
    let line = format!("devlend-mig r{round} b{block} \n");
    line.repeat(4096 / line.len() + 1).into_bytes()[..4096].to_vec()
}

/// One line of [`ram_workload`]: its counter and whether the buffers were
/// intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// The counter.
    pub n: u64,
    /// False when a buffer's bytes had changed.
    pub ok: bool,
}

/// The complete `tick` lines of a console, in order. A line that a
/// migration cut in two (its start on the source's console, its end on
/// the destination's) is not counted; nor is anything else.
pub fn ticks(console: &str) -> Vec<Tick> {
    console
        .lines()
        .filter_map(|l| {
            let mut w = l.trim_end_matches('\r').split(' ');
            if w.next()? != "tick" {
                return None;
            }
            let n = w.next()?.parse().ok()?;
            let ok = match w.next()? {
                "ok" => true,
                s if s.starts_with("BAD") => false,
                _ => return None,
            };
            Some(Tick { n, ok })
        })
        .collect()
}

/// What the counters on both sides of a migration prove: the source
/// counted to `before` (its last complete tick), and the destination
/// went on from there, without rebooting (its console has no boot of its
/// own), every tick after the previous one and every buffer intact; at
/// most one tick (a line the switch-over cut in two) between the two.
/// `after`: the destination's ticks so far. The first and last of them.
pub fn check_continued(
    before: &[Tick],
    after: &[Tick],
    dst_console: &str,
) -> anyhow::Result<(u64, u64)> {
    let last = before
        .last()
        .context("the source printed no tick before the migration")?;
    ensure!(
        before.iter().chain(after).all(|t| t.ok),
        "the guest's workload failed (a buffer of its RAM changed behind its back, or its I/O \
         failed or read other bytes): {:?}",
        before
            .iter()
            .chain(after)
            .filter(|t| !t.ok)
            .collect::<Vec<_>>()
    );
    ensure!(
        !dst_console.contains("DEVLEND-CMD-BEGIN") && !dst_console.contains("devlend-init"),
        "the destination's guest booted anew instead of running on:\n{dst_console}"
    );
    let first = after.first().context("the destination printed no tick")?;
    ensure!(
        first.n > last.n && first.n <= last.n + 2,
        "the destination's first tick is {} after the source's last {}: not where it left off",
        first.n,
        last.n
    );
    for w in after.windows(2) {
        ensure!(
            w[1].n == w[0].n + 1,
            "the destination's ticks jump from {} to {}",
            w[0].n,
            w[1].n
        );
    }
    Ok((first.n, after.last().map_or(first.n, |t| t.n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_read_whole_lines_only() {
        let c = "devlend-init: boot\r\nDEVLEND-CMD-BEGIN\ntick 1 ok\ntick 2 BAD 3 5\ntick 3 o";
        assert_eq!(
            ticks(c),
            [Tick { n: 1, ok: true }, Tick { n: 2, ok: false }]
        );
        assert_eq!(ticks("k 4 ok\ntick 5 ok\n"), [Tick { n: 5, ok: true }]);
    }

    #[test]
    fn continuity_is_checked() {
        let t = |n, ok| Tick { n, ok };
        let before = [t(1, true), t(2, true)];
        assert_eq!(
            check_continued(&before, &[t(3, true), t(4, true)], "tick 3 ok\n").unwrap(),
            (3, 4)
        );
        // A tick cut in two by the switch-over.
        assert!(check_continued(&before, &[t(4, true), t(5, true)], "").is_ok());
        for (after, console, why) in [
            (vec![t(2, true)], "", "not where it left off"),
            (vec![t(6, true)], "", "not where it left off"),
            (vec![t(3, true), t(5, true)], "", "jump"),
            (vec![t(3, false)], "", "behind its back"),
            (vec![t(3, true)], "devlend-init: boot", "booted anew"),
            (vec![], "", "no tick"),
        ] {
            let e = check_continued(&before, &after, console).unwrap_err();
            assert!(e.to_string().contains(why), "{after:?}: {e}");
        }
    }

    #[test]
    fn query_migrate_figures() {
        let v: Value = serde_json::from_str(
            r#"{"status":"completed","total-time":5120,"downtime":231,"setup-time":12,
                "ram":{"transferred":41943040,"total":268435456,"dirty-sync-count":4}}"#,
        )
        .unwrap();
        let st = MigrationStats::from_query_migrate("borrower", "borrower2", &v).unwrap();
        assert_eq!(st.downtime_ms, Some(231));
        assert_eq!(st.transferred_bytes, Some(40 << 20));
        assert_eq!(
            st.summary(),
            "borrower -> borrower2: completed, total 5120 ms, downtime 231 ms, setup 12 ms, \
             40.0 MiB sent of 256.0 MiB RAM, 4 dirty syncs"
        );
        let f: Value = serde_json::from_str(
            r#"{"status":"failed","error-desc":"Unable to write to socket: Connection reset by peer"}"#,
        )
        .unwrap();
        let st = MigrationStats::from_query_migrate("a", "b", &f).unwrap();
        assert_eq!(
            st.error.as_deref(),
            Some("Unable to write to socket: Connection reset by peer")
        );
        assert!(st.summary().contains("failed (Unable"));
    }

    #[test]
    fn qmp_answers_and_errors() {
        let cmds = [
            cmd("query-status"),
            cmd_with("migrate", json!({"uri": "tcp:x:1"})),
        ];
        let ok = "{\"return\":{\"status\":\"running\"}}\n{\"return\":{}}\n";
        let r = parse_qmp_answers(ok, &cmds).unwrap();
        assert_eq!(r[0]["status"], "running");
        let err = "{\"return\":{}}\n{\"error\":\"QEMU refused migrate: no\"}\n";
        let e = parse_qmp_answers(err, &cmds).unwrap_err().to_string();
        assert!(e.contains("migrate") && e.contains("refused"), "{e}");
        assert!(parse_qmp_answers("{\"return\":{}}\n", &cmds).is_err());
    }

    #[test]
    fn nvme_block_is_yes_head() {
        let b = nvme_block(7, 3);
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[..33], b"devlend-mig r7 b3 \ndevlend-mig r7");
        let w = nvme_workload(0);
        assert!(w.contains("yes \"devlend-mig r$round b$b \" | head -c 4096"));
        assert!(w.contains("seek=$((8192+b))") && w.contains("-lt 16 ]"));
        assert!(crate::guest::kernel_cmdline(&w).is_ok());
        let console = "nvme-ready /dev/nvme0n1\nnvme-round 1 ok\n[ 3.1] nvme nvme0: I/O timeout\nnvme-round 2 ok\nnvme-rou";
        assert_eq!(nvme_rounds(console), [1, 2]);
        assert_eq!(io_trouble(console), ["[ 3.1] nvme nvme0: I/O timeout"]);
    }

    /// [`nvme_workload`] in a guest with busybox's tools as the migrating
    /// guests have them (no 9p share), on an emulated NVMe: its rounds
    /// pass, and the backing file holds the last round's [`nvme_block`]s
    /// and nothing else. One QEMU under TCG on this machine, no cluster
    /// (about a minute): `cargo test -p devlend-vmtests --lib --
    /// --ignored --nocapture migrate::tests::tcg`.
    #[test]
    #[ignore]
    fn tcg_guest_nvme_workload_writes_its_blocks() {
        let images = devlend_cluster::tools::guest_images_dir().unwrap();
        let dir = std::env::temp_dir().join(format!("devlend-migwl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let disk = dir.join("disk.img");
        std::fs::write(&disk, vec![0u8; 64 << 20]).unwrap();
        let cmd = format!("{}\necho rounds-done", nvme_workload(3));
        let out = std::process::Command::new("timeout")
            .args([
                "600",
                "qemu-system-x86_64",
                "-machine",
                "q35",
                "-accel",
                "tcg",
            ])
            .args([
                "-cpu",
                "max",
                "-m",
                "256",
                "-nodefaults",
                "-display",
                "none",
            ])
            .args(["-no-reboot", "-serial", "stdio", "-kernel"])
            .arg(images.join("vmlinuz"))
            .arg("-initrd")
            .arg(images.join("guest-initrd.img"))
            .arg("-append")
            .arg(crate::guest::kernel_cmdline(&cmd).unwrap())
            .arg("-drive")
            .arg(format!("file={},if=none,id=d0,format=raw", disk.display()))
            .args(["-device", "nvme,drive=d0,serial=migwl"])
            .output()
            .unwrap();
        let console = String::from_utf8_lossy(&out.stdout).into_owned();
        let run = crate::guest::parse_console(console, Duration::ZERO).unwrap();
        eprintln!("guest output:\n{}", run.output);
        assert_eq!(run.rc, 0);
        assert_eq!(nvme_rounds(&run.output), [1, 2, 3], "{}", run.output);
        assert!(io_trouble(&run.output).is_empty(), "{}", run.output);
        let bytes = std::fs::read(&disk).unwrap();
        let base = (NVME_BASE_BLOCK * 4096) as usize;
        for b in 0..NVME_BLOCKS {
            let at = base + (b as usize) * 4096;
            assert!(bytes[at..at + 4096] == nvme_block(3, b)[..], "block {b}");
        }
        let end = base + (NVME_BLOCKS as usize) * 4096;
        assert!(bytes[..base].iter().chain(&bytes[end..]).all(|&b| b == 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ping_rounds_are_parsed() {
        let c = "nic-ready eth0\nnic-round 1 10 packets transmitted, 10 packets received, 0% packet loss\n\
                 nic-round 2 10 packets transmitted, 7 packets received, 30% packet loss\n\
                 nic-round 3 \nnic-round 4 10 packets transmi";
        assert_eq!(
            ping_rounds(c),
            [
                PingRound {
                    n: 1,
                    sent: 10,
                    received: 10
                },
                PingRound {
                    n: 2,
                    sent: 10,
                    received: 7
                },
            ]
        );
        let w = nic_workload("10.79.0.1", "10.79.0.2");
        assert!(w.contains("ip addr add 10.79.0.2/24") && w.contains("ping -c 10 10.79.0.1"));
        assert!(crate::guest::kernel_cmdline(&w).is_ok());
    }

    /// [`nic_workload`] in a guest as the migrating guests are, with an
    /// igb on QEMU's user network, pinging its gateway: the guest's init
    /// loads igb, the workload finds its interface and its rounds count
    /// the replies. One QEMU under TCG on this machine, no cluster (about
    /// a minute): `cargo test -p devlend-vmtests --lib -- --ignored
    /// --nocapture migrate::tests::tcg`.
    #[test]
    #[ignore]
    fn tcg_guest_nic_workload_counts_its_pings() {
        let images = devlend_cluster::tools::guest_images_dir().unwrap();
        let out = std::process::Command::new("timeout")
            .args(["90", "qemu-system-x86_64", "-machine", "q35"])
            .args(["-accel", "tcg", "-cpu", "max", "-m", "256", "-nodefaults"])
            .args(["-display", "none", "-no-reboot", "-serial", "stdio"])
            .arg("-kernel")
            .arg(images.join("vmlinuz"))
            .arg("-initrd")
            .arg(images.join("guest-initrd.img"))
            .arg("-append")
            .arg(crate::guest::kernel_cmdline(&nic_workload("10.0.2.2", "10.0.2.15")).unwrap())
            .args(["-netdev", "user,id=n0", "-device", "igb,netdev=n0"])
            .output()
            .unwrap();
        let console = String::from_utf8_lossy(&out.stdout).into_owned();
        let rounds = ping_rounds(&console);
        assert!(console.contains("nic-ready "), "{console}");
        assert!(rounds.len() >= 2, "{console}");
        assert!(
            rounds.iter().all(|r| r.sent == 10 && r.received == 10),
            "{rounds:?}"
        );
    }

    #[test]
    fn a_share_is_refused() {
        let spec = GuestSpec::new("g1", "true");
        assert!(spec.check("-device vfio-pci,sysfsdev=/x,addr=05.0").is_ok());
        assert!(spec
            .check("-virtfs local,path=/,mount_tag=outer,security_model=none")
            .is_err());
        assert!(spec.check("-incoming defer").is_err());
        assert!(GuestSpec::new("G 1", "true").check("").is_err());
        assert_eq!(quote("a'b"), r"'a'\''b'");
    }
}
