//! `devlend`: see `devlend --help` and docs/devlend-cli.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use devlend::lendconf::{self, Hosts};
use devlend::progress::with_progress;
use devlend::qmp::{self, Qmp};
use devlend::stats::{self, Reading};
use devlend::sysfs::{self, Sysfs};
use devlend::vmmargs;
use devlend::{CliError, Result};

const ABOUT: &str = "Lend PCIe devices to other hosts of the fabric, and give borrowed ones to VMs";

const LONG_ABOUT: &str = "\
Lend PCIe devices to other hosts of the fabric, and give borrowed ones to VMs.

devlend (kernel modules devlend_fabric, a fabric backend such as
devlend_ivshmem, devlend_lender and devlend_borrower) lets a host use a PCIe device installed
in another host as if it were local. A lender host lends a device; every
other host sees it as a remote device, and turns it into a VFIO mediated
device (mdev) that QEMU, libvirt or cloud-hypervisor give to a guest. The
device is borrowed when the guest first resets it, and returned when the
guest lets go of it.

Typical session:
  lender#   devlend devices                        # what could be lent
  lender#   devlend lend 0000:01:00.0
  borrower# devlend hosts                          # is the lender up?
  borrower# devlend remote                         # 0:1  lender/0000:01:00.0 ...
  borrower# devlend mdev create --device lender/0000:01:00.0
  borrower# devlend qemu-args <uuid>               # or libvirt-xml, ch-args
  borrower# devlend attach --qmp /run/vm.qmp <uuid>   # or hot-plug
  borrower# devlend detach --qmp /run/vm.qmp devlend-<uuid prefix>
  borrower# devlend mdev remove <uuid>
  lender#   devlend unlend 0000:01:00.0

Every listing takes --json. Run as root.";

const AFTER_HELP: &str = "\
Exit status:
  0  success
  1  failure without a status of its own
  2  bad usage
  3  not found (module not loaded, no adapter, no such device, mdev or type)
  4  busy or none available (held by another borrower, mdev open in a VMM, available_instances 0)
  5  permission denied (run as root)
  6  timed out (the guest did not release a device; no device became free for mdev create --wait)
  7  the VMM refused or could not be reached over QMP

See docs/devlend-cli.md for the full manual.";

