//! The harness of devlend's VM tests.
//!
//! A test binary boots one cluster and runs a list of named checks against
//! it in order (booting under TCG is slow, so checks share the cluster).
//! Arguments are substrings that select checks (`cargo test -p
//! devlend-vmtests -- peers`); `--list` lists them. Each check prints
//! `test <name> ... ok|FAILED` with its time; a failure keeps the serial,
//! QEMU and server logs and the hosts' dmesg in the artifacts directory and
//! prints their tails. The run ends with `N passed, N failed`.

pub mod fabric;
pub mod guest;
pub mod suite;

pub use suite::{Check, Suite};
