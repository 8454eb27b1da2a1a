//! A running emulated cluster: the ivshmem server, the switches of the
//! topology's networks, one QEMU per host, and an agent connection into
//! each host. Dropping it tears everything down.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use devlend_agent::AgentClient;

use crate::netswitch::NetSwitch;
use crate::process::Child;
use crate::qemu::{host_args, BootFiles, RunPaths};
use crate::rundir;
use crate::topology::Topology;
use crate::watchdog::{Watchdog, WatchedHost};

/// How long a host may take from QEMU start to an answering agent. Under TCG
/// on a busy 2-core machine a boot takes 5 to 30 s.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

/// Errors bringing a cluster up or acting on it.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The run directory could not be made.
    #[error(transparent)]
    RunDir(#[from] rundir::RunDirError),
    /// A child could not be started.
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    /// A file of the run could not be made.
    #[error("cannot create {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The ivshmem server did not come up.
    #[error("ivshmem server did not create {socket} within {secs} s (log: {log})")]
    ServerStart {
        /// The socket that did not appear.
        socket: PathBuf,
        /// Seconds waited.
        secs: u64,
        /// Its log.
        log: PathBuf,
    },
    /// A network's switch could not listen.
    #[error("cannot start the switch of network {network} on {socket}: {source}")]
    NetSwitch {
        /// The network.
        network: String,
        /// Its socket.
        socket: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A host's QEMU exited.
    #[error("QEMU of host {host} exited ({status}); see {log}")]
    QemuExited {
        /// The host.
        host: String,
        /// Its exit status.
        status: String,
        /// QEMU's own log.
        log: PathBuf,
    },
    /// A host booted but its agent never answered.
    #[error("host {host}: agent did not answer within {secs} s: {source}; serial log: {serial}")]
    AgentTimeout {
        /// The host.
        host: String,
        /// Seconds waited.
        secs: u64,
        /// The last error.
        source: Box<devlend_agent::AgentError>,
        /// The host's console log.
        serial: PathBuf,
    },
    /// No host has that name.
    #[error("no host {0} in this cluster")]
    NoHost(String),
    /// A host is not running.
    #[error("host {0} is not running")]
    HostDown(String),
}

/// Programs and files a cluster needs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The topology.
    pub topology: Topology,
    /// Kernel, initramfs and agent the hosts boot.
    pub boot: BootFiles,
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// `devlend-ivshmem-server`.
    pub ivshmem_server: PathBuf,
    /// Base of run directories.
    pub run_base: PathBuf,
}

#[derive(Debug)]
struct Host {
    qemu: Option<Child>,
    agent: Option<AgentClient>,
}

/// A running cluster.
#[derive(Debug)]
pub struct Cluster {
    cfg: ClusterConfig,
    paths: RunPaths,
    server: Option<Child>,
    /// One per network of the topology; hosts' QEMUs connect to them.
    switches: Vec<NetSwitch>,
    hosts: Vec<Host>,
    watchdog: Option<Watchdog>,
    keep_logs: bool,
}

fn wait_for_path(path: &Path, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    path.exists()
}

fn create_sparse(path: &Path, size: u64) -> Result<(), ClusterError> {
    let err = |source| ClusterError::File {
        path: path.to_owned(),
        source,
    };
    let f = std::fs::File::create(path).map_err(err)?;
    f.set_len(size).map_err(err)
}

impl Cluster {
    /// Starts the server and every host, and waits until each host's agent
    /// answers. On error everything started so far is torn down.
    pub fn start(cfg: ClusterConfig) -> Result<Cluster, ClusterError> {
        for run in rundir::reap_stale(&cfg.run_base) {
            log::info!("removed stale run {run}");
        }
        let paths = rundir::create(&cfg.run_base, &cfg.topology.name)?;
        crate::cleanup::register(&paths);
        let mut cluster = Cluster {
            hosts: cfg
                .topology
                .hosts
                .iter()
                .map(|_| Host {
                    qemu: None,
                    agent: None,
                })
                .collect(),
            cfg,
            paths,
            server: None,
            switches: Vec::new(),
            watchdog: None,
            keep_logs: false,
        };
        if let Err(e) = cluster.boot() {
            // The error names logs: keep them.
            cluster.keep_logs(true);
            return Err(e);
        }
        Ok(cluster)
    }

