//! The `--pidfile`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A pid file, written atomically and removed on drop.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process's pid and a newline to `path` (via a temporary
    /// file and a rename, so a reader never sees it half written).
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        fs::write(&tmp, format!("{}\n", std::process::id()))?;
        if let Err(e) = fs::rename(&tmp, path) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(PidFile {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only remove it if it still names us.
        let ours = fs::read_to_string(&self.path)
            .map(|s| s.trim() == std::process::id().to_string())
            .unwrap_or(false);
        if ours {
            if let Err(e) = fs::remove_file(&self.path) {
                log::warn!("cannot remove pid file {}: {e}", self.path.display());
            }
        }
    }
}
