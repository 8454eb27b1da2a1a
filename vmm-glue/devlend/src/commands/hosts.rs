//! `devlend hosts`: this host and the other hosts of the fabric.

use crate::error::Result;
use crate::sysfs::{Fabric, Sysfs};

/// This host on the fabric the commands act on, and its peers.
pub fn run(sys: &Sysfs) -> Result<Fabric> {
    sys.fabric()
}
