//! `devlend remote`: the devices other hosts lend.

use crate::error::Result;
use crate::sysfs::{Remote, Sysfs};

/// The remote devices, with the mdevs of this host that target each.
pub fn run(sys: &Sysfs) -> Result<Vec<Remote>> {
    sys.remotes()
}
