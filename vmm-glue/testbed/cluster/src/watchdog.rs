//! A watch on every host's heartbeat from outside the hosts.
//!
//! A host's kernel bumps its heartbeat in the control area every 200 ms
//! (docs/fabric-protocol.md). When a host that should be running stops
//! beating, the watchdog writes down what its QEMU and vCPUs are doing
//! (threads, registers, local APICs, the end of the console) into the run
//! directory and says so on stderr, so that a freeze explains itself
//! rather than showing only as a test that timed out (docs/testing.md,
//! "If a host freezes"). After the first report it sends the host one
//! interrupt (a key press), which ends a freeze caused by QEMU's lost
//! wake-up of a halted vCPU; it never does anything else to a host.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use devlend_wire::{ControlArea, HostSlot, HostState};

/// How long a running host may go without a beat before it is written
/// down. Half the peer timeout (8 s): TCG hosts on a busy machine skip a
/// beat or two, a host that is reported at this age is about to be
/// declared down by its peers.
pub const STALL: Duration = Duration::from_secs(4);
/// A second look at a host still silent this long, to see what moved.
pub const STALL_AGAIN: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(500);
const QMP_TIMEOUT: Duration = Duration::from_secs(3);

/// What the cluster tells the watchdog about one host.
#[derive(Debug)]
struct Watched {
    name: String,
    qmp: PathBuf,
    serial: PathBuf,
    /// QEMU's pid, 0 while not running.
    pid: AtomicU32,
    /// Frozen or being stopped on purpose: silence is expected.
    quiet: AtomicBool,
    /// Bumped whenever the cluster changes either, so the watch starts over.
    epoch: AtomicU32,
}

/// The watchdog thread and what it watches; stops when dropped.
#[derive(Debug)]
pub struct Watchdog {
    hosts: Arc<Vec<Watched>>,
    stop: Arc<AtomicBool>,
    reports: Arc<Mutex<Vec<PathBuf>>>,
    thread: Option<JoinHandle<()>>,
}

/// Where one host's files are, for [`Watchdog::start`].
#[derive(Debug, Clone)]
pub struct WatchedHost {
    /// The host's name.
    pub name: String,
    /// Its QEMU's QMP socket.
    pub qmp: PathBuf,
    /// Its serial console log.
    pub serial: PathBuf,
}

