//! Client for the agent, used on the outer machine.
//!
//! QEMU exposes each host's agent port as a unix socket
//! (`-chardev socket,server=on,wait=off` + `virtserialport`). The socket
//! exists, and accepts a connection, long before the agent inside the host
//! runs, and bytes written before the agent opens its port may be lost. So a
//! client first connects, then pings until it gets an answer
//! ([`AgentClient::wait_ready`], or [`AgentClient::connect_ready`] which also
//! retries the connection).
//!
//! QEMU serves one connection at a time per socket: share one client (it is
//! `Sync`; wrap it in an `Arc` or use scoped threads) rather than opening
//! several. Requests are matched to responses by id by a reader thread, so
//! any number of callers may wait concurrently; responses to requests nobody
//! waits for any more (a previous connection's, a timed-out one's) are
//! dropped.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use log::{debug, warn};

use crate::error::{AgentError, CommandFailure};
use crate::protocol::{ExecOutput, ExecRequest, Op, Request, Response, MAX_LINE};

/// How much longer than an exec's own timeout the client waits for its
/// response: the agent needs a moment to kill the process group, and a large
/// output takes a while to cross an emulated serial port.
pub const RESPONSE_SLACK: Duration = Duration::from_secs(15);

/// A single write must not block longer than this (the host stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// First per-try timeout of a readiness ping; doubles up to [`PING_TRY_MAX`].
const PING_TRY_MIN: Duration = Duration::from_millis(200);
const PING_TRY_MAX: Duration = Duration::from_secs(2);

/// Pause between connection attempts while the socket does not exist yet.
const CONNECT_RETRY: Duration = Duration::from_millis(100);

/// Longest command text kept in error messages' `what`.
const WHAT_MAX: usize = 200;

/// Connection to one host's agent.
///
/// Request ids start at a value derived from the clock and the process id
/// and count up, so a response meant for a previous connection is very
/// unlikely to be taken for one of this connection's.
#[derive(Debug)]
pub struct AgentClient {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    writer: Mutex<UnixStream>,
    pending: Mutex<Pending>,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct Pending {
    waiters: HashMap<u64, Sender<Response>>,
    /// Set by the reader thread when the connection ends.
    closed: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder cannot leave these structures half-updated.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AgentClient {
    /// Connects to the agent socket at `path`. Does not check that the agent
    /// runs; see [`wait_ready`](Self::wait_ready).
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, AgentError> {
        let path = path.as_ref().to_path_buf();
        let connect_err = |source| AgentError::Connect {
            path: path.clone(),
            source,
        };
        let stream = UnixStream::connect(&path).map_err(connect_err)?;
        let reader = stream.try_clone().map_err(connect_err)?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(connect_err)?;
        let shared = Arc::new(Shared {
            path: path.clone(),
            writer: Mutex::new(stream),
            pending: Mutex::new(Pending::default()),
            next_id: AtomicU64::new(first_id()),
        });
        let for_reader = Arc::clone(&shared);
        thread::Builder::new()
            .name("agent-client".into())
            .spawn(move || for_reader.read_responses(reader))
            .map_err(connect_err)?;
        let client = AgentClient { shared };
        // End whatever partial line a previous client may have left in the
        // agent's buffer; the agent ignores empty lines.
        client
            .write_line(b"\n")
            .map_err(|source| AgentError::Send {
                path: client.path().to_path_buf(),
                what: "initial newline".into(),
                source,
            })?;
        Ok(client)
    }

    /// Connects to `path` and waits until the agent answers a ping, retrying
    /// the connection while the socket does not exist yet or is closed.
    pub fn connect_ready(path: impl AsRef<Path>, timeout: Duration) -> Result<Self, AgentError> {
        let path = path.as_ref();
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match Self::connect(path) {
                Ok(client) => match client.wait_ready(remaining) {
                    Ok(()) => return Ok(client),
                    Err(AgentError::Disconnected { .. } | AgentError::Send { .. })
                        if !remaining.is_zero() =>
                    {
                        debug!("agent socket {} closed, reconnecting", path.display());
                    }
                    Err(AgentError::NotReady { .. }) => {
                        return Err(AgentError::NotReady {
                            path: path.to_path_buf(),
                            timeout,
                        })
                    }
                    Err(e) => return Err(e),
                },
                Err(e @ AgentError::Connect { .. }) if remaining.is_zero() => return Err(e),
                Err(AgentError::Connect { source, .. }) => {
                    debug!("connect {}: {source}; retrying", path.display());
                }
                Err(e) => return Err(e),
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(AgentError::NotReady {
                    path: path.to_path_buf(),
                    timeout,
                });
            }
            thread::sleep(CONNECT_RETRY.min(remaining));
        }
    }

    /// Socket path this client is connected to.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Pings until the agent answers or `timeout` passes.
    ///
    /// Each ping gets a short time to be answered before another is sent
    /// (earlier ones may have been lost before the agent opened its port);
    /// an answer to any of them counts.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), AgentError> {
        let deadline = Instant::now() + timeout;
        let (tx, rx) = mpsc::channel();
        let mut ids = Vec::new();
        let mut per_try = PING_TRY_MIN;
        let result = loop {
            let id = match self.register(tx.clone(), "ping") {
                Ok(id) => id,
                Err(e) => break Err(e),
            };
            ids.push(id);
            if let Err(e) = self.send(&Request { id, op: Op::Ping }, "ping") {
                break Err(e);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(per_try.min(remaining)) {
                Ok(resp) if resp.ok => break Ok(()),
                Ok(resp) => {
                    break Err(AgentError::Remote {
                        path: self.path().to_path_buf(),
                        what: "ping".into(),
                        message: resp.error.unwrap_or_default(),
                    })
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    break Err(AgentError::NotReady {
                        path: self.path().to_path_buf(),
                        timeout,
                    })
                }
                Err(_) => {}
            }
            per_try = (per_try * 2).min(PING_TRY_MAX);
        };
        let mut pending = lock(&self.shared.pending);
        for id in ids {
            pending.waiters.remove(&id);
        }
        result
    }

    /// Sends one ping and waits up to `timeout` for its answer.
    pub fn ping(&self, timeout: Duration) -> Result<(), AgentError> {
        let resp = self.request(Op::Ping, "ping".into(), timeout)?;
        if resp.ok {
            Ok(())
        } else {
            Err(self.remote_error("ping".into(), resp))
        }
    }

    /// Runs `argv` in the host, killing it after `timeout`. A non-zero exit,
    /// a signal or a timeout is reported in the output, not as an error.
    pub fn exec(&self, argv: &[&str], timeout: Duration) -> Result<ExecOutput, AgentError> {
        self.run(&ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            timeout_ms: Some(duration_ms(timeout)),
            ..Default::default()
        })
    }

