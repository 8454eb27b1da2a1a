//! Linux's own NTB clients over devlend's emulated adapter: each host's
//! fabric adapter is also an NTB port (`devlend_ntb_emu.ko`), and
//! `ntb_pingpong` and `ntb_tool` from Linux's drivers/ntb, built by
//! `qemu-scripts/build-ntb.sh`, drive it as they would real hardware.
//! Every check reads back values and bytes, not just status.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{ensure, Context};
use devlend_agent::AgentClient;
use devlend_cluster::Cluster;
use devlend_vmtests::fabric::{self, sh, sh_timeout};
use devlend_vmtests::lending::{self, wait_until};
use devlend_vmtests::ntb;
use devlend_vmtests::twohost;
use devlend_vmtests::{Check, Suite};

const A: &str = "lender";
const B: &str = "borrower";
const WAIT: Duration = Duration::from_secs(60);

fn boot() -> anyhow::Result<Cluster> {
    devlend_vmtests::boot_topology("two-host")
}

/// Where the hosts' kernel logs stood before the first module loaded.
static MARKS: Mutex<Option<[usize; 2]>> = Mutex::new(None);

/// Both hosts' ports registered, the fabric up between them; their NTB
/// device names.
fn ports_up(c: &Cluster) -> anyhow::Result<(String, String)> {
    {
        let mut marks = MARKS.lock().unwrap_or_else(|e| e.into_inner());
        if marks.is_none() {
            *marks = Some(twohost::log_marks(c)?);
        }
    }
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    let params = c.topology().ntb.module_params();
    ntb::load_emulated_port(a, &params).context(A)?;
    ntb::load_emulated_port(b, &params).context(B)?;
    let (ia, ib) = (fabric::host_id(a)?, fabric::host_id(b)?);
    fabric::wait_peer_state(a, ib, "up", WAIT)?;
    fabric::wait_peer_state(b, ia, "up", WAIT)?;
    Ok((ntb::ntb_device(a)?, ntb::ntb_device(b)?))
}

/// No NTB message was refused on either port.
fn no_refusals(c: &Cluster) -> anyhow::Result<()> {
    for host in [A, B] {
        let st = ntb::port_state(c.agent(host)?)?;
        ensure!(
            st.get("rej").map(String::as_str) == Some("0"),
            "{host}'s port refused messages: {st:?}"
        );
    }
    Ok(())
}

/// Each host has one NTB device on the NTB bus, named after its fabric
/// adapter: a switch port numbered by its fabric host id, with one peer.
fn ntb_emulated_ports(c: &mut Cluster) -> anyhow::Result<()> {
    let (da, db) = ports_up(c)?;
    for (host, dev) in [(A, &da), (B, &db)] {
        let a = c.agent(host)?;
        let st = ntb::port_state(a)?;
        let id = fabric::host_id(a)?.to_string();
        ensure!(
            st.get("port") == Some(&id),
            "{host}: port {st:?}, host id {id}"
        );
        ensure!(
            st.get("ports").map(String::as_str) == Some("2"),
            "{host}: {st:?}"
        );
        ensure!(st.get("ntb") == Some(dev), "{host}: {st:?} vs device {dev}");
        let adapter = sh(
            a,
            "basename $(dirname $(ls -d /sys/bus/pci/devices/*/fabric))",
        )?;
        ensure!(
            adapter.trim() == dev,
            "{host}: NTB device {dev}, adapter {adapter}"
        );
        println!("  {host}: NTB device {dev}, port {id}");
    }
    Ok(())
}

/// ntb_pingpong pings from each port to the other through the peer's
/// doorbell, after writing its count to the peer's scratchpad and message
/// register; each pong counts. Both counts climb.
fn ntb_pingpong_rounds(c: &mut Cluster) -> anyhow::Result<()> {
    let (da, db) = ports_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    for x in [a, b] {
        ntb::load_linux_module(x, "ntb_pingpong", "delay_ms=20")?;
    }
    let count = |x: &AgentClient, dev: &str| -> anyhow::Result<u64> {
        let s = sh(
            x,
            &format!("cat /sys/kernel/debug/ntb_pingpong/{dev}/count"),
        )?;
        s.trim().parse().with_context(|| format!("count {s:?}"))
    };
    let rounds = 100;
    let result = wait_until(
        "ping-pong rounds on both ports",
        WAIT,
        || Ok((count(a, &da)? >= rounds && count(b, &db)? >= rounds).to_string()),
        "true",
    );
    let (ca, cb) = (count(a, &da)?, count(b, &db)?);
    for x in [a, b] {
        sh(x, "rmmod ntb_pingpong")?;
    }
    result?;
    println!("  pongs counted: {A} {ca}, {B} {cb}");
    no_refusals(c)
}

