//! `devlend mdev types`: the adapter's mdev types.

use crate::error::Result;
use crate::sysfs::{MdevType, Sysfs};

/// devlend's mdev types of the fabric's adapter, with available instances.
pub fn run(sys: &Sysfs) -> Result<Vec<MdevType>> {
    sys.mdev_types()
}
