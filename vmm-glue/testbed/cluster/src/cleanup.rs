//! Teardown on SIGINT, SIGTERM and SIGHUP.
//!
//! Drop handlers do not run when a process is ended by a signal, so every
//! live run is registered here, and a thread that waits for those signals
//! removes them (killing their recorded PIDs) before exiting. SIGKILL cannot
//! be caught: then the QEMUs die with us (PR_SET_PDEATHSIG) and the next run
//! reaps the files ([`crate::rundir::reap_stale`]).

use std::sync::{Mutex, Once};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::qemu::RunPaths;

static RUNS: Mutex<Vec<RunPaths>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

fn runs() -> std::sync::MutexGuard<'static, Vec<RunPaths>> {
    RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the signal thread (once per process).
pub fn install() {
    INSTALL.call_once(|| {
        let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(s) => s,
            Err(e) => {
                log::warn!("cannot catch signals, an interrupted run may leave files: {e}");
                return;
            }
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                eprintln!("devlend: signal {sig}: tearing the cluster down");
                for run in runs().drain(..) {
                    crate::rundir::remove(&run, true);
                    eprintln!("devlend: logs kept in {}", run.state.display());
                }
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Registers a live run.
pub fn register(run: &RunPaths) {
    install();
    runs().push(run.clone());
}

/// Forgets a run that was torn down normally.
pub fn unregister(run: &RunPaths) {
    runs().retain(|r| r.state != run.state);
}
