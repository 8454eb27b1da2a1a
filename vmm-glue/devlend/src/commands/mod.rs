//! The commands, one file each: every one does its work on the sysfs tree
//! (or a VMM's QMP socket) and returns what it did as data, which
//! [`crate::output`] prints as JSON or as the human form. `main.rs` parses
//! the arguments and joins the two. A command that takes long tells
//! stderr through [`crate::progress::with_progress`]; one that has
//! something to say while it works (a note, a line of `apply` done) hands
//! it to a callback, so what is printed stays in the order it happens.

pub mod apply;
pub mod attach;
pub mod ch_args;
pub mod detach;
pub mod devices;
pub mod fabrics;
pub mod hosts;
pub mod lend;
pub mod libvirt_xml;
pub mod man;
pub mod mdev;
pub mod qemu_args;
pub mod remote;
pub mod stats;
pub mod unlend;

use crate::error::{CliError, Result};
use crate::sysfs::{self, Sysfs};
use crate::vmmargs;

/// Checks a QEMU device id.
pub fn check_id(id: &str) -> Result<()> {
    if vmmargs::valid_qemu_id(id) {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{id:?} is not a valid QEMU device id (a letter, then letters, digits, '-', '.', '_')"
        )))
    }
}

/// The UUID of an mdev given on the command line, lower-cased; unless
/// `no_check`, the mdev must exist on this host.
pub fn mdev_uuid(sys: &Sysfs, uuid: &str, no_check: bool) -> Result<String> {
    sysfs::check_uuid(uuid)?;
    if !no_check {
        sys.find_mdev(uuid)?;
    }
    Ok(uuid.to_ascii_lowercase())
}
