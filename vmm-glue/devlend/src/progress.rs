//! A progress line for operations that can take long: a lend or unlend
//! resets the device (up to a minute on real hardware), an attach waits
//! for QEMU to open the mdev (the borrow), a detach for the guest to let go.
//! After a second of waiting, stderr gets `<what>... N s`, redrawn each
//! second on a terminal and written once otherwise, and the time it took
//! when it ends. Quick operations print nothing.

use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Runs `op`, telling stderr about it if it takes more than a second.
pub fn with_progress<T>(what: &str, op: impl FnOnce() -> T) -> T {
    let tty = std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut shown = false;
            while let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(Duration::from_secs(1)) {
                let mut err = std::io::stderr().lock();
                if tty {
                    let _ = write!(err, "\r{what}... {} s", t0.elapsed().as_secs());
                    let _ = err.flush();
                } else if !shown {
                    let _ = writeln!(err, "{what}...");
                }
                shown = true;
            }
            if shown {
                let secs = t0.elapsed().as_secs_f64();
                eprintln!("{}{what}: {secs:.1} s", if tty { "\r" } else { "" });
            }
        });
        let r = op();
        drop(done);
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_what_the_operation_returns() {
        assert_eq!(with_progress("quick", || 7), 7);
        let slow = with_progress("slow", || {
            std::thread::sleep(Duration::from_millis(1100));
            "done"
        });
        assert_eq!(slow, "done");
    }
}
