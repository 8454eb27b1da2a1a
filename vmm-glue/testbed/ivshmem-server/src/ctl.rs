//! Creating and formatting the control area file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use devlend_wire::CtlLayout;

/// Errors of creating the control area.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The file could not be created (or opened, with `reuse`).
    #[error("cannot create control area {path} (it must not exist unless --reuse is given)")]
    Create {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file could not be sized.
    #[error("cannot size control area {path} to {size} bytes")]
    Size {
        /// The file.
        path: PathBuf,
        /// The size.
        size: u64,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The header could not be written.
    #[error("cannot write the header of control area {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Random bytes for the fabric id could not be read.
    #[error("cannot read /dev/urandom for the fabric id")]
    Random(#[source] io::Error),
}

/// A random fabric id.
pub fn random_fabric_id() -> Result<u64, CtlError> {
    let mut buf = [0u8; 8];
    File::open("/dev/urandom")
        .and_then(|f| f.read_exact_at(&mut buf, 0))
        .map_err(CtlError::Random)?;
    Ok(u64::from_le_bytes(buf))
}

/// Creates `path` (mode 0600; with `reuse` an existing file is truncated),
/// sizes it to `layout.total_size()` bytes of zeros and writes the header.
///
/// Returns the file, open read-write: its descriptor is what clients map.
pub fn create(path: &Path, layout: &CtlLayout, reuse: bool) -> Result<File, CtlError> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).mode(0o600);
    if reuse {
        opts.create(true);
    } else {
        opts.create_new(true);
    }
    let file = opts.open(path).map_err(|source| CtlError::Create {
        path: path.to_path_buf(),
        source,
    })?;
    let size = layout.total_size();
    // Truncating first zeroes whatever a reused file held.
    file.set_len(0)
        .and_then(|()| file.set_len(size))
        .map_err(|source| CtlError::Size {
            path: path.to_path_buf(),
            size,
            source,
        })?;
    file.write_all_at(&layout.to_bytes(), 0)
        .map_err(|source| CtlError::Write {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(file)
}