#[derive(Parser, Debug)]
#[command(name = "devlend", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Root of the sysfs tree to use (tests point it at a fake tree).
    #[arg(
        long,
        global = true,
        env = "DEVLEND_SYSFS_ROOT",
        default_value = "/",
        hide_env_values = true
    )]
    sysfs_root: PathBuf,
    /// The fabric to act on, by its device's name as `devlend fabrics`
    /// shows it (a PCI adapter's address, or `ntb-<NTB device>`); default:
    /// the first.
    #[arg(long, global = true, env = "DEVLEND_FABRIC", value_name = "NAME")]
    fabric: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// This host and the other hosts of the fabric, with link state.
    Hosts,
    /// The fabrics this host is on: the PCI adapter's and any a backend
    /// made (NTB), with this host's id and the peers up.
    #[command(
        long_about = "The fabrics this host is on, one line each: the fabric's \
        device (a PCI adapter's address, or ntb-<NTB device> for devlend's NTB backend), \
        this host's id on it, the fabric id and how many peers are up. The first is \
        the one other commands use unless --fabric names another."
    )]
    Fabrics,
    /// Local PCI devices and their lending state.
    #[command(long_about = "Local PCI devices and their lending state.\n\n\
        Lent devices show their dev_id, state (available, borrowed, returning, failed), the \
        borrowing host, DMA bytes mapped and interrupt vectors. Bridges are left out \
        unless --all.")]
    Devices {
        /// Also list bridges.
        #[arg(long)]
        all: bool,
    },
    /// Lend a local device to the fabric (on the lender host).
    #[command(
        long_about = "Lend a local device to the fabric (on the lender host).\n\n\
        The devlend-lender driver takes the device from its driver, isolates it in an \
        IOMMU domain of its own and announces it to the other hosts. The device must be \
        alone in its IOMMU group behind an IOMMU (boot with intel_iommu=on)."
    )]
    Lend {
        /// PCI address, like 0000:01:00.0.
        address: String,
        /// Lend it only to these host ids (comma-separated), or `all`.
        #[arg(long, value_name = "HOSTS")]
        to: Option<String>,
    },
    /// Lend the devices of the lender's configuration (at boot: devlend-lend.service).
    #[command(long_about = "Lend the devices of the lender's configuration.\n\n\
        Each line of the file is a PCI address, optionally followed by to=HOSTS (host ids \
        separated by commas, or all; the default); # starts a comment. Devices not yet lent \
        are lent, and every listed device is lent to the hosts its line names. Devices lent \
        but not listed are left as they are. Every line is tried; the exit status is that of \
        the first failure. systemd's devlend-lend.service runs this at boot, once the modules \
        are loaded.")]
    Apply {
        /// The configuration file.
        #[arg(long, default_value = lendconf::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Take a lent device back and give it to its own driver again.
    Unlend {
        /// PCI address, like 0000:01:00.0.
        address: String,
        /// Take it back even while a borrower holds it (its guest sees the device fail).
        #[arg(long)]
        force: bool,
    },
    /// Devices other hosts lend: lender, state, borrower, and local mdevs using them.
    Remote,
    /// What the fabric and the lent devices are doing: rates and round trips.
    #[command(long_about = "What the fabric and the lent devices are doing.\n\n\
        Reads the kernel's counters twice, --interval apart, and prints per peer the \
        link, heartbeat age, answers per second to this host's requests and their mean \
        round trip (in the interval, and since the module loaded); per lent device its \
        state, borrower, DMA bytes mapped, vectors and interrupts per second; and this \
        host's mdevs. --prometheus prints one reading in Prometheus' text format instead \
        (counters, for a scraper or node_exporter's textfile collector).")]
    Stats {
        /// Seconds between the two readings.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// One reading in Prometheus' text exposition format.
        #[arg(long)]
        prometheus: bool,
    },
    /// Create, list and remove the mdevs that stand for remote devices.
    #[command(subcommand)]
    Mdev(MdevCmd),
    /// QEMU arguments for an mdev (-device vfio-pci,sysfsdev=...).
    QemuArgs(VmmArgs),
    /// libvirt XML for an mdev (<hostdev type='mdev'>, a whole domain, or a node device).
    #[command(long_about = "libvirt XML for an mdev.\n\n\
        By default the <hostdev mode='subsystem' type='mdev' model='vfio-pci'> element, \
        for `virsh attach-device` or a domain's <devices>. --domain wraps it in a minimal \
        domain; --nodedev prints the node device definition for `virsh nodedev-define` \
        (libvirt then manages the mdev through mdevctl).")]
    LibvirtXml(LibvirtArgs),
    /// cloud-hypervisor arguments for an mdev (--device path=/sys/bus/mdev/devices/<uuid>/).
    #[command(
        long_about = "cloud-hypervisor arguments for an mdev: --device path=/sys/bus/mdev/devices/<uuid>/.\n\n\
        With --api-socket, the ch-remote command that hot-plugs it into a running VM instead \
        (remove it again with `ch-remote --api-socket <socket> remove-device <id>`). \
        cloud-hypervisor ignores the ERR and REQ notifications."
    )]
    ChArgs(ChArgs),
    /// Write the manual pages (devlend.1, devlend-<command>.1) into DIR.
    #[command(hide = true)]
    Man {
        /// Where to write them.
        dir: PathBuf,
    },
    /// Hot-plug an mdev into a running QEMU over QMP (device_add).
    Attach(AttachArgs),
    /// Hot-unplug a device from a running QEMU over QMP (device_del, then wait for DEVICE_DELETED).
    #[command(long_about = "Hot-unplug a device from a running QEMU over QMP.\n\n\
        Sends device_del and waits for QEMU's DEVICE_DELETED event, which comes once the \
        guest has released the device. A guest that does not cooperate (no PCIe \
        hot-plug driver, or hung) leaves the device attached: the command then fails \
        with exit status 6 after --timeout.")]
    Detach(DetachArgs),
}

