//! The devlend command's library: the sysfs model of lender and borrower
//! (under a root directory, so tests use a fake tree), the argument
//! generators for QEMU, libvirt and cloud-hypervisor, a QMP client for
//! hot-plug, the rates and Prometheus text of `devlend stats`, and the
//! lender's configuration that `devlend apply` lends at boot; the commands
//! themselves, one file each (`commands/`), which do the work and return
//! data, and what they print (`output`). `src/main.rs` parses the
//! arguments and joins a command to its output; the manual is
//! `docs/devlend-cli.md`.

pub mod abi;
pub mod commands;
pub mod error;
pub mod lendconf;
pub mod man;
pub mod output;
pub mod progress;
pub mod qmp;
pub mod stats;
pub mod sysfs;
pub mod vmmargs;

pub use error::{exit, CliError, Result};
