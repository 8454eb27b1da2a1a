//! The emulated PCIe cluster: boots a set of QEMU hosts wired like an NTB
//! cluster (shared RAM files, windows onto every peer's RAM, doorbells
//! through devlend's ivshmem server) and gives tests and users a command
//! channel into each host.
//!
//! Code map: [`topology`] (the topology file), [`qemu`] (one host's QEMU
//! command line), [`process`] (children that cannot outlive us),
//! [`rundir`] (run directories, stale-run reaping), [`cleanup`] (teardown
//! on signals), [`tools`] (finding binaries and images), [`cluster`] (the
//! running cluster).

pub mod cleanup;
pub mod cluster;
pub mod process;
pub mod qemu;
pub mod rundir;
pub mod tools;
pub mod topology;

pub use cluster::{Cluster, ClusterConfig, ClusterError};
pub use topology::Topology;
