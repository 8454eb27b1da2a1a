//! One of our programs that a check drives line by line (the fuzz-peer
//! tool's churn, flood and hostile-lender modes): commands on its stdin,
//! tagged JSON lines on its stdout. The process is killed and reaped when
//! the value goes, on every path out of the check.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// A running tool: its stdin, its stdout as lines.
#[derive(Debug)]
pub struct LineTool {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl LineTool {
    /// Starts `bin` with `args` (printed first); `what` names it in
    /// messages.
    pub fn spawn(what: &str, bin: &str, args: &[String]) -> anyhow::Result<LineTool> {
        println!("  {bin} {}", args.join(" "));
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {bin}"))?;
        let stdin = child.stdin.take().context("tool stdin")?;
        let stdout = child.stdout.take().context("tool stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(LineTool {
            what: what.to_owned(),
            child,
            stdin: Some(stdin),
            lines,
        })
    }

    /// Writes a command line (`cmd` and a newline) to its stdin.
    pub fn say(&mut self, cmd: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin.write_all(format!("{cmd}\n").as_bytes())?;
        Ok(())
    }

    /// Its next line starting with `prefix`, as JSON; its other lines
    /// printed.
    pub fn line(&self, prefix: &str, limit: Duration) -> anyhow::Result<serde_json::Value> {
        self.line_ticking(prefix, limit, &mut || Ok(()))
    }

    /// [`LineTool::line`], running `tick` about every two seconds while
    /// it waits.
    pub fn line_ticking(
        &self,
        prefix: &str,
        limit: Duration,
        tick: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<serde_json::Value> {
        let t0 = Instant::now();
        loop {
            let left = limit.saturating_sub(t0.elapsed());
            ensure!(
                !left.is_zero(),
                "the {} printed no {prefix}within {limit:?}",
                self.what
            );
            match self.lines.recv_timeout(left.min(Duration::from_secs(2))) {
                Ok(line) => {
                    if let Some(json) = line.strip_prefix(prefix) {
                        return serde_json::from_str(json)
                            .with_context(|| format!("{prefix}{json}"));
                    }
                    println!("  | {line}");
                }
                Err(RecvTimeoutError::Timeout) => tick()?,
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("the {} ended without printing {prefix}", self.what)
                }
            }
        }
    }

    /// Closes its stdin and waits for it to exit; how it did.
    pub fn finish(&mut self) -> anyhow::Result<ExitStatus> {
        drop(self.stdin.take());
        Ok(self.child.wait()?)
    }
}

impl Drop for LineTool {
    fn drop(&mut self) {
        // Its stdin closed, a tool lets go of what it holds and exits; one
        // that does not within a few seconds is killed.
        drop(self.stdin.take());
        let t0 = Instant::now();
        while let Ok(None) = self.child.try_wait() {
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.wait();
    }
}

/// The arguments of `devlend-fuzz-peer` that put it in the place of host
/// `peer` (name, fabric id; its QEMU stopped or killed) talking to host
/// `target`: the control area, the peer's doorbell socket, both ids and
/// both RAM files. The mode's own arguments follow.
pub fn fuzz_peer_args(
    c: &devlend_cluster::Cluster,
    target: (&str, u32),
    peer: (&str, u32),
) -> Vec<String> {
    let p = c.paths();
    vec![
        "--ctl".to_owned(),
        p.ctl_file().display().to_string(),
        "--doorbell-sock".to_owned(),
        p.doorbell_sock(peer.1 as usize).display().to_string(),
        "--target".to_owned(),
        target.1.to_string(),
        "--target-ram".to_owned(),
        p.ram_file(target.0).display().to_string(),
        "--peer".to_owned(),
        peer.1.to_string(),
        "--peer-ram".to_owned(),
        p.ram_file(peer.0).display().to_string(),
    ]
}
