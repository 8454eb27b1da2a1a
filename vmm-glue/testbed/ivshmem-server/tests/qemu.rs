//! The server with real QEMU (`qemu-system-x86_64`, TCG, no guest code).
//!
//! Not part of plain `cargo test`: it needs QEMU and takes a few seconds.
//! Run with `cargo test -p devlend-ivshmem-server --test qemu -- --ignored`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Client;
use devlend_ivshmem_server::EventFd;
use devlend_wire::{ControlArea, DL_CTL_MAGIC, DL_DEFAULT_CTL_SIZE};
use serde_json::{json, Value};

const SERVER: &str = env!("CARGO_BIN_EXE_devlend-ivshmem-server");
const QEMU: &str = "qemu-system-x86_64";
const VECTORS: u32 = 4;
const WAIT: Duration = Duration::from_secs(30);

/// A child process, stopped by its pid: SIGTERM and wait in `stop`,
/// SIGKILL and wait if dropped (a failed test).
struct Proc {
    name: String,
    child: Child,
    status: Option<std::process::ExitStatus>,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command) -> Self {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            name: name.to_owned(),
            child,
            status: None,
        }
    }

    /// Signals the process unless it has been reaped (then its pid may
    /// name another process).
    fn signal(&mut self, sig: libc::c_int) {
        if self.status.is_some() {
            return;
        }
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill() takes no pointers; `pid` is our child and has not
        // been reaped (`status` is None), so it names no other process.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill {}", self.name);
    }

    fn alive(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().unwrap();
        }
        self.status.is_none()
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        if self.status.is_none() {
            self.status = Some(self.child.wait().unwrap());
        }
        self.status.unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.signal(libc::SIGKILL);
            self.status = self.child.wait().ok();
        }
    }
}

fn qemu_available() -> bool {
    Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Fabric {
    dir: tempfile::TempDir,
    server: Option<Proc>,
}

impl Fabric {
    fn start(hosts: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let server = Proc::spawn(
            "server",
            Command::new(SERVER)
                .arg("--socket-dir")
                .arg(dir.path())
                .arg("--hosts")
                .arg(hosts.to_string())
                .arg("--ctl-path")
                .arg(dir.path().join("fabric.ctl"))
                .arg("--vectors")
                .arg(VECTORS.to_string())
                .arg("--pidfile")
                .arg(dir.path().join("server.pid"))
                .stderr(log),
        );
        let pidfile = dir.path().join("server.pid");
        wait_until("the server's pid file", || pidfile.exists());
        Fabric {
            dir,
            server: Some(server),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("server.log")).unwrap()
    }

    fn wait_log(&self, needle: &str, count: usize) {
        wait_until(&format!("{count} x {needle:?} in the server log"), || {
            self.log().matches(needle).count() >= count
        });
    }

    /// A paused QEMU whose ivshmem-doorbell is host `id`, with `extra`
    /// arguments (QMP, qtest).
    fn qemu(&self, id: u32, extra: &[&str]) -> Proc {
        let log = std::fs::File::create(self.path(&format!("qemu{id}.log"))).unwrap();
        let sock = self.path(&format!("doorbell-{id}.sock"));
        Proc::spawn(
            &format!("qemu{id}"),
            Command::new(QEMU)
                .args(["-machine", "q35", "-accel", "tcg", "-m", "128"])
                .args(["-display", "none", "-nodefaults", "-S"])
                .arg("-chardev")
                .arg(format!("socket,id=db,path={}", sock.display()))
                .arg("-device")
                .arg(format!("ivshmem-doorbell,chardev=db,vectors={VECTORS}"))
                .args(extra)
                .stdout(Stdio::null())
                .stderr(log),
        )
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let status = server.stop();
            if !std::thread::panicking() {
                assert!(status.success(), "server: {status}");
            }
        }
    }
}

/// A minimal QMP client.
struct Qmp(BufReader<UnixStream>);

impl Qmp {
    fn connect(path: &Path) -> Self {
        wait_until("the QMP socket", || path.exists());
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let mut qmp = Qmp(BufReader::new(stream));
        let mut greeting = String::new();
        qmp.0.read_line(&mut greeting).unwrap();
        assert!(greeting.contains("QMP"), "{greeting}");
        qmp.cmd("qmp_capabilities");
        qmp
    }

    fn cmd(&mut self, execute: &str) -> Value {
        let mut line = json!({ "execute": execute }).to_string();
        line.push('\n');
        self.0.get_mut().write_all(line.as_bytes()).unwrap();
        loop {
            let mut reply = String::new();
            self.0.read_line(&mut reply).unwrap();
            let v: Value = serde_json::from_str(&reply).unwrap();
            if let Some(r) = v.get("return") {
                return r.clone();
            }
            assert!(v.get("error").is_none(), "{execute}: {v}");
        }
    }

