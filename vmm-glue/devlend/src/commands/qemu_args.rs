//! `devlend qemu-args`: QEMU arguments for an mdev.

use super::{check_id, mdev_uuid};
use crate::error::{CliError, Result};
use crate::sysfs::Sysfs;
use crate::vmmargs::{self, QemuPlace};

/// `-device vfio-pci,sysfsdev=...` for the mdev `uuid` (checked to exist
/// unless `no_check`), with device id `id` (default
/// `devlend-<first group of the UUID>`), where `place` says. A migratable
/// mdev needs nothing more: it reports its device's dirty pages as QEMU's
/// defaults read them (docs/migration.md).
pub fn run(
    sys: &Sysfs,
    uuid: &str,
    id: Option<String>,
    place: QemuPlace<'_>,
    no_check: bool,
) -> Result<Vec<String>> {
    let uuid = mdev_uuid(sys, uuid, no_check)?;
    let id = id.unwrap_or_else(|| vmmargs::default_id(&uuid));
    check_id(&id)?;
    if let Some(addr) = place.addr {
        if !vmmargs::valid_pci_addr(addr) {
            return Err(CliError::usage(format!(
                "{addr:?} is not a PCI address QEMU takes (a slot in hex up to 1f, then optionally \
                 '.' and a function 0 to 7)"
            )));
        }
    }
    Ok(vmmargs::qemu_args(&uuid, &id, place))
}
