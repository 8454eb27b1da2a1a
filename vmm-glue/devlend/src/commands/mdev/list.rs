//! `devlend mdev list`: this host's devlend mdevs.

use crate::error::Result;
use crate::sysfs::{Mdev, Sysfs};

/// This host's devlend mdevs.
pub fn run(sys: &Sysfs) -> Result<Vec<Mdev>> {
    sys.mdevs()
}
