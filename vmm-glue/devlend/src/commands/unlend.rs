//! `devlend unlend`: take a lent device back.

use crate::error::Result;
use crate::progress::with_progress;
use crate::sysfs::{LocalDevice, Sysfs};

/// Takes `address` back, with `force` even from a borrower; returns the
/// device as it is now (with its own driver again).
pub fn run(sys: &Sysfs, address: &str, force: bool) -> Result<LocalDevice> {
    with_progress(
        &format!("taking {address} back (the lender resets it)"),
        || sys.unlend(address, force),
    )
}
