//! Driving the devlend module's fabric layer inside a host, through the
//! agent: load it, read peers from sysfs and debugfs, run the self-test.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use devlend_agent::AgentClient;

const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// devlend's modules, in load order: the fabric core, the emulated
/// backend, the lender, the borrower and the self-test client, whose
/// debugfs file [`selftest`] writes (mdev-kmod/Kbuild).
pub const MODULES: [&str; 5] = [
    "devlend_fabric",
    "devlend_ivshmem",
    "devlend_lender",
    "devlend_borrower",
    "devlend_fabric_selftest",
];

/// Where the built modules are: `$DEVLEND_KMOD_DIR`, else `mdev-kmod/`.
pub fn module_dir() -> PathBuf {
    std::env::var_os("DEVLEND_KMOD_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| devlend_cluster::tools::repo_root().join("mdev-kmod"))
}

/// Runs `cmd` with sh in a host; its stdout, or an error with everything.
pub fn sh(agent: &AgentClient, cmd: &str) -> anyhow::Result<String> {
    sh_timeout(agent, cmd, CMD_TIMEOUT)
}

/// [`sh`] with a timeout of its own.
pub fn sh_timeout(agent: &AgentClient, cmd: &str, timeout: Duration) -> anyhow::Result<String> {
    let out = agent
        .sh(cmd, timeout)
        .with_context(|| format!("agent could not run `{cmd}`"))?;
    if out.exit_code != Some(0) || out.timed_out {
        bail!(
            "`{cmd}` failed (exit {:?}, signal {:?}, timed out {}):\nstdout: {}\nstderr: {}",
            out.exit_code,
            out.signal,
            out.timed_out,
            out.stdout.trim_end(),
            out.stderr.trim_end()
        );
    }
    Ok(out.stdout)
}

/// Loads devlend's modules in a host, those not loaded yet, each after
/// the kernel's modules it depends on (insmod, unlike modprobe, does not
/// load them; ours are not in the host's module tree).
pub fn ensure_module(agent: &AgentClient) -> anyhow::Result<()> {
    let dir = module_dir();
    for m in MODULES {
        let ko = dir.join(format!("{m}.ko"));
        if !ko.is_file() {
            bail!("{} is not built: run `make -C mdev-kmod`", ko.display());
        }
    }
    sh(
        agent,
        &format!(
            "set -e; d={}; for m in {}; do \
               grep -q \"^$m \" /proc/modules && continue; \
               for dep in $(modinfo -F depends $d/$m.ko | tr , ' '); do \
                 case $dep in devlend_*) ;; *) modprobe $dep ;; esac; done; \
               insmod $d/$m.ko; done; \
             mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug",
            devlend_cluster::host_view(&dir).display(),
            MODULES.join(" ")
        ),
    )?;
    Ok(())
}

/// Unloads devlend's modules in a host, clients first, and checks that
/// none is left. Those not loaded are skipped: DKMS's modules, loaded by
/// `modprobe` for the lender or the borrower, leave out the self-test.
pub fn unload_modules(agent: &AgentClient) -> anyhow::Result<()> {
    let names: Vec<&str> = MODULES.iter().rev().copied().collect();
    sh(
        agent,
        &format!(
            "set -e; for m in {}; do \
               if grep -q \"^$m \" /proc/modules; then rmmod $m; fi; done",
            names.join(" ")
        ),
    )?;
    let loaded = sh(agent, "cat /proc/modules")?;
    let left: Vec<&str> = loaded
        .lines()
        .filter_map(|l| l.split(' ').next())
        .filter(|m| m.starts_with("devlend"))
        .collect();
    if !left.is_empty() {
        bail!("still loaded after rmmod: {}", left.join(", "));
    }
    Ok(())
}

/// The sysfs directory of the fabric adapter in a host.
const FABRIC: &str = "/sys/bus/pci/devices/*/fabric";

/// The host's own fabric id.
pub fn host_id(agent: &AgentClient) -> anyhow::Result<u32> {
    let s = sh(agent, &format!("cat {FABRIC}/host_id"))?;
    s.trim().parse().with_context(|| format!("host_id {s:?}"))
}

/// The state of peer `peer` as the host sees it ("up", "down"), or None if
/// the host does not know it.
pub fn peer_state(agent: &AgentClient, peer: u32) -> anyhow::Result<Option<String>> {
    let out = agent.sh(&format!("cat {FABRIC}/peers/{peer}/state"), CMD_TIMEOUT)?;
    Ok((out.exit_code == Some(0)).then(|| out.stdout.trim().to_owned()))
}

/// Waits until the host reports `peer` in `want` state; the time it took.
pub fn wait_peer_state(
    agent: &AgentClient,
    peer: u32,
    want: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < timeout {
        last = peer_state(agent, peer)?;
        if last.as_deref() == Some(want) {
            return Ok(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    bail!("peer {peer} not {want} after {timeout:?} (last state: {last:?})")
}

/// `key=value` pairs of one line.
pub fn parse_kv(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The debugfs counters of one peer.
pub fn peer_counters(agent: &AgentClient, peer: u32) -> anyhow::Result<HashMap<String, String>> {
    let text = sh(agent, "cat /sys/kernel/debug/devlend/peers")?;
    text.lines()
        .map(parse_kv)
        .find(|kv| kv.get("peer").map(String::as_str) == Some(&peer.to_string()))
        .with_context(|| format!("peer {peer} not in debugfs peers:\n{text}"))
}

/// A counter as a number.
pub fn counter(kv: &HashMap<String, String>, key: &str) -> anyhow::Result<u64> {
    kv.get(key)
        .with_context(|| format!("no {key} in {kv:?}"))?
        .parse()
        .with_context(|| format!("{key} is not a number in {kv:?}"))
}

/// How far each counter of a key=value line moved: `after - before` of
/// every key that is a number in both.
pub fn deltas(
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
) -> HashMap<String, i64> {
    after
        .keys()
        .map(|k| (k.clone(), grew(before, after, k)))
        .filter(|(k, _)| number(before, k).is_some() && number(after, k).is_some())
        .collect()
}

/// `after[key] - before[key]`, 0 where either is missing or no number.
pub fn grew(before: &HashMap<String, String>, after: &HashMap<String, String>, key: &str) -> i64 {
    number(after, key)
        .zip(number(before, key))
        .map_or(0, |(a, b)| a - b)
}

fn number(kv: &HashMap<String, String>, key: &str) -> Option<i64> {
    kv.get(key).and_then(|v| v.parse().ok())
}

/// Runs the module's fabric self-test toward `peer`; its result line.
pub fn selftest(
    agent: &AgentClient,
    peer: u32,
    count: u32,
    size: u32,
    window: u32,
) -> anyhow::Result<HashMap<String, String>> {
    let out = sh_timeout(
        agent,
        &format!(
            "echo 'peer={peer} count={count} size={size} window={window}' > /sys/kernel/debug/devlend/selftest; \
             cat /sys/kernel/debug/devlend/selftest"
        ),
        Duration::from_secs(600),
    )?;
    Ok(parse_kv(out.trim()))
}

/// Runs the module's fabric self-test toward `peer` and reads the result
/// line, also when pings failed (the write then fails with EIO): the line
/// as key=value, plus `write_ok` (`true` or `false`) and, if the write
/// failed, `write_error`. An error if the run did not end within
/// `timeout`.
pub fn selftest_outcome(
    agent: &AgentClient,
    peer: u32,
    count: u32,
    size: u32,
    window: u32,
    timeout: Duration,
) -> anyhow::Result<HashMap<String, String>> {
    let cmd = format!(
        "if echo 'peer={peer} count={count} size={size} window={window}' \
           > /sys/kernel/debug/devlend/selftest; then echo write_ok=true; \
         else echo write_ok=false; fi; cat /sys/kernel/debug/devlend/selftest"
    );
    let out = agent
        .sh(&cmd, timeout)
        .with_context(|| format!("agent could not run `{cmd}`"))?;
    if out.timed_out || out.exit_code != Some(0) {
        bail!(
            "the self-test toward peer {peer} ({count} pings) did not end within {timeout:?} \
             (exit {:?}, timed out {}): {}",
            out.exit_code,
            out.timed_out,
            out.stderr.trim_end()
        );
    }
    let mut kv = parse_kv(&out.stdout);
    if kv.get("write_ok").map(String::as_str) != Some("true") {
        kv.insert("write_error".into(), out.stderr.trim().replace(' ', "_"));
    }
    Ok(kv)
}
