//! attach and detach against a fake QMP server on a unix socket.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// What the fake QEMU does after capabilities, per command received.
enum Script {
    /// Answer `return {}`, then send these events after a delay.
    Ok(Vec<Value>, Duration),
    /// Answer with an error.
    Err(&'static str),
}

/// Serves one client: greeting, qmp_capabilities, then one command answered
/// per `script`. Returns the commands received.
fn fake_qemu(dir: &std::path::Path, script: Script) -> (PathBuf, thread::JoinHandle<Vec<Value>>) {
    let sock = dir.join("qmp.sock");
    let l = UnixListener::bind(&sock).unwrap();
    let h = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut got = Vec::new();
        writeln!(w, r#"{{"QMP": {{"version": {{"qemu": {{"major": 10, "minor": 0, "micro": 2}}}}, "capabilities": ["oob"]}}}}"#).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let caps: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(caps["execute"], "qmp_capabilities");
        // An unrelated event before the answer must not confuse the client.
        writeln!(w, r#"{{"event": "RTC_CHANGE", "data": {{"offset": 0}}, "timestamp": {{"seconds": 1, "microseconds": 0}}}}"#).unwrap();
        writeln!(w, "{}", json!({"return": {}, "id": caps["id"]})).unwrap();
        line.clear();
        r.read_line(&mut line).unwrap();
        let cmd: Value = serde_json::from_str(&line).unwrap();
        got.push(cmd.clone());
        match script {
            Script::Ok(events, delay) => {
                writeln!(w, "{}", json!({"return": {}, "id": cmd["id"]})).unwrap();
                thread::sleep(delay);
                for e in events {
                    writeln!(w, "{e}").unwrap();
                }
            }
            Script::Err(desc) => {
                writeln!(
                    w,
                    "{}",
                    json!({"error": {"class": "GenericError", "desc": desc}, "id": cmd["id"]})
                )
                .unwrap();
            }
        }
        // Hold the connection until the client hangs up.
        line.clear();
        let _ = r.read_line(&mut line);
        got
    });
    (sock, h)
}

fn deleted(id: &str) -> Value {
    json!({"event": "DEVICE_DELETED", "data": {"device": id, "path": format!("/machine/peripheral/{id}")},
           "timestamp": {"seconds": 2, "microseconds": 0}})
}

#[test]
fn attach_sends_device_add_with_the_mdev() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let (sock, h) = fake_qemu(t.root(), Script::Ok(vec![], Duration::ZERO));
    let o = t.devlend(&[
        "attach",
        "--qmp",
        sock.to_str().unwrap(),
        UUID,
        "--bus",
        "rp1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = h.join().unwrap();
    assert_eq!(got[0]["execute"], "device_add");
    assert_eq!(
        got[0]["arguments"],
        json!({"driver": "vfio-pci", "sysfsdev": format!("/sys/bus/mdev/devices/{UUID}"),
               "id": "devlend-83b8f4f2", "bus": "rp1"})
    );
    assert!(stdout(&o).contains("devlend detach"), "{}", stdout(&o));
}

#[test]
fn attach_reports_qemus_refusal_with_a_hint() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let (sock, h) = fake_qemu(
        t.root(),
        Script::Err("Bus 'pcie.0' does not support hotplugging"),
    );
    let o = t.devlend(&["attach", "--qmp", sock.to_str().unwrap(), UUID]);
    h.join().unwrap();
    assert_eq!(o.status.code(), Some(7));
    let e = stderr(&o);
    assert!(
        e.contains("QEMU refused device_add: Bus 'pcie.0' does not support hotplugging"),
        "{e}"
    );
    assert!(e.contains("--bus"), "{e}");
}

#[test]
fn attach_without_qemu_or_mdev_fails_clearly() {
    let t = borrower();
    let o = t.devlend(&["attach", "--qmp", "/nonexistent/qmp.sock", UUID]);
    assert_eq!(o.status.code(), Some(3), "the mdev is checked first");
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let o = t.devlend(&["attach", "--qmp", "/nonexistent/qmp.sock", UUID]);
    assert_eq!(o.status.code(), Some(7));
    assert!(
        stderr(&o).contains("cannot connect to QMP socket"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn detach_waits_for_device_deleted() {
    let t = borrower();
    let (sock, h) = fake_qemu(
        t.root(),
        Script::Ok(
            vec![deleted("other"), deleted("devlend-83b8f4f2")],
            Duration::from_millis(300),
        ),
    );
    // By UUID: its default id.
    let o = t.devlend(&[
        "detach",
        "--qmp",
        sock.to_str().unwrap(),
        UUID,
        "--timeout",
        "10",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = h.join().unwrap();
    assert_eq!(got[0]["execute"], "device_del");
    assert_eq!(got[0]["arguments"], json!({"id": "devlend-83b8f4f2"}));
}

#[test]
fn detach_times_out_when_the_guest_does_not_cooperate() {
    let t = borrower();
    let (sock, h) = fake_qemu(t.root(), Script::Ok(vec![deleted("other")], Duration::ZERO));
    let start = std::time::Instant::now();
    let o = t.devlend(&[
        "detach",
        "--qmp",
        sock.to_str().unwrap(),
        "nvme1",
        "--timeout",
        "2",
    ]);
    assert!(start.elapsed() < Duration::from_secs(6));
    h.join().unwrap();
    assert_eq!(o.status.code(), Some(6));
    let e = stderr(&o);
    assert!(
        e.contains("the guest did not release device nvme1 within 2 s"),
        "{e}"
    );
    // A wait past a second is told (stderr is not a terminal: once).
    assert!(
        e.contains("waiting for the guest to release nvme1...\n"),
        "{e}"
    );
    assert!(
        e.contains("waiting for the guest to release nvme1: 2."),
        "{e}"
    );
    assert!(e.contains("hot-plug"), "{e}");
}

#[test]
fn detach_of_an_unknown_id_passes_qemus_message() {
    let t = borrower();
    let (sock, h) = fake_qemu(t.root(), Script::Err("Device 'nvme9' not found"));
    let o = t.devlend(&["detach", "--qmp", sock.to_str().unwrap(), "nvme9"]);
    h.join().unwrap();
    assert_eq!(o.status.code(), Some(7));
    assert!(stderr(&o).contains("Device 'nvme9' not found"));
}

#[test]
fn detach_again_while_an_unplug_is_pending_keeps_waiting() {
    let t = borrower();
    let (sock, h) = fake_qemu(
        t.root(),
        Script::Err("Device nic1 is already in the process of unplug"),
    );
    let o = t.devlend(&[
        "detach",
        "--qmp",
        sock.to_str().unwrap(),
        "nic1",
        "--timeout",
        "1",
    ]);
    h.join().unwrap();
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(stderr(&o).contains("did not release device nic1"));
}