#[derive(Subcommand, Debug)]
enum MdevCmd {
    /// The mdev types of the fabric adapter, with available instances.
    Types,
    /// Create an mdev, of a type or for one named remote device.
    #[command(
        long_about = "Create an mdev, of a type or for one named remote device.\n\n\
        With --device the mdev is pinned to that remote device (its remote_device \
        attribute is written right after creation, as mdevctl does) and the type follows \
        from the device's class unless --type is given. Without --device the mdev takes \
        any free device of its type when a VM first opens it. Prints the UUID.\n\n\
        With --wait SECONDS a request for a device that is not free queues for it instead \
        of failing with exit status 4: the command looks again every half second until \
        the type has an available instance (with --device: until that device is \
        available on its lender and no other mdev of this host targets it), then creates \
        the mdev. A device returned by one borrower is taken by a waiting request. If \
        another request takes the device first, the wait goes on. At the deadline it \
        fails with exit status 6."
    )]
    Create {
        /// Type: any, nvme, net (or devlend-any, ...). Default: from --device's class, else any.
        #[arg(long = "type", short = 't')]
        mtype: Option<String>,
        /// Remote device: <lender>/<pci-address> or <host-id>:<dev_id> (see `devlend remote`).
        #[arg(long, short = 'd')]
        device: Option<String>,
        /// UUID to use (default: a new random one).
        #[arg(long)]
        uuid: Option<String>,
        /// Wait up to SECONDS for a free device (of the type, or the --device named) instead of failing; 0: do not wait.
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        wait: u64,
    },
    /// This host's devlend mdevs.
    List,
    /// Remove an mdev; refused (exit status 4) while a VMM has it open.
    #[command(
        long_about = "Remove an mdev; refused (exit status 4) while a VMM has it open.\n\n\
        Reads the mdev's `open` attribute and writes 1 to its `remove` only when it is 0 \
        (or absent, from a borrower module that predates it). The kernel would not refuse \
        the remove of an open mdev: it would ask the VMM to let go, which QEMU does by \
        unplugging the device from the running guest, and wait until the VMM closes it, \
        forever under a VMM that does not answer (cloud-hypervisor). Detach the device from \
        the guest or stop the VM first. The check and the remove are two steps, not one: \
        a VMM that opens the mdev between them gets the kernel's behaviour."
    )]
    Remove {
        /// The mdev's UUID.
        uuid: String,
    },
}

#[derive(Args, Debug)]
struct VmmArgs {
    /// The mdev's UUID.
    uuid: String,
    /// QEMU device id (default devlend-<first group of the UUID>).
    #[arg(long)]
    id: Option<String>,
    /// Bus to put the device on (e.g. a pcie-root-port id).
    #[arg(long)]
    bus: Option<String>,
    /// Do not check that the mdev exists on this host.
    #[arg(long)]
    no_check: bool,
}

#[derive(Args, Debug)]
struct LibvirtArgs {
    /// The mdev's UUID (with --nodedev --device: the new mdev's; made up if left out).
    #[arg(required_unless_present = "device")]
    uuid: Option<String>,
    /// Wrap the hostdev in a minimal domain of this name.
    #[arg(long, conflicts_with = "nodedev")]
    domain: Option<String>,
    /// Guest memory in MiB for --domain.
    #[arg(long, default_value_t = 1024, requires = "domain")]
    memory: u64,
    /// Device alias (libvirt wants user aliases to start with "ua-").
    #[arg(long)]
    alias: Option<String>,
    /// Print the node device definition instead (of an existing mdev, or with --device of a new one).
    #[arg(long)]
    nodedev: bool,
    /// With --nodedev: define a new mdev for this remote device (`<host-id>:<dev_id>` or `<lender>/<pci-address>`).
    #[arg(long, requires = "nodedev")]
    device: Option<String>,
    /// Do not check that the mdev exists on this host.
    #[arg(long, conflicts_with = "nodedev")]
    no_check: bool,
}

#[derive(Args, Debug)]
struct ChArgs {
    /// The mdev's UUID.
    uuid: String,
    /// cloud-hypervisor device id.
    #[arg(long)]
    id: Option<String>,
    /// Print the ch-remote command that hot-plugs it into the VM behind this API socket.
    #[arg(long, value_name = "SOCKET")]
    api_socket: Option<PathBuf>,
    /// Do not check that the mdev exists on this host.
    #[arg(long)]
    no_check: bool,
}

