//! `devlend`: see `devlend --help` and docs/devlend-cli.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use devlend::commands;
use devlend::lendconf;
use devlend::output::{self, Printer};
use devlend::sysfs::Sysfs;
use devlend::vmmargs;
use devlend::Result;

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
        /// The mdev is a live migration's destination for --device, the source's device, which the source (another host) may hold meanwhile: see `devlend mdev incoming`.
        #[arg(long, requires = "device")]
        incoming: bool,
    },
    /// Make an mdev a live migration's destination (before its VMM opens it).
    #[command(
        long_about = "Make an mdev a live migration's destination, before its VMM opens it.\n\n\
        The destination's QEMU opens its mdev (at the same guest PCI address as the source's) \
        while the source's guest still uses the device. An mdev told so holds nothing until the \
        guest's state arrives: its config writes, resets and interrupt setup stay its own, and \
        when QEMU loads the device's state it takes the device over from the source, which the \
        lender stopped for it. The mdev must name the source's device (--device at create). \
        --cancel makes its next open an ordinary one again. Fails with exit status 3 where the \
        host's VFIO cannot report the device's dirty pages (docs/migration.md)."
    )]
    Incoming {
        /// The mdev's UUID.
        uuid: String,
        /// Its next open is an ordinary one again.
        #[arg(long)]
        cancel: bool,
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
    /// Its place on the bus, `slot.function` (e.g. 5.1): the functions of
    /// a lent IOMMU group go to one slot of one guest.
    #[arg(long)]
    addr: Option<String>,
    /// Function 0 of a multi-function slot (with --addr SLOT.0).
    #[arg(long)]
    multifunction: bool,
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

/// Runs the command: its file in `commands/` does the work, [`Printer`]
/// prints what it returns.
fn run(cli: Cli) -> Result<()> {
    let sys = Sysfs::new(&cli.sysfs_root).with_fabric(cli.fabric.clone());
    let json = cli.json;
    let out = Printer { json };
    match cli.cmd {
        Cmd::Fabrics => {
            let fabrics = commands::fabrics::run(&sys)?;
            if fabrics.is_empty() && !json {
                return Err(commands::fabrics::none(&sys));
            }
            out.fabrics(&fabrics);
        }
        Cmd::Hosts => out.hosts(&commands::hosts::run(&sys)?),
        Cmd::Devices { all } => out.devices(&commands::devices::run(&sys, all)?),
        Cmd::Lend { address, to } => {
            out.lent(&commands::lend::run(&sys, &address, to.as_deref())?);
        }
        Cmd::Apply { config } => {
            let o = commands::apply::run(&sys, &config, |a| out.applied(a))?;
            out.apply_done(&o.done);
            if let Some(e) = o.first_err {
                return Err(e);
            }
        }
        Cmd::Unlend { address, force } => {
            out.unlent(&commands::unlend::run(&sys, &address, force)?);
        }
        Cmd::Stats {
            interval,
            prometheus,
        } => match commands::stats::run(&sys, interval, prometheus, json)? {
            commands::stats::Report::Prometheus(text) => out.prometheus(&text),
            commands::stats::Report::Rates(s) => out.stats(&s),
        },
        Cmd::Remote => out.remotes(&commands::remote::run(&sys)?),
        Cmd::Mdev(MdevCmd::Types) => out.mdev_types(&commands::mdev::types::run(&sys)?),
        Cmd::Mdev(MdevCmd::Create {
            mtype,
            device,
            uuid,
            wait,
            incoming,
        }) => {
            let req = commands::mdev::create::Request {
                mtype: mtype.as_deref(),
                device: device.as_deref(),
                uuid: uuid.as_deref(),
                wait,
                incoming,
            };
            let c = commands::mdev::create::run(&sys, &req, |r| out.note_held(r))?;
            out.mdev_created(&c);
        }
        Cmd::Mdev(MdevCmd::Incoming { uuid, cancel }) => {
            out.mdev_incoming(&commands::mdev::incoming::run(&sys, &uuid, !cancel)?);
        }
        Cmd::Mdev(MdevCmd::List) => out.mdevs(&commands::mdev::list::run(&sys)?),
        Cmd::Mdev(MdevCmd::Remove { uuid }) => {
            out.mdev_removed(&commands::mdev::remove::run(&sys, &uuid)?);
        }
        Cmd::QemuArgs(a) => out.vmm_args(&commands::qemu_args::run(
            &sys,
            &a.uuid,
            a.id,
            vmmargs::QemuPlace {
                bus: a.bus.as_deref(),
                addr: a.addr.as_deref(),
                multifunction: a.multifunction,
            },
            a.no_check,
        )?),
        Cmd::ChArgs(a) => out.vmm_args(&commands::ch_args::run(
            &sys,
            &a.uuid,
            a.id.as_deref(),
            a.api_socket.as_deref(),
            a.no_check,
        )?),
        Cmd::Man { dir } => {
            use clap::CommandFactory;
            out.files(&commands::man::run(Cli::command(), &dir)?);
        }
        Cmd::LibvirtXml(a) => {
            let req = commands::libvirt_xml::Request {
                uuid: a.uuid.as_deref(),
                domain: a.domain.as_deref(),
                memory: a.memory,
                alias: a.alias.as_deref(),
                nodedev: a.nodedev,
                device: a.device.as_deref(),
                no_check: a.no_check,
            };
            out.xml(&commands::libvirt_xml::run(&sys, &req)?);
        }
        Cmd::Attach(a) => {
            let at =
                commands::attach::run(&sys, &a.qmp, &a.uuid, a.id, a.bus.as_deref(), a.timeout)?;
            out.attached(&at.uuid, &at.id, &a.qmp);
        }
        Cmd::Detach(a) => out.detached(&commands::detach::run(&a.qmp, &a.device, a.timeout)?),
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::error(&e);
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
