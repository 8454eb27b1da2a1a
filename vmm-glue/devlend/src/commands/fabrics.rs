//! `devlend fabrics`: the fabrics this host is on.

use crate::error::{CliError, Result};
use crate::sysfs::{Fabric, Sysfs};

/// Every fabric of this host, in `Sysfs::adapters` order (possibly none).
pub fn run(sys: &Sysfs) -> Result<Vec<Fabric>> {
    sys.fabrics()
}

/// The error of a host on no fabric, which the human form reports
/// (the JSON form prints an empty list).
pub fn none(sys: &Sysfs) -> CliError {
    sys.adapter().expect_err("no fabric")
}