#[derive(Args, Debug)]
struct AttachArgs {
    /// QMP socket of the running QEMU (-qmp unix:<path>,server=on,wait=off).
    #[arg(long)]
    qmp: PathBuf,
    /// The mdev's UUID.
    uuid: String,
    /// QEMU device id (default devlend-<first group of the UUID>); detach needs it.
    #[arg(long)]
    id: Option<String>,
    /// Hot-pluggable bus, e.g. a free pcie-root-port on q35.
    #[arg(long)]
    bus: Option<String>,
    /// Seconds to wait for QEMU.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

#[derive(Args, Debug)]
struct DetachArgs {
    /// QMP socket of the running QEMU.
    #[arg(long)]
    qmp: PathBuf,
    /// QEMU device id, or the mdev's UUID (meaning its default id).
    device: String,
    /// Seconds to wait for the guest to release the device.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

fn print_json<T: Serialize>(v: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("plain data serializes")
    );
}

fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        println!("{}", s.join("  ").trim_end());
    };
    line(headers.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// `devlend apply`: every line is tried; the first failure is the result.
fn apply(sys: &Sysfs, config: &std::path::Path, json: bool) -> Result<()> {
    let text = std::fs::read_to_string(config).map_err(|source| CliError::Sysfs {
        action: "reading".into(),
        path: config.to_path_buf(),
        source,
        hint: "write the devices to lend there, one PCI address per line (`devlend apply --help`)"
            .into(),
    })?;
    let entries = lendconf::parse(&text, config)?;
    let mut first_err = None;
    let mut done = Vec::new();
    for e in entries {
        let lent = sys
            .local_devices(true)?
            .into_iter()
            .any(|d| d.address == e.address && d.lent.is_some());
        let res = if lent {
            Ok(())
        } else {
            with_progress(
                &format!("lending {} (the lender resets it)", e.address),
                || sys.lend(&e.address).map(drop),
            )
        }
        .and_then(|()| sys.set_allowed_hosts(&e.address, &e.to));
        match res {
            Ok(d) => {
                if !json {
                    println!(
                        "{} {} to hosts {}",
                        d.address,
                        if lent { "stays lent" } else { "lent" },
                        e.to.to_sysfs()
                    );
                }
                done.push(d);
            }
            Err(err) => {
                eprintln!("devlend apply: {}: {err}", e.address);
                first_err.get_or_insert(err);
            }
        }
    }
    if json {
        print_json(&done);
    }
    first_err.map_or(Ok(()), Err)
}

fn print_stats(sys: &Sysfs, interval: f64, prometheus: bool, json: bool) -> Result<()> {
    if prometheus {
        if json {
            return Err(CliError::usage(
                "--prometheus and --json exclude each other",
            ));
        }
        print!("{}", stats::prometheus(&Reading::take(sys)?));
        return Ok(());
    }
    if !(interval > 0.0 && interval <= 3600.0) {
        return Err(CliError::usage(format!(
            "--interval {interval}: give seconds, more than 0 and at most 3600"
        )));
    }
    let before = Reading::take(sys)?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(interval));
    let after = Reading::take(sys)?;
    let s = stats::compare(&before, &after, t0.elapsed().as_secs_f64());
    if json {
        print_json(&s);
        return Ok(());
    }
    let name = if s.hostname.is_empty() {
        "?"
    } else {
        &s.hostname
    };
    println!(
        "this host: {name} (host id {}); rates over {:.1} s",
        s.host_id, s.interval_s
    );
    let f1 = |v: &Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}"));
    let peers: Vec<Vec<String>> = s
        .peers
        .iter()
        .map(|p| {
            vec![
                p.host_id.to_string(),
                p.name.clone(),
                p.link.clone(),
                or_dash(&p.heartbeat_age_ms),
                f1(&p.answers_per_s),
                f1(&p.round_trip_us),
                f1(&p.round_trip_us_since_load),
            ]
        })
        .collect();
    println!();
    table(
        &[
            "HOST",
            "NAME",
            "LINK",
            "HEARTBEAT_MS",
            "ANSWERS/S",
            "RTT_US",
            "RTT_US_SINCE_LOAD",
        ],
        &peers,
    );
    if !s.lent.is_empty() {
        let lent: Vec<Vec<String>> = s
            .lent
            .iter()
            .map(|d| {
                vec![
                    d.address.clone(),
                    d.dev_id.to_string(),
                    d.state.clone(),
                    or_dash(&d.borrower),
                    d.dma_mapped_bytes.to_string(),
                    d.irq_vectors.to_string(),
                    f1(&d.irqs_per_s),
                ]
            })
            .collect();
        println!();
        table(
            &[
                "LENT",
                "DEV_ID",
                "STATE",
                "BORROWER",
                "DMA_BYTES",
                "VECTORS",
                "IRQS/S",
            ],
            &lent,
        );
    }
    if !s.mdevs.is_empty() {
        let mdevs: Vec<Vec<String>> = s
            .mdevs
            .iter()
            .map(|m| vec![m.uuid.clone(), or_dash(&m.remote_device), or_dash(&m.state)])
            .collect();
        println!();
        table(&["MDEV", "REMOTE", "STATE"], &mdevs);
    }
    Ok(())
}

fn or_dash<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |x| x.to_string())
}

fn check_id(id: &str) -> Result<()> {
    if vmmargs::valid_qemu_id(id) {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{id:?} is not a valid QEMU device id (a letter, then letters, digits, '-', '.', '_')"
        )))
    }
}

fn mdev_uuid(sys: &Sysfs, uuid: &str, no_check: bool) -> Result<String> {
    sysfs::check_uuid(uuid)?;
    if !no_check {
        sys.find_mdev(uuid)?;
    }
    Ok(uuid.to_ascii_lowercase())
}