    /// Runs `sh -c cmd` in the host; see [`exec`](Self::exec).
    pub fn sh(&self, cmd: &str, timeout: Duration) -> Result<ExecOutput, AgentError> {
        self.exec(&["sh", "-c", cmd], timeout)
    }

    /// Runs `sh -c cmd` and returns its stdout if it exited with status 0;
    /// otherwise [`AgentError::CommandFailed`] with the command, its status,
    /// stdout and stderr.
    pub fn sh_ok(&self, cmd: &str, timeout: Duration) -> Result<String, AgentError> {
        let out = self.sh(cmd, timeout)?;
        self.check(cmd.to_string(), out)
    }

    /// Like [`sh_ok`](Self::sh_ok) for an argv.
    pub fn exec_ok(&self, argv: &[&str], timeout: Duration) -> Result<String, AgentError> {
        let out = self.exec(argv, timeout)?;
        self.check(argv.join(" "), out)
    }

    /// Runs a fully specified exec request (stdin, env, cwd). The client
    /// waits for the response up to the request's timeout (the protocol's
    /// default when `None`) plus [`RESPONSE_SLACK`].
    pub fn run(&self, req: &ExecRequest) -> Result<ExecOutput, AgentError> {
        let what = describe(&req.argv);
        let timeout_ms = req
            .timeout_ms
            .unwrap_or(crate::protocol::DEFAULT_TIMEOUT_MS);
        let wait = Duration::from_millis(timeout_ms).saturating_add(RESPONSE_SLACK);
        let resp = self.request(Op::Exec(req.clone()), what.clone(), wait)?;
        if !resp.ok {
            return Err(self.remote_error(what, resp));
        }
        resp.exec.ok_or_else(|| AgentError::Protocol {
            path: self.path().to_path_buf(),
            what,
            detail: "ok response without exec result".into(),
        })
    }

    fn check(&self, command: String, out: ExecOutput) -> Result<String, AgentError> {
        if out.success() {
            return Ok(out.stdout);
        }
        Err(AgentError::CommandFailed(Box::new(CommandFailure {
            path: self.path().to_path_buf(),
            command,
            exit_code: out.exit_code,
            signal: out.signal,
            timed_out: out.timed_out,
            stdout: out.stdout,
            stderr: out.stderr,
        })))
    }

