//! devlend in-host command agent: protocol types and the outer machine's
//! client.
//!
//! Every emulated host runs the `devlend-agent` binary (as root, chrooted into
//! the outer machine's root filesystem). It serves newline-delimited JSON
//! requests on the virtio-serial port named [`protocol::PORT_NAME`]; the
//! outer machine reaches that port through the unix socket QEMU creates for
//! it and talks to it with [`AgentClient`]:
//!
//! ```no_run
//! use std::time::Duration;
//! use devlend_agent::AgentClient;
//!
//! # fn main() -> Result<(), devlend_agent::AgentError> {
//! let host = AgentClient::connect_ready("/run/devlend/h0.agent.sock", Duration::from_secs(120))?;
//! let kernel = host.sh_ok("uname -r", Duration::from_secs(10))?;
//! let out = host.exec(&["modprobe", "kvm_amd"], Duration::from_secs(30))?;
//! println!("{kernel}: modprobe {}", out.status_text());
//! # Ok(())
//! # }
//! ```
//!
//! See [`protocol`] for the wire format.

pub mod client;
pub mod error;
pub mod protocol;

pub use client::AgentClient;
pub use error::{AgentError, CommandFailure};
pub use protocol::{ExecOutput, ExecRequest};