/// `mdev create` without --wait: refuses at once what is not free.
fn create_now(
    sys: &Sysfs,
    type_name: &str,
    remote: Option<sysfs::Remote>,
    uuid: &str,
) -> Result<(sysfs::MdevType, Option<sysfs::Remote>, sysfs::Mdev)> {
    // An mdev stands for one device on this host: a device another
    // mdev targets is refused (the kernel would refuse it too). A
    // device held by another host may be targeted now and opened
    // later, if the type has an instance to spare: say so.
    if let Some(r) = &remote {
        if !r.mdevs.is_empty() {
            return Err(CliError::busy(
                format!(
                    "remote device {} is the target of mdev {} on this host",
                    r.id,
                    r.mdevs.join(", ")
                ),
                "an mdev holds its device on this host: give that mdev to the VM, or remove it first (`devlend mdev remove UUID`); `--wait SECONDS` queues for it",
            ));
        }
        match r.state.as_str() {
            "available" => {}
            "failed" => {
                return Err(CliError::busy(
                    format!(
                        "remote device {} ({}/{}) failed its reset on its lender",
                        r.id, r.lender, r.name
                    ),
                    "its lender lends it to nobody until its administrator lends it again (`devlend unlend` then `devlend lend` there)",
                ))
            }
            "borrowed" | "returning" => eprintln!(
                "devlend: note: remote device {} is {}{}; a VM cannot open the mdev until it is given back",
                r.id,
                r.state,
                r.borrower.map_or(String::new(), |b| format!(" by host {b}"))
            ),
            other => {
                return Err(CliError::busy(
                    format!("remote device {} ({}/{}) is {other}", r.id, r.lender, r.name),
                    "its lender no longer offers it; `devlend remote` shows what is offered",
                ))
            }
        }
    }
    let (dir, t) = sys.find_type(type_name)?;
    let m = sys.mdev_create(&dir, &t, uuid, remote.as_ref().map(|r| r.id.as_str()))?;
    Ok((t, remote, m))
}

/// `mdev create --wait SECONDS`: queues for a free device, with progress
/// on stderr.
fn create_waiting(
    sys: &Sysfs,
    type_name: &str,
    device: Option<&str>,
    uuid: &str,
    wait: u64,
) -> Result<(sysfs::MdevType, Option<sysfs::Remote>, sysfs::Mdev)> {
    let (_, t) = sys.find_type(type_name)?;
    // Nothing to wait for when the UUID is taken already.
    if sys.path(sysfs::MDEV_DEVICES).join(uuid).exists() {
        return Err(CliError::busy(
            format!("an mdev {uuid} exists already"),
            "pick another UUID, or leave --uuid out",
        ));
    }
    let what = match device {
        Some(spec) => format!("waiting up to {wait} s for remote device {spec} to be free"),
        None => format!("waiting up to {wait} s for a free {} device", t.id),
    };
    let c = with_progress(&what, || {
        sys.mdev_create_waiting(type_name, device, uuid, Duration::from_secs(wait))
    })?;
    Ok((c.mtype, c.remote, c.mdev))
}

