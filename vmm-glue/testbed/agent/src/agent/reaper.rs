//! The one place that waits for children.
//!
//! The agent is a child subreaper, so besides the programs it starts it
//! inherits every process they orphan, and must reap those too. A thread
//! calling `waitpid(-1)` would race with code waiting for one specific child,
//! so all waiting happens here:
//!
//! * [`spawn`] starts a child while holding the registry lock and registers
//!   its pid with a channel before releasing it.
//! * The reaper thread blocks in `waitid(P_ALL, WEXITED | WNOWAIT)`, which
//!   reports an exited child *without* reaping it (a zombie keeps its pid, so
//!   the pid cannot be reused meanwhile). It then takes the registry lock,
//!   reaps that pid, and sends the wait status to the registered channel, or
//!   drops it if the pid is not registered (an orphan). Because spawning
//!   holds the same lock, a child is always registered before the reaper
//!   looks it up, and a child that `Command::spawn` reaps itself (failed
//!   exec) is simply gone when the reaper gets the lock.
//!
//! Nothing else in the process may wait for children: use [`spawn`], never
//! `Child::wait`.

use std::collections::BTreeMap;
use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use log::{debug, error};

struct Registry {
    /// Wait-status channels of the children started by [`spawn`].
    waiters: BTreeMap<u32, Sender<i32>>,
    /// Bumped on every spawn; the reaper sleeps on it while it has no child.
    generation: u64,
}

struct Reaper {
    registry: Mutex<Registry>,
    spawned: Condvar,
}

static REAPER: Reaper = Reaper {
    registry: Mutex::new(Registry {
        waiters: BTreeMap::new(),
        generation: 0,
    }),
    spawned: Condvar::new(),
};

impl Reaper {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        loop {
            let generation = self.lock().generation;
            // SAFETY: siginfo_t is plain old data; all-zero is a valid value.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves
            // the child a zombie, so no status is lost.
            let rc =
                unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
            if rc != 0 {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::ECHILD) => {
                        let mut reg = self.lock();
                        while reg.generation == generation {
                            reg = self.spawned.wait(reg).unwrap_or_else(|e| e.into_inner());
                        }
                    }
                    _ => {
                        error!("waitid: {err}");
                        thread::sleep(Duration::from_secs(1));
                    }
                }
                continue;
            }
            // SAFETY: waitid succeeded for WEXITED without WNOHANG, so the
            // kernel filled in a child's exit, and si_pid is the valid field.
            let pid = unsafe { info.si_pid() };
            let mut reg = self.lock();
            let mut status = 0;
            // SAFETY: plain system call; `status` is a valid out-pointer.
            let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if reaped != pid {
                // Already reaped by `Command::spawn` after a failed exec.
                continue;
            }
            let key = u32::try_from(pid).unwrap_or(0);
            match reg.waiters.remove(&key) {
                // The receiver may have given up (a child that would not die).
                Some(tx) => drop(tx.send(status)),
                None => debug!("reaped orphan {pid}: {}", describe(status)),
            }
        }
    }
}

/// Starts the reaper thread. Call once, before any [`spawn`].
pub fn start() -> io::Result<()> {
    thread::Builder::new()
        .name("reaper".into())
        .spawn(|| REAPER.run())
        .map(drop)
}

/// Spawns `cmd` and returns the child (never wait on it) and a channel that
/// receives its raw wait status.
pub fn spawn(cmd: &mut Command) -> io::Result<(Child, Receiver<i32>)> {
    let (tx, rx) = mpsc::channel();
    let mut reg = REAPER.lock();
    let child = cmd.spawn()?;
    reg.waiters.insert(child.id(), tx);
    reg.generation += 1;
    REAPER.spawned.notify_all();
    Ok((child, rx))
}

/// "exit code N" / "signal N" for a raw wait status.
pub fn describe(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit code {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {status:#x}")
    }
}
