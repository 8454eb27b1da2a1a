//! The emulated PCIe cluster: boots a set of QEMU hosts wired like an NTB
//! cluster (shared RAM files, windows onto every peer's RAM, doorbells
//! through devlend's ivshmem server) and gives tests and users a command
//! channel into each host.
//!
//! Code map: [`topology`] (the topology file), [`qemu`] (one host's QEMU
//! command line), [`process`] (children that cannot outlive us), [`netswitch`]
//! (networks joining NICs of different hosts),
//! [`rundir`] (run directories, stale-run reaping), [`cleanup`] (teardown
//! on signals), [`tools`] (finding binaries and images), [`cluster`] (the
//! running cluster).

pub mod cleanup;
pub mod cluster;
pub mod netswitch;
pub mod process;
pub mod qemu;
pub mod rundir;
pub mod tools;
pub mod topology;
pub mod watchdog;

pub use cluster::{Cluster, ClusterConfig, ClusterError};

use std::path::{Path, PathBuf};

/// Where a host sees the outer machine's root as it is, without the tmpfs
/// mounts the host puts over `/tmp`, `/run`, `/root` and `/dev/shm` (set up
/// by the host's /init).
pub const OUTER_ROOT_IN_HOST: &str = "/run/devlend/outer";

/// The path by which a host reaches a file of the outer machine. Plain
/// absolute paths fail for files below the masked directories (a checkout
/// in `/tmp` or `/root`, say), so always go through this.
pub fn host_view(outer: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(outer).unwrap_or_else(|_| outer.to_owned());
    Path::new(OUTER_ROOT_IN_HOST).join(abs.strip_prefix("/").unwrap_or(&abs))
}
pub use topology::Topology;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_view_goes_through_the_unmasked_outer_root() {
        assert_eq!(
            host_view(Path::new("/tmp/nonexistent-devlend/x.ko")),
            Path::new("/run/devlend/outer/tmp/nonexistent-devlend/x.ko")
        );
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            host_view(Path::new(".")),
            Path::new(OUTER_ROOT_IN_HOST).join(here.strip_prefix("/").unwrap())
        );
    }
}
