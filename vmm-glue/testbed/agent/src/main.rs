//! `devlend-agent`: the command agent inside each emulated host.
//!
//! Runs as root (not as PID 1: the host's /init respawns it) chrooted into
//! the outer machine's root filesystem, and serves the protocol of
//! [`devlend_agent::protocol`] on the virtio-serial port named
//! `org.devlend.agent`, or on `--port PATH` (tests use a pty).

mod agent;

use std::convert::Infallible;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use devlend_agent::protocol::{DEFAULT_OUTPUT_CAP, PORT_NAME};
use log::{error, info, warn};

use agent::{port, reaper, server};

/// Requests served at once by default.
const MAX_IN_FLIGHT: usize = 64;

/// `PATH` for children when the agent was started without one.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, Parser)]
#[command(version, about = "devlend in-host command agent")]
struct Args {
    /// Serve on this file (a pty or character device) instead of looking up
    /// the virtio-serial port.
    #[arg(long, value_name = "PATH")]
    port: Option<PathBuf>,
    /// Name of the virtio-serial port to look up.
    #[arg(long, default_value = PORT_NAME)]
    port_name: String,
    /// Cap on captured stdout and on captured stderr of each command, in
    /// bytes.
    #[arg(long, default_value_t = DEFAULT_OUTPUT_CAP, value_name = "BYTES")]
    output_cap: usize,
    /// Requests served at once; more are refused.
    #[arg(long, default_value_t = MAX_IN_FLIGHT, value_name = "N")]
    max_requests: usize,
    /// Log every request (same as RUST_LOG=debug).
    #[arg(short, long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let default_level = if args.verbose { "debug" } else { "info" };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
        .init();
    match run(&args) {
        Ok(never) => match never {},
        Err(e) => {
            // One line on the host console; /init starts the agent again.
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<Infallible> {
    // Children inherit the environment of /init, which may lack these.
    // Still single-threaded here, so changing the environment is sound.
    if std::env::var_os("PATH").is_none() {
        std::env::set_var("PATH", DEFAULT_PATH);
    }
    if std::env::var_os("HOME").is_none() {
        std::env::set_var("HOME", "/root");
    }

    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes plain integers and touches
    // no memory of ours.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        warn!(
            "PR_SET_CHILD_SUBREAPER: {}; orphans go to init",
            std::io::Error::last_os_error()
        );
    }
    reaper::start().context("start the reaper thread")?;

    let (path, file) = match &args.port {
        Some(path) => {
            let file =
                port::open_port(path).with_context(|| format!("open port {}", path.display()))?;
            (path.clone(), file)
        }
        None => port::wait_for_port(&args.port_name),
    };
    let output = file
        .try_clone()
        .with_context(|| format!("duplicate port {}", path.display()))?;
    info!(
        "devlend-agent {} (pid {}) serving on {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        path.display()
    );
    server::serve(
        file,
        output,
        server::Config {
            output_cap: args.output_cap,
            max_in_flight: args.max_requests.max(1),
        },
    )
}