/// ntb_tool's link, doorbell, scratchpad, message and memory window files,
/// each written on one port and read back on the other.
fn ntb_tool_registers_and_window(c: &mut Cluster) -> anyhow::Result<()> {
    let (da, db) = ports_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    for x in [a, b] {
        ntb::load_linux_module(x, "ntb_tool", "")?;
    }
    let (ta, tb) = (
        format!("/sys/kernel/debug/ntb_tool/{da}"),
        format!("/sys/kernel/debug/ntb_tool/{db}"),
    );
    let result = tool_checks(a, &ta, b, &tb);
    for x in [a, b] {
        sh(x, "rmmod ntb_tool")?;
    }
    result?;
    no_refusals(c)
}

/// ntb_tool prints registers with the kernel's `%#llx`: zero is "0x0".
fn is_zero(v: &str) -> bool {
    v == "0x0" || v == "0"
}

fn tool_checks(a: &AgentClient, ta: &str, b: &AgentClient, tb: &str) -> anyhow::Result<()> {
    let read = |x: &AgentClient, f: &str| -> anyhow::Result<String> {
        Ok(sh(x, &format!("cat {f}"))?.trim().to_owned())
    };

    // Link: each side enables its half; the link is up once both have.
    sh(a, &format!("echo Y > {ta}/link"))?;
    ensure!(
        read(a, &format!("{ta}/peer0/link"))? == "N",
        "up with one side enabled"
    );
    sh(b, &format!("echo Y > {tb}/link"))?;
    for (x, t) in [(a, ta), (b, tb)] {
        sh_timeout(
            x,
            &format!("timeout 30 sh -c 'echo Y > {t}/peer0/link_event'"),
            Duration::from_secs(40),
        )
        .context("waiting for the link event")?;
        ensure!(read(x, &format!("{t}/peer0/link"))? == "Y");
    }
    println!("  link up on both ports once both enabled it");

    // Doorbells are the port's state, not the client's: a bit ntb_pingpong
    // (the check before) rang as it was unloaded may still be set. A new
    // client clears them, as ntb_transport does at init.
    for (x, t) in [(a, ta), (b, tb)] {
        sh(x, &format!("echo 'c 0xffff' > {t}/db"))?;
        let left = read(x, &format!("{t}/db"))?;
        ensure!(is_zero(&left), "doorbells not cleared at start: {left}");
    }

    // Doorbells: rung on one side, read and cleared on the other.
    sh(a, &format!("echo 's 0x5' > {ta}/peer_db"))?;
    wait_until(
        "doorbell bits at the peer",
        WAIT,
        || read(b, &format!("{tb}/db")),
        "0x5",
    )?;
    sh(b, &format!("echo 'c 0x5' > {tb}/db"))?;
    let left = read(b, &format!("{tb}/db"))?;
    ensure!(is_zero(&left), "doorbell not cleared: {left}");
    sh(b, &format!("echo 's 0x8000' > {tb}/peer_db"))?;
    wait_until(
        "doorbell bits back",
        WAIT,
        || read(a, &format!("{ta}/db")),
        "0x8000",
    )?;
    println!("  doorbells: 0x5 one way, 0x8000 the other, cleared");

    // Scratchpads: a peer write lands in the peer's register; a peer read
    // fetches it back.
    sh(a, &format!("echo 0xdeadbeef > {ta}/peer0/spad3"))?;
    wait_until(
        "scratchpad 3 at the peer",
        WAIT,
        || read(b, &format!("{tb}/spad3")),
        "0xdeadbeef",
    )?;
    ensure!(
        read(a, &format!("{ta}/peer0/spad3"))? == "0xdeadbeef",
        "peer read of spad3"
    );
    sh(b, &format!("echo 0x1234 > {tb}/spad0"))?;
    ensure!(
        read(a, &format!("{ta}/peer0/spad0"))? == "0x1234",
        "peer read of spad0"
    );
    println!("  scratchpads: written and read across, both ways");

    // Message registers: a message arrives with its source; an unread one
    // is not overwritten.
    sh(b, &format!("echo 's 0xf' > {tb}/msg_mask"))?;
    sh(a, &format!("echo 0x12345678 > {ta}/peer0/msg1"))?;
    wait_until(
        "message 1 at the peer",
        WAIT,
        || read(b, &format!("{tb}/msg1")),
        "0x12345678<-0",
    )?;
    let sts = read(b, &format!("{tb}/msg_sts"))?;
    ensure!(sts == "0x2", "message status {sts}, not 0x2");
    sh(a, &format!("echo 0x9 > {ta}/peer0/msg1"))?;
    sh(a, &format!("echo 0x77 > {ta}/peer0/msg2"))?;
    wait_until(
        "message 2 at the peer",
        WAIT,
        || read(b, &format!("{tb}/msg2")),
        "0x00000077<-0",
    )?;
    ensure!(
        read(b, &format!("{tb}/msg1"))? == "0x12345678<-0",
        "an unread message was overwritten"
    );
    sh(b, &format!("echo 'c 0x6' > {tb}/msg_sts"))?;
    let left = read(b, &format!("{tb}/msg_sts"))?;
    ensure!(is_zero(&left), "message status not cleared: {left}");
    println!("  message registers: delivered with their source, unread ones kept");

    // A memory window: the borrower sets an inbound translation; the lender
    // writes 64 KiB through its outbound window; the borrower reads them.
    let size = 65536;
    sh(b, &format!("echo {size} > {tb}/peer0/mw_trans0"))?;
    // Whether the lender's outbound window exists: its file reads.
    let outbound = || -> anyhow::Result<String> {
        let out = a.sh(
            &format!("cat {ta}/peer0/peer_mw_trans0"),
            Duration::from_secs(10),
        )?;
        Ok((out.exit_code == Some(0)).to_string())
    };
    wait_until("the peer's translation known", WAIT, outbound, "true")?;
    sh(a, &format!("echo 0:{size} > {ta}/peer0/peer_mw_trans0"))?;
    let sent = sh(
        a,
        &format!(
            "head -c {size} /dev/urandom > /tmp/mw.bin && \
             dd if=/tmp/mw.bin of={ta}/peer0/peer_mw0 bs={size} count=1 2>/dev/null && \
             sha256sum < /tmp/mw.bin"
        ),
    )?;
    let got = sh(b, &format!("head -c {size} {tb}/peer0/mw0 | sha256sum"))?;
    ensure!(
        sent.split_whitespace().next() == got.split_whitespace().next(),
        "bytes written through the window differ from those in the peer's buffer: {sent} vs {got}"
    );
    let back = sh(
        a,
        &format!("head -c {size} {ta}/peer0/peer_mw0 | sha256sum"),
    )?;
    ensure!(
        sent == back,
        "reading back through the window: {back} vs {sent}"
    );
    println!("  memory window: 64 KiB through the lender's outbound window, same bytes in the borrower's buffer");

    // Unmapped both ways, which also spares ntb_tool's unload a
    // use-after-free of 6.12 (tool_remove() removes its debugfs tree, then
    // each mapped window's file in it again).
    sh(a, &format!("echo 0:0 > {ta}/peer0/peer_mw_trans0"))?;
    sh(b, &format!("echo 0 > {tb}/peer0/mw_trans0"))?;
    wait_until("the peer's translation withdrawn", WAIT, outbound, "false")?;
    println!("  memory window unmapped: the lender's outbound window is gone with the translation");
    Ok(())
}

