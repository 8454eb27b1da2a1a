//! Run directories: where a cluster keeps its files, and how what an earlier
//! run left behind (it was killed with SIGKILL, the machine lost power) is
//! found and removed before a new run starts.
//!
//! A run owns two directories: `<base>/<run>` on disk (sockets, logs, NVMe
//! backing files, the share) and `/dev/shm/devlend-<run>` (host RAM). The
//! first holds an `owner` file with the PID of the process that made it; a
//! run whose owner is dead is stale. PIDs of the run's QEMUs and server are
//! in `*.pid` files; one is killed only if that process is still alive and
//! its command line names the run's directory (PIDs get reused).

use std::path::{Path, PathBuf};

use crate::process::{pid_alive, pid_mentions, signal_pid};
use crate::qemu::RunPaths;

/// Where run directories go unless `DEVLEND_RUN_DIR` says otherwise.
pub const DEFAULT_BASE: &str = "/var/tmp/devlend";
/// Where host RAM files go.
pub const SHM_BASE: &str = "/dev/shm";
const SHM_PREFIX: &str = "devlend-";

/// Errors making a run directory.
#[derive(Debug, thiserror::Error)]
#[error("cannot create run directory {path}: {source}")]
pub struct RunDirError {
    /// The directory.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// The base directory for runs.
pub fn base_dir() -> PathBuf {
    std::env::var_os("DEVLEND_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BASE))
}

/// Makes the directories of a new run named after the topology and our PID.
pub fn create(base: &Path, topology: &str) -> Result<RunPaths, RunDirError> {
    let run = format!("{topology}-{}", std::process::id());
    let paths = RunPaths {
        state: base.join(&run),
        ram: Path::new(SHM_BASE).join(format!("{SHM_PREFIX}{run}")),
        share: base.join(&run).join("share"),
    };
    for dir in [&paths.state, &paths.share, &paths.ram] {
        // A directory of that name is ours from a previous cluster of this
        // process: start clean.
        if dir != &paths.share {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::fs::create_dir_all(dir).map_err(|source| RunDirError {
            path: dir.clone(),
            source,
        })?;
    }
    // The RAM files are whole hosts' memory: for our eyes only.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&paths.ram, std::fs::Permissions::from_mode(0o700)).map_err(
        |source| RunDirError {
            path: paths.ram.clone(),
            source,
        },
    )?;
    let owner = paths.state.join("owner");
    std::fs::write(&owner, std::process::id().to_string()).map_err(|source| RunDirError {
        path: owner,
        source,
    })?;
    Ok(paths)
}

/// Kills what a run started (by the PIDs in its pidfiles, checked) and
/// removes its directories. `keep_logs` keeps `*.log` files, the owner file
/// and the state directory, removing everything else (RAM, sockets,
/// backing files); a later run reaps what is kept once the owner is dead.
pub fn remove(paths: &RunPaths, keep_logs: bool) {
    kill_recorded(&paths.state);
    let _ = std::fs::remove_dir_all(&paths.ram);
    if !keep_logs {
        let _ = std::fs::remove_dir_all(&paths.state);
        return;
    }
    if let Ok(entries) = std::fs::read_dir(&paths.state) {
        for e in entries.flatten() {
            let p = e.path();
            // The owner file stays with the logs, so that a later run
            // reaps them once their owner is gone.
            let keep = p.extension().is_some_and(|x| x == "log") || p.ends_with("owner");
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(&p);
            } else if !keep {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

fn kill_recorded(state: &Path) {
    let Ok(entries) = std::fs::read_dir(state) else {
        return;
    };
    let needle = state.to_string_lossy().into_owned();
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "pid") {
            continue;
        }
        let Some(pid) = std::fs::read_to_string(&p)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if pid_mentions(pid, &needle) {
            signal_pid(pid, libc::SIGKILL);
        }
    }
}

/// Removes every run under `base` whose owner is dead, and RAM directories
/// with no run. Returns the names removed.
pub fn reap_stale(base: &Path) -> Vec<String> {
    let mut reaped = Vec::new();
    if let Ok(entries) = std::fs::read_dir(base) {
        for e in entries.flatten() {
            let state = e.path();
            let owner = std::fs::read_to_string(state.join("owner"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            let Some(owner) = owner else { continue };
            if owner == std::process::id() || pid_alive(owner) {
                continue;
            }
            let run = e.file_name().to_string_lossy().into_owned();
            remove(
                &RunPaths {
                    ram: Path::new(SHM_BASE).join(format!("{SHM_PREFIX}{run}")),
                    share: state.join("share"),
                    state,
                },
                false,
            );
            reaped.push(run);
        }
    }
    // RAM directories whose run directory is gone (the run was removed but
    // the RAM was not, or the base moved).
    if let Ok(entries) = std::fs::read_dir(SHM_BASE) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(run) = name.strip_prefix(SHM_PREFIX) else {
                continue;
            };
            let owner_alive = run
                .rsplit('-')
                .next()
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(pid_alive);
            if !owner_alive && !base.join(run).exists() {
                let _ = std::fs::remove_dir_all(e.path());
                reaped.push(name);
            }
        }
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_runs_are_reaped_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        // A run whose owner is dead, with a "QEMU" that names its directory.
        let dead = base.path().join("t-dead");
        std::fs::create_dir_all(dead.join("share")).unwrap();
        std::fs::write(dead.join("owner"), "999999999").unwrap();
        let mut victim = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30", dead.to_str().unwrap()])
            .spawn()
            .unwrap();
        std::fs::write(dead.join("host.pid"), victim.id().to_string()).unwrap();
        // An unrelated process whose PID is recorded but which does not name
        // the run: must survive.
        let mut bystander = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        std::fs::write(dead.join("other.pid"), bystander.id().to_string()).unwrap();
        // A live run (our own PID as owner).
        let live = base.path().join("t-live");
        std::fs::create_dir_all(&live).unwrap();
        std::fs::write(live.join("owner"), std::process::id().to_string()).unwrap();

        let reaped = reap_stale(base.path());
        assert!(reaped.contains(&"t-dead".to_string()), "{reaped:?}");
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(victim.wait().unwrap().code().is_none(), "victim was killed");
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "bystander survives"
        );
        bystander.kill().unwrap();
        bystander.wait().unwrap();
    }

    #[test]
    fn remove_can_keep_logs() {
        let base = tempfile::tempdir().unwrap();
        let paths = RunPaths {
            state: base.path().join("r"),
            ram: base.path().join("ram"),
            share: base.path().join("r/share"),
        };
        for d in [&paths.state, &paths.ram, &paths.share] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(paths.state.join("h.serial.log"), "boot").unwrap();
        std::fs::write(paths.state.join("d.img"), "x").unwrap();
        std::fs::write(paths.state.join("owner"), "999999999").unwrap();
        std::fs::write(paths.ram.join("h.ram"), "x").unwrap();
        remove(&paths, true);
        assert!(paths.state.join("h.serial.log").exists());
        assert!(!paths.state.join("d.img").exists());
        assert!(!paths.share.exists());
        assert!(!paths.ram.exists());
        // Its owner is dead: the next run reaps what was kept.
        assert_eq!(reap_stale(base.path()), ["r".to_string()]);
        assert!(!paths.state.exists());
    }
}
