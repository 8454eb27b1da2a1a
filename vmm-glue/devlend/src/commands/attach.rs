//! `devlend attach`: hot-plug an mdev into a running QEMU.

use std::path::Path;
use std::time::Duration;

use super::{check_id, mdev_uuid};
use crate::error::Result;
use crate::progress::with_progress;
use crate::qmp::{self, Qmp};
use crate::sysfs::Sysfs;
use crate::vmmargs;

/// What was attached.
#[derive(Debug)]
pub struct Attached {
    /// The mdev's UUID, lower-cased.
    pub uuid: String,
    /// The QEMU device id it has.
    pub id: String,
}

/// `device_add`s the mdev `uuid` (which must exist) to the QEMU behind the
/// QMP socket `qmp`, as device `id` (default `devlend-<first group of the
/// UUID>`) on `bus`, waiting up to `timeout` seconds.
pub fn run(
    sys: &Sysfs,
    qmp_socket: &Path,
    uuid: &str,
    id: Option<String>,
    bus: Option<&str>,
    timeout: u64,
) -> Result<Attached> {
    let uuid = mdev_uuid(sys, uuid, false)?;
    let id = id.unwrap_or_else(|| vmmargs::default_id(&uuid));
    check_id(&id)?;
    let timeout = Duration::from_secs(timeout);
    let mut q = Qmp::connect(qmp_socket, timeout)?;
    with_progress(
        &format!("attaching mdev {uuid} (QEMU borrows the device)"),
        || qmp::device_add(&mut q, &vmmargs::mdev_sysfs(&uuid), &id, bus, timeout),
    )?;
    Ok(Attached { uuid, id })
}
