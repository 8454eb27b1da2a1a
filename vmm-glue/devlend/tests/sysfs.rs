//! The devlend command against fake sysfs trees: listings, lending, mdevs,
//! exit statuses and messages.

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn json(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn hosts_lists_this_host_and_its_peers() {
    let t = borrower();
    let v = json(&t.devlend(&["hosts", "--json"]));
    assert_eq!(v["host_id"], 1);
    assert_eq!(v["hostname"], "borrower");
    assert_eq!(v["adapter"], ADAPTER);
    assert_eq!(v["peers"][0]["name"], "lender");
    assert_eq!(v["peers"][0]["state"], "up");
    assert_eq!(v["peers"][0]["window"], "0000:00:04.0");
    assert_eq!(v["peers"][0]["heartbeat_age_ms"], 120);
    let o = t.devlend(&["hosts"]);
    let out = stdout(&o);
    assert!(out.contains("host id 1"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("0") && l.contains("lender") && l.contains("up")),
        "{out}"
    );
}

#[test]
fn fabrics_lists_the_pci_adapters_and_the_ntb_backends() {
    let t = borrower();
    add_ntb_fabric(&t);
    let v = json(&t.devlend(&["fabrics", "--json"]));
    assert_eq!(v[0]["adapter"], ADAPTER);
    assert_eq!(v[0]["host_id"], 1);
    assert_eq!(v[1]["adapter"], NTB_FABRIC);
    assert_eq!(v[1]["host_id"], 3);
    assert_eq!(v[1]["peers"][0]["host_id"], 2);
    let out = stdout(&t.devlend(&["fabrics"]));
    assert!(
        out.lines()
            .any(|l| l.starts_with(NTB_FABRIC) && l.contains(" 3 ") && l.contains("1/1")),
        "{out}"
    );
    // The first is the default; --fabric picks the other for any command.
    assert_eq!(json(&t.devlend(&["hosts", "--json"]))["host_id"], 1);
    let v = json(&t.devlend(&["--fabric", NTB_FABRIC, "hosts", "--json"]));
    assert_eq!(v["host_id"], 3);
    assert_eq!(v["adapter"], NTB_FABRIC);
    let v = json(&t.devlend(&["remote", "--json", "--fabric", NTB_FABRIC]));
    assert_eq!(v[0]["id"], "2:1");
    assert_eq!(v.as_array().unwrap().len(), 1);
    let o = t.devlend(&["--fabric", NTB_FABRIC, "mdev", "types", "--json"]);
    assert_eq!(json(&o)[0]["id"], "devlend-nvme");
    // A fabric this host is not on: named, with the ones it is on.
    let o = t.devlend(&["--fabric", "ntb-0000:09:00.0", "hosts"]);
    assert_eq!(o.status.code(), Some(3));
    let e = stderr(&o);
    assert!(e.contains("no fabric \"ntb-0000:09:00.0\""), "{e}");
    assert!(e.contains(&format!("{ADAPTER}, {NTB_FABRIC}")), "{e}");
}

#[test]
fn no_adapter_is_not_found_with_a_hint() {
    let t = lender();
    fs::remove_dir_all(t.p(&format!("sys/devices/pci0000:00/{ADAPTER}/fabric"))).unwrap();
    let o = t.devlend(&["hosts"]);
    assert_eq!(o.status.code(), Some(3));
    let e = stderr(&o);
    assert!(e.contains("no devlend fabric adapter"), "{e}");
    assert!(e.contains("hint: load devlend's modules"), "{e}");
    let o = t.devlend(&["fabrics"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("no devlend fabric adapter"));
}

#[test]
fn devices_show_lending_state_and_skip_bridges() {
    let t = lender();
    let v = json(&t.devlend(&["devices", "--json"]));
    let addrs: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["address"].as_str().unwrap())
        .collect();
    assert_eq!(addrs, vec![ADAPTER, "0000:00:05.0", "0000:01:00.0"]);
    assert_eq!(
        (&v[0]["fabric"], &v[1]["fabric"], &v[2]["fabric"]),
        (&Value::Bool(true), &Value::Bool(true), &Value::Bool(false))
    );
    assert_eq!(v[2]["driver"], "nvme");
    assert_eq!(v[2]["iommu_group"], 8);
    assert!(v[2]["lent"].is_null());
    let all = json(&t.devlend(&["devices", "--all", "--json"]));
    assert_eq!(all.as_array().unwrap().len(), 4);
    mark_lent(&t, "borrowed", "1");
    let v = json(&t.devlend(&["devices", "--json"]));
    assert_eq!(v[2]["lent"]["state"], "borrowed");
    assert_eq!(v[2]["lent"]["borrower"], 1);
    assert_eq!(v[2]["lent"]["dma_mapped_bytes"], 1048576);
    let out = stdout(&t.devlend(&["devices"]));
    assert!(out.contains("lent:borrowed"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("0000:00:05.0") && l.contains("fabric")),
        "{out}"
    );
}

#[test]
fn lend_writes_the_address_to_the_lender() {
    let t = lender();
    let o = t.devlend(&["lend", "0000:01:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(t.p("sys/bus/pci/drivers/devlend-lender/lend")).unwrap(),
        "0000:01:00.0"
    );
}

#[test]
fn lend_checks_its_argument_and_the_module() {
    let t = lender();
    let o = t.devlend(&["lend", "01:00.0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("lspci -D"), "{}", stderr(&o));
    let o = t.devlend(&["lend", "0000:00:05.0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("part of the fabric"), "{}", stderr(&o));
    let o = t.devlend(&["lend", "0000:02:00.0"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("no PCI device 0000:02:00.0"));
    fs::remove_dir_all(t.p("sys/bus/pci/drivers/devlend-lender")).unwrap();
    let o = t.devlend(&["lend", "0000:01:00.0"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("lender is not loaded"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn lending_twice_is_busy_and_unlend_force_says_force() {
    let t = lender();
    mark_lent(&t, "borrowed", "1");
    let o = t.devlend(&["lend", "0000:01:00.0"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(stderr(&o).contains("already lent"));
    let o = t.devlend(&["unlend", "--force", "0000:01:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(t.p("sys/bus/pci/drivers/devlend-lender/unlend")).unwrap(),
        "0000:01:00.0 force"
    );
}

#[test]
fn unlend_of_a_device_not_lent_is_not_found() {
    let t = lender();
    let o = t.devlend(&["unlend", "0000:01:00.0"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("is not lent"));
}

#[test]
fn remote_lists_devices_with_their_mdevs() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let v = json(&t.devlend(&["remote", "--json"]));
    assert_eq!(v[0]["id"], "0:1");
    assert_eq!(v[0]["lender"], "lender");
    assert_eq!(v[0]["name"], "0000:01:00.0");
    assert_eq!(v[0]["class"], "0x010802");
    assert_eq!(v[0]["state"], "available");
    assert!(v[0]["borrower"].is_null());
    assert_eq!(v[0]["mdevs"][0], UUID);
    let out = stdout(&t.devlend(&["remote"]));
    assert!(out.contains("lender/0000:01:00.0"), "{out}");
}

#[test]
fn mdev_types_and_list() {
    let t = borrower();
    let v = json(&t.devlend(&["mdev", "types", "--json"]));
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["devlend-any", "devlend-net", "devlend-nvme"]);
    assert_eq!(v[2]["device_api"], "vfio-pci");
    assert_eq!(v[2]["available_instances"], 1);
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let v = json(&t.devlend(&["mdev", "list", "--json"]));
    assert_eq!(v[0]["uuid"], UUID);
    assert_eq!(v[0]["mdev_type"], "devlend-nvme");
    assert_eq!(v[0]["parent"], ADAPTER);
    assert_eq!(v[0]["remote_device"], "0:1");
    assert_eq!(v[0]["state"], "idle");
    assert_eq!(v[0]["iommu_group"], 12);
    assert_eq!(v[0]["sysfs_path"], format!("/sys/bus/mdev/devices/{UUID}"));
}

/// Plays the kernel: when a UUID is written to a type's `create`, the mdev
/// appears.
fn fake_kernel(t: &Tree, mtype: &'static str) -> thread::JoinHandle<Option<String>> {
    fake_kernel_after(t, mtype, Duration::ZERO, || {})
}

/// [`fake_kernel`] from `delay` on, once `first` has run (it may put the
/// type's `create` in place).
fn fake_kernel_after(
    t: &Tree,
    mtype: &'static str,
    delay: Duration,
    first: impl FnOnce() + Send + 'static,
) -> thread::JoinHandle<Option<String>> {
    fake_kernel_with(t, mtype, delay, first, |_, _| {})
}

/// [`fake_kernel_after`], and `made` is given the new mdev's directory
/// and UUID once it is there (it may change what the kernel would).
fn fake_kernel_with(
    t: &Tree,
    mtype: &'static str,
    delay: Duration,
    first: impl FnOnce() + Send + 'static,
    made: impl FnOnce(&std::path::Path, &str) + Send + 'static,
) -> thread::JoinHandle<Option<String>> {
    let create = t
        .adapter()
        .join(format!("mdev_supported_types/{mtype}/create"));
    let root = t.root().to_path_buf();
    thread::spawn(move || {
        thread::sleep(delay);
        first();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let s = fs::read_to_string(&create).unwrap_or_default();
            if !s.is_empty() {
                let uuid = s.trim().to_string();
                let d = root.join(format!("sys/devices/pci0000:00/{ADAPTER}/{uuid}"));
                write(&d.join("remote_device"), "any\n");
                write(&d.join("state"), "idle\n");
                write(&d.join("open"), "0\n");
                write(&d.join("remove"), "");
                std::os::unix::fs::symlink(
                    format!("../mdev_supported_types/{mtype}"),
                    d.join("mdev_type"),
                )
                .unwrap();
                fs::create_dir_all(root.join("sys/bus/mdev/devices")).unwrap();
                std::os::unix::fs::symlink(
                    format!("../../../devices/pci0000:00/{ADAPTER}/{uuid}"),
                    root.join(format!("sys/bus/mdev/devices/{uuid}")),
                )
                .unwrap();
                made(&d, &uuid);
                return Some(uuid);
            }
            thread::sleep(Duration::from_millis(5));
        }
        None
    })
}

#[test]
fn mdev_create_for_a_named_device_picks_its_type_and_pins_it() {
    let t = borrower();
    let k = fake_kernel(&t, "devlend-nvme");
    let o = t.devlend(&["mdev", "create", "--device", "lender/0000:01:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let uuid = k.join().unwrap().expect("create written");
    assert_eq!(stdout(&o).trim(), uuid);
    assert!(devlend::sysfs::check_uuid(&uuid).is_ok());
    let d = t.adapter().join(&uuid);
    assert_eq!(fs::read_to_string(d.join("remote_device")).unwrap(), "0:1");
}

#[test]
fn mdev_create_by_type_with_a_given_uuid() {
    let t = borrower();
    let k = fake_kernel(&t, "devlend-any");
    let o = t.devlend(&["mdev", "create", "--type", "any", "--uuid", UUID, "--json"]);
    let v = json(&o);
    assert_eq!(k.join().unwrap().as_deref(), Some(UUID));
    assert_eq!(v["uuid"], UUID);
    assert_eq!(v["mdev_type"], "devlend-any");
    assert_eq!(
        fs::read_to_string(t.adapter().join(UUID).join("remote_device")).unwrap(),
        "any\n"
    );
}

#[test]
fn mdev_create_refuses_when_nothing_is_available_or_the_device_is_gone() {
    let t = borrower();
    let o = t.devlend(&["mdev", "create", "--type", "net"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        stderr(&o).contains("available_instances is 0"),
        "{}",
        stderr(&o)
    );
    let r = t.adapter().join("fabric/remote/0:1");
    fs::write(r.join("state"), "gone\n").unwrap();
    let o = t.devlend(&["mdev", "create", "--device", "0:1"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(stderr(&o).contains("is gone"), "{}", stderr(&o));
    let o = t.devlend(&["mdev", "create", "--device", "lender/0000:09:00.0"]);
    assert_eq!(o.status.code(), Some(3));
    let o = t.devlend(&["mdev", "create", "--type", "gpu"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("no mdev type devlend-gpu"));
    let o = t.devlend(&["mdev", "create", "--uuid", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn mdev_create_for_a_held_device_works_and_says_what_to_expect() {
    let t = borrower();
    let r = t.adapter().join("fabric/remote/0:1");
    fs::write(r.join("state"), "borrowed\n").unwrap();
    fs::write(r.join("borrower"), "2\n").unwrap();
    // Another device of the type is free, so the type has an instance.
    let k = fake_kernel(&t, "devlend-nvme");
    let o = t.devlend(&["mdev", "create", "--device", "0:1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let uuid = k.join().unwrap().unwrap();
    assert_eq!(
        fs::read_to_string(t.adapter().join(&uuid).join("remote_device")).unwrap(),
        "0:1"
    );
    let e = stderr(&o);
    assert!(
        e.contains("is borrowed by host 2; a VM cannot open the mdev until it is given back"),
        "{e}"
    );
}

#[test]
fn mdev_create_refuses_a_device_another_mdev_targets_or_no_instance() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let o = t.devlend(&["mdev", "create", "--device", "0:1"]);
    assert_eq!(o.status.code(), Some(4));
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "remote device 0:1 is the target of mdev {UUID} on this host"
        )),
        "{e}"
    );
    // Nothing left of the type: refused as mdevctl refuses it.
    fs::write(
        t.adapter()
            .join("mdev_supported_types/devlend-nvme/available_instances"),
        "0\n",
    )
    .unwrap();
    let o = t.devlend(&["mdev", "create", "--type", "nvme"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        stderr(&o).contains("available_instances is 0"),
        "{}",
        stderr(&o)
    );
}

/// Writes a type's `available_instances` as the borrower module would.
fn set_available(t: &Tree, mtype: &str, n: u32) {
    fs::write(
        t.adapter()
            .join(format!("mdev_supported_types/{mtype}/available_instances")),
        format!("{n}\n"),
    )
    .unwrap();
}

/// Runs devlend, with how long it took.
fn timed(t: &Tree, args: &[&str]) -> (std::process::Output, Duration) {
    let t0 = Instant::now();
    let o = t.devlend(args);
    (o, t0.elapsed())
}

#[test]
fn mdev_create_wait_times_out_with_status_6_naming_the_type_or_device() {
    let t = borrower();
    set_available(&t, "devlend-nvme", 0);
    let (o, took) = timed(&t, &["mdev", "create", "--type", "nvme", "--wait", "1"]);
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    let e = stderr(&o);
    assert!(
        e.contains("error: no devlend-nvme device became free within 1 s"),
        "{e}"
    );
    assert!(e.contains("available_instances is 0"), "{e}");
    assert!(
        e.contains("every devlend-nvme device is held by another borrower"),
        "{e}"
    );
    assert!(e.contains("hint: `devlend remote` shows who holds"), "{e}");
    assert!(!t.p("sys/bus/mdev/devices").exists(), "nothing created");
    assert_eq!(
        fs::read_to_string(t.adapter().join("mdev_supported_types/devlend-nvme/create")).unwrap(),
        "",
        "the kernel was not asked"
    );

    // A device another mdev of this host targets: waited for, by name.
    set_available(&t, "devlend-nvme", 1);
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let (o, took) = timed(
        &t,
        &[
            "mdev",
            "create",
            "--device",
            "lender/0000:01:00.0",
            "--wait",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(took >= Duration::from_millis(950), "{took:?}");
    let e = stderr(&o);
    assert!(
        e.contains("remote device lender/0000:01:00.0 did not become free within 1 s"),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "it (0:1) is the target of mdev {UUID} on this host"
        )),
        "{e}"
    );
    // A device not offered at all is refused at once, wait or not, and
    // so is a UUID in use.
    let (o, took) = timed(&t, &["mdev", "create", "--device", "9:9", "--wait", "5"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(took < Duration::from_secs(2), "{took:?}");
    let (o, took) = timed(&t, &["mdev", "create", "--uuid", UUID, "--wait", "5"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("exists already"), "{}", stderr(&o));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn mdev_create_wait_takes_an_instance_that_becomes_available() {
    let t = borrower();
    set_available(&t, "devlend-nvme", 0);
    let k = fake_kernel(&t, "devlend-nvme");
    let root = t.root().to_path_buf();
    // Another borrower returns its device after 300 ms.
    let returner = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        fs::write(
            root.join(format!(
                "sys/devices/pci0000:00/{ADAPTER}/mdev_supported_types/devlend-nvme/available_instances"
            )),
            "1\n",
        )
        .unwrap();
    });
    let (o, took) = timed(
        &t,
        &["mdev", "create", "--type", "nvme", "--wait", "5", "--json"],
    );
    returner.join().unwrap();
    let v = json(&o);
    let uuid = k.join().unwrap().expect("create written");
    assert_eq!(v["uuid"], uuid.as_str());
    assert_eq!(v["mdev_type"], "devlend-nvme");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(t.p("sys/bus/mdev/devices").join(&uuid).exists());
}

#[test]
fn mdev_create_wait_takes_a_named_device_once_it_is_returned() {
    let t = borrower();
    let r = t.adapter().join("fabric/remote/0:1");
    fs::write(r.join("state"), "borrowed\n").unwrap();
    fs::write(r.join("borrower"), "2\n").unwrap();
    let k = fake_kernel(&t, "devlend-nvme");
    let returner = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        fs::write(r.join("borrower"), "\n").unwrap();
        fs::write(r.join("state"), "available\n").unwrap();
    });
    let (o, took) = timed(&t, &["mdev", "create", "--device", "0:1", "--wait", "5"]);
    returner.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let uuid = k.join().unwrap().expect("create written");
    assert_eq!(stdout(&o).trim(), uuid);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_eq!(
        fs::read_to_string(t.adapter().join(&uuid).join("remote_device")).unwrap(),
        "0:1"
    );
    // Waited for it to be free, not merely targeted while held.
    assert!(
        !stderr(&o).contains("a VM cannot open the mdev"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn mdev_create_wait_goes_on_when_another_request_wins_the_create() {
    let full = std::path::Path::new("/dev/full");
    if !full.exists() {
        eprintln!("no /dev/full to play the kernel's ENOSPC; skipped");
        return;
    }
    let t = borrower();
    // available_instances says 1, but the kernel refuses the create with
    // ENOSPC (writes to /dev/full fail so): another request took the
    // device in between.
    let create = t.adapter().join("mdev_supported_types/devlend-nvme/create");
    fs::remove_file(&create).unwrap();
    std::os::unix::fs::symlink(full, &create).unwrap();
    let o = t.devlend(&["mdev", "create", "--type", "nvme"]);
    assert_eq!(o.status.code(), Some(4), "without --wait: {}", stderr(&o));
    assert!(
        stderr(&o).contains("available_instances is 0"),
        "{}",
        stderr(&o)
    );
    // After 300 ms the kernel takes creates again.
    let k = fake_kernel_after(&t, "devlend-nvme", Duration::from_millis(300), move || {
        let tmp = create.with_extension("new");
        fs::write(&tmp, "").unwrap();
        fs::rename(&tmp, &create).unwrap();
    });
    let (o, took) = timed(&t, &["mdev", "create", "--type", "nvme", "--wait", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let uuid = k.join().unwrap().expect("create written");
    assert_eq!(stdout(&o).trim(), uuid);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
fn mdev_create_removes_the_mdev_when_pinning_fails() {
    let t = borrower();
    let create = t.adapter().join("mdev_supported_types/devlend-nvme/create");
    let root = t.root().to_path_buf();
    let k = thread::spawn(move || {
        for _ in 0..2000 {
            let s = fs::read_to_string(&create).unwrap_or_default();
            if !s.is_empty() {
                let d = root.join(format!("sys/devices/pci0000:00/{ADAPTER}/{}", s.trim()));
                // remote_device as a directory: writing it fails (EISDIR).
                fs::create_dir_all(d.join("remote_device")).unwrap();
                write(&d.join("remove"), "");
                fs::create_dir_all(root.join("sys/bus/mdev/devices")).unwrap();
                std::os::unix::fs::symlink(
                    &d,
                    root.join(format!("sys/bus/mdev/devices/{}", s.trim())),
                )
                .unwrap();
                return d;
            }
            thread::sleep(Duration::from_millis(5));
        }
        panic!("no create");
    });
    let o = t.devlend(&["mdev", "create", "--device", "0:1"]);
    let d = k.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("remote_device"), "{}", stderr(&o));
    assert!(stderr(&o).contains("removed again"), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(d.join("remove")).unwrap(), "1");
}

#[test]
fn mdev_remove_writes_remove() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let o = t.devlend(&["mdev", "remove", &UUID.to_uppercase()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(t.adapter().join(UUID).join("remove")).unwrap(),
        "1"
    );
    let o = t.devlend(&["mdev", "remove", "00000000-0000-0000-0000-000000000000"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("devlend mdev list"));
}

/// The kernel does not refuse the remove of an open mdev (it takes the
/// device from the VM, or waits for the VMM forever): the command reads
/// `open` and refuses with exit 4 without writing `remove`.
#[test]
fn mdev_remove_refuses_an_open_mdev_and_writes_nothing() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    t.set_mdev_open(UUID, true);
    let d = t.adapter().join(UUID);
    for args in [
        &["mdev", "remove", UUID][..],
        &["--json", "mdev", "remove", &UUID.to_uppercase()][..],
    ] {
        let o = t.devlend(args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("devlend: error: mdev {UUID} is open in a VMM")),
            "{e}"
        );
        assert!(
            e.contains("devlend: hint: ") && e.contains("devlend detach"),
            "{e}"
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        assert_eq!(fs::read_to_string(d.join("remove")).unwrap(), "");
    }
    // Once the VMM has closed it, the same mdev is removed.
    t.set_mdev_open(UUID, false);
    let o = t.devlend(&["mdev", "remove", UUID]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(d.join("remove")).unwrap(), "1");
}

/// A closed mdev is removed: `1` written to its `remove`, and said so.
#[test]
fn mdev_remove_removes_a_closed_mdev() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let o = t.devlend(&["--json", "mdev", "remove", UUID]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["removed"], UUID);
    let d = t.adapter().join(UUID);
    assert_eq!(fs::read_to_string(d.join("remove")).unwrap(), "1");
}

/// A borrower module without `open` (older than it) cannot say: the
/// remove is written as before.
#[test]
fn mdev_remove_without_open_attribute_writes_remove() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let d = t.adapter().join(UUID);
    fs::remove_file(d.join("open")).unwrap();
    let o = t.devlend(&["mdev", "remove", UUID]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(d.join("remove")).unwrap(), "1");
}

/// The mdev `mdev create` makes and then takes back (its remote_device
/// refused) is not removed if a VMM opened it meanwhile.
#[test]
fn mdev_create_does_not_remove_again_an_mdev_a_vmm_opened() {
    let t = borrower();
    let create = t.adapter().join("mdev_supported_types/devlend-nvme/create");
    let root = t.root().to_path_buf();
    let k = thread::spawn(move || {
        for _ in 0..2000 {
            let s = fs::read_to_string(&create).unwrap_or_default();
            if !s.is_empty() {
                let d = root.join(format!("sys/devices/pci0000:00/{ADAPTER}/{}", s.trim()));
                fs::create_dir_all(d.join("remote_device")).unwrap();
                write(&d.join("open"), "1\n");
                write(&d.join("remove"), "");
                fs::create_dir_all(root.join("sys/bus/mdev/devices")).unwrap();
                std::os::unix::fs::symlink(
                    &d,
                    root.join(format!("sys/bus/mdev/devices/{}", s.trim())),
                )
                .unwrap();
                return d;
            }
            thread::sleep(Duration::from_millis(5));
        }
        panic!("no create");
    });
    let o = t.devlend(&["mdev", "create", "--device", "0:1"]);
    let d = k.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not removed again") && stderr(&o).contains("is open in a VMM"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(d.join("remove")).unwrap(), "");
}

#[test]
fn vmm_arguments_for_an_existing_mdev() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let o = t.devlend(&["qemu-args", UUID]);
    assert_eq!(
        stdout(&o).trim(),
        format!("-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/{UUID},id=devlend-83b8f4f2")
    );
    let v = json(&t.devlend(&["qemu-args", UUID, "--id", "nvme1", "--bus", "rp1", "--json"]));
    assert_eq!(
        v[1],
        format!("vfio-pci,sysfsdev=/sys/bus/mdev/devices/{UUID},id=nvme1,bus=rp1")
    );
    let o = t.devlend(&["ch-args", UUID]);
    assert_eq!(
        stdout(&o).trim(),
        format!("--device path=/sys/bus/mdev/devices/{UUID}/")
    );
    let o = t.devlend(&["libvirt-xml", UUID]);
    assert!(stdout(&o).starts_with("<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"));
    assert!(stdout(&o).contains(&format!("<address uuid='{UUID}'/>")));
    let o = t.devlend(&["libvirt-xml", "--nodedev", UUID]);
    assert!(
        stdout(&o).contains("<parent>pci_0000_00_03_0</parent>"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("<attr name='remote_device' value='0:1'/>"));
}

#[test]
fn nodedev_for_a_new_mdev_names_adapter_type_and_device() {
    let t = borrower();
    let o = t.devlend(&[
        "libvirt-xml",
        "--nodedev",
        "--device",
        "lender/0000:01:00.0",
        UUID,
    ]);
    let x = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(x.contains("<parent>pci_0000_00_03_0</parent>"), "{x}");
    assert!(x.contains("<type id='devlend-nvme'/>"), "{x}");
    assert!(x.contains(&format!("<uuid>{UUID}</uuid>")), "{x}");
    assert!(
        x.contains("<attr name='remote_device' value='0:1'/>"),
        "{x}"
    );
    // No mdev was created, and a UUID is made up when none is given.
    assert!(!t.p("sys/bus/mdev/devices").join(UUID).exists());
    let x = stdout(&t.devlend(&["libvirt-xml", "--nodedev", "--device", "0:1"]));
    assert!(x.contains("<uuid>") && !x.contains(UUID), "{x}");
    let o = t.devlend(&[
        "libvirt-xml",
        "--nodedev",
        "--device",
        "lender/0000:09:00.0",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
}

#[test]
fn vmm_arguments_check_the_mdev_unless_told_not_to() {
    let t = borrower();
    let o = t.devlend(&["qemu-args", UUID]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("devlend mdev create"));
    let o = t.devlend(&["qemu-args", UUID, "--no-check"]);
    assert!(o.status.success());
    let o = t.devlend(&["qemu-args", UUID, "--no-check", "--id", "9x"]);
    assert_eq!(o.status.code(), Some(2));
    let o = t.devlend(&["libvirt-xml", UUID, "--no-check", "--alias", "nvme"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("ua-"));
    let o = t.devlend(&["ch-args", "not-a-uuid"]);
    assert_eq!(o.status.code(), Some(2));
}

fn virt_xml_validate(xml: &str, schema: &str) -> Option<(bool, String)> {
    let tool = std::path::Path::new("/usr/bin/virt-xml-validate");
    if !tool.exists() {
        eprintln!("virt-xml-validate not installed (Debian: libvirt-clients); skipped");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.xml");
    fs::write(&f, xml).unwrap();
    let o = std::process::Command::new(tool)
        .arg(&f)
        .arg(schema)
        .output()
        .unwrap();
    Some((o.status.success(), format!("{}{}", stdout(&o), stderr(&o))))
}

#[test]
fn libvirt_xml_passes_virt_xml_validate() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let dom = stdout(&t.devlend(&[
        "libvirt-xml",
        UUID,
        "--domain",
        "guest1",
        "--alias",
        "ua-nvme",
    ]));
    if let Some((ok, out)) = virt_xml_validate(&dom, "domain") {
        assert!(ok, "{out}\n{dom}");
    }
    let nd = stdout(&t.devlend(&["libvirt-xml", UUID, "--nodedev"]));
    if let Some((ok, out)) = virt_xml_validate(&nd, "nodedev") {
        assert!(ok, "{out}\n{nd}");
    }
    // And a broken one is caught, so the check means something.
    if let Some((ok, _)) = virt_xml_validate(&dom.replace("type='mdev'", "type='bogus'"), "domain")
    {
        assert!(!ok);
    }
}

#[test]
fn help_teaches_the_workflow_and_exit_codes() {
    let t = borrower();
    let o = t.devlend(&["--help"]);
    let h = stdout(&o);
    assert!(h.contains("Typical session"), "{h}");
    assert!(h.contains("Exit status"), "{h}");
    for cmd in [
        "hosts",
        "devices",
        "lend",
        "unlend",
        "remote",
        "mdev",
        "qemu-args",
        "libvirt-xml",
        "ch-args",
        "attach",
        "detach",
    ] {
        assert!(h.contains(cmd), "{cmd} missing from --help");
        let o = t.devlend(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd} --help");
    }
    let o = t.devlend(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn mdev_create_help_and_manual_page_explain_wait() {
    let t = borrower();
    let h = stdout(&t.devlend(&["mdev", "create", "--help"]));
    assert!(h.contains("--wait <SECONDS>"), "{h}");
    assert!(h.contains("exit status 6"), "{h}");
    let dir = t.p("man");
    let o = t.devlend(&["man", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = fs::read_to_string(dir.join("devlend-mdev-create.1")).unwrap();
    assert!(page.contains("wait"), "{page}");
    assert!(page.contains("taken by a waiting request"), "{page}");
}

#[test]
fn stats_reports_counters_as_text_json_and_prometheus() {
    let t = borrower();
    let o = t.devlend(&["stats", "--interval", "0.05"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("host id 1"), "{out}");
    // 400 answers in 100 ms since load: 250 us each; none in the interval.
    assert!(
        out.lines()
            .any(|l| l.starts_with("0") && l.contains("lender") && l.contains("250.0")),
        "{out}"
    );
    let v = json(&t.devlend(&["stats", "--json", "--interval", "0.05"]));
    assert_eq!(v["peers"][0]["link"], "up");
    assert_eq!(v["peers"][0]["answers_per_s"], 0.0);
    assert_eq!(v["peers"][0]["round_trip_us"], Value::Null);
    assert_eq!(v["peers"][0]["round_trip_us_since_load"], 250.0);

    let l = lender();
    mark_lent(&l, "borrowed", "1");
    write(&l.adapter().join("fabric/peers/1/state"), "up\n");
    let v = json(&l.devlend(&["stats", "--json", "--interval", "0.05"]));
    assert_eq!(v["lent"][0]["address"], "0000:01:00.0");
    assert_eq!(v["lent"][0]["borrower"], 1);
    assert_eq!(v["lent"][0]["dma_mapped_bytes"], 1_048_576);
    assert_eq!(v["lent"][0]["irqs_per_s"], 0.0);
    let p = stdout(&l.devlend(&["stats", "--prometheus"]));
    assert!(
        p.contains(
            "devlend_lent_irqs_total{host_id=\"0\",device=\"0000:01:00.0\",dev_id=\"1\"} 1000\n"
        ),
        "{p}"
    );
    assert!(
        p.contains("devlend_peer_up{host_id=\"0\",peer=\"1\""),
        "{p}"
    );
}

#[test]
fn stats_refuses_bad_intervals_and_mixed_formats() {
    let t = borrower();
    for args in [
        &["stats", "--interval", "0"][..],
        &["stats", "--interval", "-1"],
        &["stats", "--interval", "nan"],
        &["stats", "--prometheus", "--json"],
    ] {
        let o = t.devlend(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).is_empty());
    }
}

#[test]
fn apply_lends_to_the_configured_hosts_and_tries_every_line() {
    let t = lender();
    mark_lent(&t, "available", "");
    let allowed = t.p("sys/devices/pci0000:00/0000:01:00.0/devlend/allowed_hosts");
    let conf = t.p("lend.conf");
    write(&conf, "# boot\n0000:01:00.0 to=1\n");
    let o = t.devlend(&["apply", "--config", conf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&allowed).unwrap(), "1");
    assert!(
        stdout(&o).contains("0000:01:00.0 stays lent to hosts 1"),
        "{}",
        stdout(&o)
    );

    // A device not there fails its line; the others are still applied.
    write(&conf, "0000:07:00.0\n0000:01:00.0 to=all\n");
    let o = t.devlend(&["apply", "--config", conf.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("0000:07:00.0"), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&allowed).unwrap(), "all");

    // A bad line stops before anything is done, naming the line.
    write(&conf, "0000:01:00.0 to=3\n0000:01:00.0 to=9\n");
    let o = t.devlend(&["apply", "--config", conf.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("lend.conf:2: host id 9"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&allowed).unwrap(), "all");

    let o = t.devlend(&["apply", "--config", "/nonexistent/lend.conf"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("/nonexistent/lend.conf"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn lend_to_sets_the_hosts_of_a_lent_device() {
    let t = lender();
    mark_lent(&t, "available", "");
    let o = t.devlend(&["lend", "0000:01:00.0", "--to", "2,1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let allowed = t.p("sys/devices/pci0000:00/0000:01:00.0/devlend/allowed_hosts");
    assert_eq!(fs::read_to_string(&allowed).unwrap(), "1,2");
    let o = t.devlend(&["lend", "0000:01:00.0", "--to", "eight"]);
    assert_eq!(o.status.code(), Some(2));
    // Without --to, lending a lent device is still refused as busy.
    let o = t.devlend(&["lend", "0000:01:00.0"]);
    assert_eq!(o.status.code(), Some(4));
}

#[test]
fn sriov_vfs_are_shown_with_their_pf_and_a_pf_with_vfs_is_not_lent() {
    let t = lender();
    let pf = t.p("sys/devices/pci0000:00/0000:01:00.0");
    write(&pf.join("sriov_numvfs"), "2\n");
    for (i, vf) in ["0000:01:10.0", "0000:01:10.2"].into_iter().enumerate() {
        let d = t.p(&format!("sys/devices/pci0000:00/{vf}"));
        write(&d.join("vendor"), "0x8086\n");
        write(&d.join("device"), "0x10ca\n");
        write(&d.join("class"), "0x020000\n");
        std::os::unix::fs::symlink("../0000:01:00.0", d.join("physfn")).unwrap();
        std::os::unix::fs::symlink(format!("../{vf}"), pf.join(format!("virtfn{i}"))).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:00/{vf}"),
            t.p(&format!("sys/bus/pci/devices/{vf}")),
        )
        .unwrap();
    }
    let v = json(&t.devlend(&["devices", "--json"]));
    let dev = |a: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|d| d["address"] == a)
            .unwrap()
            .clone()
    };
    assert_eq!(dev("0000:01:00.0")["sriov_numvfs"], 2);
    assert!(dev("0000:01:00.0")["physfn"].is_null());
    assert_eq!(dev("0000:01:10.2")["physfn"], "0000:01:00.0");
    let out = stdout(&t.devlend(&["devices"]));
    assert!(
        out.lines()
            .any(|l| l.starts_with("0000:01:10.0") && l.ends_with("vf:0000:01:00.0")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("0000:01:00.0") && l.ends_with("pf:2")),
        "{out}"
    );
    // The PF is refused before the lender is asked.
    let o = t.devlend(&["lend", "0000:01:00.0"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("2 VFs enabled"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("lend its VFs one by one"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        fs::read_to_string(t.p("sys/bus/pci/drivers/devlend-lender/lend")).unwrap(),
        ""
    );

    let b = borrower();
    let r = b.p(&format!(
        "sys/devices/pci0000:00/{ADAPTER}/fabric/remote/0:1/pf"
    ));
    write(&r, "0000:01:00.0\n");
    let v = json(&b.devlend(&["remote", "--json"]));
    assert_eq!(v[0]["pf"], "0000:01:00.0");
    let out = stdout(&b.devlend(&["remote"]));
    assert!(out.contains("vf:lender/0000:01:00.0"), "{out}");
    // A lender that does not say (older module, or not a VF).
    write(&r, "\n");
    assert!(json(&b.devlend(&["remote", "--json"]))[0]["pf"].is_null());
}

/// `mdev incoming` writes `incoming` (or `none` with --cancel) to the
/// mdev's `migration`; it refuses an mdev of any device (exit 2) and one
/// whose host cannot migrate it (exit 3, nothing written); `qemu-args`
/// for a migratable mdev is QEMU's plain `vfio-pci` (the mdev reports its
/// dirty pages as QEMU's defaults read them), no experimental property.
#[test]
fn mdev_incoming_and_qemu_args_for_a_migratable_mdev() {
    let t = borrower();
    t.add_mdev(UUID, "devlend-nvme", "0:1");
    let m = t.adapter().join(UUID).join("migration");
    fs::write(&m, "running\n").unwrap();

    let o = t.devlend(&["qemu-args", UUID]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).trim(),
        format!(
            "-device vfio-pci,sysfsdev=/sys/bus/mdev/devices/{UUID},id=devlend-{}",
            &UUID[..8]
        ),
        "{}",
        stdout(&o)
    );
    let o = t.devlend(&["mdev", "incoming", UUID]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&m).unwrap(), "incoming");
    assert!(stderr(&o).contains("-incoming"), "{}", stderr(&o));
    let o = t.devlend(&["mdev", "incoming", UUID, "--cancel"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&m).unwrap(), "none");

    // A host whose VFIO cannot report the device's dirty pages.
    fs::write(&m, "unsupported\n").unwrap();
    let o = t.devlend(&["mdev", "incoming", UUID]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("CONFIG_IOMMUFD_DRIVER"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&m).unwrap(), "unsupported\n");

    // An mdev of any device cannot stand for the source's.
    const ANY: &str = "11111111-2222-3333-4444-555555555555";
    t.add_mdev(ANY, "devlend-nvme", "any");
    fs::write(t.adapter().join(ANY).join("migration"), "running\n").unwrap();
    let o = t.devlend(&["mdev", "incoming", ANY]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(t.adapter().join(ANY).join("migration")).unwrap(),
        "running\n"
    );
}

/// `mdev create --device ... --incoming` while the source (host 3) holds
/// the device and the type has no instance left: the UUID goes into the
/// device's `incoming_mdev` before `create` is written (the kernel then
/// gives the new mdev that device as a destination, which the fake kernel
/// here plays), and the mdev must come out `incoming` for it. Without
/// `--device`, with `--wait`, or with a module that has no
/// `incoming_mdev`, nothing is created.
#[test]
fn mdev_create_incoming_names_the_held_device_before_creating() {
    let t = borrower();
    let r = t.adapter().join("fabric/remote/0:1");
    write(&r.join("state"), "borrowed\n");
    write(&r.join("borrower"), "3\n");
    let ty = t.adapter().join("mdev_supported_types/devlend-nvme");
    write(&ty.join("available_instances"), "0\n");

    // A borrower module without incoming_mdev.
    let o = t.devlend(&["mdev", "create", "--device", "0:1", "--incoming"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("incoming_mdev"), "{}", stderr(&o));
    assert_eq!(fs::read_to_string(ty.join("create")).unwrap(), "");
    let o = t.devlend(&["mdev", "create", "--type", "nvme", "--incoming"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = t.devlend(&[
        "mdev",
        "create",
        "--device",
        "0:1",
        "--incoming",
        "--wait",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    let named = r.join("incoming_mdev");
    write(&named, "\n");
    let named2 = named.clone();
    // The kernel gives the new mdev the device named for its UUID.
    let k = fake_kernel_with(
        &t,
        "devlend-nvme",
        Duration::ZERO,
        || {},
        move |d, uuid| {
            let seen = fs::read_to_string(&named2).unwrap();
            let target = if seen == uuid { "0:1" } else { "any" };
            write(&d.join("remote_device"), &format!("{target}\n"));
            write(&d.join("migration"), "incoming\n");
        },
    );
    let o = t.devlend(&[
        "mdev",
        "create",
        "--device",
        "lender/0000:01:00.0",
        "--incoming",
        "--uuid",
        UUID,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(k.join().unwrap().as_deref(), Some(UUID));
    assert_eq!(stdout(&o).trim(), UUID);
    let m = t.adapter().join(UUID);
    assert_eq!(
        fs::read_to_string(m.join("remote_device")).unwrap(),
        "0:1\n"
    );
}
