//! Errors of the devlend command, each with what failed, what to do about
//! it, and an exit status of its own.

use std::io;
use std::path::PathBuf;

/// Exit statuses (documented in `devlend --help` and docs/devlend-cli.md).
pub mod exit {
    /// Something failed that has no status of its own.
    pub const FAILURE: u8 = 1;
    /// Bad arguments.
    pub const USAGE: u8 = 2;
    /// The thing named (module, adapter, device, mdev, type) is not there.
    pub const NOT_FOUND: u8 = 3;
    /// Busy: held by someone else, or nothing available.
    pub const BUSY: u8 = 4;
    /// Permission denied (run as root).
    pub const PERMISSION: u8 = 5;
    /// Timed out (for instance the guest did not release a device).
    pub const TIMEOUT: u8 = 6;
    /// The VMM (QMP) refused or could not be reached.
    pub const VMM: u8 = 7;
}

/// What went wrong, for a human and a script.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input the argument parser could not catch.
    #[error("{msg}")]
    Usage {
        /// What is wrong.
        msg: String,
    },
    /// Something is missing.
    #[error("{msg}")]
    NotFound {
        /// What is missing.
        msg: String,
        /// What to do.
        hint: String,
    },
    /// Busy or none available.
    #[error("{msg}")]
    Busy {
        /// What is busy.
        msg: String,
        /// What to do.
        hint: String,
    },
    /// A sysfs read or write failed.
    #[error("{action} {}: {source}", path.display())]
    Sysfs {
        /// "reading" or "writing ... to".
        action: String,
        /// The file.
        path: PathBuf,
        /// The system error.
        source: io::Error,
        /// What to do.
        hint: String,
    },
    /// Reading or writing an ordinary file failed.
    #[error("{action} {}: {source}", path.display())]
    File {
        /// "reading" or "writing".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// A wait ran out.
    #[error("{msg}")]
    Timeout {
        /// What did not happen.
        msg: String,
        /// What to do.
        hint: String,
    },
    /// QMP failed or QEMU refused.
    #[error("{msg}")]
    Vmm {
        /// What failed.
        msg: String,
        /// What to do.
        hint: String,
    },
}

impl CliError {
    /// A usage error.
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError::Usage { msg: msg.into() }
    }

    /// A not-found error with a hint.
    pub fn not_found(msg: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError::NotFound {
            msg: msg.into(),
            hint: hint.into(),
        }
    }

    /// A busy error with a hint.
    pub fn busy(msg: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError::Busy {
            msg: msg.into(),
            hint: hint.into(),
        }
    }

    /// A file error.
    pub fn file(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        CliError::File {
            action,
            path: path.into(),
            source,
        }
    }

    /// A QMP/VMM error with a hint.
    pub fn vmm(msg: impl Into<String>, hint: impl Into<String>) -> Self {
        CliError::Vmm {
            msg: msg.into(),
            hint: hint.into(),
        }
    }

    /// What to do about it, if there is advice.
    pub fn hint(&self) -> Option<&str> {
        match self {
            CliError::Usage { .. } | CliError::File { .. } => None,
            CliError::NotFound { hint, .. }
            | CliError::Busy { hint, .. }
            | CliError::Sysfs { hint, .. }
            | CliError::Timeout { hint, .. }
            | CliError::Vmm { hint, .. } => (!hint.is_empty()).then_some(hint.as_str()),
        }
    }

    /// The process exit status.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage { .. } => exit::USAGE,
            CliError::File { .. } => exit::FAILURE,
            CliError::NotFound { .. } => exit::NOT_FOUND,
            CliError::Busy { .. } => exit::BUSY,
            CliError::Timeout { .. } => exit::TIMEOUT,
            CliError::Vmm { .. } => exit::VMM,
            CliError::Sysfs { source, .. } => match source.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => exit::NOT_FOUND,
                Some(libc::EBUSY) | Some(libc::ENOSPC) => exit::BUSY,
                Some(libc::EACCES) | Some(libc::EPERM) => exit::PERMISSION,
                Some(libc::EINVAL) => exit::FAILURE,
                _ => match source.kind() {
                    io::ErrorKind::NotFound => exit::NOT_FOUND,
                    io::ErrorKind::PermissionDenied => exit::PERMISSION,
                    _ => exit::FAILURE,
                },
            },
        }
    }
}

/// Result of the command.
pub type Result<T> = std::result::Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn sysfs(errno: i32) -> CliError {
        CliError::Sysfs {
            action: "writing".into(),
            path: "/sys/x".into(),
            source: io::Error::from_raw_os_error(errno),
            hint: String::new(),
        }
    }

    #[test]
    fn errnos_map_to_exit_statuses() {
        assert_eq!(sysfs(libc::ENOENT).exit_code(), exit::NOT_FOUND);
        assert_eq!(sysfs(libc::ENODEV).exit_code(), exit::NOT_FOUND);
        assert_eq!(sysfs(libc::EBUSY).exit_code(), exit::BUSY);
        assert_eq!(sysfs(libc::EACCES).exit_code(), exit::PERMISSION);
        assert_eq!(sysfs(libc::EPERM).exit_code(), exit::PERMISSION);
        assert_eq!(sysfs(libc::EINVAL).exit_code(), exit::FAILURE);
        assert_eq!(sysfs(libc::EIO).exit_code(), exit::FAILURE);
        assert_eq!(CliError::usage("x").exit_code(), exit::USAGE);
        assert_eq!(CliError::vmm("x", "").exit_code(), exit::VMM);
        assert_eq!(CliError::vmm("x", "").hint(), None);
        assert_eq!(CliError::busy("x", "do y").hint(), Some("do y"));
    }

    #[test]
    fn messages_name_the_file() {
        let e = sysfs(libc::EBUSY);
        assert_eq!(
            e.to_string(),
            "writing /sys/x: Device or resource busy (os error 16)"
        );
    }
}