impl Watchdog {
    /// Starts watching the control area `ctl`; reports go into `dir`.
    /// Hosts are in fabric-id order, and none is watched until
    /// [`Watchdog::running`] gives its pid.
    pub fn start(ctl: PathBuf, dir: PathBuf, hosts: Vec<WatchedHost>) -> Watchdog {
        let hosts: Arc<Vec<Watched>> = Arc::new(
            hosts
                .into_iter()
                .map(|h| Watched {
                    name: h.name,
                    qmp: h.qmp,
                    serial: h.serial,
                    pid: AtomicU32::new(0),
                    quiet: AtomicBool::new(false),
                    epoch: AtomicU32::new(0),
                })
                .collect(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let reports = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (hosts, stop, reports) = (hosts.clone(), stop.clone(), reports.clone());
            std::thread::Builder::new()
                .name("devlend-watchdog".into())
                .spawn(move || watch(&ctl, &dir, &hosts, &stop, &reports))
                .map_err(|e| log::warn!("no heartbeat watchdog: {e}"))
                .ok()
        };
        Watchdog {
            hosts,
            stop,
            reports,
            thread,
        }
    }

    fn set(&self, id: usize, f: impl FnOnce(&Watched)) {
        if let Some(h) = self.hosts.get(id) {
            f(h);
            h.epoch.fetch_add(1, Ordering::Release);
        }
    }

    /// Host `id` runs as QEMU `pid` (0: not running).
    pub fn running(&self, id: usize, pid: u32) {
        self.set(id, |h| {
            h.pid.store(pid, Ordering::Release);
            h.quiet.store(false, Ordering::Release);
        });
    }

    /// Host `id` is frozen on purpose (true) or runs on (false).
    pub fn quiet(&self, id: usize, quiet: bool) {
        self.set(id, |h| h.quiet.store(quiet, Ordering::Release));
    }

    /// The files stalls were written down in, oldest first.
    pub fn reports(&self) -> Vec<PathBuf> {
        self.reports.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Deletes the reports, for a test that silenced a host on purpose.
    pub fn clear_reports(&self) {
        if let Ok(mut r) = self.reports.lock() {
            for f in r.drain(..) {
                let _ = std::fs::remove_file(f);
            }
        }
    }

    /// Stops the thread (also done on drop).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Per host: the last beat seen and what has been said about the silence.
#[derive(Default, Clone)]
struct Beat {
    epoch: u32,
    /// The QEMU watched.
    pid: u32,
    /// The incarnation the host's slot showed when that QEMU was started:
    /// a kernel that is gone, whose beat stands still until the new one
    /// attaches (a restarted host).
    before: Option<Option<u64>>,
    last: Option<(u64, u64)>,
    since: Option<Instant>,
    reports: u32,
    file: Option<PathBuf>,
}

fn watch(
    ctl: &Path,
    dir: &Path,
    hosts: &[Watched],
    stop: &AtomicBool,
    reports: &Mutex<Vec<PathBuf>>,
) {
    let mut beats = vec![Beat::default(); hosts.len()];
    let mut area: Option<ControlArea> = None;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(POLL);
        if area.is_none() {
            area = ControlArea::open(ctl).ok();
        }
        let Some(a) = area.as_ref() else { continue };
        for (id, (h, b)) in hosts.iter().zip(beats.iter_mut()).enumerate() {
            let epoch = h.epoch.load(Ordering::Acquire);
            let pid = h.pid.load(Ordering::Acquire);
            if epoch != b.epoch || pid == 0 || h.quiet.load(Ordering::Acquire) {
                *b = Beat {
                    epoch,
                    pid,
                    // Kept while the same QEMU runs (paused and resumed).
                    before: if pid == b.pid { b.before } else { None },
                    ..Beat::default()
                };
                continue;
            }
            let now = Instant::now();
            let up = match u32::try_from(id).map(|i| a.read_host(i)) {
                Ok(Ok(HostSlot::Valid(info))) if info.state == HostState::Up => {
                    Some((info.incarnation, info.heartbeat))
                }
                _ => None,
            };
            let before = *b.before.get_or_insert(up.map(|(inc, _)| inc));
            let beat = match up {
                // The kernel of an earlier QEMU of this host: no beat expected.
                Some((inc, _)) if before == Some(inc) => continue,
                Some(beat) => beat,
                // Booting, module not loaded, or left: no beat expected.
                None => {
                    b.last = None;
                    continue;
                }
            };
            if b.last != Some(beat) {
                if let (Some(since), Some(file)) = (b.since, b.file.take()) {
                    let note = format!(
                        "host {}: heartbeat moved again after {:.1} s\n",
                        h.name,
                        since.elapsed().as_secs_f64()
                    );
                    eprintln!("watchdog: {}", note.trim_end());
                    append(&file, &note);
                }
                *b = Beat {
                    epoch,
                    pid,
                    before: b.before,
                    last: Some(beat),
                    since: Some(now),
                    ..Beat::default()
                };
                continue;
            }
            let Some(since) = b.since else { continue };
            let silent = now.duration_since(since);
            let due = match b.reports {
                0 => STALL,
                1 => STALL_AGAIN,
                _ => continue,
            };
            if silent < due {
                continue;
            }
            b.reports += 1;
            let file = b.file.get_or_insert_with(|| {
                let t = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                dir.join(format!("freeze-{}-{t}.log", h.name))
            });
            let mut text = describe(h, pid, beat.1, silent);
            if b.reports == 1 {
                text.push_str(&kick(&h.qmp));
            }
            append(file, &text);
            if let Ok(mut r) = reports.lock() {
                if !r.contains(file) {
                    r.push(file.clone());
                }
            }
            eprintln!(
                "watchdog: host {} (QEMU pid {pid}) has not beaten for {:.1} s; \
                 threads, registers and local APICs written to {}",
                h.name,
                silent.as_secs_f64(),
                file.display()
            );
        }
    }
}

fn append(file: &Path, text: &str) {
    use std::io::Write;
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = r {
        log::warn!("watchdog: cannot write {}: {e}", file.display());
    }
}

/// Sends a silent host an interrupt: a key press on its PS/2 keyboard
/// (nothing reads it; the host's console is serial). QEMU 10.0's TCG can
/// leave a halted vCPU asleep with an APIC timer interrupt pending
/// (docs/testing.md, "If a host freezes"); any interrupt delivered to it
/// wakes it, before the peers' timeout declares it down. A host that is
/// stuck for another reason stays silent, and the second report says so.
fn kick(qmp: &Path) -> String {
    let keys = serde_json::json!({ "keys": [{ "type": "qcode", "data": "shift" }] });
    let r = devlend::qmp::Qmp::connect(qmp, QMP_TIMEOUT)
        .and_then(|mut q| q.execute("send-key", Some(keys), QMP_TIMEOUT));
    match r {
        Ok(_) => "-- kicked: a key press sent (an interrupt, for a lost wake-up)\n".to_owned(),
        Err(e) => format!("-- kick (send-key) failed: {e}\n"),
    }
}

/// What a silent host's QEMU is doing.
fn describe(h: &Watched, pid: u32, heartbeat: u64, silent: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== host {}: heartbeat {heartbeat} unchanged for {:.1} s (QEMU pid {pid})",
        h.name,
        silent.as_secs_f64()
    );
    s.push_str(&threads(pid));
    s.push_str(&monitor(&h.qmp));
    s.push_str("-- console, last lines\n");
    let console = std::fs::read_to_string(&h.serial).unwrap_or_default();
    let lines: Vec<&str> = console.lines().collect();
    for l in &lines[lines.len().saturating_sub(30)..] {
        let _ = writeln!(s, "{l}");
    }
    s
}

/// Each QEMU thread: name, state, kernel wait channel, CPU ticks used.
fn threads(pid: u32) -> String {
    let mut s = String::from("-- QEMU threads: tid name state wchan utime+stime\n");
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        s.push_str("QEMU is not running\n");
        return s;
    };
    for t in tasks.flatten() {
        let p = t.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        let stat = read("stat");
        // Fields after the parenthesised name: state is the first, utime
        // and stime the 12th and 13th.
        let rest: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = rest
            .get(11)
            .zip(rest.get(12))
            .and_then(|(u, k)| Some(u.parse::<u64>().ok()? + k.parse::<u64>().ok()?));
        let _ = writeln!(
            s,
            "{} {} {} {} {}",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            rest.first().unwrap_or(&"?"),
            read("wchan").trim(),
            ticks.map_or("?".into(), |t| t.to_string())
        );
    }
    s
}

