//! `devlend-cluster`: boot an emulated PCIe cluster from a topology file and
//! run commands in its hosts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use devlend_cluster::{rundir, tools, Cluster, ClusterConfig, Topology};

/// Boot and drive devlend's emulated PCIe cluster: QEMU hosts whose RAM
/// files are shared, with windows onto each other's memory and doorbells
/// through devlend's ivshmem server.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "\
Examples:
  devlend-cluster up qemu-scripts/topologies/two-host.toml
  devlend-cluster runs
  devlend-cluster exec two-host-1234 borrower -- cat /proc/cpuinfo"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Boot every host of a topology and stay in the foreground; Ctrl-C
    /// (or SIGTERM) tears the cluster down and removes its files but the
    /// logs, which stay in /var/tmp/devlend/<run>/ until the next run.
    Up {
        /// The topology file.
        topology: PathBuf,
    },
    /// List the runs that are up.
    Runs,
    /// Run a command in a host of a running cluster; exits with its status.
    Exec {
        /// The run (see `runs`).
        run: String,
        /// The host name.
        host: String,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        argv: Vec<String>,
        /// Seconds before the command is killed.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
}

fn up(topology: PathBuf) -> anyhow::Result<ExitCode> {
    let topology = Topology::load(&topology)?;
    eprintln!(
        "==> booting {} hosts of {} (TCG: about half a minute)",
        topology.hosts.len(),
        topology.name
    );
    let mut cluster = Cluster::start(ClusterConfig {
        topology,
        boot: tools::boot_files()?,
        qemu: "qemu-system-x86_64".into(),
        ivshmem_server: tools::our_binary("devlend-ivshmem-server", "DEVLEND_IVSHMEM_SERVER")?,
        run_base: rundir::base_dir(),
    })?;
    cluster.release_agents();
    let run = cluster
        .paths()
        .state
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    println!("cluster {run} is up:");
    for (id, h) in cluster.topology().hosts.iter().enumerate() {
        println!(
            "  host {id} {:<10} {} MiB, serial log {}",
            h.name,
            h.memory.mib(),
            cluster.paths().serial_log(&h.name).display()
        );
    }
    println!("run commands with: devlend-cluster exec {run} <host> -- <command>");
    println!("Ctrl-C to tear it down.");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn runs() -> anyhow::Result<ExitCode> {
    let base = rundir::base_dir();
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Ok(ExitCode::SUCCESS);
    };
    for e in entries.flatten() {
        let owner = std::fs::read_to_string(e.path().join("owner")).unwrap_or_default();
        let alive = owner
            .trim()
            .parse::<u32>()
            .is_ok_and(devlend_cluster::process::pid_alive);
        if alive {
            println!("{}", e.file_name().to_string_lossy());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn exec(run: &str, host: &str, argv: &[String], timeout: u64) -> anyhow::Result<ExitCode> {
    let sock = rundir::base_dir()
        .join(run)
        .join(format!("{host}.agent.sock"));
    if !sock.exists() {
        anyhow::bail!(
            "no host {host} in run {run} ({} missing); see `devlend-cluster runs`",
            sock.display()
        );
    }
    let agent = devlend_agent::AgentClient::connect(&sock)?;
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = agent.exec(&args, Duration::from_secs(timeout))?;
    print!("{}", out.stdout);
    eprint!("{}", out.stderr);
    if out.timed_out {
        eprintln!("devlend-cluster: killed after {timeout} s");
        return Ok(ExitCode::from(124));
    }
    Ok(match out.exit_code {
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::from(128 + u8::try_from(out.signal.unwrap_or(0)).unwrap_or(0)),
    })
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Up { topology } => up(topology),
        Cmd::Runs => runs(),
        Cmd::Exec {
            run,
            host,
            argv,
            timeout,
        } => exec(&run, &host, &argv, timeout),
    };
    res.unwrap_or_else(|e| {
        eprintln!("devlend-cluster: {e:#}");
        ExitCode::from(2)
    })
}