    /// The BAR sizes of the ivshmem device (1af4:1110).
    fn ivshmem_bars(&mut self) -> Vec<(u64, u64)> {
        let buses = self.cmd("query-pci");
        let dev = buses
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["devices"].as_array().unwrap())
            .find(|d| d["id"]["vendor"] == 0x1af4 && d["id"]["device"] == 0x1110)
            .expect("no ivshmem device");
        dev["regions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["bar"].as_u64().unwrap(), r["size"].as_u64().unwrap()))
            .collect()
    }
}

#[test]
#[ignore = "needs qemu-system-x86_64; run with --ignored"]
fn two_qemus_connect_stay_up_and_survive_restarts() {
    if !qemu_available() {
        eprintln!("SKIPPED: {QEMU} is not installed");
        return;
    }
    let fabric = Fabric::start(2);
    let qmp0 = fabric.path("qmp0.sock");
    let qmp1 = fabric.path("qmp1.sock");
    let qmp_arg = |p: &Path| format!("unix:{},server=on,wait=off", p.display());
    let mut q0 = fabric.qemu(0, &["-qmp", &qmp_arg(&qmp0)]);
    let mut q1 = fabric.qemu(1, &["-qmp", &qmp_arg(&qmp1)]);
    fabric.wait_log("host 0 connected", 1);
    fabric.wait_log("host 1 connected", 1);

    for path in [&qmp0, &qmp1] {
        let mut qmp = Qmp::connect(path);
        assert_eq!(qmp.cmd("query-status")["status"], "prelaunch");
        // BAR2 is the control area the server sent.
        let bars = qmp.ivshmem_bars();
        assert!(bars.contains(&(2, DL_DEFAULT_CTL_SIZE)), "{bars:?}");
    }

    // Host 1's QEMU is restarted a few times; host 0's must not notice.
    // (With announced disconnects QEMU 10.0 corrupts its heap here.)
    for round in 1..=3 {
        let status = q1.stop();
        assert!(status.success(), "qemu1 round {round}: {status}");
        fabric.wait_log("host 1 disconnected", round);
        q1 = fabric.qemu(1, &[]);
        fabric.wait_log("host 1 connected", round + 1);
        std::thread::sleep(Duration::from_millis(300));
        assert!(q0.alive(), "qemu0 died in round {round}");
        assert!(q1.alive(), "qemu1 died in round {round}");
    }
    let log = fabric.log();
    assert!(!log.contains("refused"), "{log}");
    // A QEMU whose heap was corrupted tends to crash on the way out.
    for (name, q) in [("qemu0", q0), ("qemu1", q1)] {
        let status = q.stop();
        assert!(status.success(), "{name}: {status}");
    }
    fabric.wait_log("host 0 disconnected", 1);
}

/// Drives a paused QEMU's memory and I/O with the qtest protocol.
struct Qtest(BufReader<UnixStream>);

/// The ivshmem device on a q35 machine with `-nodefaults`: 00:01.0.
const IVSHMEM_CFG: u32 = 0x8000_0000 | (1 << 11);
const BAR0: u64 = 0xc000_0000;
const BAR1: u64 = 0xc000_1000;
const BAR2: u64 = 0xc040_0000;

impl Qtest {
    fn connect(path: &Path) -> Self {
        wait_until("the qtest socket", || path.exists());
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        Qtest(BufReader::new(stream))
    }

    fn cmd(&mut self, cmd: &str) -> u64 {
        self.0
            .get_mut()
            .write_all(format!("{cmd}\n").as_bytes())
            .unwrap();
        loop {
            let mut reply = String::new();
            self.0.read_line(&mut reply).unwrap();
            let mut words = reply.split_whitespace();
            match words.next() {
                Some("OK") => {
                    return words
                        .next()
                        .map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap())
                        .unwrap_or(0)
                }
                Some("IRQ") => continue,
                _ => panic!("qtest {cmd:?}: {reply:?}"),
            }
        }
    }

    fn cfg_read(&mut self, reg: u32) -> u32 {
        self.cmd(&format!("outl 0xcf8 {:#x}", IVSHMEM_CFG | reg));
        self.cmd("inl 0xcfc") as u32
    }

    fn cfg_write(&mut self, reg: u32, value: u32) {
        self.cmd(&format!("outl 0xcf8 {:#x}", IVSHMEM_CFG | reg));
        self.cmd(&format!("outl 0xcfc {value:#x}"));
    }
}

/// A paused QEMU as host 0, driven through qtest, with its ivshmem
/// device's BARs mapped and MSI-X enabled (every vector masked, so an
/// interrupt only sets its pending bit).
struct DrivenQemu {
    proc: Proc,
    qt: Qtest,
    pba: u64,
}

