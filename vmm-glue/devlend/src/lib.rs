//! The devlend command's library: the sysfs model of lender and borrower
//! (under a root directory, so tests use a fake tree), the argument
//! generators for QEMU, libvirt and cloud-hypervisor, a QMP client for
//! hot-plug, the rates and Prometheus text of `devlend stats`, and the
//! lender's configuration that `devlend apply` lends at boot. The command itself is `src/main.rs`; its manual is
//! `docs/devlend-cli.md`.

pub mod error;
pub mod lendconf;
pub mod man;
pub mod progress;
pub mod qmp;
pub mod stats;
pub mod sysfs;
pub mod vmmargs;

pub use error::{exit, CliError, Result};