/// devlend over its own NTB backend (`devlend_ntb.ko`) on the emulated
/// ports: a second fabric comes up on the NTB devices, the lender serves
/// it too, and the borrower's userspace driver does verified I/O on the
/// lender's NVMe through an mdev of that fabric, then writes 256 KiB more
/// that stay. Its doorbells travel as NTB doorbells (counted by the
/// ports), and its writes reach the lender's backing file (the verified
/// phase puts back what it found; the timed writes stay).
fn ntb_backend_lends_nvme(c: &mut Cluster) -> anyhow::Result<()> {
    let (da, db) = ports_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    for x in [a, b] {
        let ko = devlend_cluster::host_view(&fabric::module_dir().join("devlend_ntb.ko"));
        sh(
            x,
            &format!(
                "grep -q '^devlend_ntb ' /proc/modules || insmod {}",
                ko.display()
            ),
        )
        .context("loading devlend_ntb")?;
    }
    let (ia, ib) = (fabric::host_id(a)?, fabric::host_id(b)?);
    for (x, dev, peer) in [(a, &da, ib), (b, &db, ia)] {
        ntb::wait_ntb_fabric_peer_up(x, dev, peer, WAIT)?;
    }
    println!("  a second fabric, over the NTB ports, is up on both hosts");

    lending::ensure_module(b)?;
    let nvme = lending::find_by_class(a, lending::NVME_CLASS)?;
    if lending::driver_of(a, &nvme.addr)?.as_deref() != Some("devlend-lender") {
        lending::lend(a, &nvme.addr)?;
    }
    // The NTB fabric's own device is /sys/class/devlend/ntb-<dev> (the NTB
    // device has its PCI adapter's name, which the emulated fabric's mdev
    // parent took already): no clash.
    let dup = sh(
        b,
        "dmesg | grep -c 'cannot create duplicate filename' || true",
    )?;
    ensure!(
        dup.trim() == "0",
        "sysfs names clashed:\n{}",
        sh(b, "dmesg | grep -A3 'duplicate filename'")?
    );
    let parents = sh(b, "ls /sys/class/mdev_bus")?;
    ensure!(
        parents.split_whitespace().any(|p| p == format!("ntb-{db}")),
        "the NTB fabric is no mdev parent: {parents}"
    );
    ntb::wait_listed_on_ntb_fabric(b, &db, &nvme.addr, WAIT)?;
    // The CLI sees both fabrics, and acts on the one it is told.
    let cli = twohost::host_bin("devlend", "DEVLEND_CLI")?;
    let fabrics: serde_json::Value =
        serde_json::from_str(&sh(b, &format!("{cli} fabrics --json"))?)
            .context("devlend fabrics --json")?;
    let ntb_fabric = format!("ntb-{db}");
    let names: Vec<&str> = fabrics
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["adapter"].as_str()).collect())
        .unwrap_or_default();
    ensure!(
        names.len() == 2 && names[1] == ntb_fabric,
        "devlend fabrics: {fabrics}"
    );
    ensure!(
        fabrics[1]["host_id"] == ib,
        "devlend fabrics: this host's id on the NTB fabric: {fabrics}"
    );
    let remote = sh(b, &format!("{cli} --fabric {ntb_fabric} remote --json"))?;
    ensure!(
        remote.contains(&format!("\"{}\"", nvme.addr)),
        "devlend --fabric {ntb_fabric} remote: {remote}"
    );
    println!("  devlend fabrics: {}", names.join(", "));
    let img = c.paths().nvme_file(A, "nvme0");
    let before_file = ntb::backing_range_sha256(&img, 8192, 64)?;
    let before_db = db_rx(b)?;
    let r = ntb::nvme_writes_over_ntb_fabric(b, &db, "--lba 8192 --range-blocks 64 --ios 500")?;
    let verified = r["verified_ios"].as_u64().unwrap_or(0);
    let nvme_type = "devlend-nvme";
    let doorbells = db_rx(b)? - before_db;
    ensure!(
        doorbells > verified / 4,
        "{doorbells} NTB doorbells for {verified} I/Os: not the NTB fabric"
    );
    ensure!(
        ntb::backing_range_sha256(&img, 8192, 64)? != before_file,
        "the written range of the lender's backing file is unchanged: {r}"
    );
    ensure!(
        r["rw"] == "write" && r["timed_bytes"].as_u64().unwrap_or(0) > 0,
        "no timed writes: {r}"
    );
    println!(
        "  {verified} verified I/Os over the NTB fabric ({nvme_type}), {doorbells} NTB doorbells at the borrower, the lender's drive written"
    );
    wait_until(
        "the NVMe available again",
        WAIT,
        || lending::lent_state(a, &nvme.addr),
        "available",
    )?;
    // The borrower leaves the NTB fabric: the lender takes window 1 (its
    // RAM) from it, and the borrower's port hears that it is gone.
    let window_1 = |x: &AgentClient, peer: u32, dir: &str| -> anyhow::Result<String> {
        let peers = ntb::port_peers(x)?;
        let kv = peers
            .get(&peer)
            .with_context(|| format!("no peer {peer}: {peers:?}"))?;
        Ok(kv[dir].split(',').nth(1).unwrap_or("?").to_owned())
    };
    ensure!(
        window_1(a, ib, "in")? != "0" && window_1(b, ia, "out")? != "0",
        "window 1 not open while bound: {:?}",
        ntb::port_peers(a)?
    );
    sh(b, "rmmod devlend_ntb").context("unloading devlend_ntb")?;
    wait_until(
        "the lender's window 1 taken from the borrower that left",
        WAIT,
        || {
            Ok(format!(
                "{}/{}",
                window_1(a, ib, "in")?,
                window_1(b, ia, "out")?
            ))
        },
        "0/0",
    )?;
    println!("  the borrower left: the lender closed its window 1 to it");
    sh(a, "rmmod devlend_ntb").context("unloading devlend_ntb")?;
    no_refusals(c)
}

