//! `devlend apply`: lend the devices of the lender's configuration.

use std::path::Path;

use crate::error::{CliError, Result};
use crate::lendconf::{self, Hosts};
use crate::progress::with_progress;
use crate::sysfs::{LocalDevice, Sysfs};

/// One line of the configuration, done.
#[derive(Debug)]
pub enum Applied<'a> {
    /// The device is lent to `to`; `stayed`: it was lent already.
    Lent {
        /// The device, as it is now.
        device: &'a LocalDevice,
        /// It was lent before (only its hosts were set).
        stayed: bool,
        /// The hosts it is lent to.
        to: &'a Hosts,
    },
    /// The line failed; the others are tried all the same.
    Failed {
        /// The line's device.
        address: &'a str,
        /// Why.
        err: &'a CliError,
    },
}

/// What `apply` did: the devices lent to their hosts, and the first line
/// that failed, if one did (its failure is the command's).
#[derive(Debug)]
pub struct Outcome {
    /// The devices lent (or lent already) to the hosts of their lines.
    pub done: Vec<LocalDevice>,
    /// The first failure.
    pub first_err: Option<CliError>,
}

/// Lends every device `config` lists (unless lent already) to the hosts
/// its line names, telling `report` about each line as it is done. Every
/// line is tried. An unreadable configuration, or sysfs that cannot be
/// listed, fails at once.
pub fn run(sys: &Sysfs, config: &Path, mut report: impl FnMut(&Applied<'_>)) -> Result<Outcome> {
    let text = std::fs::read_to_string(config).map_err(|source| CliError::Sysfs {
        action: "reading".into(),
        path: config.to_path_buf(),
        source,
        hint: "write the devices to lend there, one PCI address per line (`devlend apply --help`)"
            .into(),
    })?;
    let entries = lendconf::parse(&text, config)?;
    let mut first_err = None;
    let mut done = Vec::new();
    for e in entries {
        let lent = sys
            .local_devices(true)?
            .into_iter()
            .any(|d| d.address == e.address && d.lent.is_some());
        let res = if lent {
            Ok(())
        } else {
            with_progress(
                &format!("lending {} (the lender resets it)", e.address),
                || sys.lend(&e.address).map(drop),
            )
        }
        .and_then(|()| sys.set_allowed_hosts(&e.address, &e.to));
        match res {
            Ok(d) => {
                report(&Applied::Lent {
                    device: &d,
                    stayed: lent,
                    to: &e.to,
                });
                done.push(d);
            }
            Err(err) => {
                report(&Applied::Failed {
                    address: &e.address,
                    err: &err,
                });
                first_err.get_or_insert(err);
            }
        }
    }
    Ok(Outcome { done, first_err })
}
