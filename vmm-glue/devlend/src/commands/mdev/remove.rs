//! `devlend mdev remove`: remove an mdev no VMM has open.

use crate::error::Result;
use crate::sysfs::Sysfs;

/// Removes the mdev `uuid`, refused while a VMM has it open; returns its
/// UUID lower-cased.
pub fn run(sys: &Sysfs, uuid: &str) -> Result<String> {
    sys.mdev_remove(uuid)?;
    Ok(uuid.to_ascii_lowercase())
}