/// The ports refuse what an adapter with smaller windows would: loaded with
/// 64 MiB windows (the hosts have 1 GiB of RAM, and their adapters bypass
/// the IOMMU here, so a window shows bus addresses one to one), devlend's
/// NTB backend says why and makes no fabric; loaded again with the
/// topology's limits, the ports take them.
fn ntb_window_limits_refused(c: &mut Cluster) -> anyhow::Result<()> {
    let (da, db) = ports_up(c)?;
    let (a, b) = (c.agent(A)?, c.agent(B)?);
    let small = 64u64 << 20;
    for x in [a, b] {
        sh(
            x,
            "if grep -q '^devlend_ntb ' /proc/modules; then rmmod devlend_ntb; fi; \
             rmmod devlend_ntb_emu",
        )?;
        ntb::load_emulated_port(x, &format!("mw_count=2 mw_size_max={small}"))?;
        let st = ntb::port_state(x)?;
        ensure!(
            st.get("mw_size_max") == Some(&small.to_string()),
            "port limits not taken: {st:?}"
        );
    }
    let mark = devlend_vmtests::ownership::kernel_log_lines(a)?;
    for x in [a, b] {
        let ko = devlend_cluster::host_view(&fabric::module_dir().join("devlend_ntb.ko"));
        sh(x, &format!("insmod {}", ko.display()))?;
    }
    let want = format!("inbound window of {small} bytes shows bus addresses one to one");
    wait_until(
        "the backend's refusal in the owner's log",
        WAIT,
        || {
            let n = sh(
                a,
                &format!("dmesg | tail -n +{} | grep -c \"{want}\" || true", mark + 1),
            )?;
            Ok(n.trim().to_owned())
        },
        "1",
    )?;
    for (x, dev) in [(a, &da), (b, &db)] {
        let fab = sh(
            x,
            &format!("test -e /sys/bus/ntb/devices/{dev}/fabric && echo yes || echo no"),
        )?;
        ensure!(
            fab.trim() == "no",
            "a fabric came up over windows too small for the RAM"
        );
    }
    println!("  64 MiB windows for 1 GiB hosts: the NTB backend refused, no fabric");
    for x in [a, b] {
        sh(x, "rmmod devlend_ntb devlend_ntb_emu")?;
    }
    ports_up(c)?;
    let st = ntb::port_state(a)?;
    println!(
        "  reloaded with the topology's limits: {} windows of up to {} bytes",
        st["mws"], st["mw_size_max"]
    );
    Ok(())
}