    fn boot(&mut self) -> Result<(), ClusterError> {
        self.start_server()?;
        self.start_switches()?;
        let watched = self
            .cfg
            .topology
            .hosts
            .iter()
            .map(|h| WatchedHost {
                name: h.name.clone(),
                qmp: self.paths.qmp_sock(&h.name),
                serial: self.paths.serial_log(&h.name),
            })
            .collect();
        self.watchdog = Some(Watchdog::start(
            self.paths.ctl_file(),
            self.paths.state.clone(),
            watched,
        ));
        for spec in &self.cfg.topology.hosts {
            let disks = spec.nvme.iter().map(|d| (&d.id, d.size));
            let controllers = spec.ahci.iter().chain(&spec.lsi).chain(&spec.virtio_blk);
            for (id, size) in disks.chain(controllers.map(|d| (&d.id, d.size))) {
                create_sparse(&self.paths.disk_file(&spec.name, id), size.0)?;
            }
            for d in &spec.nvme_sriov {
                for nsid in 1..=d.vfs {
                    create_sparse(&self.paths.disk_file(&spec.name, &d.ns_id(nsid)), d.size.0)?;
                }
            }
            // Before any QEMU maps it: the lender's and its peers' alike.
            for d in &spec.nvme {
                if let Some(pmr) = d.pmr {
                    create_sparse(&self.paths.pmr_file(&spec.name, &d.id), pmr.0)?;
                }
            }
        }
        // Start every QEMU first, then wait: the hosts boot in parallel.
        for id in 0..self.hosts.len() {
            self.spawn_host(id)?;
        }
        for id in 0..self.hosts.len() {
            self.connect_agent(id)?;
        }
        Ok(())
    }

    fn start_server(&mut self) -> Result<(), ClusterError> {
        let p = &self.paths;
        let n = self.cfg.topology.hosts.len();
        let args: Vec<OsString> = vec![
            "--socket-dir".into(),
            p.state.clone().into(),
            "--hosts".into(),
            n.to_string().into(),
            "--ctl-path".into(),
            p.ctl_file().into(),
            "--vectors".into(),
            crate::qemu::DOORBELL_VECTORS.to_string().into(),
            "--pidfile".into(),
            p.state.join("ivshmem-server.pid").into(),
        ];
        let log = p.state.join("ivshmem-server.log");
        let server = Child::spawn("ivshmem-server", &self.cfg.ivshmem_server, &args, &log)?;
        self.server = Some(server);
        for id in 0..n {
            let sock = p.doorbell_sock(id);
            if !wait_for_path(&sock, Duration::from_secs(10)) {
                return Err(ClusterError::ServerStart {
                    socket: sock,
                    secs: 10,
                    log,
                });
            }
        }
        Ok(())
    }

    /// Before any QEMU: each connects to its networks' switches at start.
    fn start_switches(&mut self) -> Result<(), ClusterError> {
        for (net, ends) in self.cfg.topology.networks() {
            let socket = self.paths.net_sock(net);
            let sw = NetSwitch::start(&socket).map_err(|source| ClusterError::NetSwitch {
                network: net.to_owned(),
                socket: socket.clone(),
                source,
            })?;
            log::info!(
                "network {net}: switch for {} NICs on {}",
                ends.len(),
                socket.display()
            );
            self.switches.push(sw);
        }
        Ok(())
    }

    fn spawn_host(&mut self, id: usize) -> Result<(), ClusterError> {
        let name = self.cfg.topology.hosts[id].name.clone();
        // Sockets of a previous QEMU of this host would confuse the wait.
        let _ = std::fs::remove_file(self.paths.agent_sock(&name));
        let _ = std::fs::remove_file(self.paths.qmp_sock(&name));
        let args = host_args(&self.cfg.topology, id, &self.paths, &self.cfg.boot);
        let log = self.paths.state.join(format!("{name}.qemu.log"));
        let child = Child::spawn(&format!("qemu {name}"), &self.cfg.qemu, &args, &log)?;
        log::info!("host {name} (fabric id {id}): QEMU pid {}", child.pid());
        if let Some(w) = &self.watchdog {
            w.running(id, child.pid());
        }
        self.hosts[id].qemu = Some(child);
        self.hosts[id].agent = None;
        Ok(())
    }

