//! Errors of the agent client.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Why a request to an agent failed. Every variant names the agent's socket
/// (one per emulated host) and the request in question.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The unix socket could not be connected.
    #[error("connect to agent socket {path}: {source}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Error from `connect(2)`.
        #[source]
        source: io::Error,
    },

    /// Writing the request to the socket failed.
    #[error("agent at {path}: send {what}: {source}")]
    Send {
        /// Socket path.
        path: PathBuf,
        /// The request, abbreviated.
        what: String,
        /// Error from `write(2)`.
        #[source]
        source: io::Error,
    },

    /// The request line would exceed the agent's line limit.
    #[error("agent at {path}: {what}: request is {len} bytes, the agent accepts at most {max}")]
    RequestTooLarge {
        /// Socket path.
        path: PathBuf,
        /// The request, abbreviated.
        what: String,
        /// Size of the encoded request line.
        len: usize,
        /// The agent's limit ([`crate::protocol::MAX_LINE`]).
        max: usize,
    },

    /// The connection closed before the response arrived.
    #[error("agent at {path}: connection closed while waiting for {what}")]
    Disconnected {
        /// Socket path.
        path: PathBuf,
        /// The request, abbreviated.
        what: String,
    },

    /// No response arrived in time.
    #[error("agent at {path}: no response to {what} within {timeout:?}")]
    Timeout {
        /// Socket path.
        path: PathBuf,
        /// The request, abbreviated.
        what: String,
        /// How long the client waited.
        timeout: Duration,
    },

    /// The agent never answered a ping.
    #[error("agent at {path} not ready: no answer to ping within {timeout:?}")]
    NotReady {
        /// Socket path.
        path: PathBuf,
        /// How long the client tried.
        timeout: Duration,
    },

    /// The agent answered `ok: false`.
    #[error("agent at {path}: {what} failed: {message}")]
    Remote {
        /// Socket path.
        path: PathBuf,
        /// The request, abbreviated.
        what: String,
        /// The agent's `error` field.
        message: String,
    },

    /// The agent's response does not fit the request.
    #[error("agent at {path}: {what}: malformed response: {detail}")]
    Protocol {
        /// Socket path.
        path: PathBuf,
        /// The request, abbreviated.
        what: String,
        /// What was wrong.
        detail: String,
    },

    /// The command ran but did not succeed (`sh_ok`, `exec_ok`).
    #[error("{0}")]
    CommandFailed(Box<CommandFailure>),
}

/// A command that ran and failed: non-zero exit, killed by a signal, or timed
/// out. Carries everything needed to diagnose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFailure {
    /// Socket of the agent that ran it.
    pub path: PathBuf,
    /// The command, as given (for `sh_ok`, the shell command line).
    pub command: String,
    /// Exit status, if it exited.
    pub exit_code: Option<i32>,
    /// Signal, if it was killed by one.
    pub signal: Option<i32>,
    /// Whether the agent's timeout expired.
    pub timed_out: bool,
    /// Full captured stdout.
    pub stdout: String,
    /// Full captured stderr.
    pub stderr: String,
}

/// At most this much of each stream goes into the `Display` text.
const DISPLAY_TAIL: usize = 4096;

fn tail(s: &str) -> &str {
    if s.len() <= DISPLAY_TAIL {
        return s;
    }
    let mut start = s.len() - DISPLAY_TAIL;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl fmt::Display for CommandFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = match (self.exit_code, self.signal) {
            _ if self.timed_out => "timed out".to_string(),
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "exit status unknown".to_string(),
        };
        write!(
            f,
            "agent at {}: command `{}` failed: {status}",
            self.path.display(),
            self.command
        )?;
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let shown = tail(text);
            if shown.len() < text.len() {
                write!(f, "\n--- {name} (last {} bytes) ---\n{shown}", shown.len())?;
            } else if !text.is_empty() {
                write!(f, "\n--- {name} ---\n{shown}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_display_carries_everything() {
        let f = CommandFailure {
            path: "/s/h0.agent.sock".into(),
            command: "false".into(),
            exit_code: Some(1),
            signal: None,
            timed_out: false,
            stdout: "out".into(),
            stderr: "é".repeat(3000),
        };
        let text = AgentError::CommandFailed(Box::new(f)).to_string();
        assert!(text.starts_with("agent at /s/h0.agent.sock: command `false` failed: exit code 1"));
        assert!(text.contains("--- stdout ---\nout"));
        assert!(text.contains("--- stderr (last 4096 bytes) ---\n"));
    }
}