/// Doorbell messages the host's emulated port received.
fn db_rx(x: &AgentClient) -> anyhow::Result<u64> {
    let st = ntb::port_state(x)?;
    fabric::counter(&st, "db_rx")
}

/// Everything unloads: the emulated ports (their NTB devices leave the
/// bus), then ntb.ko and devlend's modules; no WARN, oops or lockup on
/// either host since the suite began.
fn ntb_unload_clean(c: &mut Cluster) -> anyhow::Result<()> {
    ports_up(c)?;
    for host in [A, B] {
        let x = c.agent(host)?;
        sh(
            x,
            "if grep -q '^devlend_ntb ' /proc/modules; then rmmod devlend_ntb; fi; \
             rmmod devlend_ntb_emu ntb",
        )
        .with_context(|| format!("unloading on the {host}"))?;
        let left = sh(x, "ls /sys/bus/ntb/devices 2>/dev/null | wc -l")?;
        ensure!(left.trim() == "0", "{host}: NTB devices left after unload");
        fabric::unload_modules(x).with_context(|| format!("devlend's modules on the {host}"))?;
    }
    let marks = MARKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .context("no marks")?;
    twohost::no_kernel_trouble(c, marks, None)
}

fn main() {
    suite().run(boot)
}

/// The checks of this suite, with its reset; `twohost` runs them on the
/// cluster it shares with the other two-host suites.
pub fn suite() -> Suite {
    let checks = vec![
        Check {
            name: "ntb_emulated_ports",
            run: ntb_emulated_ports,
        },
        Check {
            name: "ntb_pingpong_rounds",
            run: ntb_pingpong_rounds,
        },
        Check {
            name: "ntb_tool_registers_and_window",
            run: ntb_tool_registers_and_window,
        },
        Check {
            name: "ntb_backend_lends_nvme",
            run: ntb_backend_lends_nvme,
        },
        Check {
            name: "ntb_window_limits_refused",
            run: ntb_window_limits_refused,
        },
        Check {
            name: "ntb_unload_clean",
            run: ntb_unload_clean,
        },
    ];
    Suite::new("ntb", checks).reset(devlend_vmtests::fixture::reset_hosts)
}
