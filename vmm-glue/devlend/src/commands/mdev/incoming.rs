//! `devlend mdev incoming`: make an mdev a live migration's destination.

use crate::error::Result;
use crate::sysfs::{Mdev, Sysfs};

/// Makes the next open of the mdev `uuid` a live migration's destination
/// (`incoming`), or an ordinary open again; returns the mdev as it is now.
pub fn run(sys: &Sysfs, uuid: &str, incoming: bool) -> Result<Mdev> {
    sys.mdev_set_incoming(uuid, incoming)
}