    fn remote_error(&self, what: String, resp: Response) -> AgentError {
        AgentError::Remote {
            path: self.path().to_path_buf(),
            what,
            message: resp.error.unwrap_or_else(|| "(no message)".into()),
        }
    }

    /// Sends `op` with a fresh id and waits up to `wait` for its response.
    fn request(&self, op: Op, what: String, wait: Duration) -> Result<Response, AgentError> {
        let (tx, rx) = mpsc::channel();
        let id = self.register(tx, &what)?;
        let result = self.send(&Request { id, op }, &what).and_then(|()| {
            rx.recv_timeout(wait).map_err(|e| match e {
                RecvTimeoutError::Timeout => AgentError::Timeout {
                    path: self.path().to_path_buf(),
                    what: what.clone(),
                    timeout: wait,
                },
                RecvTimeoutError::Disconnected => AgentError::Disconnected {
                    path: self.path().to_path_buf(),
                    what: what.clone(),
                },
            })
        });
        if result.is_err() {
            lock(&self.shared.pending).waiters.remove(&id);
        }
        result
    }

    /// Allocates an id whose response goes to `tx`.
    fn register(&self, tx: Sender<Response>, what: &str) -> Result<u64, AgentError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut pending = lock(&self.shared.pending);
        if pending.closed {
            return Err(AgentError::Disconnected {
                path: self.path().to_path_buf(),
                what: what.to_string(),
            });
        }
        pending.waiters.insert(id, tx);
        Ok(id)
    }

    fn send(&self, req: &Request, what: &str) -> Result<(), AgentError> {
        let mut line = serde_json::to_vec(req).expect("requests always serialize");
        if line.len() > MAX_LINE {
            lock(&self.shared.pending).waiters.remove(&req.id);
            return Err(AgentError::RequestTooLarge {
                path: self.path().to_path_buf(),
                what: what.to_string(),
                len: line.len(),
                max: MAX_LINE,
            });
        }
        line.push(b'\n');
        self.write_line(&line).map_err(|source| {
            lock(&self.shared.pending).waiters.remove(&req.id);
            AgentError::Send {
                path: self.path().to_path_buf(),
                what: what.to_string(),
                source,
            }
        })
    }

    fn write_line(&self, line: &[u8]) -> io::Result<()> {
        let mut w = lock(&self.shared.writer);
        w.write_all(line)?;
        w.flush()
    }
}

impl Drop for AgentClient {
    fn drop(&mut self) {
        // Ends the reader thread (its read returns 0) and the connection.
        let _ = lock(&self.shared.writer).shutdown(Shutdown::Both);
    }
}

impl Shared {
    fn read_responses(&self, stream: UnixStream) {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        let reason = loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break "end of stream".to_string(),
                Ok(_) => self.dispatch(&line),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break e.to_string(),
            }
        };
        debug!(
            "agent socket {}: reader stops: {reason}",
            self.path.display()
        );
        let mut pending = lock(&self.pending);
        pending.closed = true;
        // Dropping the senders wakes every waiter with `Disconnected`.
        pending.waiters.clear();
    }

    fn dispatch(&self, line: &[u8]) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let resp: Response = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                warn!(
                    "agent socket {}: unparsable line ({e}): {:.200}",
                    self.path.display(),
                    String::from_utf8_lossy(line)
                );
                return;
            }
        };
        let Some(id) = resp.id else {
            warn!(
                "agent socket {}: agent reports an error without id: {}",
                self.path.display(),
                resp.error.as_deref().unwrap_or("")
            );
            return;
        };
        let waiter = lock(&self.pending).waiters.remove(&id);
        match waiter {
            // The waiter may have given up in the meantime; nothing to do.
            Some(tx) => drop(tx.send(resp)),
            None => debug!(
                "agent socket {}: stale response id {id}",
                self.path.display()
            ),
        }
    }
}

/// A per-connection starting id, so that responses to an earlier
/// connection's requests (still in flight when it closed) are unlikely to
/// match this one's ids. Below 2^48: JSON numbers stay exact everywhere.
fn first_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mix = nanos ^ (u64::from(std::process::id()) << 20);
    (mix % (1 << 48)) + 1
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `exec ["sh","-c","..."]`, cut to a readable length.
fn describe(argv: &[String]) -> String {
    let mut s = format!("exec {argv:?}");
    if s.len() > WHAT_MAX {
        let mut end = WHAT_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_cuts_long_commands() {
        assert_eq!(describe(&["true".into()]), r#"exec ["true"]"#);
        let long = describe(&["é".repeat(500)]);
        assert!(long.len() <= WHAT_MAX + 3 && long.ends_with("..."));
    }
}
