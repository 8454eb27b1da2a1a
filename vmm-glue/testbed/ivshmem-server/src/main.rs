//! `devlend-ivshmem-server`: see the library documentation.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use devlend_ivshmem_server::{parse_size, Config, PidFile, Server};
use devlend_wire::{DL_DB_VECTORS_MAX, DL_DEFAULT_RING_SLOTS, DL_DEFAULT_SLOT_SIZE};
use vmm_sys_util::signal::{self, block_signal, create_sigset};

/// ivshmem server for the devlend fabric: host i connects to
/// <socket-dir>/doorbell-<i>.sock and gets id i, the control area and the
/// doorbell eventfds of every connected host.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Directory for the doorbell-<i>.sock sockets.
    #[arg(long, value_name = "D")]
    socket_dir: PathBuf,
    /// Number of hosts (sockets, and host slots in the control area).
    #[arg(long, value_name = "N")]
    hosts: u32,
    /// Control area file to create (it must not exist, unless --reuse).
    #[arg(long, value_name = "F")]
    ctl_path: PathBuf,
    /// Size of the control area: a power of two, with K, M or G suffix.
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size)]
    ctl_size: u64,
    /// Interrupt vectors per host.
    #[arg(long, value_name = "N", default_value_t = DL_DB_VECTORS_MAX)]
    vectors: u32,
    /// Slots per message ring.
    #[arg(long, value_name = "N", default_value_t = DL_DEFAULT_RING_SLOTS)]
    ring_slots: u32,
    /// Bytes per ring slot.
    #[arg(long, value_name = "BYTES", default_value_t = DL_DEFAULT_SLOT_SIZE)]
    slot_size: u32,
    /// Write the server's pid here once every socket accepts connections.
    #[arg(long, value_name = "P")]
    pidfile: Option<PathBuf>,
    /// Truncate and reformat an existing control area file.
    #[arg(long)]
    reuse: bool,
    /// Announce disconnects and give a reconnecting host new eventfds, as
    /// QEMU's ivshmem spec describes. Off by default: QEMU (up to at least
    /// 10.0) corrupts its heap when a host id it was told had left
    /// connects again, which fixed host ids make routine.
    #[arg(long)]
    notify_disconnects: bool,
}

/// Blocks SIGTERM, SIGINT and SIGHUP and returns a signalfd that becomes
/// readable when one of them arrives. Called before any thread exists, so
/// the mask covers the whole process.
fn stop_signals() -> std::io::Result<OwnedFd> {
    let stop = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
    let set = create_sigset(&stop)?;
    for sig in stop {
        match block_signal(sig) {
            // Blocked already (inherited): just as good.
            Ok(()) | Err(signal::Error::SignalAlreadyBlocked(_)) => {}
            Err(e) => return Err(std::io::Error::other(format!("blocking signal {sig}: {e}"))),
        }
    }
    // vmm-sys-util has no signalfd.
    // SAFETY: -1 asks for a new signalfd for the initialized `set`.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Name of the signal a signalfd reported, for the log.
fn signal_name(sigfd: OwnedFd) -> String {
    // struct signalfd_siginfo is 128 bytes and starts with ssi_signo.
    let mut info = [0u8; 128];
    match File::from(sigfd).read(&mut info) {
        Ok(128) => match u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32 {
            libc::SIGTERM => "SIGTERM".into(),
            libc::SIGINT => "SIGINT".into(),
            libc::SIGHUP => "SIGHUP".into(),
            n => format!("signal {n}"),
        },
        _ => "a signal".into(),
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let sigfd = stop_signals().context("cannot set up signal handling")?;
    let config = Config {
        socket_dir: args.socket_dir,
        hosts: args.hosts,
        ctl_path: args.ctl_path,
        ctl_size: args.ctl_size,
        vectors: args.vectors,
        ring_slots: args.ring_slots,
        slot_size: args.slot_size,
        reuse: args.reuse,
        notify_disconnects: args.notify_disconnects,
    };
    let mut server = Server::new(config)?;
    let _pidfile = match &args.pidfile {
        Some(p) => Some(
            PidFile::create(p).with_context(|| format!("cannot write pid file {}", p.display()))?,
        ),
        None => None,
    };
    server.run(sigfd.as_fd())?;
    log::info!("exiting on {}", signal_name(sigfd));
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
