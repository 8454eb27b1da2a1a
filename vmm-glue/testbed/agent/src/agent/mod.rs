//! The agent proper (binary side): port, request loop, child handling.

pub mod exec;
pub mod lines;
pub mod port;
pub mod reaper;
pub mod server;
