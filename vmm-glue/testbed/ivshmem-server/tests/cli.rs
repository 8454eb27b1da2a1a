//! The `devlend-ivshmem-server` binary: arguments, pid file, signals.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Client;
use devlend_wire::ControlArea;

const BIN: &str = env!("CARGO_BIN_EXE_devlend-ivshmem-server");

/// These tests run one at a time. Run in parallel threads, the SIGINT test
/// saw its server close the first connection once in about 40 runs (none
/// in 80 runs one at a time, none alone); the cause is not established.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The server process; killed (SIGKILL) if the test fails before it is
/// stopped.
struct Server(Option<Child>);

impl Server {
    fn child(&self) -> &Child {
        self.0.as_ref().unwrap()
    }

    fn wait_with_output(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            kill(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

fn spawn(dir: &Path, extra: &[&str]) -> Server {
    let child = Command::new(BIN)
        .arg("--socket-dir")
        .arg(dir)
        .arg("--ctl-path")
        .arg(dir.join("fabric.ctl"))
        .arg("--pidfile")
        .arg(dir.join("server.pid"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Server(Some(child))
}

fn kill(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill() takes no pointers; `pid` is our own child, not yet
    // reaped, so it cannot name another process.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

fn stop_with(sig: libc::c_int, sig_name: &str) {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(
        dir.path(),
        &[
            "--hosts",
            "2",
            "--ctl-size",
            "1M",
            "--vectors",
            "2",
            "--ring-slots",
            "16",
            "--slot-size",
            "128",
        ],
    );
    let pidfile = dir.path().join("server.pid");
    wait_for(&pidfile);
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid, server.child().id());

    // The pid file is written once every socket accepts connections.
    let c1 = Client::connect(&dir.path().join("doorbell-1.sock"));
    let shm = c1.expect_greeting(1);
    c1.expect_vectors(1, 2);
    let area = ControlArea::from_file(std::fs::File::from(shm), "shm".into()).unwrap();
    assert_eq!(area.layout().total_size(), 1 << 20);
    assert_eq!(area.layout().max_hosts(), 2);
    assert_eq!(area.layout().ring_slots(), 16);
    assert_eq!(area.layout().slot_size(), 128);
    let c0 = Client::connect(&dir.path().join("doorbell-0.sock"));
    c0.expect_greeting(0);
    c0.expect_vectors(1, 2);
    c0.expect_vectors(0, 2);
    c1.expect_vectors(0, 2);
    // Host 0 leaves and comes back (its new connection makes the server
    // notice the old one is gone); host 1 already knows it.
    drop(c0);
    let c0 = Client::connect(&dir.path().join("doorbell-0.sock"));
    c0.expect_greeting(0);
    c0.expect_vectors(1, 2);
    c0.expect_vectors(0, 2);
    c1.expect_nothing(Duration::from_millis(200));

    kill(server.child(), sig);
    let out = server.wait_with_output();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {log}", out.status);
    assert!(log.contains("host 1 connected"), "{log}");
    assert!(log.contains("host 0 connected"), "{log}");
    assert!(log.contains("host 0 disconnected"), "{log}");
    assert!(log.contains(&format!("exiting on {sig_name}")), "{log}");
    // Sockets and pid file gone, the control area kept.
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["fabric.ctl"]);
    let rest = c1.expect_closed();
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn sigterm_stops_it_cleanly() {
    stop_with(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_stops_it_cleanly() {
    stop_with(libc::SIGINT, "SIGINT");
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--hosts", "9"], "max_hosts"),
        (&["--hosts", "2", "--ctl-size", "3M"], "power of two"),
        (&["--hosts", "2", "--ctl-size", "4X"], "suffix"),
        (&["--hosts", "2", "--vectors", "0"], "vectors"),
        (&["--hosts", "2", "--slot-size", "100"], "slot_size"),
    ];
    for (args, needle) in cases {
        let out = spawn(dir.path(), args).wait_with_output();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(log.contains(needle), "{args:?}: {log}");
    }
    // A control area that exists is refused, and left alone.
    std::fs::write(dir.path().join("fabric.ctl"), "mine").unwrap();
    let out = spawn(dir.path(), &["--hosts", "2"]).wait_with_output();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(log.contains("--reuse"), "{log}");
    assert_eq!(
        std::fs::read(dir.path().join("fabric.ctl")).unwrap(),
        b"mine"
    );
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["fabric.ctl"]);
}
