//! attach and detach against a real QEMU (no guest code; a second or so).
//! Ignored by default: `cargo test -p devlend --test qemu -- --ignored`.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

struct Qemu {
    child: Child,
    sock: std::path::PathBuf,
}

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A paused q35 VM with an empty hot-plug root port and a NIC behind
/// another one, and a QMP socket.
fn qemu(dir: &std::path::Path) -> Qemu {
    let sock = dir.join("qmp.sock");
    let child = Command::new("qemu-system-x86_64")
        .args([
            "-machine",
            "q35",
            "-accel",
            "tcg",
            "-m",
            "128",
            "-nodefaults",
        ])
        .args(["-display", "none", "-S"])
        .args(["-device", "pcie-root-port,id=rp1,chassis=1"])
        .args(["-device", "pcie-root-port,id=rp2,chassis=2"])
        .args([
            "-netdev",
            "user,id=n0",
            "-device",
            "e1000e,id=nic1,bus=rp2,netdev=n0",
        ])
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", sock.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("qemu-system-x86_64");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "QEMU made no QMP socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    Qemu { child, sock }
}

#[test]
#[ignore = "starts QEMU"]
fn qemu_refuses_an_mdev_that_is_not_there_and_says_why() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let q = qemu(t.root());
    let o = t.devlend(&[
        "attach",
        "--qmp",
        q.sock.to_str().unwrap(),
        UUID,
        "--bus",
        "rp1",
    ]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("QEMU refused device_add"), "{e}");
    assert!(e.contains(UUID), "QEMU's own message names the device: {e}");
}

#[test]
#[ignore = "starts QEMU"]
fn qemu_without_a_guest_never_releases_a_device() {
    let t = borrower();
    let q = qemu(t.root());
    let sock = q.sock.to_str().unwrap();
    let o = t.devlend(&["detach", "--qmp", sock, "nic1", "--timeout", "2"]);
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(stderr(&o).contains("did not release device nic1"));
    // Asking again while the unplug is pending keeps waiting.
    let o = t.devlend(&["detach", "--qmp", sock, "nic1", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    let o = t.devlend(&["detach", "--qmp", sock, "nic9", "--timeout", "1"]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(stderr(&o).contains("nic9"));
}