fn run(cli: Cli) -> Result<()> {
    let sys = Sysfs::new(&cli.sysfs_root).with_fabric(cli.fabric.clone());
    let json = cli.json;
    match cli.cmd {
        Cmd::Fabrics => {
            let fabrics = sys.fabrics()?;
            if json {
                print_json(&fabrics);
            } else if fabrics.is_empty() {
                return Err(sys.adapter().expect_err("no fabric"));
            } else {
                let rows: Vec<Vec<String>> = fabrics
                    .iter()
                    .map(|f| {
                        let up = f.peers.iter().filter(|p| p.state == "up").count();
                        vec![
                            f.adapter.clone(),
                            f.host_id.to_string(),
                            f.fabric_id.clone(),
                            format!("{up}/{}", f.peers.len()),
                        ]
                    })
                    .collect();
                table(&["FABRIC", "HOST", "FABRIC_ID", "PEERS_UP"], &rows);
            }
        }
        Cmd::Hosts => {
            let f = sys.fabric()?;
            if json {
                print_json(&f);
            } else {
                println!(
                    "this host: {} (host id {}), adapter {}, fabric {}, protocol {}",
                    if f.hostname.is_empty() {
                        "?"
                    } else {
                        &f.hostname
                    },
                    f.host_id,
                    f.adapter,
                    f.fabric_id,
                    f.proto
                );
                let rows: Vec<Vec<String>> = f
                    .peers
                    .iter()
                    .map(|p| {
                        vec![
                            p.host_id.to_string(),
                            p.name.clone(),
                            p.state.clone(),
                            p.proto.to_string(),
                            or_dash(&p.window),
                            or_dash(&p.heartbeat_age_ms),
                        ]
                    })
                    .collect();
                if rows.is_empty() {
                    println!(
                        "no peers seen yet (are devlend's modules loaded on the other hosts?)"
                    );
                } else {
                    table(
                        &["HOST", "NAME", "LINK", "PROTO", "WINDOW", "HEARTBEAT_MS"],
                        &rows,
                    );
                }
            }
        }
        Cmd::Devices { all } => {
            let devs = sys.local_devices(all)?;
            if json {
                print_json(&devs);
            } else {
                let rows: Vec<Vec<String>> = devs
                    .iter()
                    .map(|d| {
                        let (state, borrower) = match &d.lent {
                            Some(l) => (format!("lent:{}", l.state), or_dash(&l.borrower)),
                            None if d.fabric => ("fabric".into(), "-".into()),
                            None => ("-".into(), "-".into()),
                        };
                        vec![
                            d.address.clone(),
                            format!(
                                "{}:{}",
                                d.vendor.trim_start_matches("0x"),
                                d.device.trim_start_matches("0x")
                            ),
                            d.class.trim_start_matches("0x").to_string(),
                            or_dash(&d.driver),
                            or_dash(&d.iommu_group),
                            d.lent.as_ref().map_or("-".into(), |l| l.dev_id.to_string()),
                            state,
                            borrower,
                            d.lent
                                .as_ref()
                                .map_or("-".into(), |l| or_dash(&l.allowed_hosts)),
                            d.sriov(),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "ADDRESS", "ID", "CLASS", "DRIVER", "IOMMU", "DEV_ID", "STATE", "BORROWER",
                        "LENT_TO", "SRIOV",
                    ],
                    &rows,
                );
            }
        }
        Cmd::Lend { address, to } => {
            let to = to.as_deref().map(Hosts::parse).transpose()?;
            // With --to, a device lent already is only given its hosts.
            let lent_already = sys
                .local_devices(true)?
                .into_iter()
                .find(|d| d.address == address && d.lent.is_some());
            let mut d = match lent_already {
                Some(d) if to.is_some() => d,
                _ => with_progress(&format!("lending {address} (the lender resets it)"), || {
                    sys.lend(&address)
                })?,
            };
            if let Some(to) = &to {
                d = sys.set_allowed_hosts(&address, to)?;
            }
            if json {
                print_json(&d);
            } else {
                match &d.lent {
                    Some(l) => println!("lent {} as dev_id {} ({})", d.address, l.dev_id, l.state),
                    None => println!("lent {}", d.address),
                }
            }
        }
        Cmd::Apply { config } => apply(&sys, &config, json)?,
        Cmd::Unlend { address, force } => {
            let d = with_progress(
                &format!("taking {address} back (the lender resets it)"),
                || sys.unlend(&address, force),
            )?;
            if json {
                print_json(&d);
            } else {
                println!(
                    "took {} back (driver now {})",
                    d.address,
                    or_dash(&d.driver)
                );
            }
        }
        Cmd::Stats {
            interval,
            prometheus,
        } => print_stats(&sys, interval, prometheus, json)?,
        Cmd::Remote => {
            let r = sys.remotes()?;
            if json {
                print_json(&r);
            } else if r.is_empty() {
                println!("no remote devices (is a lender up? `devlend hosts`; has it lent one? `devlend lend` there)");
            } else {
                let rows: Vec<Vec<String>> = r
                    .iter()
                    .map(|x| {
                        vec![
                            x.id.clone(),
                            format!("{}/{}", x.lender, x.name),
                            format!(
                                "{}:{}",
                                x.vendor.trim_start_matches("0x"),
                                x.device.trim_start_matches("0x")
                            ),
                            x.class.trim_start_matches("0x").to_string(),
                            x.state.clone(),
                            or_dash(&x.borrower),
                            if x.mdevs.is_empty() {
                                "-".into()
                            } else {
                                x.mdevs.join(",")
                            },
                            x.pf.as_ref()
                                .map_or("-".into(), |pf| format!("vf:{}/{pf}", x.lender)),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "ID", "DEVICE", "IDS", "CLASS", "STATE", "BORROWER", "MDEVS", "SRIOV",
                    ],
                    &rows,
                );
            }
        }
        Cmd::Mdev(MdevCmd::Types) => {
            let t = sys.mdev_types()?;
            if json {
                print_json(&t);
            } else {
                let rows: Vec<Vec<String>> = t
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.clone(),
                            t.available_instances.to_string(),
                            t.device_api.clone(),
                            t.name.clone(),
                        ]
                    })
                    .collect();
                table(&["TYPE", "AVAILABLE", "API", "NAME"], &rows);
            }
        }
        Cmd::Mdev(MdevCmd::Create {
            mtype,
            device,
            uuid,
            wait,
        }) => {
            let uuid = sysfs::given_or_new_uuid(uuid.as_deref())?;
            // A device not offered at all is refused at once, also with
            // --wait: a mistyped name is not worth waiting for.
            let remote = match &device {
                Some(spec) => Some(sys.find_remote(spec)?),
                None => None,
            };
            let type_name = match (&mtype, &remote) {
                (Some(t), _) => t.clone(),
                (None, Some(r)) => r.default_type().to_string(),
                (None, None) => "devlend-any".to_string(),
            };
            let (t, remote, m) = if wait > 0 {
                create_waiting(&sys, &type_name, device.as_deref(), &uuid, wait)?
            } else {
                create_now(&sys, &type_name, remote, &uuid)?
            };
            if json {
                print_json(&m);
            } else {
                println!("{}", m.uuid);
                eprintln!(
                    "created mdev {} of type {} for {}; give it to a VM with `devlend qemu-args {}`",
                    m.uuid,
                    t.id,
                    remote.map_or("any free device of the type".into(), |r| format!("{} ({}/{})", r.id, r.lender, r.name)),
                    m.uuid
                );
            }
        }
        Cmd::Mdev(MdevCmd::List) => {
            let m = sys.mdevs()?;
            if json {
                print_json(&m);
            } else if m.is_empty() {
                println!("no devlend mdevs on this host (`devlend mdev create` makes one)");
            } else {
                let rows: Vec<Vec<String>> = m
                    .iter()
                    .map(|m| {
                        vec![
                            m.uuid.clone(),
                            or_dash(&m.mdev_type),
                            or_dash(&m.parent),
                            or_dash(&m.remote_device),
                            or_dash(&m.state),
                            or_dash(&m.iommu_group),
                        ]
                    })
                    .collect();
                table(
                    &["UUID", "TYPE", "PARENT", "REMOTE", "STATE", "IOMMU"],
                    &rows,
                );
            }
        }
        Cmd::Mdev(MdevCmd::Remove { uuid }) => {
            sys.mdev_remove(&uuid)?;
            if json {
                print_json(&serde_json::json!({ "removed": uuid.to_ascii_lowercase() }));
            } else {
                eprintln!("removed mdev {}", uuid.to_ascii_lowercase());
            }
        }
        Cmd::QemuArgs(a) => {
            let uuid = mdev_uuid(&sys, &a.uuid, a.no_check)?;
            let id = a.id.unwrap_or_else(|| vmmargs::default_id(&uuid));
            check_id(&id)?;
            let args = vmmargs::qemu_args(&uuid, &id, a.bus.as_deref());
            if json {
                print_json(&args);
            } else {
                println!("{}", vmmargs::shell_join(&args));
            }
        }
        Cmd::ChArgs(a) => {
            let uuid = mdev_uuid(&sys, &a.uuid, a.no_check)?;
            let args = match &a.api_socket {
                Some(s) => vmmargs::ch_remote_add(&s.to_string_lossy(), &uuid, a.id.as_deref()),
                None => vmmargs::ch_args(&uuid, a.id.as_deref()),
            };
            if json {
                print_json(&args);
            } else {
                println!("{}", vmmargs::shell_join(&args));
            }
        }
        Cmd::Man { dir } => {
            use clap::CommandFactory;
            for f in devlend::man::write_pages(Cli::command(), &dir)? {
                println!("{f}");
            }
        }
        Cmd::LibvirtXml(a) => {
            if let Some(al) = &a.alias {
                if !al.starts_with("ua-") {
                    return Err(CliError::usage(format!(
                        "alias {al:?} must start with \"ua-\" (libvirt's rule for user aliases)"
                    )));
                }
            }
            let xml = if let Some(spec) = &a.device {
                // A definition for libvirt to create (through mdevctl):
                // the adapter is the parent, the type follows the class.
                let uuid = sysfs::given_or_new_uuid(a.uuid.as_deref())?;
                let r = sys.find_remote(spec)?;
                let adapter = sys.adapter()?;
                let parent = adapter
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                vmmargs::libvirt_nodedev(&uuid, &parent, r.default_type(), Some(&r.id))
            } else if a.nodedev {
                let m = sys.find_mdev(a.uuid.as_deref().unwrap_or_default())?;
                let parent = m.parent.clone().ok_or_else(|| {
                    CliError::not_found(format!("mdev {} has no parent device", m.uuid), "")
                })?;
                let t = m.mdev_type.clone().unwrap_or_else(|| "devlend-any".into());
                let remote = m.remote_device.as_deref().filter(|r| *r != "any");
                vmmargs::libvirt_nodedev(&m.uuid, &parent, &t, remote)
            } else {
                let uuid = mdev_uuid(&sys, a.uuid.as_deref().unwrap_or_default(), a.no_check)?;
                match &a.domain {
                    Some(name) => {
                        vmmargs::libvirt_domain(&uuid, name, a.memory, a.alias.as_deref())
                    }
                    None => vmmargs::libvirt_hostdev(&uuid, a.alias.as_deref(), ""),
                }
            };
            if json {
                print_json(&serde_json::json!({ "xml": xml }));
            } else {
                print!("{xml}");
            }
        }
        Cmd::Attach(a) => {
            let uuid = mdev_uuid(&sys, &a.uuid, false)?;
            let id = a.id.unwrap_or_else(|| vmmargs::default_id(&uuid));
            check_id(&id)?;
            let timeout = Duration::from_secs(a.timeout);
            let mut q = Qmp::connect(&a.qmp, timeout)?;
            with_progress(
                &format!("attaching mdev {uuid} (QEMU borrows the device)"),
                || {
                    qmp::device_add(
                        &mut q,
                        &vmmargs::mdev_sysfs(&uuid),
                        &id,
                        a.bus.as_deref(),
                        timeout,
                    )
                },
            )?;
            if json {
                print_json(&serde_json::json!({ "attached": uuid, "id": id }));
            } else {
                println!("attached mdev {uuid} as device {id}; detach it with `devlend detach --qmp {} {id}`", a.qmp.display());
            }
        }
        Cmd::Detach(a) => {
            let id = if sysfs::check_uuid(&a.device).is_ok() {
                vmmargs::default_id(&a.device.to_ascii_lowercase())
            } else {
                a.device.clone()
            };
            check_id(&id)?;
            let timeout = Duration::from_secs(a.timeout);
            let mut q = Qmp::connect(&a.qmp, timeout)?;
            with_progress(&format!("waiting for the guest to release {id}"), || {
                qmp::device_del(&mut q, &id, timeout)
            })?;
            if json {
                print_json(&serde_json::json!({ "detached": id }));
            } else {
                println!("detached {id}; the guest released it");
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devlend: error: {e}");
            if let Some(h) = e.hint() {
                eprintln!("devlend: hint: {h}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn json_is_global_and_subcommands_parse() {
        let c = Cli::try_parse_from(["devlend", "remote", "--json"]).unwrap();
        assert!(c.json);
        let c = Cli::try_parse_from(["devlend", "mdev", "create", "-d", "lender/0000:01:00.0"])
            .unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::Mdev(MdevCmd::Create {
                device: Some(_),
                wait: 0,
                ..
            })
        ));
        let c = Cli::try_parse_from(["devlend", "mdev", "create", "-t", "nvme", "--wait", "30"])
            .unwrap();
        assert!(matches!(c.cmd, Cmd::Mdev(MdevCmd::Create { wait: 30, .. })));
        assert!(
            Cli::try_parse_from(["devlend", "mdev", "create", "--wait", "-1"]).is_err(),
            "--wait takes whole seconds"
        );
        assert!(
            Cli::try_parse_from(["devlend", "attach", "u"]).is_err(),
            "--qmp is required"
        );
        assert!(Cli::try_parse_from(["devlend", "libvirt-xml", "u", "--memory", "5"]).is_err());
        // A node device for a new mdev needs no UUID; --device only with --nodedev.
        let c = Cli::try_parse_from(["devlend", "libvirt-xml", "--nodedev", "--device", "0:1"])
            .unwrap();
        assert!(matches!(
            c.cmd,
            Cmd::LibvirtXml(LibvirtArgs { uuid: None, .. })
        ));
        assert!(Cli::try_parse_from(["devlend", "libvirt-xml", "--device", "0:1"]).is_err());
        assert!(Cli::try_parse_from(["devlend", "libvirt-xml", "--nodedev"]).is_err());
        assert!(
            Cli::try_parse_from(["devlend", "libvirt-xml", "u", "--nodedev", "--domain", "x"])
                .is_err()
        );
        let c = Cli::try_parse_from(["devlend", "detach", "--qmp", "/s", "dev0", "--timeout", "3"])
            .unwrap();
        assert!(matches!(c.cmd, Cmd::Detach(DetachArgs { timeout: 3, .. })));
    }
}
