//! `devlend-qmp`: a QMP client the checks run inside a host (over its
//! agent), where a nested guest's QEMU has its QMP socket: the migration
//! checks drive `migrate-incoming`, `migrate` and `query-migrate` with it
//! (`devlend_vmtests::migrate`).
//!
//! ```text
//! devlend-qmp SOCKET [--wait SECS] COMMAND...
//!     COMMAND: a JSON object {"execute": ..., "arguments": {...}}. Runs
//!     each in turn and prints its answer as one JSON line,
//!     {"return": ...} or {"error": "<QEMU's text>"}; stops and exits 1
//!     at the first error. --wait: how long to retry connecting (a QEMU
//!     that is starting has no socket yet), and to wait for each answer
//!     (default 30 s).
//! devlend-qmp SOCKET --wait-migration SECS
//!     Polls query-migrate every 100 ms until its status is completed,
//!     failed or cancelled (or SECS pass); prints each new status as
//!     `status <status> <ms since the first poll>`, then the last answer
//!     as one JSON line. Exits 0 on completed, 1 otherwise.
//! ```
//!
//! The answers go to stdout, everything else to stderr; exit 2 on bad
//! arguments or a QMP failure (no socket, QEMU gone).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use devlend::qmp::Qmp;
use serde_json::{json, Value};

/// QEMU's statuses of a migration that will not change any more.
const FINAL: [&str; 3] = ["completed", "failed", "cancelled"];

fn connect(socket: &Path, wait: Duration) -> anyhow::Result<Qmp> {
    let t0 = Instant::now();
    loop {
        match Qmp::connect(socket, wait) {
            Ok(q) => return Ok(q),
            Err(e) if t0.elapsed() < wait => {
                log::debug!("{e}; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => anyhow::bail!("{e}"),
        }
    }
}

/// Runs `cmds`; prints each answer; false at the first error.
fn run_commands(q: &mut Qmp, cmds: &[Value], wait: Duration) -> anyhow::Result<bool> {
    for c in cmds {
        let exec = c
            .get("execute")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow::anyhow!("not a QMP command (no \"execute\"): {c}"))?;
        match q.execute(exec, c.get("arguments").cloned(), wait) {
            Ok(r) => println!("{}", json!({ "return": r })),
            Err(e) => {
                println!("{}", json!({ "error": e.to_string() }));
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Polls `query-migrate` until it ends; prints what [the module's docs]
/// say; true when it completed.
fn wait_migration(q: &mut Qmp, secs: u64) -> anyhow::Result<bool> {
    let t0 = Instant::now();
    let mut last_status = String::new();
    loop {
        let r = q
            .execute("query-migrate", None, Duration::from_secs(30))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let status = r
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("none")
            .to_owned();
        if status != last_status {
            println!("status {status} {}", t0.elapsed().as_millis());
            last_status.clone_from(&status);
        }
        if FINAL.contains(&status.as_str()) || t0.elapsed() > Duration::from_secs(secs) {
            println!("{r}");
            return Ok(status == "completed");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("devlend-qmp: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<bool> {
    let (socket, rest) = args.split_first().ok_or_else(|| {
        anyhow::anyhow!(
            "usage: devlend-qmp SOCKET [--wait SECS] COMMAND... | SOCKET --wait-migration SECS"
        )
    })?;
    let secs = |v: Option<&String>, what: &str| -> anyhow::Result<u64> {
        v.ok_or_else(|| anyhow::anyhow!("{what} needs a number of seconds"))?
            .parse()
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))
    };
    let mut wait = Duration::from_secs(30);
    let mut cmds = Vec::new();
    let mut migration = None;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--wait" => wait = Duration::from_secs(secs(it.next(), "--wait")?),
            "--wait-migration" => migration = Some(secs(it.next(), "--wait-migration")?),
            s => cmds.push(
                serde_json::from_str::<Value>(s)
                    .map_err(|e| anyhow::anyhow!("command {s:?} is not JSON: {e}"))?,
            ),
        }
    }
    let mut q = connect(Path::new(socket), wait)?;
    match migration {
        Some(secs) => {
            anyhow::ensure!(cmds.is_empty(), "--wait-migration takes no command");
            wait_migration(&mut q, secs)
        }
        None => run_commands(&mut q, &cmds, wait),
    }
}
