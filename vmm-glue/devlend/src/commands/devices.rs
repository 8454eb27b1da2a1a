//! `devlend devices`: local PCI devices and their lending state.

use crate::error::Result;
use crate::sysfs::{LocalDevice, Sysfs};

/// The local PCI functions, bridges only with `all`.
pub fn run(sys: &Sysfs, all: bool) -> Result<Vec<LocalDevice>> {
    sys.local_devices(all)
}
