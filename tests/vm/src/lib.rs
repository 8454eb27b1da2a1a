//! The harness of devlend's VM tests.
//!
//! A test binary boots one cluster and runs a list of named checks against
//! it in order (booting under TCG is slow, so checks share the cluster).
//! Arguments are substrings that select checks (`cargo test -p
//! devlend-vmtests -- peers`); `--list` lists them. Each check prints
//! `test <name> ... ok|FAILED` with its time; a failure keeps the serial,
//! QEMU and server logs and the hosts' dmesg in the artifacts directory and
//! prints their tails. The run ends with `N passed, N failed`.

pub mod bench;
pub mod fabric;
pub mod fixture;
pub mod group;
pub mod guest;
pub mod kmemleak;
pub mod lending;
pub mod libvirt;
pub mod lockdep;
pub mod migrate;
pub mod ntb;
pub mod nvme_sriov;
pub mod ownership;
pub mod p2p;
pub mod peerfuzz;
pub mod pool;
pub mod rwroot;
pub mod sriov;
pub mod suite;
pub mod tool;
pub mod twohost;

pub use fixture::Scope;
pub use suite::{Check, Suite};

/// Boots the cluster of `qemu-scripts/topologies/<name>.toml` with the
/// programs and images this checkout built.
pub fn boot_topology(name: &str) -> anyhow::Result<devlend_cluster::Cluster> {
    use devlend_cluster::{tools, Cluster, ClusterConfig, Topology};
    let path = tools::repo_root().join(format!("qemu-scripts/topologies/{name}.toml"));
    Ok(Cluster::start(ClusterConfig {
        topology: Topology::load(&path)?,
        boot: tools::boot_files()?,
        qemu: "qemu-system-x86_64".into(),
        ivshmem_server: tools::our_binary("devlend-ivshmem-server", "DEVLEND_IVSHMEM_SERVER")?,
        run_base: devlend_cluster::rundir::base_dir(),
    })?)
}