    fn connect_agent(&mut self, id: usize) -> Result<(), ClusterError> {
        let name = self.cfg.topology.hosts[id].name.clone();
        let sock = self.paths.agent_sock(&name);
        let start = Instant::now();
        loop {
            if let Some(status) = self.hosts[id].qemu.as_mut().and_then(|q| q.exited()) {
                return Err(ClusterError::QemuExited {
                    host: name.clone(),
                    status,
                    log: self.paths.state.join(format!("{name}.qemu.log")),
                });
            }
            // Short slices, so a QEMU that died is noticed quickly.
            let left = BOOT_TIMEOUT.saturating_sub(start.elapsed());
            match AgentClient::connect_ready(&sock, left.min(Duration::from_secs(5))) {
                Ok(client) => {
                    log::info!(
                        "host {name}: agent answered after {:.1} s",
                        start.elapsed().as_secs_f64()
                    );
                    self.hosts[id].agent = Some(client);
                    return Ok(());
                }
                Err(e) if start.elapsed() >= BOOT_TIMEOUT => {
                    return Err(ClusterError::AgentTimeout {
                        host: name.clone(),
                        secs: BOOT_TIMEOUT.as_secs(),
                        source: Box::new(e),
                        serial: self.paths.serial_log(&name),
                    })
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn id(&self, host: &str) -> Result<usize, ClusterError> {
        self.cfg
            .topology
            .host(host)
            .map(|(id, _)| id)
            .ok_or_else(|| ClusterError::NoHost(host.to_owned()))
    }

    /// The agent of a running host.
    pub fn agent(&self, host: &str) -> Result<&AgentClient, ClusterError> {
        self.hosts[self.id(host)?]
            .agent
            .as_ref()
            .ok_or_else(|| ClusterError::HostDown(host.to_owned()))
    }

    /// Closes the agent connections, so that another process (e.g.
    /// `devlend-cluster exec`) can connect: an agent's socket takes one
    /// client at a time.
    pub fn release_agents(&mut self) {
        for h in &mut self.hosts {
            h.agent = None;
        }
    }

    /// Kills a host's QEMU at once, as a power failure would.
    pub fn kill_host(&mut self, host: &str) -> Result<(), ClusterError> {
        let id = self.id(host)?;
        if let Some(w) = &self.watchdog {
            w.running(id, 0);
        }
        let h = &mut self.hosts[id];
        h.agent = None;
        if let Some(mut q) = h.qemu.take() {
            q.kill();
        }
        Ok(())
    }

    /// Freezes a host's QEMU (SIGSTOP), as a host stalled under load
    /// would be: vCPUs, devices and timers stop, memory stays. Its agent
    /// does not answer until [`Cluster::resume_host`].
    pub fn pause_host(&mut self, host: &str) -> Result<(), ClusterError> {
        if let Some(w) = &self.watchdog {
            w.quiet(self.id(host)?, true);
        }
        self.signal_host(host, libc::SIGSTOP)
    }

    /// Lets a host frozen by [`Cluster::pause_host`] run on (SIGCONT).
    pub fn resume_host(&mut self, host: &str) -> Result<(), ClusterError> {
        self.signal_host(host, libc::SIGCONT)?;
        if let Some(w) = &self.watchdog {
            w.quiet(self.id(host)?, false);
        }
        Ok(())
    }

    fn signal_host(&mut self, host: &str, sig: libc::c_int) -> Result<(), ClusterError> {
        let id = self.id(host)?;
        match self.hosts[id].qemu.as_mut() {
            Some(q) => {
                q.signal(sig);
                Ok(())
            }
            None => Err(ClusterError::HostDown(host.to_owned())),
        }
    }

    /// Boots a host again (after [`Cluster::kill_host`]) and waits for its agent.
    pub fn restart_host(&mut self, host: &str) -> Result<(), ClusterError> {
        let id = self.id(host)?;
        self.kill_host(host)?;
        self.spawn_host(id)?;
        self.connect_agent(id)
    }

    /// Files in which the watchdog wrote down a running host that stopped
    /// beating (see [`crate::watchdog`]), oldest first.
    pub fn freeze_reports(&self) -> Vec<PathBuf> {
        self.watchdog
            .as_ref()
            .map(Watchdog::reports)
            .unwrap_or_default()
    }

    /// Deletes those files: for a test that silenced a host on purpose.
    pub fn clear_freeze_reports(&self) {
        if let Some(w) = &self.watchdog {
            w.clear_reports();
        }
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.cfg.topology
    }

    /// The run's paths.
    pub fn paths(&self) -> &RunPaths {
        &self.paths
    }

    /// Keep the logs (serial, QEMU, server) when the cluster is dropped, e.g.
    /// because a test failed.
    pub fn keep_logs(&mut self, keep: bool) {
        self.keep_logs = keep;
    }

    /// The log files of this run, serial consoles first.
    pub fn log_files(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = self
            .cfg
            .topology
            .hosts
            .iter()
            .map(|h| self.paths.serial_log(&h.name))
            .collect();
        for h in &self.cfg.topology.hosts {
            logs.push(self.paths.state.join(format!("{}.qemu.log", h.name)));
        }
        logs.push(self.paths.state.join("ivshmem-server.log"));
        logs
    }

    /// Stops everything and removes the run's files (but the logs, if asked
    /// to keep them). Also done on drop.
    pub fn shutdown(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            w.stop();
            if !w.reports().is_empty() {
                eprintln!(
                    "watchdog: a host stopped beating during this run; its files are kept in {}",
                    self.paths.state.display()
                );
                self.keep_logs = true;
            }
        }
        for h in &mut self.hosts {
            h.agent = None;
            if let Some(mut q) = h.qemu.take() {
                q.stop(Duration::from_secs(2));
            }
        }
        if let Some(mut s) = self.server.take() {
            s.stop(Duration::from_secs(2));
        }
        self.switches.clear();
        rundir::remove(&self.paths, self.keep_logs);
        crate::cleanup::unregister(&self.paths);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}
