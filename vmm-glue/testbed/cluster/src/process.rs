//! Child processes of a cluster (QEMU, the ivshmem server), started so that
//! they cannot outlive us and stopped by their PID, never by name.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Errors starting or stopping a child.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Its log file could not be created.
    #[error("cannot create log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A child process with its output going to a log file.
#[derive(Debug)]
pub struct Child {
    name: String,
    child: std::process::Child,
    log: PathBuf,
}

impl Child {
    /// Starts `program args…` with stdout and stderr appended to `log`.
    ///
    /// The child is in its own process group (a Ctrl-C at the terminal
    /// reaches us, and we stop it in order) and gets SIGKILL if the thread
    /// that started it dies, so even `kill -9` of the harness leaves no
    /// QEMU running. Start children from a thread that lives as long as they
    /// should (the main thread).
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[std::ffi::OsString],
        log: &Path,
    ) -> Result<Child, ProcessError> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| ProcessError::Log {
                path: log.to_owned(),
                source,
            })?;
        let err = out.try_clone().map_err(|source| ProcessError::Log {
            path: log.to_owned(),
            source,
        })?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: the closure runs in the child between fork and exec and
        // only calls prctl(2), which is async-signal-safe and touches no
        // memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
        Ok(Child {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        })
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it is, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `Some(description)` once it has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// Sends `sig` to it (only while it has not been reaped, so the PID is
    /// still ours).
    pub fn signal(&mut self, sig: libc::c_int) {
        if self.exited().is_none() {
            signal_pid(self.pid(), sig);
        }
    }

    /// SIGKILL now, and reap.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL; always reaps.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        self.signal(libc::SIGTERM);
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends a signal to a PID (no-op if it is gone).
pub fn signal_pid(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 0 {
        return;
    }
    // SAFETY: kill(2) with a positive PID has no memory-safety effects; a
    // failure (ESRCH) is harmless and ignored.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// True if a process with this PID exists.
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// True if `pid` is alive and its command line mentions `needle`: the check
/// that a recorded PID is still the process we started, not a reused PID.
pub fn pid_mentions(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(needle))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_ends_a_child_that_ignores_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let mut c = Child::spawn(
            "t",
            Path::new("/bin/sh"),
            &["-c".into(), "trap '' TERM; echo up; sleep 30".into()],
            &log,
        )
        .unwrap();
        let pid = c.pid();
        let t0 = Instant::now();
        while std::fs::read_to_string(&log).unwrap_or_default().is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(pid_mentions(pid, "trap"));
        c.stop(Duration::from_millis(200));
        assert!(c.exited().is_some());
        assert!(!pid_alive(pid));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "up\n");
    }

    #[test]
    fn drop_kills() {
        let dir = tempfile::tempdir().unwrap();
        let c = Child::spawn(
            "t",
            Path::new("/bin/sleep"),
            &["30".into()],
            &dir.path().join("log"),
        )
        .unwrap();
        let pid = c.pid();
        drop(c);
        assert!(!pid_alive(pid));
    }

    #[test]
    fn spawn_failure_names_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let e = Child::spawn(
            "t",
            Path::new("/nonexistent/qemu"),
            &[],
            &dir.path().join("l"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/qemu"), "{e}");
    }
}
