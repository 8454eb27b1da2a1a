//! `devlend lend`: lend a local device, or give a lent one its hosts.

use crate::error::Result;
use crate::lendconf::Hosts;
use crate::progress::with_progress;
use crate::sysfs::{LocalDevice, Sysfs};

/// Lends `address` (to the hosts `to` names, `all` or ids, if given). With
/// `to`, a device lent already is only given its hosts.
pub fn run(sys: &Sysfs, address: &str, to: Option<&str>) -> Result<LocalDevice> {
    let to = to.map(Hosts::parse).transpose()?;
    let lent_already = sys
        .local_devices(true)?
        .into_iter()
        .find(|d| d.address == address && d.lent.is_some());
    let mut d = match lent_already {
        Some(d) if to.is_some() => d,
        _ => with_progress(&format!("lending {address} (the lender resets it)"), || {
            sys.lend(address)
        })?,
    };
    if let Some(to) = &to {
        d = sys.set_allowed_hosts(address, to)?;
    }
    Ok(d)
}
