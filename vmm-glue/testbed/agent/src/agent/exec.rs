//! Running one `exec` request.
//!
//! The child gets its own process group; stdout and stderr are pipes drained
//! with `poll` (each capped, the excess read and dropped so the child never
//! blocks on a full pipe); stdin is a pipe fed from the request, or
//! /dev/null. The request ends when:
//!
//! * the child exited and both pipes reached end of file, or
//! * the child exited and [`EXIT_GRACE`] passed with a pipe still open (a
//!   background process it started holds it; that process is left running
//!   and loses its output), or
//! * the timeout expired: the whole process group gets SIGKILL and the
//!   request ends once the child's status arrives (at most [`KILL_WAIT`]).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use devlend_agent::protocol::{ExecOutput, ExecRequest, DEFAULT_TIMEOUT_MS};
use log::warn;

use super::reaper;

/// How long output is still collected after the child exited.
const EXIT_GRACE: Duration = Duration::from_millis(100);
/// How long to wait for a SIGKILLed child's status before giving up on it.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// While pipes are open and the child runs, check its status this often.
const STATUS_POLL: Duration = Duration::from_millis(50);
/// Read at most this many chunks from one pipe per wake-up, for fairness.
const READS_PER_WAKEUP: usize = 16;

/// Runs the request; `Err` is a message for the `error` field (the child
/// could not be started).
pub fn run(req: &ExecRequest, output_cap: usize) -> Result<ExecOutput, String> {
    let Some((program, args)) = req.argv.split_first() else {
        return Err("exec: argv is empty".into());
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if req.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0);
    for (key, value) in req.env.iter().flatten() {
        if key.is_empty() || key.contains(['=', '\0']) {
            return Err(format!("exec: invalid environment variable name {key:?}"));
        }
        cmd.env(key, value);
    }
    if let Some(cwd) = &req.cwd {
        cmd.current_dir(cwd);
    }
    let timeout = Duration::from_millis(req.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS));

    let (mut child, status_rx) = reaper::spawn(&mut cmd).map_err(|e| match &req.cwd {
        Some(cwd) => format!("exec {program:?} in {cwd:?}: {e}"),
        None => format!("exec {program:?}: {e}"),
    })?;
    let pid = child.id();
    let mut run = Running {
        pid,
        stdout: Capture::new(child.stdout.take().map(|p| File::from(OwnedFd::from(p)))),
        stderr: Capture::new(child.stderr.take().map(|p| File::from(OwnedFd::from(p)))),
        stdin: Feeder::new(
            child.stdin.take().map(|p| File::from(OwnedFd::from(p))),
            req.stdin.as_deref().unwrap_or("").as_bytes(),
        ),
        status_rx,
        cap: output_cap,
    };
    let (status, timed_out) = run.wait(timeout);
    let (exit_code, signal) = match status {
        Some(s) if libc::WIFEXITED(s) => (Some(libc::WEXITSTATUS(s)), None),
        Some(s) if libc::WIFSIGNALED(s) => (None, Some(libc::WTERMSIG(s))),
        _ => (None, None),
    };
    Ok(ExecOutput {
        exit_code,
        signal,
        timed_out,
        stdout: String::from_utf8_lossy(&run.stdout.buf).into_owned(),
        stderr: String::from_utf8_lossy(&run.stderr.buf).into_owned(),
        stdout_truncated: run.stdout.truncated,
        stderr_truncated: run.stderr.truncated,
    })
}

struct Running<'a> {
    pid: u32,
    stdout: Capture,
    stderr: Capture,
    stdin: Feeder<'a>,
    status_rx: Receiver<i32>,
    cap: usize,
}

