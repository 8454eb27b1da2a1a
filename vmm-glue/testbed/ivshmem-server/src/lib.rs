//! devlend's ivshmem server.
//!
//! QEMU's `ivshmem-doorbell` device gets its shared memory and its
//! interrupt eventfds from a server over a UNIX socket
//! (QEMU `docs/specs/ivshmem-spec.rst`). Debian ships no such server, and
//! QEMU's example server hands out ids in connection order; devlend needs
//! host ids that do not depend on boot order, so this server listens on one
//! socket per host id: a client of `doorbell-<i>.sock` is host `i`.
//!
//! The shared memory it hands out is the fabric's control area: a file the
//! server creates, sizes and formats with a `struct dl_ctl_header`
//! ([`devlend_wire::CtlLayout`]) before any host attaches. It holds the
//! header and the host info slots; the message rings live in each host's
//! own RAM (its inbox), which the server never sees.
//!
//! # Protocol
//!
//! Every message is one little-endian `i64`, some with one descriptor
//! (`SCM_RIGHTS`). When host `i` connects it receives, in order:
//!
//! 1. `0`, the protocol version;
//! 2. `i`, its id;
//! 3. `-1` with the control area's descriptor;
//! 4. for every other connected host `j`, in id order, `j` once per vector
//!    with that vector's eventfd (to ring `j`);
//!
//! then every other connected host that has not been sent host `i`'s
//! eventfds yet receives `i` once per vector with them, and finally host
//! `i` receives
//!
//! 5. `i` once per vector with its own eventfds (to be rung on).
//!
//! So a client is sent each other host's eventfds once: when it connects,
//! for the hosts connected then, or when that host connects later.
//!
//! When host `i` disconnects (or misbehaves: sends anything, stops
//! reading) socket `i` accepts a new client, e.g. the host's QEMU was
//! restarted. A second client on the socket of a connected host is refused
//! (closed).
//!
//! What else happens on a disconnect depends on
//! [`Config::notify_disconnects`]:
//!
//! * by default, nothing: host `i` keeps its eventfds for the server's
//!   lifetime (they are drained when it reconnects), so the other clients'
//!   copies stay valid and need no update. This works around a QEMU bug:
//!   ivshmem (up to at least QEMU 10.0) frees a peer's eventfd array on a
//!   disconnect message but keeps using it, so a peer id that connects
//!   again corrupts the heap of every QEMU that was told it had left;
//!   QEMU's own server never reuses ids quickly, devlend's fixed ids reuse
//!   them on every restart. The guest cannot see connects or disconnects
//!   anyway; devlend detects dead peers by their heartbeat.
//! * with `notify_disconnects` (the spec's behaviour), every client that
//!   knew host `i` receives `i` without a descriptor, host `i`'s eventfds
//!   are closed, and it gets new ones when it connects again.
//!
//! # Design
//!
//! One thread, one `poll` loop, no blocking calls: a client that stops
//! reading is dropped, not waited for. The server never reads the control
//! area after formatting it.

pub mod config;
pub mod ctl;
pub mod os;
pub mod pidfile;
pub mod server;

pub use config::{parse_size, Config, MAX_VECTORS};
pub use os::{recv_msg, send_msg, EventFd};
pub use pidfile::PidFile;
pub use server::{Server, ServerError, PROTOCOL_VERSION};

/// Name of the socket of host `id` inside the socket directory.
pub fn socket_name(id: u32) -> String {
    format!("doorbell-{id}.sock")
}