impl DrivenQemu {
    fn start(fabric: &Fabric, name: &str) -> Self {
        let qtest_sock = fabric.path(name);
        let _ = std::fs::remove_file(&qtest_sock);
        let proc = fabric.qemu(
            0,
            &[
                "-qtest",
                &format!("unix:{},server=on,wait=off", qtest_sock.display()),
            ],
        );
        let mut qt = Qtest::connect(&qtest_sock);
        assert_eq!(qt.cfg_read(0), 0x1110_1af4, "ivshmem is not at 00:01.0");
        qt.cfg_write(0x10, BAR0 as u32);
        qt.cfg_write(0x14, BAR1 as u32);
        qt.cfg_write(0x18, BAR2 as u32);
        qt.cfg_write(0x1c, 0);
        qt.cfg_write(0x04, 0x2); // memory space enable
        assert_eq!(qt.cmd(&format!("readl {:#x}", BAR0 + 8)), 0, "IVPosition");
        let mut cap = qt.cfg_read(0x34) & 0xff;
        while qt.cfg_read(cap) & 0xff != 0x11 {
            cap = (qt.cfg_read(cap) >> 8) & 0xff;
            assert_ne!(cap, 0, "no MSI-X capability");
        }
        let pba = u64::from(qt.cfg_read(cap + 8) & !7);
        let ctl = qt.cfg_read(cap);
        qt.cfg_write(cap, ctl | (1 << 31));
        DrivenQemu { proc, qt, pba }
    }

    /// QEMU rings vector `v` of host `peer`.
    fn ring(&mut self, peer: u32, v: u32) {
        self.qt
            .cmd(&format!("writel {:#x} {:#x}", BAR0 + 12, (peer << 16) | v));
    }

    /// Waits until vector `v`'s pending bit is set.
    fn wait_pending(&mut self, v: u32) {
        let addr = BAR1 + self.pba;
        wait_until(&format!("pending bit of vector {v}"), || {
            self.qt.cmd(&format!("readl {addr:#x}")) & (1 << v) != 0
        });
    }

    fn pending(&mut self) -> u64 {
        self.qt.cmd(&format!("readl {:#x}", BAR1 + self.pba))
    }
}

/// Host 1's doorbells rung by QEMU arrive on `own1`; ringing `to_q0`
/// interrupts QEMU's vectors.
fn check_doorbells(q0: &mut DrivenQemu, own1: &[EventFd], to_q0: &[EventFd]) {
    for v in 0..VECTORS {
        q0.ring(1, v);
        wait_readable(&own1[v as usize]);
        assert_eq!(own1[v as usize].read().unwrap(), 1);
    }
    assert_eq!(q0.pending(), 0, "vectors pending before any ring");
    for v in 0..VECTORS {
        to_q0[v as usize].write(1).unwrap();
        q0.wait_pending(v);
    }
}

#[test]
#[ignore = "needs qemu-system-x86_64; run with --ignored"]
fn qemu_rings_and_is_rung_through_server_eventfds() {
    if !qemu_available() {
        eprintln!("SKIPPED: {QEMU} is not installed");
        return;
    }
    let fabric = Fabric::start(2);
    // Host 1 is a fake client, host 0 a QEMU driven through qtest.
    let c1 = Client::connect(&fabric.path("doorbell-1.sock"));
    c1.expect_greeting(1);
    let own1 = c1.expect_vectors(1, VECTORS);
    let mut q0 = DrivenQemu::start(&fabric, "qtest-a.sock");
    let to_q0 = c1.expect_vectors(0, VECTORS);

    // BAR2 is the control area file.
    assert_eq!(q0.qt.cmd(&format!("readq {BAR2:#x}")), DL_CTL_MAGIC);
    q0.qt
        .cmd(&format!("writeq {:#x} 0x1122334455667788", BAR2 + 0x1000));
    let mut word = [0u8; 8];
    std::fs::File::open(fabric.path("fabric.ctl"))
        .unwrap()
        .read_exact_at(&mut word, 0x1000)
        .unwrap();
    assert_eq!(u64::from_ne_bytes(word), 0x1122_3344_5566_7788);
    assert!(ControlArea::open(fabric.path("fabric.ctl")).is_ok());

    check_doorbells(&mut q0, &own1, &to_q0);

    // Host 1 reconnects: it gets the same eventfds back, QEMU nothing.
    drop(c1);
    fabric.wait_log("host 1 disconnected", 1);
    let c1 = Client::connect(&fabric.path("doorbell-1.sock"));
    c1.expect_greeting(1);
    let to_q0 = c1.expect_vectors(0, VECTORS);
    let own1 = c1.expect_vectors(1, VECTORS);
    // Clear QEMU's pending bits by restarting it: host 0's QEMU restarts,
    // host 1 is sent nothing and its old copies of host 0's eventfds
    // reach the new QEMU.
    let status = q0.proc.stop();
    assert!(status.success(), "qemu0: {status}");
    fabric.wait_log("host 0 disconnected", 1);
    let mut q0 = DrivenQemu::start(&fabric, "qtest-b.sock");
    fabric.wait_log("host 0 connected", 2);
    c1.expect_nothing(Duration::from_millis(300));
    check_doorbells(&mut q0, &own1, &to_q0);

    let status = q0.proc.stop();
    assert!(status.success(), "qemu0: {status}");
}

fn wait_readable(e: &EventFd) {
    let mut fds = [libc::pollfd {
        fd: e.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: `fds` is a valid array of one pollfd for the duration of
    // the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, WAIT.as_millis() as i32) };
    assert_eq!(n, 1, "eventfd was not rung");
}
