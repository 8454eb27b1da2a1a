//! `devlend qemu-args`: QEMU arguments for an mdev.

use super::{check_id, mdev_uuid};
use crate::error::Result;
use crate::sysfs::Sysfs;
use crate::vmmargs;

/// `-device vfio-pci,sysfsdev=...` for the mdev `uuid` (checked to exist
/// unless `no_check`), with device id `id` (default
/// `devlend-<first group of the UUID>`) on `bus`.
pub fn run(
    sys: &Sysfs,
    uuid: &str,
    id: Option<String>,
    bus: Option<&str>,
    no_check: bool,
) -> Result<Vec<String>> {
    let uuid = mdev_uuid(sys, uuid, no_check)?;
    let id = id.unwrap_or_else(|| vmmargs::default_id(&uuid));
    check_id(&id)?;
    Ok(vmmargs::qemu_args(&uuid, &id, bus))
}