impl Running<'_> {
    /// Runs the event loop; returns the wait status (if it arrived) and
    /// whether the timeout struck.
    fn wait(&mut self, timeout: Duration) -> (Option<i32>, bool) {
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        let mut status = None;
        let mut exited_at = None;
        let mut killed_at: Option<Instant> = None;
        loop {
            if status.is_none() {
                match self.status_rx.try_recv() {
                    Ok(s) => {
                        status = Some(s);
                        exited_at = Some(Instant::now());
                    }
                    Err(TryRecvError::Empty) => {}
                    Err(TryRecvError::Disconnected) => {
                        warn!("pid {}: exit status lost", self.pid);
                        break;
                    }
                }
            }
            let now = Instant::now();
            let output_open = self.stdout.is_open() || self.stderr.is_open();
            let wake = if let Some(exited) = exited_at {
                if !output_open || now >= exited + EXIT_GRACE {
                    break;
                }
                Some(exited + EXIT_GRACE)
            } else if let Some(killed) = killed_at {
                if now >= killed + KILL_WAIT {
                    warn!(
                        "pid {} ignored SIGKILL for {KILL_WAIT:?}; giving up on it",
                        self.pid
                    );
                    break;
                }
                Some(killed + KILL_WAIT)
            } else if deadline.is_some_and(|d| now >= d) {
                self.kill_group();
                killed_at = Some(now);
                continue;
            } else {
                deadline
            };
            let wait = wake.map(|w| w.saturating_duration_since(now));

            if !output_open && !self.stdin.is_open() {
                // Nothing to pump: just wait for the status.
                let got = match wait {
                    Some(w) => self.status_rx.recv_timeout(w),
                    None => self
                        .status_rx
                        .recv()
                        .map_err(|_| RecvTimeoutError::Disconnected),
                };
                match got {
                    Ok(s) => {
                        status = Some(s);
                        exited_at = Some(Instant::now());
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        warn!("pid {}: exit status lost", self.pid);
                        break;
                    }
                }
                continue;
            }
            // The status does not wake poll; look again regularly.
            let slice = match (status, wait) {
                (None, Some(w)) => w.min(STATUS_POLL),
                (None, None) => STATUS_POLL,
                (Some(_), w) => w.unwrap_or(STATUS_POLL),
            };
            self.pump(slice);
        }
        (status, killed_at.is_some())
    }

    /// One `poll` over the open pipes, then moves whatever data is ready.
    fn pump(&mut self, wait: Duration) {
        let mut fds = Vec::with_capacity(3);
        for fd in [&self.stdout.fd, &self.stderr.fd].into_iter().flatten() {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if let Some(fd) = &self.stdin.fd {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLOUT,
                revents: 0,
            });
        }
        // Round up so a sub-millisecond remainder does not spin.
        let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        let nfds = fds.len() as libc::nfds_t;
        // SAFETY: `fds` is a valid array of `nfds` pollfd entries whose
        // descriptors stay open for the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        if rc <= 0 {
            // Timeout, or EINTR: the caller's loop re-evaluates.
            return;
        }
        let ready = |fd: &Option<File>| {
            fd.as_ref()
                .is_some_and(|fd| fds.iter().any(|p| p.fd == fd.as_raw_fd() && p.revents != 0))
        };
        let (out_ready, err_ready, in_ready) = (
            ready(&self.stdout.fd),
            ready(&self.stderr.fd),
            ready(&self.stdin.fd),
        );
        if out_ready {
            self.stdout.drain(self.cap);
        }
        if err_ready {
            self.stderr.drain(self.cap);
        }
        if in_ready {
            self.stdin.feed();
        }
    }

    fn kill_group(&self) {
        let Ok(pgid) = libc::pid_t::try_from(self.pid) else {
            return;
        };
        // SAFETY: kill has no memory-safety preconditions. The child leads
        // its own group (process_group(0)) and is not yet reaped, so the
        // group id cannot belong to anyone else.
        if unsafe { libc::kill(-pgid, libc::SIGKILL) } != 0 {
            warn!("kill process group {pgid}: {}", io::Error::last_os_error());
        }
    }
}

/// One output pipe and what was read from it.
struct Capture {
    fd: Option<File>,
    buf: Vec<u8>,
    truncated: bool,
}

impl Capture {
    fn new(fd: Option<File>) -> Self {
        if let Some(fd) = &fd {
            set_nonblocking(fd);
        }
        Capture {
            fd,
            buf: Vec::new(),
            truncated: false,
        }
    }

    fn is_open(&self) -> bool {
        self.fd.is_some()
    }

    /// Reads what is available; closes the pipe on end of file or error.
    fn drain(&mut self, cap: usize) {
        let mut chunk = [0u8; 64 * 1024];
        for _ in 0..READS_PER_WAKEUP {
            let Some(fd) = &self.fd else { return };
            match (&*fd).read(&mut chunk) {
                Ok(0) => {
                    self.fd = None;
                    return;
                }
                Ok(n) => {
                    let room = cap.saturating_sub(self.buf.len());
                    self.buf.extend_from_slice(&chunk[..n.min(room)]);
                    self.truncated |= n > room;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    warn!("read child output: {e}");
                    self.fd = None;
                    return;
                }
            }
        }
    }
}

/// The stdin pipe and the bytes still to write.
struct Feeder<'a> {
    fd: Option<File>,
    data: &'a [u8],
}

impl<'a> Feeder<'a> {
    fn new(fd: Option<File>, data: &'a [u8]) -> Self {
        if let Some(fd) = &fd {
            set_nonblocking(fd);
        }
        let mut feeder = Feeder { fd, data };
        if feeder.data.is_empty() {
            feeder.fd = None;
        }
        feeder
    }

    fn is_open(&self) -> bool {
        self.fd.is_some()
    }

    /// Writes what the pipe takes; closes it when done or when the child
    /// closed its end.
    fn feed(&mut self) {
        while let Some(fd) = &self.fd {
            match (&*fd).write(self.data) {
                Ok(n) => {
                    self.data = &self.data[n..];
                    if self.data.is_empty() {
                        self.fd = None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // EPIPE: the child does not read its stdin; not an error.
                Err(_) => self.fd = None,
            }
        }
    }
}

/// Puts a pipe end in non-blocking mode (the loop relies on `poll`).
fn set_nonblocking(file: &File) {
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open (owned by `file`); F_GETFL/F_SETFL only change
    // its status flags.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if !ok {
        warn!(
            "set O_NONBLOCK on a child pipe: {}",
            io::Error::last_os_error()
        );
    }
}