/// The VM's run state, vCPUs, registers and local APICs, over QMP.
fn monitor(qmp: &Path) -> String {
    let mut s = String::new();
    let mut q = match devlend::qmp::Qmp::connect(qmp, QMP_TIMEOUT) {
        Ok(q) => q,
        Err(e) => {
            let _ = writeln!(s, "-- QMP: {e}");
            return s;
        }
    };
    let mut ask = |s: &mut String, cmd: &str, args: Option<serde_json::Value>| {
        let r = q.execute(cmd, args.clone(), QMP_TIMEOUT);
        let what = args.map_or_else(|| cmd.to_owned(), |a| a.to_string());
        let _ = writeln!(s, "-- {what}");
        match r {
            Ok(serde_json::Value::String(text)) => s.push_str(&text),
            Ok(v) => {
                let _ = writeln!(s, "{v}");
            }
            Err(e) => {
                let _ = writeln!(s, "error: {e}");
            }
        }
    };
    ask(&mut s, "query-status", None);
    ask(&mut s, "query-cpus-fast", None);
    let hmp = |cmd: &str| Some(serde_json::json!({ "command-line": cmd }));
    ask(&mut s, "human-monitor-command", hmp("info registers -a"));
    // One line per CPU index; `info lapic` takes an APIC id, which QEMU
    // gives CPU i as i on this machine type.
    let cpus = s.matches("\"cpu-index\"").count().max(1);
    for i in 0..cpus {
        ask(
            &mut s,
            "human-monitor-command",
            hmp(&format!("info lapic {i}")),
        );
    }
    ask(&mut s, "human-monitor-command", hmp("info pic"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_of_a_live_process_are_listed() {
        let s = threads(std::process::id());
        assert!(s.lines().count() >= 2, "{s}");
        for line in s.lines().skip(1) {
            assert!(line.split_whitespace().count() >= 5, "{line}");
        }
    }

    #[test]
    fn a_process_that_is_gone_says_so() {
        assert!(threads(u32::MAX).contains("not running"));
    }

    #[test]
    fn monitor_without_qemu_says_why() {
        let s = monitor(Path::new("/nonexistent/qmp.sock"));
        assert!(s.contains("QMP"), "{s}");
    }
}
